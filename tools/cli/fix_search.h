// The search behind `ampscope fix`: run -> pin what the run recommends -> re-run, until a run
// is clean; then drop every pin whose removal keeps the run clean. Running is a callback, so
// the search can be tested without a process per run.
#pragma once

#include <ampscope/reports/report.h>

#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace ampscope::cli::fix {

/// One real run of the command with a set of pins.
struct RunRecord {
  int index = 0;                  ///< 1-based run number
  std::string purpose;            ///< "baseline", "round 2", "without up"
  std::vector<std::string> pins;  ///< the map it ran with
  std::string dir;                ///< its output folder
  reports::Report report;
  int exit_code = 0;
  double seconds = 0;  ///< wall time of the run
};

/// What the search asks the runner for.
struct RunRequest {
  int index = 0;  ///< the number the run will get
  std::string purpose;
  std::vector<std::string> pins;
  bool full = false;  ///< run to the end (the baseline: its time per step is the cost base)
};

/// Makes one real run; fills report, dir, exit_code and seconds.
using Runner = std::function<RunRecord(const RunRequest&)>;

/// Layers of the report's pin_fp32 recommendations ("<outside>" is no module: never pinned).
std::vector<std::string> pin_findings(const reports::Report& r);
/// No harmful non-finite value, no pin-able finding, and the run was not cut short by a signal
/// (a run interrupted before its failure step proves nothing).
bool is_clean(const reports::Report& r);
/// The command failed: a non-zero exit code that is not --stop-on-nonfinite's (a pin can break
/// a script, e.g. a float32 output where it asserts float16; such a run proves nothing).
bool failed(const RunRecord& r);
/// A clean report from a command that did not fail.
bool is_clean(const RunRecord& r);

/// The life of one pin in the search.
struct PinHistory {
  std::string layer;
  int added_by = 0;             ///< run whose recommendation added it (0: the starting map)
  int round = 0;                ///< round of that run (0: the starting map)
  reports::Recommendation rec;  ///< that recommendation
  int needed_by = 0;            ///< a run without it that was not clean (0: none)
  int dropped_by = 0;           ///< the clean run without it that dropped it (0: kept)
};

struct FixOptions {
  std::vector<std::string> start_pins;  ///< --map FILE
  int max_rounds = 8;
  /// Up to this many pins are minimised one at a time; more, by halves.
  std::size_t one_at_a_time_max = 8;
  /// Asked after every run: true ends the search (Ctrl-C) with the best map known so far.
  std::function<bool()> interrupted;
};

struct FixOutcome {
  std::deque<RunRecord> runs;  ///< every run, in order (index i is runs[i - 1])
  int rounds = 0;
  /// "clean", "max_rounds" (N rounds passed), "nothing_to_pin" (no new pin recommended),
  /// "failed" (the command failed with the map and recommended no pin) or "interrupted".
  std::string ended;
  bool minimised = false;
  std::vector<PinHistory> pins;  ///< every pin ever in the map, in the order it came
  std::vector<std::string> final_pins;
  int final_run = 0;  ///< the run with exactly final_pins
  const RunRecord& run(int index) const { return runs.at(static_cast<std::size_t>(index - 1)); }
  const RunRecord& baseline() const { return runs.front(); }
  const RunRecord& final() const { return run(final_run); }
};

/// Runs the search: a full baseline without pins, the rounds from the starting map, then the
/// minimisation when a round got clean. Interrupted, the final map is the smallest clean one
/// run so far (minimisation keeps it clean at every step), else the last round's.
FixOutcome find_fix(const FixOptions& options, const Runner& runner);

}  // namespace ampscope::cli::fix
