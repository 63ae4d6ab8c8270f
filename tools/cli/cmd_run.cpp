// ampscope run: runs a command under the profiler. `python script.py ...` runs as
// `python -m ampscope script.py ...`; any other program (a LibTorch binary) runs with
// libampscope_preload.so in LD_PRELOAD.
#include <ampscope/reports/files.h>
#include <ampscope/reports/out_dir.h>
#include <fcntl.h>
#include <fmt/core.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "args.h"
#include "commands.h"

extern char** environ;

namespace ampscope::cli {

std::string self_exe() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "ampscope";
  buf[n] = '\0';
  return buf;
}

namespace {

constexpr const char* kHelp = R"(usage: ampscope run [--out DIR] [--every N] [--shadow] [--stop-on-nonfinite]
                    [--include PATS] [--exclude PATS] [--ops PATS] [--exclude-ops PATS]
                    [--input-stats] -- CMD ARGS...

Runs a command under the profiler and writes DIR/report.json, report.html and
precision_map.json (default DIR: ampscope-out). Exits with the command's exit code.
  python script.py ARGS   runs as `python -m ampscope --out DIR script.py ARGS` (the Python
                          package next to this binary is put on PYTHONPATH)
  torchrun [OPTS] script.py ARGS
                          every rank runs `-m ampscope --out DIR script.py ARGS` and writes
                          DIR/report.rank<R>.json (+ html, map); combine with `ampscope merge`
  any other program       a LibTorch program, run with libampscope_preload.so in LD_PRELOAD:
                          profiling starts when it loads and the report is written when it
                          exits normally. Its ops land in "<outside>" unless its modules use
                          ampscope::LayerScope (see the README).

  --out DIR              output folder
  --every N              record every N-th step only
  --shadow               re-check low-precision ops in float32 (see python -m ampscope --help)
  --stop-on-nonfinite    Python scripts: stop at the first NaN/Inf, write the report, exit 3
  --include PATS         record only these layers (comma-separated globs; covers sub-layers)
  --exclude PATS         do not record these layers
  --ops PATS             record only these ops / autograd nodes ("aten::*mm*,*Backward0")
  --exclude-ops PATS     do not record these ops
  --input-stats          also record stats of every op's floating inputs
)";

std::string install_dir() {
  const std::string exe = self_exe();
  if (exe.find('/') == std::string::npos) return ".";
  return reports::parent_dir(reports::parent_dir(exe));  // <prefix>/bin/ampscope -> <prefix>
}

std::string prepend_env(const char* name, const std::string& value) {
  const char* old = std::getenv(name);
  return old && *old ? value + ":" + old : value;
}

/// While the CLI waits, SIGINT/SIGTERM go to the command (which writes its report and exits
/// 130/143), not to the waiting CLI: its exit code is then the command's.
void forward_signal(int sig) {
  if (g_running_child > 0) ::kill(static_cast<pid_t>(g_running_child), sig);
}

/// Installs forward_signal while alive, unless a caller (`ampscope fix`) already handles the
/// signals itself: its handler stays and does its own forwarding.
struct ForwardSignals {
  struct sigaction prev_int {}, prev_term {};
  bool installed = false;
  ForwardSignals() {
    ::sigaction(SIGINT, nullptr, &prev_int);
    ::sigaction(SIGTERM, nullptr, &prev_term);
    const auto own = [](const struct sigaction& a) {
      return (a.sa_flags & SA_SIGINFO) || (a.sa_handler != SIG_DFL && a.sa_handler != SIG_IGN);
    };
    if (own(prev_int) || own(prev_term)) return;
    struct sigaction sa {};
    sa.sa_handler = forward_signal;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, nullptr);
    ::sigaction(SIGTERM, &sa, nullptr);
    installed = true;
  }
  ~ForwardSignals() {
    if (!installed) return;
    ::sigaction(SIGINT, &prev_int, nullptr);
    ::sigaction(SIGTERM, &prev_term, nullptr);
  }
};

