// Parameters around an optimizer step: updates that rounding swallowed (parameters and optimizer
// state stored in float16/bfloat16), and how representable each parameter's values are in the
// low-precision formats. Fed by Session::optimizer_step in C++ and by the optimizer step hooks
// in Python (torch.ops.ampscope.updates_before/after).
#pragma once

#include <ampscope/profiler/stats.h>
#include <ampscope/reports/report.h>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace torch::optim {
class Optimizer;
}

namespace ampscope {

/// One tensor the optimizer is about to update: a parameter ("value") or one of its state
/// tensors (role = the state key, e.g. "exp_avg"), with the parameter's gradient.
struct WatchedTensor {
  std::string param;       ///< qualified parameter name
  std::string layer;       ///< the layer that owns it
  std::string layer_type;
  std::string role = "value";
  at::Tensor tensor;
  at::Tensor grad;
};

/// What was watched of one parameter.
struct ParamWatchInfo {
  std::string name;
  std::string layer;
  std::string layer_type;
  std::string dtype;
  std::optional<Stats> values;  ///< its values at the last recorded step
  std::vector<reports::StaleUpdateRecord> stale;  ///< float16/bfloat16 tensors only
};

/// Before optimizer.step(), on recorded steps: stats of every parameter's values, and copies of
/// the float16/bfloat16 tensors (with a defined gradient) to compare after it. Not observed.
void updates_before(std::vector<WatchedTensor> tensors);
/// After optimizer.step(): per copied tensor, the elements with a nonzero gradient whose value
/// did not change. No-op without a matching updates_before.
void updates_after();
/// The parameters of `optimizer` that attached modules own, as WatchedTensors.
std::vector<WatchedTensor> watched_params(torch::optim::Optimizer& optimizer);
/// Everything watched since the last reset, in first-seen order (thread-safe).
std::vector<ParamWatchInfo> param_watch_snapshot();
/// Forgets every record (a new run).
void reset_param_watch();

}  // namespace ampscope
