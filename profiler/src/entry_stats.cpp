// EntryStats: the one merge of aggregated op entries (observer threads, snapshots, ranks).
#include <ampscope/profiler/entry_stats.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace ampscope {
namespace {

/// a += b, refusing to wrap around (a merged count past int64 is no count at all).
void add(std::int64_t& a, std::int64_t b, const char* what) {
  if (__builtin_add_overflow(a, b, &a)) throw std::overflow_error(std::string(what) + ": merged count overflows int64");
}

/// Stats::merge after checking that no count can overflow: every other count of a valid block
/// is at most `count` (report_validate.cpp), so checking the counts suffices.
void merge_stats(Stats& into, const Stats& s, const char* what) {
  std::int64_t total = into.count;
  add(total, s.count, what);
  into.merge(s);
}

std::int64_t earliest(std::int64_t a, std::int64_t b) { return a < 0 ? b : b < 0 ? a : std::min(a, b); }

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
  add(nonfinite_from_finite, o.nonfinite_from_finite, "nonfinite_from_finite");
  add(benign_nonfinite, o.benign_nonfinite, "benign_nonfinite");
  add(harmful_nonfinite, o.harmful_nonfinite, "harmful_nonfinite");
  add(fp32_finite, o.fp32_finite, "fp32_finite");
  add(fp32_nonfinite, o.fp32_nonfinite, "fp32_nonfinite");
  first_nonfinite_step = earliest(first_nonfinite_step, o.first_nonfinite_step);
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
  add(calls, o.calls, "calls");
  add(casts, o.casts, "casts");
  first_step = std::min(first_step, o.first_step);
  last_step = std::max(last_step, o.last_step);
  merge_stats(stats, o.stats, "stats");
  if (o.input_stats) {
    if (input_stats) merge_stats(*input_stats, *o.input_stats, "input_stats");
    else input_stats = o.input_stats;
  }
  shadow.merge(o.shadow);
  std::int64_t launches = kernels.launches, time_ns = kernels.time_ns;
  add(launches, o.kernels.launches, "kernels.launches");
  add(time_ns, o.kernels.time_ns, "kernels.time_ns");
  kernels.merge(o.kernels);
  merge_series(absmax_by_step, o.absmax_by_step);
}

}  // namespace ampscope
