// The run machinery `verify` and `fix` share: how a map and the recording flags reach each kind
// of command.
#include "profiled_run.h"

#include <ampscope/reports/files.h>
#include <fmt/core.h>

#include <cstdlib>
#include <fstream>

#include "args.h"
#include "commands.h"

namespace ampscope::cli {

bool is_ampscope_demo(const std::vector<std::string>& cmd) {
  return cmd.size() >= 2 && reports::base_name(cmd[0]) == "ampscope" && cmd[1] == "demo";
}

bool can_stop_on_nonfinite(const std::vector<std::string>& cmd) {
  return !cmd.empty() &&
         (is_ampscope_demo(cmd) || reports::base_name(cmd[0]).rfind("python", 0) == 0);
}

std::string join_command(const std::vector<std::string>& cmd) {
  std::string joined;
  for (const auto& s : cmd) joined += (joined.empty() ? "" : " ") + s;
  return joined;
}

namespace {

int run_demo_pass(const PassOptions& o) {
  std::vector<std::string> c = o.cmd;
  if (c[0].find('/') == std::string::npos) c[0] = self_exe();  // this ampscope, on PATH or not
  c.insert(c.end(), {"--out", o.out, "--every", std::to_string(o.every), "--quiet"});
  if (!o.map.empty()) c.insert(c.end(), {"--map", o.map});
  if (o.stop_on_nonfinite) c.push_back("--stop-on-nonfinite");
  return spawn_and_wait(c, o.log);
}

}  // namespace

std::string last_line(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line)) {
    const bool own = line.rfind("ampscope: ", 0) == 0 && line.rfind("ampscope: error", 0) != 0;
    if (!line.empty() && !own) last = line;  // not "ampscope: wrote ...", after the error
  }
  std::string out;
  for (unsigned char c : last.substr(0, 200))
    out.push_back(c >= 0x20 && c < 0x7f ? static_cast<char>(c) : '?');
  return out;
}

PassResult run_pass(const PassOptions& o) {
  // Python scripts and LibTorch programs read the map from the environment; an empty map must
  // not inherit the caller's.
  if (o.map.empty())
    ::unsetenv("AMPSCOPE_PRECISION_MAP");
  else
    ::setenv("AMPSCOPE_PRECISION_MAP", o.map.c_str(), 1);
  PassResult r;
  if (is_ampscope_demo(o.cmd)) {
    r.exit_code = run_demo_pass(o);
  } else {
    std::vector<std::string> flags;
    if (o.stop_on_nonfinite && can_stop_on_nonfinite(o.cmd)) flags.push_back("--stop-on-nonfinite");
    r.exit_code = run_profiled(o.cmd, o.out, o.every, flags, o.log);
  }
  r.report_path = reports::join_path(o.out, "report.json");
  if (reports::path_kind(r.report_path) != reports::PathKind::kFile) {
    const std::string log =
        o.log.empty() ? "" : fmt::format(" ({}: \"{}\")", o.log, last_line(o.log));
    throw UsageError(fmt::format("the command exited with code {} and wrote no report ({}){}",
                                 r.exit_code, r.report_path, log));
  }
  return r;
}

}  // namespace ampscope::cli
