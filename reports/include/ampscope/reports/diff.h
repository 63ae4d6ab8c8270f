// What changed between two reports of the same model (e.g. before and after pinning).
#pragma once

#include <ampscope/reports/report.h>

#include <string>
#include <vector>

namespace ampscope::reports {

/// One (layer, op) whose compute dtype differs between the runs.
struct DtypeChange {
  std::string layer, op, before, after;
};

struct ReportDiff {
  bool nonfinite_before = false, nonfinite_after = false;  ///< first_nonfinite set
  std::int64_t origins_before = 0, origins_after = 0;      ///< sum of nonfinite_from_finite
  std::vector<std::string> pins_gone, pins_new;            ///< pin_fp32 recommendations
  std::vector<DtypeChange> dtype_changes;                  ///< forward ops, layers in both
  double step_s_before = 0, step_s_after = 0;              ///< duration / steps
};

/// Compares `before` with `after`.
ReportDiff diff_reports(const Report& before, const Report& after);
/// The diff as terminal text (ends with a newline).
std::string render_diff(const ReportDiff& d, const Report& before, const Report& after);

}  // namespace ampscope::reports
