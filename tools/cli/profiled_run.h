// One profiled run of a user's command with a precision map, as `verify` and `fix` make them:
// the command's kind decides how the map and the output folder reach it.
#pragma once

#include <string>
#include <vector>

namespace ampscope::cli {

/// What one run is given.
struct PassOptions {
  std::vector<std::string> cmd;    ///< the user's command (python script, ampscope demo, program)
  std::string out;                 ///< folder the run writes report.json into
  int every = 1;                   ///< record every N-th step
  std::string map;                 ///< precision-map file to apply ("" = none)
  bool stop_on_nonfinite = false;  ///< Python scripts and the demo: stop at the first NaN/Inf
  std::string log;                 ///< file for the command's stdout+stderr ("" = inherit)
};

/// What one run left behind.
struct PassResult {
  std::string report_path;  ///< out/report.json (it exists)
  int exit_code = 0;        ///< the command's exit code (3 after --stop-on-nonfinite stopped it)
};

/// `ampscope demo ...` (any path to the ampscope binary).
bool is_ampscope_demo(const std::vector<std::string>& cmd);
/// Whether --stop-on-nonfinite can reach `cmd` (Python scripts and the demo; a LibTorch
/// program checks Session::stop_requested() itself).
bool can_stop_on_nonfinite(const std::vector<std::string>& cmd);
/// Runs `cmd` under the profiler with the map: `python script.py` through `python -m ampscope`
/// (map in $AMPSCOPE_PRECISION_MAP), the demo with --map, any other program through the preload
/// library (map path in $AMPSCOPE_PRECISION_MAP). Throws UsageError when no report appeared.
PassResult run_pass(const PassOptions& o);
/// The command as one line, for progress messages.
std::string join_command(const std::vector<std::string>& cmd);
/// The last non-empty line of a log file that is not ampscope's own news ("ampscope: wrote
/// ..."; its errors count): the command's error. Printable, at most 200 characters.
std::string last_line(const std::string& path);

}  // namespace ampscope::cli
