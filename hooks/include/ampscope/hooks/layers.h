// Layer attribution in C++. LibTorch modules have no forward hooks, so a module's forward marks
// itself with a LayerScope (one line); names come from named_modules() of the attached root.
#pragma once

#include <ampscope/profiler/observer.h>

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
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

/// One ampscope::forward call on a watched unsampled step (SessionOptions::watch_unsampled):
/// the C++ counterpart of the Python front end's module hooks (python/ampscope/_watch.py).
/// A call is checked when its module holds others or no enclosing call on this thread is
/// checked (a leaf's values reach its checked parent's output); its output going NaN/Inf is
/// answered by a replay of the call under the per-op sentinel, which names the op. Constructed
/// before the call's LayerScope; costs one check of the step's mode on other steps.
class WatchFrame {
 public:
  /// `checkable`: the call returns one tensor and its arguments can be kept for a replay (a
  /// call that cannot be checked leaves the check to the calls inside it).
  WatchFrame(const torch::nn::Module& module, bool checkable);
  ~WatchFrame();
  WatchFrame(const WatchFrame&) = delete;
  WatchFrame& operator=(const WatchFrame&) = delete;
  /// This call's output is checked (the CPU RNG state it starts with is kept for a replay).
  bool checked() const { return checked_; }
  /// After a checked call: true when its output (or a child's) holds NaN/Inf that this call's
  /// own ops made, and no origin is known yet. NaN/Inf already in `inputs` are handed to the
  /// enclosing checked call (made by its ops), or, with none, recorded against the enclosing
  /// layer (ops outside every ampscope::forward call cannot be replayed from C++).
  bool tripped(const at::Tensor& output, const std::vector<at::Tensor>& inputs);
  /// Runs `again` (the forward on copies of the inputs) from the RNG state the call started
  /// with, under the per-op sentinel; puts back the RNG state and every buffer of `module` the
  /// replay changed. An exception from `again` is swallowed: the call is then recorded as the
  /// origin with the op unknown, as is a replay that makes no NaN/Inf.
  void replay(torch::nn::Module& module, const std::function<at::Tensor()>& again);

 private:
  struct Saved;
  WatchFrame* parent_ = nullptr;  ///< the enclosing call's frame on this thread
  bool checked_ = false;
  bool child_trip_ = false;       ///< a call inside got NaN/Inf made by this call's own ops
  LayerId enclosing_layer_ = kOutsideLayerId;  ///< the layer the call was made in
  std::unique_ptr<Saved> saved_;  ///< the RNG state at the call's start (checked calls)
};

/// A copy of a tensor argument for a replay (detached; undefined stays undefined).
at::Tensor replay_copy(const at::Tensor& t);
template <typename T>
T replay_copy(const T& v) {
  return v;
}
/// The tensor arguments of a call.
template <typename... A>
std::vector<at::Tensor> tensors_of(const std::tuple<A...>& args) {
  std::vector<at::Tensor> out;
  std::apply(
      [&](const auto&... a) {
        (([&] {
           if constexpr (std::is_same_v<std::decay_t<decltype(a)>, at::Tensor>) out.push_back(a);
         }()),
         ...);
      },
      args);
  return out;
}

/// A checked call (see WatchFrame): keeps handles of the arguments for a replay. `Out` is
/// at::Tensor (a template parameter: this header does not include torch).
template <typename Out, typename Holder, typename... Args>
Out watched_forward(Holder& module, const LayerScope& scope, WatchFrame& watch, Args&&... args) {
  std::tuple<std::decay_t<Args>...> kept(args...);  // handles, not copies of the data
  Out out = module->forward(maybe_fp32(std::forward<Args>(args), scope.pinned())...);
  if (watch.tripped(out, tensors_of(kept))) {
    watch.replay(*module, [&]() -> Out {
      return std::apply(
          [&](const auto&... a) -> Out {
            return module->forward(maybe_fp32(replay_copy(a), scope.pinned())...);
          },
          kept);
    });
  }
  scope.returns(out);
  return out;
}
}  // namespace detail

/// Calls `module->forward(args...)` inside the module's LayerScope: the way to attribute
/// built-in modules (Linear, LayerNorm, ...), whose forward cannot be edited. For a pinned
/// layer the floating tensor arguments are cast to float32. `module` is a
/// ModuleHolder (torch::nn::Linear) or a shared_ptr to a module.
template <typename Holder, typename... Args>
decltype(auto) forward(Holder& module, Args&&... args) {
  using Result = decltype(module->forward(detail::maybe_fp32(std::forward<Args>(args), false)...));
  constexpr bool kReturnsTensor = std::is_same_v<std::decay_t<Result>, at::Tensor>;
  // a watched step checks the call when it can replay it: one tensor out, copyable arguments
  detail::WatchFrame watch(
      *module, kReturnsTensor && (std::is_copy_constructible_v<std::decay_t<Args>> && ...));
  LayerScope scope(*module);
  if constexpr (kReturnsTensor) {
    if constexpr ((std::is_copy_constructible_v<std::decay_t<Args>> && ...)) {
      if (watch.checked()) {
        return detail::watched_forward<std::decay_t<Result>>(module, scope, watch,
                                                             std::forward<Args>(args)...);
      }
    }
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
