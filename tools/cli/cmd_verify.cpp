// ampscope verify: runs a command twice, without and with a precision map, and says which of
// the first run's problems the pins removed and what they cost in time per step.
#include <ampscope/reports/diff.h>
#include <ampscope/reports/files.h>
#include <ampscope/reports/precision_map.h>
#include <ampscope/reports/report_json.h>
#include <ampscope/reports/terminal.h>
#include <fmt/core.h>

#include <cstdio>

#include "args.h"
#include "commands.h"
#include "profiled_run.h"

namespace ampscope::cli {
namespace {

constexpr const char* kHelp =
    R"(usage: ampscope verify --map FILE [--out DIR] [--every N] [--fail-on-nonfinite]
                       -- CMD ARGS...

Runs CMD twice under the profiler: first as it is (DIR/baseline), then with the precision map
FILE applied (DIR/pinned). Then, for every problem the first run's report recommended, says
whether it is gone, whether the first non-finite value is gone, which ops changed the dtype
they computed in, and what the pins cost in time per step.

  CMD is one of
    python script.py ARGS   run as `python -m ampscope`; the map is applied at start-up
    ampscope demo ARGS      the bundled demo, given --map for the second run
    any other program       a LibTorch program under `ampscope run`; it gets the map's path
                            in $AMPSCOPE_PRECISION_MAP and applies it itself
                            (Session::apply_precision_map)

  --map FILE            the precision map to verify (e.g. DIR/precision_map.json of a run)
  --out DIR             output folder (default ampscope-verify)
  --every N             record every N-th step only
  --fail-on-nonfinite   exit with code 3 when the run with the map still saw a non-finite value
)";

/// Runs one of the two passes.
PassResult verify_pass(const std::vector<std::string>& cmd, const std::string& out, int every,
                       const std::string& map) {
  PassOptions o;
  o.cmd = cmd;
  o.out = out;
  o.every = every;
  o.map = map;
  const PassResult r = run_pass(o);
  if (r.exit_code != 0)
    std::fprintf(stderr, "ampscope: note: the command exited with code %d\n", r.exit_code);
  return r;
}

std::string reasons_text(const reports::Recommendation& r) {
  std::string s;
  for (const auto& c : r.reasons) s += (s.empty() ? "" : ",") + c;
  return reports::terminal_safe(s);
}

/// The same problem in the second run: same layer and action, and a reason in common.
bool still_there(const reports::Recommendation& r, const reports::Report& after) {
  for (const auto& a : after.recommendations) {
    if (a.layer != r.layer || a.action != r.action) continue;
    for (const auto& c : r.reasons)
      for (const auto& d : a.reasons)
        if (c == d) return true;
  }
  return false;
}

}  // namespace

int cmd_verify(const Argv& argv) {
  Args a(argv, {"--map", "--out", "--every"}, {"--fail-on-nonfinite"}, "verify");
  if (a.help()) return fmt::print("{}", kHelp), 0;
  if (!a.has("--map")) throw UsageError("verify needs --map FILE (see ampscope verify --help)");
  if (!a.positional().empty() || a.rest().empty())
    throw UsageError("verify needs the command after '--' (see ampscope verify --help)");
  const std::string map = a.value("--map");
  const reports::PrecisionMap pm = reports::read_precision_map(map);  // bad maps fail up front
  const std::string out = a.value("--out", "ampscope-verify");
  const int every = a.int_value("--every", 1, 1, 1000000);

  fmt::print("ampscope verify: [1/2] baseline run: {}\n", join_command(a.rest()));
  std::fflush(stdout);
  const std::string before_path =
      verify_pass(a.rest(), reports::join_path(out, "baseline"), every, "").report_path;
  fmt::print("ampscope verify: [2/2] run with {} ({} layer{} pinned to float32)\n", map,
             pm.pin_fp32.size(), pm.pin_fp32.size() == 1 ? "" : "s");
  std::fflush(stdout);
  const PassResult pinned = verify_pass(a.rest(), reports::join_path(out, "pinned"), every, map);
  const std::string& after_path = pinned.report_path;

  const reports::Report before = reports::read_report(before_path);
  const reports::Report after = reports::read_report(after_path);
  std::string text = "\nproblems of the baseline run:\n";
  if (before.recommendations.empty()) text += "  none recommended anything\n";
  for (const auto& r : before.recommendations) {
    text += fmt::format("  {:<11} {:<9} {:<12} {:<8} {}\n", still_there(r, after) ? "STILL THERE" : "gone",
                        ampscope::name_of(r.severity), ampscope::name_of(r.action),
                        r.layer.empty() ? "(root)" : reports::terminal_safe(r.layer), reasons_text(r));
  }
  text += reports::render_diff(reports::diff_reports(before, after), before, after);
  text += fmt::format("reports: {}\n         {}\n", before_path, after_path);
  fmt::print("{}", text);
  reports::write_file_atomic(reports::join_path(out, "verify.txt"), text);
  if (a.flag("--fail-on-nonfinite") && after.first_nonfinite) return kExitNonFinite;
  // A run with the map that failed verifies nothing, whatever its report says: its exit code.
  if (pinned.exit_code != 0 && pinned.exit_code != kExitNonFinite) {
    std::fprintf(stderr, "ampscope: the run with the map exited with code %d: not verified\n",
                 pinned.exit_code);
    return pinned.exit_code;
  }
  return 0;
}

}  // namespace ampscope::cli
