#include <ampscope/reports/what_if.h>

#include <algorithm>

#include "dtypes.h"

namespace ampscope::reports {
namespace {

void add(WhatIfCounts& c, const Stats& s, Format f) {
  c.values += s.finite() - s.zeros;
  c.overflow += s.overflow_in(f);
  c.underflow += s.underflow_in(f);
  c.subnormal += s.subnormal_in(f);
  c.absmax = std::max(c.absmax, s.absmax);
}

std::string verdict_of(const WhatIfCounts& c) {
  if (c.values == 0) return "";
  if (c.overflow > 0) return "overflow";
  if (static_cast<double>(c.underflow) > kWhatIfUnderflowShare * static_cast<double>(c.values))
    return "underflow";
  return "safe";
}

}  // namespace

std::string what_if_verdict(const WhatIfRow& row, std::size_t i) {
  const std::string a = verdict_of(row.activations[i]), g = verdict_of(row.gradients[i]),
                    w = verdict_of(row.weights[i]);
  for (const char* v : {"overflow", "underflow", "safe"})
    if (a == v || g == v || w == v) return v;
  return "";
}

std::vector<WhatIfRow> what_if(const Report& report) {
  std::vector<WhatIfRow> rows;
  for (const Layer& l : report.layers) {
    WhatIfRow row;
    row.layer = l.name;
    for (std::size_t i = 0; i < kWhatIfFormats.size(); ++i) {
      const Format f = kWhatIfFormats[i];
      for (const OpRecord& op : l.ops) {
        // Backward entries carry the incoming gradients, of the dtype they arrived in.
        const bool backward = op.phase == Phase::kBackward;
        const std::string& dtype = backward ? op.input_dtype : op.output_dtype;
        if (!dtypes::wider_than(dtype, f)) continue;
        add(backward ? row.gradients[i] : row.activations[i], op.stats, f);
      }
      for (const ParamRecord& p : l.params) {
        if (!dtypes::wider_than(p.dtype, f)) continue;
        add(row.gradients[i], p.grad, f);
        if (p.values) add(row.weights[i], *p.values, f);
      }
    }
    auto checked = [](const std::array<WhatIfCounts, 3>& a) {
      return std::any_of(a.begin(), a.end(), [](const WhatIfCounts& c) { return c.values > 0; });
    };
    const bool any = checked(row.activations) || checked(row.gradients) || checked(row.weights);
    if (any) rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace ampscope::reports
