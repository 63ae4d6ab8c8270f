// What-if: per layer, what its recorded activations and gradients would do in float16,
// float8_e4m3fn and float8_e5m2 — the "safe to move to fp16?" table. Derived from the stats
// blocks already in a report (exact counts: the same casts as tensor.to(F)).
#pragma once

#include <ampscope/reports/report.h>

#include <array>
#include <string>
#include <vector>

namespace ampscope::reports {

/// Underflow share (underflowed / nonzero finite values) above which a format is "underflow".
inline constexpr double kWhatIfUnderflowShare = 1e-3;

/// Counts of the values of one kind (activations or gradients) of one layer against a format.
/// Only tensors whose dtype can hold values outside the format count (see `values`).
struct WhatIfCounts {
  std::int64_t values = 0;   ///< nonzero finite values checked
  std::int64_t overflow = 0;
  std::int64_t underflow = 0;
  std::int64_t subnormal = 0;
  double absmax = 0.0;
};

/// The formats of the table, in column order.
inline constexpr std::array<Format, 3> kWhatIfFormats = {Format::kFloat16, Format::kFloat8E4M3FN,
                                                          Format::kFloat8E5M2};

struct WhatIfRow {
  std::string layer;
  std::array<WhatIfCounts, 3> activations;  ///< forward outputs, by kWhatIfFormats
  std::array<WhatIfCounts, 3> gradients;    ///< backward incoming gradients and param grads
  std::array<WhatIfCounts, 3> weights;      ///< parameter values at the last recorded step
};

/// "overflow" | "underflow" | "safe" | "" (nothing checked) for one format of a row.
std::string what_if_verdict(const WhatIfRow& row, std::size_t format_index);

/// One row per layer with anything checked, in report order.
std::vector<WhatIfRow> what_if(const Report& report);

}  // namespace ampscope::reports
