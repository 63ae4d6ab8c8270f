// The bundled example: a small transformer language model trained on synthetic data under
// autocast while ampscope profiles it. One FFN output projection (blocks.1.ffn.wo) is made to
// grow past float16's range mid-run, as T5's `wo` did, so the report has a true finding.
#pragma once

#include <ampscope/profiler/name_filter.h>

#include <cstdint>
#include <string>

namespace ampscope::demo {

struct DemoOptions {
  std::string device = "cpu";    ///< "cpu" | "cuda"
  std::string dtype = "float16"; ///< autocast dtype: "float16" | "bfloat16"
  int steps = 24;
  int every = 1;
  std::string out_dir = "ampscope-out";
  std::uint64_t seed = 0;
  bool quiet = false;            ///< no per-step progress lines
  std::string map_path;          ///< precision map to apply before training ("" = none)
  bool shadow = false;           ///< float32 shadow re-checks of low-precision ops
  bool stop_on_nonfinite = false;  ///< end training right after the first NaN/Inf
  NameFilter layers;             ///< layers recorded (SessionOptions::layers)
  NameFilter ops;                ///< ops recorded (SessionOptions::ops)
  bool input_stats = false;      ///< also stats of op inputs
  /// Train with ampscope::GradScaler (loss scaling, steps skipped on inf/NaN gradients). Always
  /// on for cuda + float16, as a float16 run on a GPU would be.
  bool scaler = false;
};

struct DemoResult {
  int steps_run = 0;
  int steps_skipped = 0;   ///< optimizer steps skipped on a non-finite loss or gradient
  bool scaler = false;     ///< trained with the GradScaler
  bool interrupted = false;
  int signal = 0;  ///< SIGINT/SIGTERM received (the CLI exits 128 + signal)
  bool stopped_on_nonfinite = false;  ///< ended by stop_on_nonfinite
  std::string report_path;
};

/// Trains the demo model under the profiler and writes the reports into options.out_dir.
DemoResult run_demo(const DemoOptions& options);

/// The step at which the planted overflow of blocks.1.ffn.wo is meant to begin.
int planted_overflow_step(int steps);

}  // namespace ampscope::demo
