// The recommendation engine: reads only the report model, so it is testable on hand-made reports.
#pragma once

#include <ampscope/reports/report.h>

#include <string>
#include <vector>

namespace ampscope::reports {

/// Severity rank: critical 3, high 2, medium 1, low 0; -1 for an unknown name.
int severity_rank(const std::string& severity);

/// Evidence-backed recommendations for a report, most severe first. A clean run gives none.
std::vector<Recommendation> recommend(const Report& report);

}  // namespace ampscope::reports