/// posix_spawn file actions that send stdout and stderr to `log`.
struct LogRedirect {
  posix_spawn_file_actions_t actions;
  explicit LogRedirect(const std::string& log) {
    ::posix_spawn_file_actions_init(&actions);
    ::posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                       0644);
    ::posix_spawn_file_actions_adddup2(&actions, 1, 2);
  }
  ~LogRedirect() { ::posix_spawn_file_actions_destroy(&actions); }
};

}  // namespace

volatile std::sig_atomic_t g_running_child = 0;

int spawn_and_wait(const std::vector<std::string>& cmd, const std::string& log) {
  std::vector<char*> argv;
  for (const auto& s : cmd) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  std::optional<LogRedirect> redirect;
  if (!log.empty()) redirect.emplace(log);
  int rc = ::posix_spawnp(&pid, argv[0], redirect ? &redirect->actions : nullptr, nullptr,
                          argv.data(), environ);
  if (rc != 0) throw UsageError("cannot run '" + cmd[0] + "': " + std::strerror(rc));
  g_running_child = pid;
  ForwardSignals forward;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw UsageError(std::string("waiting for the command: ") + std::strerror(errno));
  }
  g_running_child = 0;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

namespace {

bool is_python(const std::string& program) {
  return reports::base_name(program).rfind("python", 0) == 0;
}

/// `torchrun [its options] script.py args`: where the script starts (0: not torchrun, or no
/// `.py` argument to run under `-m ampscope`).
std::size_t torchrun_script(const std::vector<std::string>& rest) {
  if (reports::base_name(rest[0]) != "torchrun") return 0;
  for (std::size_t i = 1; i < rest.size(); ++i) {
    const std::string& a = rest[i];
    if (a.size() > 3 && a[0] != '-' && a.compare(a.size() - 3, 3, ".py") == 0) return i;
  }
  throw UsageError("run: no training script (*.py) in the torchrun command");
}

/// `python [interpreter options] script.py args`: how many words after the interpreter are its
/// own options (-u, -O, -X dev, -W error, ...), which go before `-m ampscope`. A command, module
/// or stdin instead of a script file cannot run under the profiler: a usage error.
std::size_t python_options(const std::vector<std::string>& rest) {
  std::size_t i = 1;
  while (i < rest.size() && rest[i].size() > 1 && rest[i][0] == '-') {
    const std::string& a = rest[i];
    if (a == "-c" || a == "-m" || a.rfind("-c", 0) == 0 || a.rfind("-m", 0) == 0 || a == "--")
      throw UsageError("run: '" + rest[0] + " " + a +
                       " ...' runs no script file; run `python script.py ...` (or put the code "
                       "in a file)");
    i += (a == "-X" || a == "-W" || a == "--check-hash-based-pycs") ? 2 : 1;
  }
  if (i >= rest.size() || rest[i] == "-")
    throw UsageError("run: no script after '" + rest[0] + "' (ampscope run -- python script.py ...)");
  return i - 1;
}

/// The recording flags as the preload library's environment (AMPSCOPE_SHADOW, _INPUT_STATS,
/// _INCLUDE, _EXCLUDE, _OPS, _EXCLUDE_OPS).
void set_preload_env(const std::vector<std::string>& flags) {
  auto has = [&](const char* f) { return std::find(flags.begin(), flags.end(), f) != flags.end(); };
  ::setenv("AMPSCOPE_SHADOW", has("--shadow") ? "1" : "0", 1);
  ::setenv("AMPSCOPE_INPUT_STATS", has("--input-stats") ? "1" : "0", 1);
  const std::pair<const char*, const char*> valued[] = {{"--include", "AMPSCOPE_INCLUDE"},
                                                        {"--exclude", "AMPSCOPE_EXCLUDE"},
                                                        {"--ops", "AMPSCOPE_OPS"},
                                                        {"--exclude-ops", "AMPSCOPE_EXCLUDE_OPS"}};
  for (const auto& [flag, env] : valued) {
    auto it = std::find(flags.begin(), flags.end(), flag);
    if (it != flags.end() && it + 1 != flags.end()) ::setenv(env, (it + 1)->c_str(), 1);
    else ::unsetenv(env);
  }
}

}  // namespace

