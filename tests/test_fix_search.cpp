// The search behind `ampscope fix` against a synthetic model of a training run: each planted
// culprit overflows at its own step unless pinned, so a run stops at the earliest unpinned one
// (as --stop-on-nonfinite does) and recommends pinning it. The oracle is that set logic.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "../tools/cli/fix_search.h"

namespace ampscope::cli::fix {
namespace {

using Pins = std::vector<std::string>;

/// A layer that overflows at `step` unless one of `cures` is pinned.
struct Culprit {
  std::string layer;
  int step;
  std::set<std::string> cures;
};

reports::Report run_model(const std::vector<Culprit>& culprits, const Pins& pins) {
  const std::set<std::string> pinned(pins.begin(), pins.end());
  const Culprit* first = nullptr;
  for (const auto& c : culprits) {
    const bool cured =
        std::any_of(c.cures.begin(), c.cures.end(), [&](auto& l) { return pinned.count(l) > 0; });
    if (!cured && (!first || c.step < first->step)) first = &c;
  }
  reports::Report r;
  r.recommendations.push_back({"", reports::Action::kLossScaling, reports::Severity::kHigh, {"grad_underflow_float16"}});
  if (!first) return r;
  reports::NonFiniteEvent e;
  e.step = first->step;
  e.layer = first->layer;
  e.op = "aten::linear";
  e.kind = "inf";
  r.first_nonfinite = e;
  r.recommendations.insert(r.recommendations.begin(),
                           {first->layer, reports::Action::kPinFp32, reports::Severity::kCritical, {"nonfinite_origin"}});
  return r;
}

struct Recorder {
  explicit Recorder(std::vector<Culprit> c = {}) : culprits(std::move(c)) {}
  std::vector<Culprit> culprits;
  std::vector<RunRequest> requests;
  Runner runner() {
    return [this](const RunRequest& req) {
      requests.push_back(req);
      RunRecord rec;
      rec.report = run_model(culprits, req.pins);
      return rec;
    };
  }
  /// No map is asked for twice.
  bool all_distinct() const {
    std::set<std::set<std::string>> seen;
    for (const auto& r : requests)
      if (!seen.insert(std::set<std::string>(r.pins.begin(), r.pins.end())).second) return false;
    return true;
  }
};

TEST(FixSearch, SecondCulpritAppearsOnceTheFirstIsPinnedAndARedundantStartPinIsDropped) {
  Recorder rec({{"up", 2, {"up"}}, {"mid", 4, {"mid"}}});
  FixOptions o;
  o.start_pins = {"head"};
  const FixOutcome out = find_fix(o, rec.runner());
  EXPECT_EQ(out.ended, "clean");
  EXPECT_TRUE(out.minimised);
  EXPECT_EQ(out.final_pins, (Pins{"up", "mid"}));
  EXPECT_TRUE(is_clean(out.final().report));
  EXPECT_EQ(out.final().pins.size(), 2u);
  EXPECT_TRUE(rec.all_distinct());
  EXPECT_TRUE(rec.requests.front().full && rec.requests.front().pins.empty());  // the baseline
  EXPECT_EQ(out.rounds, 3);
  for (const auto& h : out.pins) {
    if (h.layer == "head") {
      EXPECT_EQ(h.added_by, 0);
      EXPECT_GT(h.dropped_by, 0);
      EXPECT_TRUE(is_clean(out.run(h.dropped_by).report));
    } else {
      EXPECT_GT(h.added_by, 0);
      EXPECT_EQ(out.run(h.added_by).report.first_nonfinite->layer, h.layer);
      ASSERT_GT(h.needed_by, 0);
      EXPECT_EQ(out.run(h.needed_by).report.first_nonfinite->layer,
                h.layer);  // removal brings it back
    }
  }
}

TEST(FixSearch, ManyRedundantPinsAreMinimisedByHalvesInFewerRunsThanOneAtATime) {
  Recorder rec({{"blocks.7.wo", 3, {"blocks.7.wo"}}});
  FixOptions o;
  for (int i = 0; i < 16; ++i) o.start_pins.push_back("blocks." + std::to_string(i) + ".wo");
  const FixOutcome out = find_fix(o, rec.runner());
  EXPECT_EQ(out.final_pins, (Pins{"blocks.7.wo"}));
  EXPECT_TRUE(is_clean(out.final().report));
  EXPECT_TRUE(rec.all_distinct());
  // One at a time would take the baseline, round 1 and 16 removals.
  EXPECT_LT(rec.requests.size(), 2u + 16u) << rec.requests.size() << " runs";
}

TEST(FixSearch, EitherOfTwoCuresIsEnoughSoOnlyOneStays) {
  // The parent's pin also cures the child: after minimisation exactly one of them remains.
  Recorder rec({{"blocks.1.ffn.wo", 5, {"blocks.1.ffn.wo", "blocks.1.ffn"}}});
  FixOptions o;
  o.start_pins = {"blocks.1.ffn"};
  const FixOutcome out = find_fix(o, rec.runner());
  EXPECT_EQ(out.ended, "clean");
  EXPECT_EQ(out.final_pins.size(), 1u);
  EXPECT_TRUE(is_clean(out.final().report));
}

TEST(FixSearch, AModelBugNoPinCanFixEndsWithoutPins) {
  Recorder rec;
  FixOptions o;
  const FixOutcome out = find_fix(o, [&](const RunRequest& req) {
    rec.requests.push_back(req);
    RunRecord r;
    reports::NonFiniteEvent e;
    e.layer = "logp";
    r.report.first_nonfinite = e;
    r.report.recommendations.push_back({"logp", reports::Action::kFixModel, reports::Severity::kCritical, {"nonfinite_in_fp32"}});
    return r;
  });
  EXPECT_EQ(out.ended, "nothing_to_pin");
  EXPECT_TRUE(out.final_pins.empty());
  EXPECT_FALSE(out.minimised);
  EXPECT_EQ(rec.requests.size(), 1u);  // the baseline is round 1
  EXPECT_TRUE(out.final().report.first_nonfinite.has_value());
}

TEST(FixSearch, MaxRoundsStopsAChainOfCulpritsAndAddsNothingUntested) {
  Recorder rec({{"a", 1, {"a"}}, {"b", 2, {"b"}}, {"c", 3, {"c"}}, {"d", 4, {"d"}}});
  FixOptions o;
  o.max_rounds = 2;
  const FixOutcome out = find_fix(o, rec.runner());
  EXPECT_EQ(out.ended, "max_rounds");
  EXPECT_EQ(out.final_pins, (Pins{"a"}));  // added in round 1, run in round 2
  EXPECT_EQ(out.final().pins, (Pins{"a"}));
  EXPECT_EQ(out.final().report.first_nonfinite->layer, "b");
}

TEST(FixSearch, InterruptedKeepsTheSmallestCleanMapRunSoFar) {
  Recorder rec({{"up", 2, {"up"}}, {"mid", 4, {"mid"}}});
  FixOptions o;
  o.start_pins = {"head"};
  o.interrupted = [&] { return rec.requests.size() >= 4; };  // after round 3, before minimising
  const FixOutcome out = find_fix(o, rec.runner());
  EXPECT_EQ(out.ended, "interrupted");
  EXPECT_EQ(rec.requests.size(), 4u);
  EXPECT_EQ(out.final_pins, (Pins{"head", "up", "mid"}));
  EXPECT_TRUE(is_clean(out.final().report));
}

TEST(FixSearch, InterruptedBeforeAnyCleanRunKeepsTheLastRunsMap) {
  Recorder rec({{"up", 2, {"up"}}, {"mid", 4, {"mid"}}});
  FixOptions o;
  o.interrupted = [&] { return rec.requests.size() >= 2; };
  const FixOutcome out = find_fix(o, rec.runner());
  EXPECT_EQ(out.ended, "interrupted");
  EXPECT_EQ(out.final_pins, (Pins{"up"}));
  EXPECT_FALSE(is_clean(out.final().report));
}

TEST(FixSearch, ARunStoppedByASignalIsNotClean) {
  reports::Report r;
  EXPECT_TRUE(is_clean(r));
  r.run.stopped = "signal";
  EXPECT_FALSE(is_clean(r));
}

TEST(FixSearch, ACommandThatFailsWithAMapIsNotClean) {
  RunRecord r;
  r.exit_code = 1;  // e.g. the script asserted a dtype the pin changed
  EXPECT_TRUE(is_clean(r.report));
  EXPECT_TRUE(failed(r));
  EXPECT_FALSE(is_clean(r));
  r.report.run.stopped = "nonfinite";  // --stop-on-nonfinite's own exit code
  r.exit_code = 3;
  EXPECT_FALSE(failed(r));
}

TEST(FixSearch, OutsideIsNeverPinned) {
  reports::Report r;
  r.recommendations.push_back(
      {reports::kOutsideLayer, reports::Action::kPinFp32, reports::Severity::kCritical, {"nonfinite_origin"}});
  EXPECT_TRUE(pin_findings(r).empty());
}

}  // namespace
}  // namespace ampscope::cli::fix
