// ampscope demo: trains the bundled example under autocast while profiling it.
#include <ampscope/reports/out_dir.h>
#include <ampscope/reports/precision_map.h>
#include <ampscope/reports/report_json.h>
#include <ampscope/reports/summary.h>
#include <fmt/core.h>
#include <unistd.h>

#include <cstdio>

#include "../demo/demo.h"
#include "args.h"
#include "commands.h"
#include "device_probe.h"

namespace ampscope::cli {
namespace {

constexpr const char* kHelp = R"(usage: ampscope demo [--device cpu|cuda] [--dtype float16|bfloat16] [--steps N]
                     [--every N] [--out DIR] [--map FILE] [--shadow] [--stop-on-nonfinite]
                     [--fail-on-nonfinite] [--quiet] [--include PATS] [--exclude PATS]
                     [--ops PATS] [--exclude-ops PATS] [--input-stats] [--scaler]

Trains the bundled example (a small transformer language model on synthetic data) under
autocast while ampscope profiles it, then writes DIR/report.json, DIR/report.html and
DIR/precision_map.json and prints the summary. One FFN output projection, blocks.1.ffn.wo, is
made to grow 2x a step so that it passes float16's largest value (65504) about half-way
through the run, as T5's `wo` did: in a float16 run that is where the first inf appears and
what the precision map pins; in a bfloat16 run the summary shows it as float16 headroom.

  --device cpu|cuda       default: cuda if a GPU is present, else cpu
  --dtype D               autocast dtype: float16 or bfloat16 (default: bfloat16 on cpu,
                          float16 on cuda)
  --steps N               training steps (default 24)
  --every N               record every N-th step only (default 1)
  --out DIR               output folder (default ampscope-out)
  --map FILE              apply a precision map first (e.g. the previous run's
                          precision_map.json: the pinned wo then stays finite)
  --shadow                re-run the first call of each low-precision op entry per step
                          in float32 and report its error (precision_loss findings)
  --stop-on-nonfinite     stop training right after the step's forward that produced the
                          first NaN/Inf, write the report, exit with code 3
  --fail-on-nonfinite     exit with code 3 when a non-finite value was seen
  --quiet                 no per-step progress lines
  --scaler                train with ampscope::GradScaler (always on for cuda + float16):
                          steps with inf/NaN gradients are skipped and the scale backs off;
                          the report's loss_scale lists every update
  --include PATS          record only these layers: comma-separated name globs; a match also
                          covers sub-layers ("blocks.1" records blocks.1.ffn.wo)
  --exclude PATS          do not record these layers (globs, as --include)
  --ops PATS              record only these ops / autograd nodes ("aten::*mm*,*Backward0")
  --exclude-ops PATS      do not record these ops (globs)
  --input-stats           also record stats of every op's floating inputs (default: outputs)
Ctrl-C stops training early; the report of the steps seen is still written.
)";

}  // namespace

int cmd_demo(const Argv& argv) {
  Args a(argv,
         {"--device", "--dtype", "--steps", "--every", "--out", "--map", "--include", "--exclude",
          "--ops", "--exclude-ops"},
         {"--fail-on-nonfinite", "--quiet", "--shadow", "--stop-on-nonfinite", "--input-stats",
          "--scaler"},
         "demo");
  if (a.help()) return fmt::print("{}", kHelp), 0;
  if (!a.positional().empty()) throw UsageError("demo takes no positional arguments");
  demo::DemoOptions o;
  o.device = a.value("--device", cuda_device_count() > 0 ? "cuda" : "cpu");
  if (o.device != "cpu" && o.device != "cuda") {
    throw UsageError("--device must be cpu or cuda, got '" + o.device + "'");
  }
  if (o.device == "cuda" && cuda_device_count() == 0) {
    throw UsageError("--device cuda: no CUDA device is available on this machine");
  }
  o.dtype = a.value("--dtype", o.device == "cuda" ? "float16" : "bfloat16");
  if (o.dtype != "float16" && o.dtype != "bfloat16") {
    throw UsageError("--dtype must be float16 or bfloat16, got '" + o.dtype + "'");
  }
  o.steps = a.int_value("--steps", o.steps, 1, 1000000);
  o.every = a.int_value("--every", 1, 1, 1000000);
  o.out_dir = a.value("--out", "ampscope-out");
  o.quiet = a.flag("--quiet");
  o.map_path = a.value("--map");
  o.shadow = a.flag("--shadow");
  o.stop_on_nonfinite = a.flag("--stop-on-nonfinite");
  o.layers = {split_patterns(a.value("--include")), split_patterns(a.value("--exclude")), true};
  o.ops = {split_patterns(a.value("--ops")), split_patterns(a.value("--exclude-ops")), false};
  o.input_stats = a.flag("--input-stats");
  o.scaler = a.flag("--scaler");
  if (!o.map_path.empty()) reports::read_precision_map(o.map_path);  // bad maps fail up front
  reports::check_writable(o.out_dir);  // and an unusable --out (the Session then claims it)
  const bool scaler = o.scaler || (o.device == "cuda" && o.dtype == "float16");
  fmt::print("ampscope demo: {} steps on {} under {} autocast{}\n", o.steps, o.device, o.dtype,
             scaler ? " with GradScaler" : "");
  std::fflush(stdout);
  demo::DemoResult result = demo::run_demo(o);
  reports::Report report = reports::read_report(result.report_path);
  reports::SummaryOptions so;
  so.color = isatty(fileno(stdout)) != 0;
  fmt::print("\n{}", reports::render_summary(report, so));
  if (!report.loss_scale.empty()) {
    std::size_t found = 0;
    for (const auto& p : report.loss_scale) found += p.found_inf ? 1 : 0;
    fmt::print("loss scale: {:g} -> {:g} over {} updates, {} with inf/NaN gradients (step "
               "skipped)\n",
               report.loss_scale.front().scale, report.loss_scale.back().scale,
               report.loss_scale.size(), found);
  }
  if (result.interrupted) fmt::print("interrupted after {} steps\n", result.steps_run);
  if (result.stopped_on_nonfinite)
    fmt::print("stopped at the first non-finite value, in step {}\n", result.steps_run);
  fmt::print("\nreport: {}/report.json\n        {}/report.html\n        {}/precision_map.json\n",
             o.out_dir, o.out_dir, o.out_dir);
  if (result.signal != 0) return 128 + result.signal;  // 130 / 143, as the shell expects
  const bool fail = a.flag("--fail-on-nonfinite") || o.stop_on_nonfinite;
  return fail && report.first_nonfinite ? kExitNonFinite : 0;
}

}  // namespace ampscope::cli
