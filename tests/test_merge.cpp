// merge_reports on hand-made rank reports: sums, merged stats, per-rank first non-finite.
#include <ampscope/reports/merge.h>
#include <ampscope/reports/report_json.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

namespace {

using namespace ampscope;
using namespace ampscope::reports;

Report rank_report(int rank, std::int64_t calls, double absmax, std::optional<std::int64_t> nan_step) {
  Report r;
  r.run.rank = rank;
  r.run.world_size = 2;
  r.run.steps = 5 + rank;
  r.run.autocast_dtype = "float16";
  Layer l;
  l.name = "fc";
  l.type = "Linear";
  OpRecord op;
  op.op = "aten::linear";
  op.phase = ampscope::Phase::kForward;
  op.calls = calls;
  op.input_dtype = "float32";
  op.compute_dtype = op.output_dtype = "float16";
  op.autocast = ampscope::AutocastClass::kLowerPrecision;
  op.stats.count = 10 * calls;
  op.stats.absmax = absmax;
  op.stats.exp_hist.add(3, 10 * calls);
  op.absmax_by_step = {{0, absmax}, {1, absmax / 2}};
  l.ops.push_back(op);
  ParamRecord p;
  p.name = "fc.weight";
  p.dtype = "float32";
  p.updates = 5;
  p.grad.count = 16;
  l.params.push_back(p);
  r.layers.push_back(l);
  if (nan_step) {
    NonFiniteEvent e;
    e.step = *nan_step;
    e.phase = ampscope::Phase::kForward;
    e.layer = "fc";
    e.op = "aten::linear";
    e.kind = "inf";
    r.first_nonfinite = e;
  }
  return r;
}

TEST(Merge, SumsCountsAndMergesStats) {
  Report m = merge_reports({rank_report(1, 3, 8.0, std::nullopt), rank_report(0, 2, 4.0, std::nullopt)});
  ASSERT_EQ(m.layers.size(), 1u);
  const OpRecord& op = m.layers[0].ops.at(0);
  EXPECT_EQ(op.calls, 5);
  EXPECT_EQ(op.stats.count, 50);
  EXPECT_EQ(op.stats.exp_hist.at(3), 50);
  EXPECT_DOUBLE_EQ(op.stats.absmax, 8.0);
  EXPECT_DOUBLE_EQ(op.absmax_by_step.at(0).second, 8.0);
  EXPECT_EQ(m.layers[0].params.at(0).updates, 10);
  EXPECT_EQ(m.layers[0].params.at(0).grad.count, 32);
  EXPECT_EQ(m.run.steps, 6);
  EXPECT_EQ(m.run.world_size, 2);
  EXPECT_FALSE(m.first_nonfinite.has_value());
  EXPECT_TRUE(m.recommendations.empty());
}

TEST(Merge, KeepsEveryRanksFirstNonFiniteAndTheEarliest) {
  Report m = merge_reports({rank_report(0, 1, 1.0, 7), rank_report(1, 1, 1.0, 4)});
  ASSERT_EQ(m.first_nonfinite_by_rank.size(), 2u);
  EXPECT_EQ(m.first_nonfinite_by_rank[0].rank, 0);
  EXPECT_EQ(m.first_nonfinite_by_rank[1].rank, 1);
  ASSERT_TRUE(m.first_nonfinite.has_value());
  EXPECT_EQ(m.first_nonfinite->step, 4);
  EXPECT_EQ(m.first_nonfinite->rank, 1);
  // The merged report survives its own JSON round trip.
  Report back = report_from_json(report_to_json(m));
  EXPECT_EQ(back.first_nonfinite_by_rank.size(), 2u);
  EXPECT_EQ(back.first_nonfinite->rank, 1);
}

TEST(Merge, CastLossAndDegenerateOutputsMergeLikeTheObserversThreads) {
  Report r0 = rank_report(0, 2, 4.0, std::nullopt), r1 = rank_report(1, 3, 8.0, std::nullopt);
  auto cast = [](std::int64_t underflow, std::int64_t first, std::int64_t worst, double worst_l2, bool param) {
    CastLossRecord c;
    c.argument = "weight";
    c.arg_index = 1;
    c.parameter = param;
    c.source_dtype = "float32";
    c.target_dtype = "float16";
    c.casts = 2;
    c.values = 100;
    c.nonzero = 90;
    c.underflow = underflow;
    c.source_sq = 4.0;
    c.lost_sq = 1.0;
    c.first_step = first;
    c.worst_step = worst;
    c.worst_rel_l2 = worst_l2;
    return c;
  };
  r0.layers[0].ops[0].cast_loss = {cast(5, 3, 4, 0.25, false)};
  r1.layers[0].ops[0].cast_loss = {cast(7, 1, 6, 0.5, true)};
  CastLossRecord other = cast(1, 2, 2, 0.1, false);
  other.target_dtype = "bfloat16";  // another cast of the same argument: its own record
  r1.layers[0].ops[0].cast_loss.push_back(other);
  r0.layers[0].ops[0].degenerate = DegenerateRecord{2, 2, 1, 5, 0.005, 0.75, 3.0};
  r1.layers[0].ops[0].degenerate = DegenerateRecord{4, 3, 2, 2, 0.002, 0.6, 9.0};
  const Report m = merge_reports({r0, r1});
  const OpRecord& op = m.layers[0].ops.at(0);
  ASSERT_EQ(op.cast_loss.size(), 2u);
  const CastLossRecord& c = op.cast_loss[0];
  EXPECT_EQ(c.target_dtype, "float16");
  EXPECT_EQ(c.casts, 4);
  EXPECT_EQ(c.values, 200);
  EXPECT_EQ(c.underflow, 12);
  EXPECT_DOUBLE_EQ(c.lost_rel_l2(), 0.5);  // sqrt(2 / 8)
  EXPECT_EQ(c.first_step, 1);              // the earlier of 3 and 1
  EXPECT_EQ(c.worst_step, 6);              // the cast that lost more of its norm
  EXPECT_DOUBLE_EQ(c.worst_rel_l2, 0.5);
  EXPECT_TRUE(c.parameter);
  EXPECT_EQ(op.cast_loss[1].target_dtype, "bfloat16");
  EXPECT_EQ(op.cast_loss[1].underflow, 1);
  ASSERT_TRUE(op.degenerate.has_value());
  EXPECT_EQ(op.degenerate->zero_outputs, 6);
  EXPECT_EQ(op.degenerate->checked, 5);
  EXPECT_EQ(op.degenerate->degenerate, 3);
  EXPECT_EQ(op.degenerate->first_step, 2);
  EXPECT_DOUBLE_EQ(op.degenerate->min_nonzero_share, 0.002);
  EXPECT_DOUBLE_EQ(op.degenerate->max_rel_err, 0.75);
  EXPECT_DOUBLE_EQ(op.degenerate->fp32_absmax, 9.0);
}

TEST(Merge, RejectsDuplicateRanksAndNothing) {
  EXPECT_THROW(merge_reports({}), std::invalid_argument);
  EXPECT_THROW(merge_reports({rank_report(0, 1, 1, std::nullopt), rank_report(0, 1, 1, std::nullopt)}),
               std::invalid_argument);
}

Stats stats_of(const std::vector<float>& v) {
  TensorView view;
  view.data = v.data();
  view.sizes = {static_cast<std::int64_t>(v.size())};
  view.strides = {1};
  return compute_stats(view, 1);
}

/// Values with zeros, subnormals, infs and NaNs in them, so every count of a block is exercised.
std::vector<float> mixed_values(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned k = rng() % 20;
    v[i] = k == 0   ? 0.f
           : k == 1 ? std::numeric_limits<float>::denorm_min() * 7
           : k == 2 ? std::numeric_limits<float>::infinity()
           : k == 3 ? std::nanf("")
                    : normal(rng) * std::ldexp(1.f, static_cast<int>(rng() % 40) - 20);
  }
  return v;
}

