// Parameters around an optimizer step: updates that rounding swallowed (parameters and optimizer
// state stored in float16/bfloat16), and how representable each parameter's values are in the
// low-precision formats. Fed by Session::optimizer_step in C++ and by the optimizer step hooks
// in Python (torch.ops.ampscope.updates_before/after).
#pragma once

#include <ampscope/profiler/stats.h>

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

/// Updates of one tensor lost to rounding, over the recorded steps.
struct StaleUpdateCounts {
  std::string tensor = "value";  ///< "value" or the optimizer state key
  std::string dtype;
  std::int64_t steps = 0;     ///< optimizer steps compared
  std::int64_t updated = 0;   ///< elements with a nonzero gradient (an update was due)
  std::int64_t stale = 0;     ///< ... whose stored value did not change
  std::int64_t worst_step = -1;
  double worst_share = 0.0;   ///< largest stale / updated of one step
};

/// What was watched of one parameter.
struct ParamWatchInfo {
  std::string name;
  std::string layer;
  std::string layer_type;
  std::optional<Stats> values;  ///< its values at the last recorded step
  std::vector<StaleUpdateCounts> stale;
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
