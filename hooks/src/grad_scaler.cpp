// GradScaler: a line-by-line port of torch/amp/grad_scaler.py's semantics (non-fused path).
#include <ampscope/hooks/grad_scaler.h>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <nlohmann/json.hpp>
#include <torch/optim/optimizer.h>

#include <algorithm>
#include <stdexcept>

namespace ampscope {
namespace {

constexpr const char* kInitFix =
    "This may indicate your script did not use scaler.scale(loss or outputs) earlier in the "
    "iteration.";

/// `master` copied to `device` once (Python's _MultiDeviceReplicator).
class PerDevice {
 public:
  explicit PerDevice(at::Tensor master) : master_(std::move(master)) {}
  at::Tensor get(const c10::Device& device) {
    for (const auto& [d, t] : copies_) {
      if (d == device) return t;
    }
    copies_.emplace_back(device, master_.to(device, /*non_blocking=*/true, /*copy=*/true));
    return copies_.back().second;
  }
  std::vector<std::pair<c10::Device, at::Tensor>> take() { return std::move(copies_); }

 private:
  at::Tensor master_;
  std::vector<std::pair<c10::Device, at::Tensor>> copies_;
};

/// The tensor to unscale for one parameter's gradient (values of a sparse one), or undefined.
at::Tensor unscale_target(const at::Tensor& param) {
  const at::Tensor& grad = param.grad();
  if (!grad.defined()) return {};
  if (grad.scalar_type() == at::kHalf) {
    throw std::invalid_argument("ampscope::GradScaler: Attempting to unscale FP16 gradients.");
  }
  return grad.is_sparse() ? grad._values() : grad;
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options) : options_(options) {
  if (!options_.enabled) return;
  if (options_.growth_factor <= 1.0) {
    throw std::invalid_argument("ampscope::GradScaler: The growth factor must be > 1.0.");
  }
  if (options_.backoff_factor >= 1.0) {
    throw std::invalid_argument("ampscope::GradScaler: The backoff factor must be < 1.0.");
  }
}

void GradScaler::lazy_init(const c10::Device& device) {
  scale_ = at::full({}, options_.init_scale, at::TensorOptions().dtype(at::kFloat).device(device));
  growth_tracker_ = at::full({}, init_growth_tracker_,
                             at::TensorOptions().dtype(at::kInt).device(device));
}

void GradScaler::check_initialized(const char* what) const {
  if (!scale_.defined()) {
    throw std::runtime_error(std::string("ampscope::GradScaler: Attempted ") + what +
                             " but the scale is not initialized. " + kInitFix);
  }
}

GradScaler::OptimizerState& GradScaler::state_of(const torch::optim::Optimizer& optimizer) {
  for (auto& [opt, state] : per_optimizer_) {
    if (opt == &optimizer) return state;
  }
  per_optimizer_.emplace_back(&optimizer, OptimizerState{});
  return per_optimizer_.back().second;
}

at::Tensor GradScaler::scale(const at::Tensor& outputs) {
  if (!options_.enabled) return outputs;
  if (!scale_.defined()) lazy_init(outputs.device());
  return outputs * scale_.to(outputs.device(), /*non_blocking=*/true);
}

std::vector<at::Tensor> GradScaler::scale(const std::vector<at::Tensor>& outputs) {
  if (!options_.enabled) return outputs;
  std::vector<at::Tensor> scaled;
  scaled.reserve(outputs.size());
  std::optional<PerDevice> scales;
  for (const auto& out : outputs) {
    if (!scales) {
      if (!scale_.defined()) lazy_init(out.device());
      scales.emplace(scale_);
    }
    scaled.push_back(out * scales->get(out.device()));
  }
  return scaled;
}

std::vector<std::pair<c10::Device, at::Tensor>> GradScaler::unscale_grads(
    torch::optim::Optimizer& optimizer, const at::Tensor& inv_scale) {
  auto found_inf = at::full({}, 0.0, at::TensorOptions().dtype(at::kFloat).device(scale_.device()));
  PerDevice inv_scales(inv_scale), found_infs(found_inf);
  // One foreach call per (device, dtype) group, as Python's. Their order does not matter: each
  // device has its own found_inf, which the op only ever sets to 1.
  struct Group {
    c10::Device device;
    c10::ScalarType dtype;
    std::vector<at::Tensor> grads;
  };
  std::vector<Group> groups;
  c10::AutoGradMode no_grad(false);
  for (auto& param_group : optimizer.param_groups()) {
    for (const auto& param : param_group.params()) {
      at::Tensor target = unscale_target(param);
      if (!target.defined()) continue;
      auto it = std::find_if(groups.begin(), groups.end(), [&](const Group& g) {
        return g.device == target.device() && g.dtype == target.scalar_type();
      });
      if (it == groups.end()) it = groups.insert(groups.end(), {target.device(), target.scalar_type(), {}});
      it->grads.push_back(target);
    }
  }
  for (auto& g : groups) {
    at::Tensor found = found_infs.get(g.device);
    at::_amp_foreach_non_finite_check_and_unscale_(g.grads, found, inv_scales.get(g.device));
  }
  return found_infs.take();
}

void GradScaler::unscale_(torch::optim::Optimizer& optimizer) {
  if (!options_.enabled) return;
  check_initialized("unscale_");
  OptimizerState& state = state_of(optimizer);
  if (state.stage == Stage::kUnscaled) {
    throw std::runtime_error(
        "ampscope::GradScaler: unscale_() has already been called on this optimizer since the "
        "last update().");
  }
  if (state.stage == Stage::kStepped) {
    throw std::runtime_error("ampscope::GradScaler: unscale_() is being called after step().");
  }
  at::Tensor inv_scale = scale_.to(at::kDouble).reciprocal().to(at::kFloat);
  state.found_inf_per_device = unscale_grads(optimizer, inv_scale);
  state.stage = Stage::kUnscaled;
}

bool GradScaler::step(torch::optim::Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return true;
  }
  check_initialized("step");
  if (state_of(optimizer).stage == Stage::kStepped) {
    throw std::runtime_error(
        "ampscope::GradScaler: step() has already been called since the last update().");
  }
  if (state_of(optimizer).stage == Stage::kReady) unscale_(optimizer);
  OptimizerState& state = state_of(optimizer);
  if (state.found_inf_per_device.empty()) {
    throw std::runtime_error(
        "ampscope::GradScaler: No inf checks were recorded for this optimizer.");
  }
  double found = 0.0;
  for (const auto& [device, found_inf] : state.found_inf_per_device) found += found_inf.item<double>();
  bool stepped = found == 0.0;
  if (stepped) optimizer.step();
  state.stage = Stage::kStepped;
  return stepped;
}

void GradScaler::update(std::optional<double> new_scale) {
  if (!options_.enabled) return;
  check_initialized("update");
  if (new_scale) {
    scale_.fill_(*new_scale);
  } else {
    at::Tensor combined;
    for (auto& [opt, state] : per_optimizer_) {
      for (auto& [device, found_inf] : state.found_inf_per_device) {
        at::Tensor f = found_inf.to(scale_.device(), /*non_blocking=*/true);
        if (!combined.defined()) {
          combined = f;
        } else {
          combined += f;
        }
      }
    }
    if (!combined.defined()) {
      throw std::runtime_error(
          "ampscope::GradScaler: No inf checks were recorded prior to update().");
    }
    at::_amp_update_scale_(scale_, growth_tracker_, combined, options_.growth_factor,
                           options_.backoff_factor, options_.growth_interval);
  }
  per_optimizer_.clear();
}

void GradScaler::update(const at::Tensor& new_scale) {
  if (!options_.enabled) return;
  check_initialized("update");
  if (new_scale.device().type() != scale_.device().type() || new_scale.numel() != 1 ||
      new_scale.requires_grad()) {
    throw std::invalid_argument(
        "ampscope::GradScaler: new_scale should be a float or a 1-element tensor on the "
        "scaler's device type with requires_grad=false.");
  }
  scale_.copy_(new_scale.reshape({}));
  per_optimizer_.clear();
}

double GradScaler::get_scale() const {
  if (!options_.enabled) return 1.0;
  return scale_.defined() ? scale_.item<double>() : options_.init_scale;
}

std::int64_t GradScaler::get_growth_tracker() const {
  if (!options_.enabled) return 0;
  return growth_tracker_.defined() ? growth_tracker_.item<std::int64_t>() : init_growth_tracker_;
}

std::optional<GradScalerState> GradScaler::state_dict() const {
  if (!options_.enabled) return std::nullopt;
  return GradScalerState{get_scale(), options_.growth_factor, options_.backoff_factor,
                         options_.growth_interval, get_growth_tracker()};
}

void GradScaler::load_state_dict(const std::optional<GradScalerState>& state) {
  if (!options_.enabled) return;
  if (!state) {
    throw std::runtime_error(
        "ampscope::GradScaler: The source state dict is empty, possibly because it was saved "
        "from a disabled instance of GradScaler.");
  }
  options_.init_scale = state->scale;
  if (scale_.defined()) scale_.fill_(state->scale);
  options_.growth_factor = state->growth_factor;
  options_.backoff_factor = state->backoff_factor;
  options_.growth_interval = state->growth_interval;
  init_growth_tracker_ = state->growth_tracker;
  if (growth_tracker_.defined()) growth_tracker_.fill_(state->growth_tracker);
}

std::string grad_scaler_state_to_json(const GradScalerState& s) {
  nlohmann::ordered_json j;
  j["scale"] = s.scale;
  j["growth_factor"] = s.growth_factor;
  j["backoff_factor"] = s.backoff_factor;
  j["growth_interval"] = s.growth_interval;
  j["_growth_tracker"] = s.growth_tracker;
  return j.dump();
}

GradScalerState grad_scaler_state_from_json(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) throw std::invalid_argument("GradScaler state: not a JSON object");
  auto number = [&](const char* key) {
    if (!j.contains(key) || !j[key].is_number()) {
      throw std::invalid_argument(std::string("GradScaler state: '") + key +
                                  "' is missing or not a number");
    }
    return j[key];
  };
  auto integer = [&](const char* key) {
    if (!number(key).is_number_integer()) {
      throw std::invalid_argument(std::string("GradScaler state: '") + key +
                                  "' is not an integer");
    }
    return j[key].get<std::int64_t>();
  };
  GradScalerState s;
  s.scale = number("scale").get<double>();
  s.growth_factor = number("growth_factor").get<double>();
  s.backoff_factor = number("backoff_factor").get<double>();
  s.growth_interval = integer("growth_interval");
  s.growth_tracker = integer("_growth_tracker");
  return s;
}

}  // namespace ampscope
