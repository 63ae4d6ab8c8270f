// The self-contained HTML report (no network, every model-derived string escaped).
#pragma once

#include <ampscope/reports/report.h>

#include <string>

namespace ampscope::reports {

/// Escapes &, <, >, " and ' for HTML text and attribute values.
std::string html_escape(const std::string& s);
/// The whole report as one HTML document.
std::string render_html(const Report& report);

}  // namespace ampscope::reports
