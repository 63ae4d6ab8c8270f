// ampscope fix: from a NaN run to a minimal, verified precision map. Runs the command, pins
// what each run recommends, re-runs until a run is clean, then drops every pin a clean run
// does without; every candidate map is a real run (fix_search.h).
#include <ampscope/reports/files.h>
#include <ampscope/reports/precision_map.h>
#include <ampscope/reports/recommend.h>
#include <ampscope/reports/report_json.h>
#include <fmt/core.h>
#include <signal.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <csignal>
#include <cstdio>

#include "args.h"
#include "commands.h"
#include "fix_report.h"
#include "fix_search.h"
#include "profiled_run.h"

namespace ampscope::cli {
namespace {

constexpr const char* kHelp =
    R"(usage: ampscope fix [--out DIR] [--max-rounds N] [--map FILE] [--every N] -- CMD ARGS...

Finds a minimal set of layers to pin to float32 that makes a training run clean: no harmful
NaN/Inf and no pin_fp32 recommendation left. Every step is a real run of CMD under the profiler:
  1. a baseline run without pins (to the end: the cost of the map is measured against it);
  2. rounds: pin every layer the last run recommends pinning (pin_fp32) and run again, until
     a run is clean or N rounds have passed; pinning the first culprit often lets the next
     one overflow a few steps later, which the next round catches;
  3. minimisation: drop the pins one at a time (by halves when there are more than 8) and keep
     only those whose removal brings a non-finite value or a pin finding back.
Runs stop at their first harmful non-finite value (--stop-on-nonfinite), so a failing run
costs only the steps up to its failure; a map that was run once is not run again.

  CMD is one of
    python script.py ARGS   run as `python -m ampscope`; the map is applied at start-up
                            ($AMPSCOPE_PRECISION_MAP)
    ampscope demo ARGS      the bundled demo, given --map
    any other program       a LibTorch program under `ampscope run`; it reads the map's path
                            from $AMPSCOPE_PRECISION_MAP (Session::apply_precision_map); its
                            runs go to the end (it cannot be stopped at the first NaN/Inf)