TEST(Merge, KeepsEveryRanksInputStatsAsTheStatsOfAllInputs) {
  // Oracle: one stats pass over both ranks' inputs together.
  const auto a = mixed_values(1000, 1), b = mixed_values(777, 2);
  std::vector<float> both(a);
  both.insert(both.end(), b.begin(), b.end());
  Report r0 = rank_report(0, 1, 1.0, std::nullopt), r1 = rank_report(1, 1, 1.0, std::nullopt);
  r0.layers[0].ops[0].input_stats = stats_of(a);
  r1.layers[0].ops[0].input_stats = stats_of(b);
  const Report m = merge_reports({r0, r1});
  const Stats& got = m.layers.at(0).ops.at(0).input_stats.value();
  const Stats want = stats_of(both);
  EXPECT_EQ(got.count, want.count);
  EXPECT_EQ(got.nan, want.nan);
  EXPECT_EQ(got.posinf, want.posinf);
  EXPECT_EQ(got.zeros, want.zeros);
  EXPECT_EQ(got.finite(), want.finite());
  EXPECT_FLOAT_EQ(got.absmax, want.absmax);
  EXPECT_FLOAT_EQ(got.absmin_nonzero, want.absmin_nonzero);
  EXPECT_EQ(got.overflow, want.overflow);
  EXPECT_EQ(got.underflow, want.underflow);
  EXPECT_EQ(got.subnormal, want.subnormal);
  EXPECT_TRUE(got.exp_hist == want.exp_hist);
  EXPECT_EQ(got.exp_hist.total(), want.finite() - want.zeros);
  // A rank without input stats (recorded without --input-stats) leaves the other rank's whole.
  r0.layers[0].ops[0].input_stats.reset();
  const Report m2 = merge_reports({r0, r1});
  EXPECT_EQ(m2.layers.at(0).ops.at(0).input_stats.value().count, static_cast<std::int64_t>(b.size()));
}

