#include <ampscope/hooks/grad_scaler.h>
#include <ampscope/hooks/param_watch.h>
#include <ampscope/hooks/session.h>
#include <ampscope/reports/files.h>
#include <ampscope/reports/writers.h>
#include <ampscope/reports/out_dir.h>
#include <ampscope/reports/precision_map.h>
#include <ampscope/reports/recommend.h>
#include <ampscope/reports/report_json.h>

#include <torch/optim/optimizer.h>
#include <torch/version.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <map>

#include <unistd.h>

#include "report_builder.h"

namespace ampscope {
namespace {

std::string utc_now_iso() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

Session::Session(SessionOptions options) : options_(std::move(options)) {}

Session::~Session() {
  try {
    stop();
  } catch (...) {
    // A destructor must not throw; a failed write was already reported by stop() callers.
  }
}

void Session::attach(torch::nn::Module& root, const std::string& prefix) {
  attach_modules(root, prefix);
}

std::vector<std::string> Session::apply_precision_map(const std::string& path) {
  reports::PrecisionMap map = reports::read_precision_map(path);
  std::vector<std::string> unknown;
  auto pinned = pin_layers(map.pin_fp32, &unknown);
  if (!unknown.empty()) {
    std::string list;
    for (const auto& n : unknown) list += (list.empty() ? "" : ", ") + n;
    std::fprintf(stderr, "ampscope: warning: %s: layers not in the attached modules: %s\n",
                 path.c_str(), list.c_str());
  }
  return pinned;
}

void Session::start() {
  // The output folder is checked and claimed before anything runs: an unusable or busy --out
  // fails now, not after training.
  if (!options_.out_dir.empty()) out_lock_ = reports::claim_out_dir(options_.out_dir, "report");
  owner_pid_ = static_cast<int>(::getpid());
  ObserverOptions o;
  o.every = options_.every;
  o.shadow = options_.shadow;
  o.layers = options_.layers;
  o.ops = options_.ops;
  o.input_stats = options_.input_stats;
  o.watch_unsampled = options_.watch_unsampled;
  Observer::start(o);
  reset_param_grads();
  reset_param_watch();
  running_ = true;
  written_ = false;
  started_ = utc_now_iso();
  t0_ = std::chrono::steady_clock::now();
}

void Session::stop() {
  if (!running_) return;
  Observer::stop();
  running_ = false;
  // A forked child that inherited the session never writes over its parent's report.
  if (!options_.out_dir.empty() && !written_ && ::getpid() == owner_pid_) {
    write(options_.out_dir);
    written_ = true;
  }
  out_lock_.reset();
}

void Session::step() { Observer::mark_step(); }

void Session::optimizer_step(torch::optim::Optimizer& optimizer) {
  rehook_params();
  updates_before(watched_params(optimizer));  // updates lost to rounding (issue 13)
  {
    OptimizerScope scope;
    optimizer.step();
  }
  updates_after();
  Observer::mark_step();
}

bool Session::optimizer_step(GradScaler& scaler, torch::optim::Optimizer& optimizer) {
  rehook_params();
  updates_before(watched_params(optimizer));
  OptimizerScope scope;
  bool stepped = scaler.step(optimizer);
  if (stepped) updates_after();
  else updates_before({});  // skipped: nothing was updated
  // Ended before the update: the observer then counts the update's _amp_update_scale_ as the
  // end of this (already ended) step rather than ending another one.
  Observer::mark_step();
  scaler.update();
  return stepped;
}

bool Session::stop_requested() const {
  return options_.stop_on_nonfinite && Observer::nonfinite_seen();
}

reports::Report Session::report() const {
  RunContext ctx;
  ctx.torch_version = TORCH_VERSION;
  ctx.device = options_.device;
  ctx.autocast_dtype = options_.autocast_dtype;
  ctx.command = options_.command;
  ctx.every = options_.every;
  ctx.shadow = options_.shadow;
  ctx.sampling.stats_on = options_.input_stats ? "inputs_and_outputs" : "outputs";
  ctx.sampling.include_layers = options_.layers.include;
  ctx.sampling.exclude_layers = options_.layers.exclude;
  ctx.sampling.include_ops = options_.ops.include;
  ctx.sampling.exclude_ops = options_.ops.exclude;
  ctx.stopped = stopped_.empty() && stop_requested() ? "nonfinite" : stopped_;
  ctx.started = started_;
  ctx.duration_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  // The snapshot first: it reads CUDA stats back, parameter gradients' included.
  const ObserverSnapshot snap = Observer::snapshot();
  const RunRecords records{known_layers(), param_grads(), silent_loss_snapshot(),
                           param_watch_snapshot()};
  reports::Report report = build_report(snap, records, ctx);
  report.recommendations = reports::recommend(report);
  return report;
}

std::string write_report_files(const reports::Report& r, const std::string& dir,
                               const std::string& stem, bool html) {
  // One set: a kill at any moment leaves all the files of this run or of the previous one.
  return reports::write_report_set(r, dir, stem, html ? std::vector<std::string>{} : std::vector<std::string>{"html"});
}

std::string Session::write(const std::string& dir) const {
  return write_report_files(report(), dir, "report", options_.write_html);
}

}  // namespace ampscope
