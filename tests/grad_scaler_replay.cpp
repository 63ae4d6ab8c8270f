// ampscope-scaler-replay IN.json OUT.json: runs ampscope::GradScaler with SGD on a given
// sequence of gradients and writes the trajectory, for tests/python/test_grad_scaler.py to
// compare with torch.amp.GradScaler on the same sequence.
//
// IN:  {"options": {"init_scale", "growth_factor", "backoff_factor", "growth_interval",
//                   "enabled"},            (any subset; GradScalerOptions' defaults otherwise)
//       "load_state": null | {Python's state_dict keys},   loaded before the first iteration
//       "sgd": {"lr", "momentum"},
//       "params": [{"dtype": "float32"|"float64", "values": [...]}, ...],
//       "iterations": [{"grads": [[...] per param], "unscale_first": bool,
//                       "new_scale": null | number}, ...]}
//      Values are numbers or the strings "inf", "-inf", "nan". Each iteration back-propagates
//      scaler.scale(sum_k sum(p_k * g_k)), so p_k.grad = scale * g_k.
// OUT: {"trajectory": [{"scale", "growth_tracker", "stepped"}, ...],
//       "params": [[...], ...], "state_dict": {...} | {}}
#include <ampscope/hooks/grad_scaler.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <cmath>
#include <fstream>
#include <iostream>
#include <limits>

namespace {

using nlohmann::json;

double to_double(const json& v) {
  if (v.is_number()) return v.get<double>();
  const std::string s = v.get<std::string>();
  if (s == "inf") return std::numeric_limits<double>::infinity();
  if (s == "-inf") return -std::numeric_limits<double>::infinity();
  if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
  throw std::invalid_argument("not a number: " + s);
}

json from_double(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  return d;
}

torch::Tensor tensor_of(const json& values, c10::ScalarType dtype) {
  std::vector<double> v;
  for (const auto& x : values) v.push_back(to_double(x));
  return torch::tensor(v, torch::kDouble).to(dtype);
}

json values_of(const torch::Tensor& t) {
  json out = json::array();
  auto d = t.detach().to(torch::kDouble).contiguous();
  for (std::int64_t i = 0; i < d.numel(); ++i) out.push_back(from_double(d[i].item<double>()));
  return out;
}

ampscope::GradScalerOptions options_of(const json& j) {
  ampscope::GradScalerOptions o;
  o.init_scale = j.value("init_scale", o.init_scale);
  o.growth_factor = j.value("growth_factor", o.growth_factor);
  o.backoff_factor = j.value("backoff_factor", o.backoff_factor);
  o.growth_interval = j.value("growth_interval", o.growth_interval);
  o.enabled = j.value("enabled", o.enabled);
  return o;
}

/// One training iteration; returns its trajectory point.
json iterate(ampscope::GradScaler& scaler, torch::optim::SGD& opt,
             const std::vector<torch::Tensor>& params, const json& it) {
  opt.zero_grad();
  torch::Tensor loss;
  for (std::size_t k = 0; k < params.size(); ++k) {
    auto term = (params[k] * tensor_of(it["grads"][k], params[k].scalar_type())).sum();
    loss = loss.defined() ? loss + term : term;
  }
  scaler.scale(loss).backward();
  if (it.value("unscale_first", false)) scaler.unscale_(opt);
  bool stepped = scaler.step(opt);
  if (it.contains("new_scale") && !it["new_scale"].is_null()) {
    scaler.update(it["new_scale"].get<double>());
  } else {
    scaler.update();
  }
  return {{"scale", scaler.get_scale()}, {"growth_tracker", scaler.get_growth_tracker()},
          {"stepped", stepped}};
}

json replay(const json& in) {
  ampscope::GradScaler scaler(options_of(in.value("options", json::object())));
  if (in.contains("load_state") && !in["load_state"].is_null()) {
    scaler.load_state_dict(ampscope::grad_scaler_state_from_json(in["load_state"].dump()));
  }
  std::vector<torch::Tensor> params;
  for (const auto& p : in["params"]) {
    auto dtype = p["dtype"] == "float64" ? torch::kDouble : torch::kFloat;
    params.push_back(tensor_of(p["values"], dtype).requires_grad_());
  }
  const json& sgd = in["sgd"];
  torch::optim::SGD opt(params, torch::optim::SGDOptions(sgd["lr"].get<double>())
                                    .momentum(sgd.value("momentum", 0.0)));
  json out;
  out["trajectory"] = json::array();
  for (const auto& it : in["iterations"]) out["trajectory"].push_back(iterate(scaler, opt, params, it));
  out["params"] = json::array();
  for (const auto& p : params) out["params"].push_back(values_of(p));
  auto state = scaler.state_dict();
  out["state_dict"] = state ? json::parse(ampscope::grad_scaler_state_to_json(*state)) : json::object();
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: ampscope-scaler-replay IN.json OUT.json\n";
    return 2;
  }
  try {
    std::ifstream in(argv[1]);
    json out = replay(json::parse(in));
    std::ofstream(argv[2]) << out.dump();
  } catch (const std::exception& e) {
    std::cerr << "ampscope-scaler-replay: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