  --out DIR          output folder (default ampscope-fix):
                       DIR/precision_map.json  the minimal map; "why" holds each pin's reason
                                               codes, "evidence" the run that added it and the
                                               run without it that was not clean
                       DIR/fix.txt             what is printed at the end
                       DIR/runs/NN-PURPOSE/    each run: report.json/.html, applied_map.json,
                                               log.txt (the command's output)
  --max-rounds N     at most N rounds, i.e. runs with the map so far (default 8; the baseline
                     is round 1 without --map); the last round's recommendations are not
                     added, since no run would test them
  --map FILE         start from this map (its redundant pins are dropped by minimisation)
  --every N          record every N-th step only (the watch still finds every NaN/Inf; a run
                     whose NaN/Inf came from a step it did not record, in backward, is run once
                     more recording every step, to name the op that made it)

Findings a pin cannot fix (fix_model: a model bug that float32 does not avoid; loss_scaling;
fp32_master_weights) are listed under "what remains".
A run counts as clean only if the command also exited normally: a pin that makes the script
fail (say, it asserts float16 where the pin gives float32) is no fix.
exit codes: 0 the final map's run is clean; 3 it is not: still non-finite after N rounds or
where no pin can help (e.g. log(0)), or the command failed with the map; 2 bad usage or a
command that wrote no report (one `ampscope: error:` line); 128+signal interrupted (Ctrl-C,
SIGTERM): the smallest clean map run so far is written.
)";

volatile std::sig_atomic_t g_fix_signal = 0;

/// Ctrl-C reaches the running command through the terminal; SIGTERM is passed on to it. Either
/// ends the search after that run, with what it found so far written out.
extern "C" void on_fix_signal(int sig) {
  if (sig == SIGTERM && !g_fix_signal && g_running_child > 0) ::kill(g_running_child, SIGTERM);
  g_fix_signal = sig;
}

/// Installs on_fix_signal for SIGINT and SIGTERM while alive.
struct SignalGuard {
  using Action = struct sigaction;
  Action old_int{}, old_term{};
  SignalGuard() {
    Action sa{};
    sa.sa_handler = on_fix_signal;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, &old_int);
    ::sigaction(SIGTERM, &sa, &old_term);
  }
  ~SignalGuard() {
    ::sigaction(SIGINT, &old_int, nullptr);
    ::sigaction(SIGTERM, &old_term, nullptr);
  }
};

std::string slug(const std::string& purpose) {
  std::string s;
  for (char c : purpose.substr(0, 60)) {
    const bool keep =
        std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_';
    s.push_back(keep ? c : '-');
  }
  return s;
}

struct FixContext {
  std::vector<std::string> cmd;
  std::string out;
  int every = 1;
  std::map<std::string, std::vector<std::string>> start_why;
};

/// The map file a run applies ("" for no pins).
std::string write_applied_map(const std::string& dir, const fix::RunRequest& req,
                              const FixContext& c) {
  if (req.pins.empty()) return "";
  reports::PrecisionMap m;
  m.pin_fp32 = req.pins;
  for (const auto& p : req.pins)
    if (auto it = c.start_why.find(p); it != c.start_why.end()) m.why[p] = it->second;
  const std::string path = reports::join_path(dir, "applied_map.json");
  reports::write_precision_map(m, path);
  return path;
}

/// Runs the pass and reads its report; ends the progress line before an error line. A run a
/// signal stopped before it wrote a report counts as interrupted, not as an error.
PassResult run_and_read(const PassOptions& o, fix::RunRecord& rec) {
  try {
    PassResult r = run_pass(o);
    rec.report = reports::read_report(r.report_path);
    return r;
  } catch (const std::exception&) {
    fmt::print(stderr, "failed\n");
    if (!g_fix_signal) throw;
    rec.report.run.stopped = "signal";
    return PassResult{"", 128 + g_fix_signal};
  }
}

fix::RunRecord run_once(const FixContext& c, const fix::RunRequest& req, int every,
                        const std::string& dir_suffix) {
  fix::RunRecord rec;
  rec.dir = reports::join_path(reports::join_path(c.out, "runs"),
                               fmt::format("{:02}-{}{}", req.index, slug(req.purpose), dir_suffix));
  reports::make_directories(rec.dir);
  PassOptions o;
  o.cmd = c.cmd;
  o.out = rec.dir;
  o.every = every;
  o.map = write_applied_map(rec.dir, req, c);
  o.stop_on_nonfinite = !req.full;
  o.log = reports::join_path(rec.dir, "log.txt");
  ::unlink(reports::join_path(rec.dir, "report.json").c_str());  // never read an older run's
  fmt::print(stderr, "ampscope fix: run {:>2}  {:<24} {:<8} ... ", req.index, req.purpose,
             fmt::format("{} pin{}", req.pins.size(), req.pins.size() == 1 ? "" : "s"));
  std::fflush(stderr);
  const auto t0 = std::chrono::steady_clock::now();
  const PassResult r = run_and_read(o, rec);
  rec.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  rec.exit_code = r.exit_code;
  fmt::print(stderr, "{}  [{:.1f} s]{}\n", fix::run_result(rec), rec.seconds,
             fix::failed(rec) ? " (see " + o.log + ")" : "");
  return rec;
}

/// One run of the request; with --every N, once more recording every step when its NaN/Inf
/// came from a step the watch could not take apart (that run is the one the search sees).
fix::RunRecord run_one(const FixContext& c, const fix::RunRequest& req) {
  fix::RunRecord rec = run_once(c, req, c.every, "");
  // its NaN/Inf came from an unrecorded step the watch could not take apart (a gradient gone
  // non-finite in backward): a run recording every step names its maker
  if (c.every == 1 || g_fix_signal || !reports::has_reason(rec.report, "nonfinite_origin_unobserved"))
    return rec;
  fmt::print(stderr,
             "ampscope fix: run {:>2}  its NaN/Inf came from a step --every {} did not record: "
             "once more, recording every step\n",
             req.index, c.every);
  fix::RunRecord again = run_once(c, req, 1, "-every-step");
  again.seconds += rec.seconds;
  return again;
}

}  // namespace

int cmd_fix(const Argv& argv) {
  Args a(argv, {"--out", "--max-rounds", "--map", "--every"}, {}, "fix");
  if (a.help()) return fmt::print("{}", kHelp), 0;
  if (!a.positional().empty() || a.rest().empty())
    throw UsageError("fix needs the command after '--' (see ampscope fix --help)");
  fix::FixOptions fo;
  fo.max_rounds = a.int_value("--max-rounds", 8, 1, 100);
  reports::PrecisionMap start;
  if (a.has("--map")) start = reports::read_precision_map(a.value("--map"));  // fails up front
  fo.start_pins = start.pin_fp32;
  FixContext c{a.rest(), a.value("--out", "ampscope-fix"), a.int_value("--every", 1, 1, 1000000),
               start.why};
  reports::make_directories(c.out);
  if (!can_stop_on_nonfinite(c.cmd))
    fmt::print(stderr,
               "ampscope fix: note: a LibTorch program cannot be stopped at its first NaN/Inf; "
               "every run goes to the end\n");
  fo.interrupted = [] { return g_fix_signal != 0; };
  SignalGuard guard;
  const fix::FixOutcome o =
      fix::find_fix(fo, [&](const fix::RunRequest& r) { return run_one(c, r); });
  reports::write_file_atomic(reports::join_path(c.out, "precision_map.json"),
                             fix::fix_map_json(o, start, c.out).dump(2) + "\n");
  const std::string text = fix::render_fix(o, join_command(c.cmd));
  reports::write_file_atomic(reports::join_path(c.out, "fix.txt"), text);
  fmt::print("\n{}\nmap: {}\n", text, reports::join_path(c.out, "precision_map.json"));
  if (o.ended == "interrupted") return 128 + g_fix_signal;
  return o.ended == "clean" ? 0 : kExitNonFinite;
}

}  // namespace ampscope::cli