int run_profiled(const std::vector<std::string>& rest, const std::string& out, int every,
                 const std::vector<std::string>& python_flags, const std::string& log) {
  reports::check_writable(out);  // an unusable --out fails before the command runs
  const char* prev = std::getenv("LD_PRELOAD");
  const std::string prev_preload = prev ? prev : "";
  std::string prefix = install_dir();
  std::vector<std::string> cmd;
  if (const std::size_t script = torchrun_script(rest); script > 0) {
    // every rank runs `-m ampscope ... script.py`: one report per rank (report.rank<R>.json)
    ::setenv("PYTHONPATH", prepend_env("PYTHONPATH", reports::join_path(prefix, "python")).c_str(),
             1);
    cmd.assign(rest.begin(), rest.begin() + static_cast<std::ptrdiff_t>(script));
    for (const char* a : {"-m", "ampscope", "--out"}) cmd.emplace_back(a);
    cmd.insert(cmd.end(), {out, "--every", std::to_string(every)});
    cmd.insert(cmd.end(), python_flags.begin(), python_flags.end());
    cmd.insert(cmd.end(), rest.begin() + static_cast<std::ptrdiff_t>(script), rest.end());
  } else if (is_python(rest[0])) {
    std::string pkg = reports::join_path(prefix, "python");
    ::setenv("PYTHONPATH", prepend_env("PYTHONPATH", pkg).c_str(), 1);
    const auto script = static_cast<std::ptrdiff_t>(1 + python_options(rest));
    cmd.assign(rest.begin(), rest.begin() + script);
    cmd.insert(cmd.end(), {"-m", "ampscope", "--out", out, "--every", std::to_string(every)});
    cmd.insert(cmd.end(), python_flags.begin(), python_flags.end());
    cmd.insert(cmd.end(), rest.begin() + script, rest.end());
  } else {
    std::string lib = reports::join_path(reports::join_path(prefix, "lib"), "libampscope_preload.so");
    if (reports::path_kind(lib) != reports::PathKind::kFile) throw UsageError(lib + ": not found");
    ::setenv("LD_PRELOAD", prepend_env("LD_PRELOAD", lib).c_str(), 1);
    ::setenv("AMPSCOPE_OUT", out.c_str(), 1);
    ::setenv("AMPSCOPE_EVERY", std::to_string(every).c_str(), 1);
    set_preload_env(python_flags);
    std::string joined;
    for (const auto& s : rest) joined += (joined.empty() ? "" : " ") + s;
    ::setenv("AMPSCOPE_COMMAND", joined.c_str(), 1);
    cmd = rest;
  }
  const int rc = spawn_and_wait(cmd, log);
  // The next spawn (verify runs two) starts from the caller's environment again.
  if (prev) ::setenv("LD_PRELOAD", prev_preload.c_str(), 1);
  else ::unsetenv("LD_PRELOAD");
  return rc;
}

int cmd_run(const Argv& argv) {
  Args a(argv, {"--out", "--every", "--include", "--exclude", "--ops", "--exclude-ops"},
         {"--shadow", "--stop-on-nonfinite", "--input-stats"}, "run");
  if (a.help()) return fmt::print("{}", kHelp), 0;
  if (!a.positional().empty() || a.rest().empty()) {
    throw UsageError("run needs the command after '--' (see ampscope run --help)");
  }
  std::vector<std::string> flags;
  for (const char* f : {"--shadow", "--stop-on-nonfinite", "--input-stats"})
    if (a.flag(f)) flags.push_back(f);
  for (const char* v : {"--include", "--exclude", "--ops", "--exclude-ops"}) {
    if (!a.value(v).empty()) flags.insert(flags.end(), {v, a.value(v)});
  }
  if (a.flag("--stop-on-nonfinite") && !is_python(a.rest()[0]) &&
      reports::base_name(a.rest()[0]) != "torchrun")
    throw UsageError("--stop-on-nonfinite works for Python scripts only; a LibTorch program checks "
                     "Session::stop_requested() itself");
  return run_profiled(a.rest(), a.value("--out", "ampscope-out"), a.int_value("--every", 1, 1, 1000000),
                      flags);
}

}  // namespace ampscope::cli