TEST(Merge, KeysOpsOnTheAutocastClassLikeTheObserver) {
  Report r0 = rank_report(0, 2, 1.0, std::nullopt), r1 = rank_report(1, 3, 1.0, std::nullopt);
  r1.layers[0].ops[0].autocast = ampscope::AutocastClass::kFp32;  // same op and dtypes, another autocast class
  Report m = merge_reports({r0, r1});
  ASSERT_EQ(m.layers.at(0).ops.size(), 2u);
  for (const OpRecord& op : m.layers[0].ops) EXPECT_EQ(op.calls, op.autocast == ampscope::AutocastClass::kFp32 ? 3 : 2);
  r1.layers[0].ops[0].autocast = r0.layers[0].ops[0].autocast;
  m = merge_reports({r0, r1});
  ASSERT_EQ(m.layers.at(0).ops.size(), 1u);
  EXPECT_EQ(m.layers[0].ops[0].calls, 5);
}

TEST(Merge, SumsEveryCountAndRefusesToWrap) {
  Report r0 = rank_report(0, 1, 1.0, std::nullopt), r1 = rank_report(1, 1, 1.0, std::nullopt);
  OpRecord &o0 = r0.layers[0].ops[0], &o1 = r1.layers[0].ops[0];
  o0.benign_nonfinite = 4, o1.benign_nonfinite = 5;
  o0.harmful_nonfinite = 1, o1.harmful_nonfinite = 2;
  o0.fp32_finite = 7, o1.fp32_nonfinite = 3;
  const OpRecord& m = merge_reports({r0, r1}).layers.at(0).ops.at(0);
  EXPECT_EQ(m.benign_nonfinite, 9);
  EXPECT_EQ(m.harmful_nonfinite, 3);
  EXPECT_EQ(m.fp32_finite, 7);
  EXPECT_EQ(m.fp32_nonfinite, 3);
  o1.calls = std::numeric_limits<std::int64_t>::max();
  EXPECT_THROW(merge_reports({r0, r1}), std::overflow_error);
}

TEST(Merge, RefusesReportsOfDifferentRunsUnlessForced) {
  Report r0 = rank_report(0, 1, 1.0, std::nullopt), r1 = rank_report(1, 1, 1.0, std::nullopt);
  r1.run.autocast_dtype = "bfloat16";
  EXPECT_THROW(merge_reports({r0, r1}), std::invalid_argument);
  MergeOptions force;
  force.force = true;
  const Report m = merge_reports({r0, r1}, force);
  EXPECT_TRUE(std::any_of(m.run.notes.begin(), m.run.notes.end(),
                          [](const std::string& n) { return n.find("--force") != std::string::npos; }));
}

}  // namespace
