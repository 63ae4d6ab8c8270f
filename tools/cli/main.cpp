// ampscope: the command-line front end. Every failure is one line on stderr,
// "ampscope: error: <what and where>", with exit code 2; never a crash or a stack trace.
#include <ampscope/reports/report_json.h>
#include <c10/core/DeviceType.h>
#include <c10/cuda/CUDAFunctions.h>
#include <fmt/core.h>

#include <fcntl.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <functional>
#include <map>

#include "args.h"
#include "commands.h"
#include "device_probe.h"

namespace ampscope::cli {

int cuda_device_count() {
  try {
    return static_cast<int>(c10::cuda::device_count());
  } catch (const std::exception&) {
    return 0;
  }
}

namespace {

constexpr const char* kUsage = R"(usage: ampscope <command> [options]    (ampscope <command> --help for more)

ampscope profiles the numerical precision of mixed-precision PyTorch training: per layer, what
dtype each op ran in, what overflowed, underflowed or went non-finite, and which layers must
stay float32.

commands:
  demo           train the bundled example under autocast while profiling it
  summary        terminal tables of a report: risks, autocast choices, first non-finite
  html           (re)render the HTML report from report.json
  map            write the precision map from a report's recommendations
  autocast-ops   the ops that have an autocast kernel for a device in the linked torch
  merge          merge the per-rank reports of a distributed run
  run            run a LibTorch program or a Python script under the profiler
  diff           what changed between two runs (e.g. before/after pinning)
  verify         run a command without and with a precision map: which problems the pins
                 removed, and what they cost in step time
  fix            run, pin what the run recommends, re-run until clean, then minimise the
                 pins: a minimal, verified precision map

exit codes: 0 success, 2 bad usage or unreadable input, 3 non-finite (--fail-on-nonfinite;
            fix: still non-finite with its map)
)";

int dispatch(const std::string& command, const Argv& rest) {
  static const std::map<std::string, std::function<int(const Argv&)>> commands = {
      {"demo", cmd_demo},       {"summary", cmd_summary},
      {"map", cmd_map},         {"html", cmd_html},
      {"autocast-ops", cmd_autocast_ops}, {"merge", cmd_merge},
      {"run", cmd_run},         {"diff", cmd_diff},
      {"verify", cmd_verify},   {"fix", cmd_fix},
  };
  auto it = commands.find(command);
  if (it != commands.end()) return it->second(rest);
  throw UsageError("unknown command '" + command + "' (see ampscope --help)");
}

/// `ampscope demo | head -2`: once the reader is gone, stdout goes to /dev/null and the run
/// goes on to write its report (open and dup2 are async-signal-safe).
void on_sigpipe(int) {
  const int null_fd = ::open("/dev/null", O_WRONLY);
  if (null_fd >= 0) {
    ::dup2(null_fd, STDOUT_FILENO);
    ::close(null_fd);
  }
}

int fail(const std::string& message) {
  std::fprintf(stderr, "ampscope: error: %s\n", message.c_str());
  return 2;
}

}  // namespace
}  // namespace ampscope::cli

int main(int argc, char** argv) {
  using namespace ampscope::cli;
  Argv args(argv + 1, argv + argc);
  std::signal(SIGPIPE, on_sigpipe);
  if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  try {
    return dispatch(args[0], Argv(args.begin() + 1, args.end()));
  } catch (const UsageError& e) {
    return fail(e.what());
  } catch (const ampscope::reports::ReportError& e) {
    return fail(e.what());
  } catch (const std::invalid_argument& e) {
    return fail(e.what());
  } catch (const c10::Error& e) {
    return fail(e.what_without_backtrace());
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}
