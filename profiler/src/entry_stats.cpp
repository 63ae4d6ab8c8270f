// EntryStats: the one merge of aggregated op entries (observer threads, snapshots, ranks), and
// that of their silent-loss tallies (loss_counts.h).
#include <ampscope/profiler/entry_stats.h>
#include <ampscope/profiler/loss_counts.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace ampscope {
namespace {

/// Per step, the maximum of both series; then halved back under kMaxSeries.
void merge_series(StepSeries& into, const StepSeries& from) {
  if (from.empty()) return;
  StepSeries merged;
  merged.reserve(into.size() + from.size());
  auto a = into.cbegin();
  auto b = from.cbegin();
  while (a != into.cend() || b != from.cend()) {
    if (b == from.cend() || (a != into.cend() && a->first < b->first)) {
      merged.push_back(*a++);
    } else if (a == into.cend() || b->first < a->first) {
      merged.push_back(*b++);
    } else {
      merged.emplace_back(a->first, std::max(a->second, b->second));
      ++a;
      ++b;
    }
  }
  while (merged.size() > kMaxSeries) halve_series(merged);
  into.swap(merged);
}

}  // namespace

void add_count(std::int64_t& a, std::int64_t b, std::string_view what) {
  if (__builtin_add_overflow(a, b, &a)) throw std::overflow_error(std::string(what) + ": merged count overflows int64");
}

void merge_stats_checked(Stats& into, const Stats& s, std::string_view what) {
  std::int64_t total = into.count;
  add_count(total, s.count, what);
  into.merge(s);
}

void add_series_point(StepSeries& series, std::int64_t step, double value) {
  if (series.empty() || series.back().first < step) {
    series.emplace_back(step, value);
  } else if (series.back().first == step) {
    series.back().second = std::max(series.back().second, value);
    return;
  } else {
    auto it = std::lower_bound(series.begin(), series.end(), step,
                               [](const auto& point, std::int64_t s) { return point.first < s; });
    if (it != series.end() && it->first == step) {
      it->second = std::max(it->second, value);
      return;
    }
    series.insert(it, {step, value});
  }
  if (series.size() > kMaxSeries) halve_series(series);
}

void EntryStats::add_nonfinite_counts(const EntryStats& o) {
  add_count(nonfinite_from_finite, o.nonfinite_from_finite, "nonfinite_from_finite");
  add_count(benign_nonfinite, o.benign_nonfinite, "benign_nonfinite");
  add_count(harmful_nonfinite, o.harmful_nonfinite, "harmful_nonfinite");
  add_count(fp32_finite, o.fp32_finite, "fp32_finite");
  add_count(fp32_nonfinite, o.fp32_nonfinite, "fp32_nonfinite");
  first_nonfinite_step = earliest_step(first_nonfinite_step, o.first_nonfinite_step);
}

bool EntryStats::has_nonfinite_counts() const {
  return nonfinite_from_finite != 0 || benign_nonfinite != 0 || harmful_nonfinite != 0 || fp32_finite != 0 ||
         fp32_nonfinite != 0 || first_nonfinite_step >= 0;
}

void EntryStats::merge(const EntryStats& o) {
  if (calls == 0 && o.calls > 0) {
    // Only sentinel counts here so far (unsampled steps): take o's calls, keep the counts.
    EntryStats counts = std::move(*this);
    *this = o;
    add_nonfinite_counts(counts);
    return;
  }
  add_nonfinite_counts(o);
  if (o.calls == 0) return;
  add_count(calls, o.calls, "calls");
  add_count(casts, o.casts, "casts");
  first_step = std::min(first_step, o.first_step);
  last_step = std::max(last_step, o.last_step);
  merge_stats_checked(stats, o.stats, "stats");
  if (o.input_stats) {
    if (input_stats) merge_stats_checked(*input_stats, *o.input_stats, "input_stats");
    else input_stats = o.input_stats;
  }
  shadow.merge(o.shadow);
  std::int64_t launches = kernels.launches, time_ns = kernels.time_ns;
  add_count(launches, o.kernels.launches, "kernels.launches");
  add_count(time_ns, o.kernels.time_ns, "kernels.time_ns");
  kernels.merge(o.kernels);
  merge_series(absmax_by_step, o.absmax_by_step);
}

double CastLossTally::lost_rel_l2() const {
  if (!(source_sq > 0.0)) return underflow > 0 ? 1.0 : 0.0;
  return std::min(1.0, std::sqrt(lost_sq / source_sq));
}

void CastLossTally::add(const CastLossTally& o) {
  first_step = earliest_step(first_step, o.first_step);
  if (o.worst_step >= 0 && (worst_step < 0 || o.worst_rel_l2 > worst_rel_l2)) {
    worst_rel_l2 = o.worst_rel_l2;
    worst_step = o.worst_step;
  }
  casts += o.casts;
  values += o.values;
  nonzero += o.nonzero;
  underflow += o.underflow;
  overflow += o.overflow;
  subnormal += o.subnormal;
  source_sq += o.source_sq;
  lost_sq += o.lost_sq;
}

void DegenerateCounts::add(const DegenerateCounts& o) {
  first_step = earliest_step(first_step, o.first_step);
  zero_outputs += o.zero_outputs;
  checked += o.checked;
  degenerate += o.degenerate;
  min_nonzero_share = std::min(min_nonzero_share, o.min_nonzero_share);
  max_rel_err = std::max(max_rel_err, o.max_rel_err);
  fp32_absmax = std::max(fp32_absmax, o.fp32_absmax);
}

}  // namespace ampscope
