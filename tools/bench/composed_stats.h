// The stats block composed from ATen ops only: what one would write without ampscope's kernel.
// The reference the stats benchmarks (CPU and CUDA) time the kernel against. Header-only: each
// benchmark is one translation unit.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <limits>

#include "ampscope/profiler/stats.h"

namespace ampscope::bench {

/// The stats of `t0` (any device): 16-bit inputs are widened to float32 once (exact), float64
/// kept; masks are counted with count_nonzero; the exponent histogram comes from frexp.
inline ampscope::Stats composed_stats(const at::Tensor& t0) {
  static const c10::ScalarType formats[] = {at::kHalf, at::kBFloat16, at::kFloat8_e4m3fn,
                                            at::kFloat8_e5m2};
  static const double min_normal[] = {0x1p-14, 0x1p-126, 0x1p-6, 0x1p-14};
  auto cnt = [](const at::Tensor& m) { return at::count_nonzero(m).item<std::int64_t>(); };
  const auto t = t0.scalar_type() == at::kDouble ? t0 : t0.to(at::kFloat);
  ampscope::Stats s;
  s.count = t.numel();
  auto fin = t.isfinite();
  s.nan = cnt(t.isnan());
  s.posinf = cnt(t.isposinf());
  s.neginf = cnt(t.isneginf());
  s.zeros = cnt(t.eq(0));
  auto a = t.abs();
  auto nzf = fin & t.ne(0);
  s.absmax = at::where(fin, a, at::zeros({}, a.options())).amax().item<double>();
  s.absmin_nonzero =
      at::where(nzf, a, at::full({}, std::numeric_limits<double>::infinity(), a.options()))
          .amin()
          .item<double>();
  auto d = at::where(fin, t, at::zeros({}, t.options())).to(at::kDouble);
  s.sum = d.sum().item<double>();
  s.sum_sq = d.mul(d).sum().item<double>();
  auto e =
      std::get<1>(at::frexp(at::where(nzf, a, at::zeros({}, a.options()))));  // frexp(0) = (0, 0)
  auto counts = at::bincount(at::where(nzf, e + 1200, at::zeros({}, e.options())).flatten()).cpu();
  auto* p = counts.to(at::kLong).contiguous().data_ptr<std::int64_t>();
  for (std::int64_t i = 1; i < counts.numel(); ++i)
    if (p[i] != 0) s.exp_hist.add(static_cast<int>(i) - 1201, p[i]);
  for (int f = 0; f < ampscope::kNumFormats; ++f) {
    auto c = t.to(formats[f]).to(at::kFloat);
    auto over = formats[f] == at::kFloat8_e4m3fn ? c.isnan() : c.isinf();
    s.overflow[f] = cnt(fin & over);
    s.underflow[f] = cnt(nzf & c.eq(0));
    s.subnormal[f] = cnt(nzf & c.ne(0) & c.abs().lt(min_normal[f]) & ~over);
  }
  return s;
}

}  // namespace ampscope::bench
