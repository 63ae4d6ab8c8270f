// What re-running one low-precision op call in float32 showed: the FP32 re-check of the first
// non-finite op, and the --shadow re-checks of sampled low-precision ops. Plain C++ (no torch):
// the report model carries these as they are.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace ampscope {

/// One op call's low-precision output `a` against its float32 re-run `b` (first floating
/// output of each). Errors are over the elements finite in both; NaN when there are none.
struct Fp32Check {
  bool also_nonfinite = false;  ///< the float32 re-run held NaN/Inf too
  std::int64_t compared = 0;    ///< elements finite in both
  std::int64_t lowp_only_nonfinite = 0;  ///< NaN/Inf in a where b is finite
  double rel_err = std::numeric_limits<double>::quiet_NaN();  ///< ||a - b||_2 / ||b||_2
  double max_ulp = std::numeric_limits<double>::quiet_NaN();  ///< max |a - b| in ulps of a's format at b
  double cosine = std::numeric_limits<double>::quiet_NaN();   ///< <a, b> / (|a| |b|)
  double fp32_absmax = std::numeric_limits<double>::quiet_NaN();  ///< max |b| over finite b
};

/// The --shadow re-checks of one (layer, op) entry, summarised worst-case.
struct ShadowSummary {
  std::int64_t checks = 0;
  double max_rel_err = 0.0;
  double max_ulp = 0.0;
  double min_cosine = 1.0;
  std::int64_t worst_step = -1;  ///< step of the check with the largest relative error

  void add(const Fp32Check& c, std::int64_t step) {
    if (c.compared == 0) return;
    ++checks;
    if (std::isfinite(c.rel_err) && (worst_step < 0 || c.rel_err > max_rel_err)) {
      max_rel_err = c.rel_err;
      worst_step = step;
    }
    if (std::isfinite(c.max_ulp)) max_ulp = std::max(max_ulp, c.max_ulp);
    if (std::isfinite(c.cosine)) min_cosine = std::min(min_cosine, c.cosine);
  }
  void merge(const ShadowSummary& o) {
    if (o.checks == 0) return;
    if (checks == 0 || o.max_rel_err > max_rel_err) {
      max_rel_err = o.max_rel_err;
      worst_step = o.worst_step;
    }
    checks += o.checks;
    max_ulp = std::max(max_ulp, o.max_ulp);
    min_cosine = std::min(min_cosine, o.min_cosine);
  }
};

}  // namespace ampscope
