// ampscope fix: the rounds (pin what each run recommends) and the minimisation (drop what a
// clean run does without). A map already run is not run again: its run is the evidence.
#include "fix_search.h"

#include <fmt/core.h>

#include <algorithm>
#include <set>

namespace ampscope::cli::fix {

std::vector<std::string> pin_findings(const reports::Report& r) {
  std::vector<std::string> out;
  for (const reports::Recommendation& rec : r.recommendations) {
    if (rec.action != reports::Action::kPinFp32 || rec.layer == reports::kOutsideLayer) continue;
    if (std::find(out.begin(), out.end(), rec.layer) == out.end()) out.push_back(rec.layer);
  }
  return out;
}

bool is_clean(const reports::Report& r) {
  return !r.first_nonfinite && pin_findings(r).empty() && r.run.stopped != "signal";
}

bool failed(const RunRecord& r) { return r.exit_code != 0 && r.report.run.stopped != "nonfinite"; }

bool is_clean(const RunRecord& r) { return is_clean(r.report) && !failed(r); }

namespace {

using Pins = std::vector<std::string>;

/// Thrown out of the search when FixOptions::interrupted says so.
struct Interrupted {};

Pins without(const Pins& pins, const std::set<std::string>& drop) {
  Pins out;
  for (const auto& p : pins)
    if (!drop.count(p)) out.push_back(p);
  return out;
}

std::string without_label(const std::set<std::string>& drop) {
  if (drop.size() == 1) return "without " + *drop.begin();
  return fmt::format("without {} pins", drop.size());
}

class Search {
 public:
  Search(const FixOptions& o, const Runner& runner) : o_(o), runner_(runner) {}

  FixOutcome run() {
    try {
      get({}, "baseline", true);
      rounds();
      if (out_.ended == "clean")
        minimise();
      else
        finish(pins_of_history(), last_round_run_);
    } catch (const Interrupted&) {
      out_.ended = "interrupted";
      settle_interrupted();
    }
    return std::move(out_);
  }

 private:
  /// The run of exactly `pins` (in any order): the earlier one, or a new one.
  const RunRecord& get(const Pins& pins, const std::string& purpose, bool full = false) {
    const std::set<std::string> key(pins.begin(), pins.end());
    if (auto it = memo_.find(key); it != memo_.end()) return out_.run(it->second);
    RunRequest req{static_cast<int>(out_.runs.size()) + 1, purpose, pins, full};
    RunRecord rec = runner_(req);
    rec.index = req.index;
    rec.purpose = purpose;
    rec.pins = pins;
    out_.runs.push_back(std::move(rec));
    memo_[key] = req.index;
    if (o_.interrupted && o_.interrupted()) throw Interrupted{};
    return out_.runs.back();
  }

  /// The smallest clean map run so far, else the last run's map.
  void settle_interrupted() {
    const RunRecord* best = &out_.runs.back();
    for (const auto& r : out_.runs) {
      if (is_clean(r) && (!is_clean(*best) || r.pins.size() < best->pins.size())) best = &r;
    }
    out_.final_pins = best->pins;
    out_.final_run = best->index;
  }

  Pins pins_of_history() const {
    Pins out;
    for (const auto& h : out_.pins) out.push_back(h.layer);
    return out;
  }

  PinHistory* history(const std::string& layer) {
    for (auto& h : out_.pins)
      if (h.layer == layer) return &h;
    return nullptr;
  }

  void rounds() {
    for (const auto& p : o_.start_pins)
      if (!history(p)) {
        PinHistory h;
        h.layer = p;
        out_.pins.push_back(h);
      }
    for (int round = 1; round <= o_.max_rounds; ++round) {
      out_.rounds = round;
      const RunRecord& r = get(pins_of_history(), fmt::format("round {}", round));
      last_round_run_ = r.index;
      if (is_clean(r)) return void(out_.ended = "clean");
      if (!add_recommended(r, round))
        return void(out_.ended =
                        failed(r) && !r.report.first_nonfinite ? "failed" : "nothing_to_pin");
    }
    out_.ended = "max_rounds";
  }

  /// Adds the run's new pins unless this was the last round; false when it recommended none.
  bool add_recommended(const RunRecord& r, int round) {
    std::vector<const reports::Recommendation*> fresh;
    for (const auto& rec : r.report.recommendations) {
      if (rec.action == reports::Action::kPinFp32 && rec.layer != reports::kOutsideLayer && !history(rec.layer))
        fresh.push_back(&rec);
    }
    if (fresh.empty()) return false;
    if (round == o_.max_rounds) return true;
    for (const auto* rec : fresh) out_.pins.push_back(PinHistory{rec->layer, r.index, round, *rec});
    return true;
  }

  void minimise() {
    const Pins all = pins_of_history();
    Pins kept = all.size() <= o_.one_at_a_time_max ? one_at_a_time(all) : by_halves(all, {});
    // Keep the order pins came in.
    finish(without(all, removed(all, kept)), 0);
    out_.minimised = true;
  }

  static std::set<std::string> removed(const Pins& all, const Pins& kept) {
    std::set<std::string> k(kept.begin(), kept.end()), out;
    for (const auto& p : all)
      if (!k.count(p)) out.insert(p);
    return out;
  }

  Pins one_at_a_time(const Pins& all) {
    Pins current = all;
    for (const auto& p : all) {
      const RunRecord& r = get(without(current, {p}), without_label({p}));
      if (is_clean(r)) {
        current = without(current, {p});
        history(p)->dropped_by = r.index;
      } else {
        history(p)->needed_by = r.index;
      }
    }
    return current;
  }

  /// The pins of `cand` that `keep` + them needs, given that keep + cand is clean.
  Pins by_halves(const Pins& cand, const Pins& keep) {
    if (cand.empty()) return {};
    const std::set<std::string> drop(cand.begin(), cand.end());
    const RunRecord& r = get(keep, without_label(drop));
    if (is_clean(r)) {
      for (const auto& p : cand) history(p)->dropped_by = r.index;
      return {};
    }
    if (cand.size() == 1) {
      history(cand[0])->needed_by = r.index;
      return cand;
    }
    const Pins first(cand.begin(), cand.begin() + static_cast<long>(cand.size() / 2));
    const Pins second(cand.begin() + static_cast<long>(cand.size() / 2), cand.end());
    Pins keep_first = keep;
    keep_first.insert(keep_first.end(), second.begin(), second.end());
    const Pins need_first = by_halves(first, keep_first);
    Pins keep_second = keep;
    keep_second.insert(keep_second.end(), need_first.begin(), need_first.end());
    Pins need = need_first;
    for (const auto& p : by_halves(second, keep_second)) need.push_back(p);
    return need;
  }

  /// Sets the final map and its run (`index`, or the run of exactly that map, made if missing).
  void finish(const Pins& pins, int index) {
    out_.final_pins = pins;
    out_.final_run = index ? index : get(pins, "final map").index;
  }

  const FixOptions& o_;
  const Runner& runner_;
  FixOutcome out_;
  std::map<std::set<std::string>, int> memo_;  ///< pin set -> the run made with it
  int last_round_run_ = 0;
};

}  // namespace

FixOutcome find_fix(const FixOptions& options, const Runner& runner) {
  return Search(options, runner).run();
}

}  // namespace ampscope::cli::fix
