// Terminal rendering of a report: top risks, autocast choices per layer, first non-finite.
#pragma once

#include <ampscope/reports/report.h>

#include <string>

namespace ampscope::reports {

struct SummaryOptions {
  std::size_t max_layers = 40;  ///< rows of the autocast table before "... N more"
  bool color = false;           ///< ANSI colours (only on a terminal)
};

/// The summary as plain text (ends with a newline).
std::string render_summary(const Report& report, const SummaryOptions& options = {});

}  // namespace ampscope::reports
