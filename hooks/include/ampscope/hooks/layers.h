// Layer attribution in C++. LibTorch modules have no forward hooks, so a module's forward marks
// itself with a LayerScope (one line); names come from named_modules() of the attached root.
#pragma once

#include <ampscope/profiler/observer.h>

#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace torch::nn {
class Module;
}
namespace at {
class Tensor;
}

namespace ampscope {

/// One known layer: qualified name and module type ("Linear", "TransformerBlock", ...).
struct LayerInfo {
  std::string name;
  std::string type;
};

/// Registers `root` and every module below it (named_modules() order) under `prefix`, and
/// hooks every parameter so its gradient stats are recorded after each backward. Re-attaching
/// the same module is a no-op. Thread-safe.
void attach_modules(torch::nn::Module& root, const std::string& prefix = "");
/// Removes every attached module, parameter hook and gradient record.
void detach_all_modules();
/// All layers by id (id 0 is "<outside>").
std::vector<LayerInfo> known_layers();
/// Id of an attached module, or -1.
LayerId find_layer(const torch::nn::Module& module);
/// Id of a layer name, registering it with `type` when unknown.
LayerId layer_for_name(std::string_view name, std::string_view type = "scope");

/// Gradient stats of one attached parameter (recorded by a hook on it at each backward).
struct ParamGradInfo {
  std::string name;   ///< qualified, e.g. "blocks.0.ffn.wo.weight"
  std::string dtype;
  LayerId layer = kOutsideLayerId;  ///< the module that registers it
  std::int64_t updates = 0;
  Stats grad;
  std::vector<std::string> aliases;  ///< other names of the same (tied) parameter
};
/// Snapshot of every attached parameter's gradient record, in attach order.
std::vector<ParamGradInfo> param_grads();
/// Hooks one parameter of a front end with its own module tree (Python): its gradients are
/// recorded by a C++ hook, as an attached module's are, under `name`, owned by `layer`. The
/// hook is on the parameter's AccumulateGrad node: the tensor's own hooks (the user's) stay
/// and run first.
void hook_param(const at::Tensor& param, const std::string& name, LayerId layer);
/// Removes every parameter hook; the gradient records stay (the report is built after).
void unhook_params();
/// Moves each parameter hook to the parameter's current AccumulateGrad node where torch made a
/// new one (e.g. after its .data was replaced by a tensor of another type). Called at each
/// optimizer step (Session::optimizer_step, and the Python front end's optimizer hook).
void rehook_params();
/// Records one gradient of a parameter known by name (front ends without C++ modules, e.g.
/// Python): creates its record, owned by `layer` (registered with `layer_type`), on first use.
void record_param_grad(const std::string& name, const std::string& layer,
                       const std::string& layer_type, const at::Tensor& grad);
/// Records that `alias` names the same parameter as `name` (tied weights): one record.
void record_param_alias(const std::string& name, const std::string& alias);
/// Zeroes every gradient record (parameters stay attached).
void reset_param_grads();
/// The qualified name, owning layer and its type of an attached parameter; false when `param`
/// is not one (or does not require grad).
bool attached_param(const at::Tensor& param, std::string* name, std::string* layer,
                    std::string* layer_type);

/// Pins the named layers to float32 (precision-map semantics): inside a pinned layer's
/// LayerScope autocast is off (CPU and CUDA), and ampscope::forward() casts the call's floating
/// tensor arguments to float32, so the layer computes and returns float32. Names are those of
/// attached modules; the names not attached are returned in *unknown (a warning, not an error).
/// Returns the names pinned.
std::vector<std::string> pin_layers(const std::vector<std::string>& names,
                                    std::vector<std::string>* unknown = nullptr);
/// True when the layer is pinned to float32.
bool layer_pinned(LayerId id);

class AutocastGuard;

/// Attributes ops run on this thread during its lifetime to a layer. For a module that was not
/// attached (e.g. one built on the fly inside a forward) it does nothing, so its ops count as
/// part of the innermost attached module.
class LayerScope {
 public:
  explicit LayerScope(const torch::nn::Module& module);
  /// A named scope for code outside modules (e.g. "loss").
  explicit LayerScope(std::string_view name);
  ~LayerScope();
  LayerScope(const LayerScope&) = delete;
  LayerScope& operator=(const LayerScope&) = delete;
  /// True when this scope's layer is pinned to float32 (autocast is off inside it).
  bool pinned() const { return !autocast_off_.empty(); }
  /// Marks `t` as the layer's output and returns it: NaN/Inf it carries are harmful (they leave
  /// the layer), as a Python module's outputs are; NaN/Inf consumed inside stay benign.
  /// ampscope::forward does this for the module's result.
  const at::Tensor& returns(const at::Tensor& t) const;

 private:
  void enter(LayerId id);
  bool pushed_ = false;
  std::vector<std::unique_ptr<AutocastGuard>> autocast_off_;
};

namespace detail {
/// `t` cast to float32 when `pin` and it is a floating tensor other than float32.
at::Tensor to_fp32_if(const at::Tensor& t, bool pin);
template <typename T>
decltype(auto) maybe_fp32(T&& v, bool pin) {
  if constexpr (std::is_same_v<std::decay_t<T>, at::Tensor>) {
    return to_fp32_if(v, pin);
  } else {
    return std::forward<T>(v);
  }
}
}  // namespace detail

/// Calls `module->forward(args...)` inside the module's LayerScope: the way to attribute
/// built-in modules (Linear, LayerNorm, ...), whose forward cannot be edited. For a pinned
/// layer the floating tensor arguments are cast to float32. `module` is a
/// ModuleHolder (torch::nn::Linear) or a shared_ptr to a module.
template <typename Holder, typename... Args>
decltype(auto) forward(Holder& module, Args&&... args) {
  LayerScope scope(*module);
  using Result = decltype(module->forward(detail::maybe_fp32(std::forward<Args>(args), false)...));
  if constexpr (std::is_same_v<std::decay_t<Result>, at::Tensor>) {
    at::Tensor out = module->forward(detail::maybe_fp32(std::forward<Args>(args), scope.pinned())...);
    scope.returns(out);
    return out;
  } else {
    return module->forward(detail::maybe_fp32(std::forward<Args>(args), scope.pinned())...);
  }
}

/// Marks the ops on this thread as optimizer work while alive.
class OptimizerScope {
 public:
  OptimizerScope() { Observer::push_phase(Phase::kOptimizer); }
  ~OptimizerScope() { Observer::pop_phase(); }
  OptimizerScope(const OptimizerScope&) = delete;
  OptimizerScope& operator=(const OptimizerScope&) = delete;
};

/// Ends the current training step (the C++ step marker).
inline void mark_step() { Observer::mark_step(); }

}  // namespace ampscope
