// ampscope::GradScaler: dynamic loss scaling for LibTorch with the semantics of Python's
// torch.amp.GradScaler (LibTorch has none), on the same ATen ops (_amp_foreach_non_finite_
// check_and_unscale_, _amp_update_scale_), so the profiler records its updates like Python's.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace torch::optim {
class Optimizer;
}

namespace ampscope {

/// Constructor arguments of torch.amp.GradScaler, with its defaults.
struct GradScalerOptions {
  double init_scale = 65536.0;     ///< 2^16
  double growth_factor = 2.0;      ///< must be > 1
  double backoff_factor = 0.5;     ///< must be < 1
  std::int64_t growth_interval = 2000;  ///< clean steps in a row before the scale grows
  bool enabled = true;             ///< false: scale() and step() pass through, the rest no-ops
};

/// The scaler's state; the fields are the keys of Python's GradScaler.state_dict().
struct GradScalerState {
  double scale = 65536.0;              ///< "scale"
  double growth_factor = 2.0;          ///< "growth_factor"
  double backoff_factor = 0.5;         ///< "backoff_factor"
  std::int64_t growth_interval = 2000; ///< "growth_interval"
  std::int64_t growth_tracker = 0;     ///< "_growth_tracker"
};

/// The state as the JSON object Python's `json.dumps(scaler.state_dict())` writes.
std::string grad_scaler_state_to_json(const GradScalerState& state);
/// Reads such an object (all five keys required). Throws std::invalid_argument when a key is
/// missing or has the wrong type.
GradScalerState grad_scaler_state_from_json(const std::string& json);

/// Dynamic loss scaling like torch.amp.GradScaler: scale the loss, step() unscales the
/// gradients and skips optimizer.step() when any is inf/NaN, update() backs the scale off
/// (backoff_factor) after a skipped step and grows it (growth_factor) after growth_interval
/// clean steps. The scale (float32) and growth tracker (int32) are 0-dim tensors created on the
/// device of the first scaled tensor; nothing syncs with the device except step() (which reads
/// found_inf, as Python's does), get_scale(), get_growth_tracker() and state_dict().
/// Errors as Python's: std::runtime_error for misuse (unscale_ twice, step twice, ...),
/// std::invalid_argument for float16 gradients. Not thread-safe.
class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  /// outputs * scale (on outputs' device; the result keeps outputs' dtype). Creates the scale on
  /// outputs' device on first use. Disabled: returns outputs.
  at::Tensor scale(const at::Tensor& outputs);
  /// Scales each tensor (one copy of the scale per device).
  std::vector<at::Tensor> scale(const std::vector<at::Tensor>& outputs);
  /// Divides the optimizer's gradients by the scale in place and records whether any was
  /// inf/NaN. At most once per optimizer between update()s, and not after step().
  void unscale_(torch::optim::Optimizer& optimizer);
  /// unscale_() unless already done, then optimizer.step() unless a gradient was inf/NaN.
  /// Returns true when optimizer.step() ran. Disabled: always steps and returns true.
  bool step(torch::optim::Optimizer& optimizer);
  /// Updates the scale from this iteration's inf checks (or sets it to new_scale) and resets
  /// the per-optimizer states. Call once per iteration after every step().
  void update(std::optional<double> new_scale = std::nullopt);
  /// update() with a 1-element tensor as the new scale (copied, on the scaler's device type).
  void update(const at::Tensor& new_scale);

  /// The current scale (init_scale before the first scale(); 1 when disabled). Syncs.
  double get_scale() const;
  /// Clean steps since the last growth or backoff (0 when disabled). Syncs.
  std::int64_t get_growth_tracker() const;
  /// The scale tensor itself (undefined before the first scale() or when disabled).
  const at::Tensor& scale_tensor() const { return scale_; }
  bool is_enabled() const { return options_.enabled; }

  double get_growth_factor() const { return options_.growth_factor; }
  void set_growth_factor(double f) { options_.growth_factor = f; }
  double get_backoff_factor() const { return options_.backoff_factor; }
  void set_backoff_factor(double f) { options_.backoff_factor = f; }
  std::int64_t get_growth_interval() const { return options_.growth_interval; }
  void set_growth_interval(std::int64_t n) { options_.growth_interval = n; }

  /// Python's state_dict(); std::nullopt (Python's {}) when disabled. Syncs.
  std::optional<GradScalerState> state_dict() const;
  /// Python's load_state_dict(): a no-op when disabled; throws std::runtime_error for an empty
  /// (std::nullopt) state.
  void load_state_dict(const std::optional<GradScalerState>& state);

 private:
  enum class Stage { kReady, kUnscaled, kStepped };
  struct OptimizerState {
    Stage stage = Stage::kReady;
    std::vector<std::pair<c10::Device, at::Tensor>> found_inf_per_device;
  };

  void lazy_init(const c10::Device& device);
  void check_initialized(const char* what) const;
  OptimizerState& state_of(const torch::optim::Optimizer& optimizer);
  std::vector<std::pair<c10::Device, at::Tensor>> unscale_grads(
      torch::optim::Optimizer& optimizer, const at::Tensor& inv_scale);

  GradScalerOptions options_;
  std::int64_t init_growth_tracker_ = 0;
  at::Tensor scale_;           ///< float32, 0-dim
  at::Tensor growth_tracker_;  ///< int32, 0-dim
  /// Per optimizer since the last update(), in first-use order (as Python's dict).
  std::vector<std::pair<const torch::optim::Optimizer*, OptimizerState>> per_optimizer_;
};

}  // namespace ampscope
