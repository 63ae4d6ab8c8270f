// ampscope::Session: starts and stops observation, owns the attached module trees, builds the
// report and writes the report files.
#pragma once

#include <ampscope/hooks/layers.h>
#include <ampscope/reports/report.h>

#include <chrono>
#include <memory>
#include <string>

namespace torch::optim {
class Optimizer;
}

namespace ampscope {
namespace reports {
class OutLock;
}

class GradScaler;

struct SessionOptions {
  std::string out_dir;         ///< where stop()/the destructor write the reports ("" = nowhere)
  int every = 1;               ///< record steps 0, N, 2N, ...
  std::string device = "cpu";  ///< recorded in run.device
  std::string autocast_dtype;  ///< the run's low-precision dtype ("" when autocast is off)
  std::string command;         ///< recorded in run.command
  bool write_html = true;
  /// Re-run the first call of each low-precision (layer, op) entry of every recorded step in
  /// float32 and report the worst error per entry (costs about one more float32 forward).
  bool shadow = false;
  /// Make stop_requested() true as soon as an op produces the first NaN/Inf.
  bool stop_on_nonfinite = false;
  /// Layers recorded (glob patterns; "blocks.1" also covers "blocks.1.ffn.wo").
  NameFilter layers;
  /// Ops and autograd nodes recorded (glob patterns on "aten::matmul", "AddmmBackward0").
  NameFilter ops;
  /// Also record a stats block of every op's floating inputs (op.input_stats).
  bool input_stats = false;
  /// Unsampled steps watched (module outputs, parameter gradients, replays) instead of read op
  /// by op by the per-op sentinel: ObserverOptions::watch_unsampled. The Python front end sets
  /// it. In C++ the checked and replayable calls are those made through ampscope::forward
  /// (detail::WatchFrame in layers.h): NaN/Inf made by a LayerScope-only module's own ops are
  /// named by layer, not op, on a watched step. Off by default in C++.
  bool watch_unsampled = false;
};

/// Writes <stem>.json and <stem>.html (optional) and the precision map into `dir` (created if
/// missing), each atomically. The map is precision_map.json for stem "report" and
/// precision_map<rest>.json for "report<rest>" (e.g. report.rank1 -> precision_map.rank1.json).
/// Returns the path of the JSON report.
std::string write_report_files(const reports::Report& report, const std::string& dir,
                               const std::string& stem = "report", bool html = true);

/// One profiled run. Only one session observes at a time (the observer is process-wide).
/// Not copyable; the destructor stops observation and, with out_dir set, writes the reports
/// (also during stack unwinding), never throwing.
class Session {
 public:
  explicit Session(SessionOptions options = {});
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  /// Registers a module tree for layer names (see LayerScope). Call before or after start().
  void attach(torch::nn::Module& root, const std::string& prefix = "");
  /// Reads a precision map and pins its layers (see pin_layers); names not attached are
  /// printed as one warning line on stderr. Throws reports::ReportError for a bad file.
  /// Returns the names pinned.
  std::vector<std::string> apply_precision_map(const std::string& path);
  /// Installs the observer. With out_dir set, first checks that it is writable and claims it
  /// (reports::claim_out_dir): throws std::runtime_error when it is not usable or another run
  /// writes there. Throws std::logic_error when another session is observing.
  void start();
  /// Removes the observer and writes the reports when out_dir is set.
  void stop();
  bool running() const { return running_; }

  /// Ends the current training step.
  void step();
  /// Runs `optimizer.step()` as optimizer-phase work, then ends the step.
  void optimizer_step(torch::optim::Optimizer& optimizer);
  /// Runs `scaler.step(optimizer)` as optimizer-phase work, ends the step, then runs
  /// `scaler.update()` (recorded as that step's loss-scale entry). The step ends exactly once,
  /// also when the scaler skips optimizer.step() on inf/NaN gradients. Returns whether
  /// optimizer.step() ran. Do not call scaler.update() again for this iteration.
  bool optimizer_step(GradScaler& scaler, torch::optim::Optimizer& optimizer);

  /// True once an op produced a NaN/Inf and stop_on_nonfinite is set: the training loop should
  /// end now (the report then says run.stopped = "nonfinite").
  bool stop_requested() const;
  /// Records why the run ended early ("signal", "nonfinite", ...) in run.stopped.
  void set_stopped(const std::string& why) { stopped_ = why; }

  /// The report of everything seen so far, with recommendations.
  reports::Report report() const;
  /// Writes report.json, report.html and precision_map.json into `dir` (created if missing),
  /// each atomically. Returns the path of report.json.
  std::string write(const std::string& dir) const;

 private:
  SessionOptions options_;
  bool running_ = false;
  bool written_ = false;
  std::string started_;
  std::string stopped_;
  std::chrono::steady_clock::time_point t0_;
  std::unique_ptr<reports::OutLock> out_lock_;  ///< the claim on out_dir while running
  int owner_pid_ = 0;                           ///< the process that started (and writes)
};

}  // namespace ampscope
