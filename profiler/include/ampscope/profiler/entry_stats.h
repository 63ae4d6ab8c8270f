// What one aggregated op entry knows, whoever holds it: the observer (per thread, per key), the
// session's snapshot, and the report (OpRecord, per layer, merged across ranks). One type, one
// merge. Plain C++ (no torch).
#pragma once

#include <ampscope/profiler/fp32_check.h>
#include <ampscope/profiler/kernel_trace.h>
#include <ampscope/profiler/stats.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ampscope {

/// Most points kept in a per-entry time series; longer runs are down-sampled to this.
inline constexpr std::size_t kMaxSeries = 256;

/// A per-step series of maxima, sorted by step.
using StepSeries = std::vector<std::pair<std::int64_t, double>>;

/// a += b, refusing to wrap around: throws std::overflow_error("<what>: merged count overflows
/// int64"), a merged count past int64 being no count at all.
void add_count(std::int64_t& a, std::int64_t b, std::string_view what);
/// Stats::merge after checking that no count can overflow (the same error, naming `what`):
/// every other count of a valid block is at most `count`, so checking the counts suffices.
void merge_stats_checked(Stats& into, const Stats& s, std::string_view what);
/// The earliest of two steps, -1 meaning none.
constexpr std::int64_t earliest_step(std::int64_t a, std::int64_t b) {
  return a < 0 ? b : b < 0 ? a : (a < b ? a : b);
}

/// Adds `value` at `step` (the maximum when the step is there already), halving the series
/// when it grows past kMaxSeries. Cheapest when `step` is the last one or later.
void add_series_point(StepSeries& series, std::int64_t step, double value);

/// Calls of one entry (op, phase, dtypes, autocast class) and what they produced.
struct EntryStats {
  std::int64_t calls = 0;  ///< calls with full stats (recorded steps); 0: seen by the sentinel only
  std::int64_t casts = 0;  ///< casts autocast inserted for these calls
  std::int64_t first_step = 0;
  std::int64_t last_step = 0;
  /// Calls whose outputs held NaN/Inf although every floating input was finite: the op itself
  /// produced them (an origin), as opposed to passing on someone else's.
  std::int64_t nonfinite_from_finite = 0;
  std::int64_t first_nonfinite_step = -1;  ///< step of the first such call (-1: none)
  /// Calls that created NaN/Inf which never reached a module output, a gradient, a parameter
  /// or optimizer state (consumed harmlessly, e.g. an -inf mask through softmax).
  std::int64_t benign_nonfinite = 0;
  /// Calls that created NaN/Inf from finite inputs that did reach one of those (harmful).
  std::int64_t harmful_nonfinite = 0;
  /// FP32 re-runs of calls that made NaN/Inf from finite inputs: finite / also non-finite.
  std::int64_t fp32_finite = 0;
  std::int64_t fp32_nonfinite = 0;
  Stats stats;  ///< outputs (forward/optimizer); incoming gradients (backward)
  /// Floating inputs of the calls; only when the run took input stats.
  std::optional<Stats> input_stats;
  /// Per step absmax of the outputs, at most kMaxSeries points (down-sampled beyond that).
  StepSeries absmax_by_step;
  ShadowSummary shadow;  ///< --shadow: worst error of the float32 re-runs (checks == 0: none)
  KernelSummary kernels;  ///< CUDA kernels/copies of its calls (CUPTI; empty: none)

  /// Adds the entry of the same key from another thread, snapshot or rank. An entry with no
  /// calls carries only the non-finite counts the sentinel took on unsampled steps: its steps
  /// and blocks are not merged. Throws std::overflow_error (naming the count) rather than let
  /// a count wrap around.
  void merge(const EntryStats& other);
  /// Adds the non-finite counts (origins, benign, FP32 re-runs, first step) only.
  void add_nonfinite_counts(const EntryStats& other);
  bool has_nonfinite_counts() const;
};

}  // namespace ampscope
