// The files a run writes, as one registry: each writer names its file for a set and renders its
// text from the report. Session::write, the Python front end (through the session library) and
// the CLI loop over it, so a new output is one entry in writers.cpp.
#pragma once

#include <ampscope/reports/report.h>

#include <string>
#include <string_view>
#include <vector>

namespace ampscope::reports {

struct Writer {
  std::string_view name;  ///< "html", "precision_map", "report"
  /// Its file name in the set named `stem` ("report", "report.rank1", ...).
  std::string (*file)(std::string_view stem);
  /// Its text.
  std::string (*write)(const Report& report);
};

/// Every writer, in the order a set is written; "report" (report.json) is last.
const std::vector<Writer>& writers();

/// The writer called `name`, or nullptr.
const Writer* find_writer(std::string_view name);

/// Writes the set `stem` of `report` into `dir` (created if missing) atomically: a kill at any
/// moment leaves all of this set's files or the previous set's. Writers named in `skip` are
/// left out. Returns the path of the JSON report.
std::string write_report_set(const Report& report, const std::string& dir, const std::string& stem,
                             const std::vector<std::string>& skip = {});

}  // namespace ampscope::reports
