// What `ampscope fix` writes: the minimal precision map with each pin's evidence, and the text
// of fix.txt (rounds, runs, what each pin fixed, what remains, what the map costs).
#pragma once

#include <ampscope/reports/precision_map.h>

#include <nlohmann/json.hpp>
#include <string>

#include "fix_search.h"

namespace ampscope::cli::fix {

/// A run's outcome in a few words: "clean", or where it went non-finite and what it recommends.
std::string run_result(const RunRecord& r);
/// The final map (schema ampscope.precision_map/1) plus "evidence": per pin, the run and
/// recommendation that added it and the run without it that was not clean. `start` supplies
/// the reason codes of pins that came from the starting map. Run folders are written relative
/// to `out_dir`, where the map lives.
nlohmann::ordered_json fix_map_json(const FixOutcome& o, const reports::PrecisionMap& start,
                                    const std::string& out_dir);
/// fix.txt; `command` is the user's command as one line. Ends with a newline.
std::string render_fix(const FixOutcome& o, const std::string& command);

}  // namespace ampscope::cli::fix
