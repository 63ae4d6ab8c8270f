// The ampscope subcommands. Each returns the process exit code and throws UsageError (exit 2)
// or reports::ReportError (exit 2) on bad input.
#pragma once

#include <csignal>
#include <string>
#include <vector>

namespace ampscope::cli {

using Argv = std::vector<std::string>;

/// Exit code for --fail-on-nonfinite when the report shows a non-finite value.
inline constexpr int kExitNonFinite = 3;

int cmd_demo(const Argv& args);
int cmd_summary(const Argv& args);
int cmd_map(const Argv& args);
int cmd_html(const Argv& args);
int cmd_autocast_ops(const Argv& args);
int cmd_merge(const Argv& args);
int cmd_run(const Argv& args);
int cmd_diff(const Argv& args);
int cmd_verify(const Argv& args);
int cmd_fix(const Argv& args);

/// The pid of the command spawn_and_wait is waiting for (0: none), for signal forwarding.
extern volatile std::sig_atomic_t g_running_child;
/// Runs `cmd` and waits; its exit code (128 + signal when killed). With `log`, its stdout and
/// stderr go to that file (truncated). Throws UsageError when it cannot be started.
int spawn_and_wait(const std::vector<std::string>& cmd, const std::string& log = "");
/// The path of this ampscope executable (/proc/self/exe).
std::string self_exe();
/// Runs `cmd` under the profiler, as `ampscope run` does, writing the reports into `out`.
/// `python_flags` (--shadow, --stop-on-nonfinite) go to `python -m ampscope`; --shadow also to
/// a preloaded LibTorch program.
int run_profiled(const std::vector<std::string>& cmd, const std::string& out, int every,
                 const std::vector<std::string>& python_flags = {}, const std::string& log = "");

}  // namespace ampscope::cli
