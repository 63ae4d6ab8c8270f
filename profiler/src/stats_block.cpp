// The stats block: exponent histogram, merging, derived values, tensor views.
#include "ampscope/profiler/stats.h"

#include <algorithm>
#include <cmath>

namespace ampscope {

// ---------------------------------------------------------------- ExpHist

void ExpHist::cover(int lo, int hi) {
  if (bins_.empty()) {
    lo_ = lo;
    bins_.assign(static_cast<std::size_t>(hi - lo), 0);
    return;
  }
  const int new_lo = std::min(lo, lo_), new_hi = std::max(hi, this->hi());
  if (new_lo == lo_ && new_hi == this->hi()) return;
  std::vector<std::int64_t> grown(static_cast<std::size_t>(new_hi - new_lo), 0);
  std::copy(bins_.begin(), bins_.end(), grown.begin() + (lo_ - new_lo));
  bins_.swap(grown);
  lo_ = new_lo;
}

void ExpHist::add(int e, std::int64_t n) {
  if (n == 0) return;
  cover(e, e + 1);
  bins_[static_cast<std::size_t>(e - lo_)] += n;
}

void ExpHist::add_bins(int lo, const std::int64_t* counts, int n) {
  int first = 0, last = n;
  while (first < last && counts[first] == 0) ++first;
  while (last > first && counts[last - 1] == 0) --last;
  if (first == last) return;
  cover(lo + first, lo + last);
  for (int i = first; i < last; ++i) bins_[static_cast<std::size_t>(lo + i - lo_)] += counts[i];
}

void ExpHist::merge(const ExpHist& other) {
  add_bins(other.lo_, other.bins_.data(), static_cast<int>(other.bins_.size()));
}

std::int64_t ExpHist::at(int e) const {
  if (bins_.empty() || e < lo_ || e >= hi()) return 0;
  return bins_[static_cast<std::size_t>(e - lo_)];
}

std::int64_t ExpHist::total() const {
  std::int64_t t = 0;
  for (auto b : bins_) t += b;
  return t;
}

bool ExpHist::operator==(const ExpHist& o) const {
  // Compare bin by bin over the union of both ranges, so stored zero edges never matter.
  if (empty() && o.empty()) return true;
  const int lo = empty() ? o.lo_ : o.empty() ? lo_ : std::min(lo_, o.lo_);
  const int hi = empty() ? o.hi() : o.empty() ? this->hi() : std::max(this->hi(), o.hi());
  for (int e = lo; e < hi; ++e)
    if (at(e) != o.at(e)) return false;
  return true;
}

// ---------------------------------------------------------------- Stats

double Stats::mean() const {
  const std::int64_t n = finite();
  return n > 0 ? sum / static_cast<double>(n) : 0.0;
}

double Stats::rms() const {
  const std::int64_t n = finite();
  return n > 0 ? std::sqrt(sum_sq / static_cast<double>(n)) : 0.0;
}

void Stats::merge(const Stats& o) {
  count += o.count;
  nan += o.nan;
  posinf += o.posinf;
  neginf += o.neginf;
  zeros += o.zeros;
  absmax = std::max(absmax, o.absmax);
  absmin_nonzero = std::min(absmin_nonzero, o.absmin_nonzero);
  sum += o.sum;
  sum_sq += o.sum_sq;
  for (int i = 0; i < kNumFormats; ++i) {
    overflow[i] += o.overflow[i];
    underflow[i] += o.underflow[i];
    subnormal[i] += o.subnormal[i];
  }
  exp_hist.merge(o.exp_hist);
}

// ---------------------------------------------------------------- TensorView

std::int64_t TensorView::numel() const {
  std::int64_t n = 1;
  for (auto s : sizes) n *= s;
  return n;
}

bool TensorView::is_contiguous() const {
  if (numel() == 0) return true;
  std::int64_t expected = 1;
  for (std::size_t d = sizes.size(); d-- > 0;) {
    if (sizes[d] == 1) continue;
    if (d >= strides.size() || strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

void halve_series(std::vector<std::pair<std::int64_t, double>>& series) {
  std::vector<std::pair<std::int64_t, double>> halved;
  halved.reserve(series.size() / 2 + 1);
  for (std::size_t i = 0; i < series.size(); i += 2) {
    auto p = series[i];
    if (i + 1 < series.size()) p.second = std::max(p.second, series[i + 1].second);
    halved.push_back(p);
  }
  series.swap(halved);
}

}  // namespace ampscope
