#include <ampscope/hooks/autocast_guard.h>
#include <ampscope/hooks/layers.h>
#include <ampscope/profiler/tensor_stats.h>

#include <ATen/autocast_mode.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace ampscope {
namespace {

struct ParamSlot {
  std::mutex mu;
  ParamGradInfo info;
  std::shared_ptr<DeviceStatsTarget> device;  ///< CUDA gradients: stats read back per step
};

/// Folds a parameter's CUDA gradient stats into its record at the observer's read-back.
struct GradTarget final : DeviceStatsTarget {
  explicit GradTarget(std::weak_ptr<ParamSlot> s) : slot(std::move(s)) {}
  void add(const Stats& stats) override {
    if (auto p = slot.lock()) {
      std::lock_guard<std::mutex> lock(p->mu);
      p->info.grad.merge(stats);
    }
  }
  std::weak_ptr<ParamSlot> slot;
};

struct HookedParam {
  at::Tensor tensor;
  /// The parameter's AccumulateGrad node, held (torch holds it weakly from the tensor): the
  /// same node, hook and all, takes the gradients of every step.
  std::shared_ptr<torch::autograd::Node> accumulator;
  const torch::autograd::FunctionPreHook* hook;  ///< in the node's pre-hooks (owned there)
  std::shared_ptr<ParamSlot> slot;
};

/// The process-wide layer registry. Layer ids index `layers`.
/// An attached module's layer. Modules are known by address; `owner` tells a live module from
/// a new one built where a destroyed one was (a model rebuilt in the same process).
struct AttachedModule {
  LayerId id;
  std::weak_ptr<const torch::nn::Module> owner;  ///< empty for a module not held by shared_ptr
  bool shared;                                   ///< held by a shared_ptr when attached
  bool gone() const { return shared && owner.expired(); }
};

struct Registry {
  std::mutex mu;
  std::vector<LayerInfo> layers{{"<outside>", "outside"}};
  std::unordered_map<const torch::nn::Module*, AttachedModule> by_module;
  std::unordered_map<std::string, LayerId> by_name{{"<outside>", kOutsideLayerId}};
  std::vector<std::shared_ptr<ParamSlot>> params;
  std::unordered_map<std::string, std::shared_ptr<ParamSlot>> params_by_name;
  std::vector<bool> pinned;  ///< by layer id
  std::vector<HookedParam> hooks;
  /// Aliases of parameters whose record does not exist yet (Python creates it on first grad).
  std::unordered_map<std::string, std::vector<std::string>> pending_aliases;
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: hooks may run during shutdown
  return *r;
}

/// "torch::nn::LinearImpl" -> "Linear"; "MyBlockImpl" -> "MyBlock".
std::string type_name(const torch::nn::Module& m) {
  std::string name = m.name();
  auto colon = name.rfind("::");
  if (colon != std::string::npos) name = name.substr(colon + 2);
  if (name.size() > 4 && name.compare(name.size() - 4, 4, "Impl") == 0) name.resize(name.size() - 4);
  return name;
}

LayerId add_layer_locked(Registry& r, const std::string& name, const std::string& type) {
  auto it = r.by_name.find(name);
  if (it != r.by_name.end()) return it->second;
  auto id = static_cast<LayerId>(r.layers.size());
  r.layers.push_back({name, type});
  r.by_name.emplace(name, id);
  Observer::name_layer(id, name);  // for the observer's layer filter
  return id;
}

std::string qualified(const std::string& prefix, const std::string& name) {
  if (prefix.empty()) return name;
  if (name.empty()) return prefix;
  return prefix + "." + name;
}

void record_into(ParamSlot& slot, const at::Tensor& grad) {
  if (!grad.defined()) return;
  if (!Observer::sampling_now()) {  // the sentinel still looks for NaN/Inf
    if (!grad.is_cuda()) Observer::check_param_grad(slot.info.layer, slot.info.name, grad);
    return;
  }
  if (grad.is_cuda()) {  // on the device, no sync: the stats arrive at the step's end
    if (queue_device_stats(grad, slot.device)) {
      std::lock_guard<std::mutex> lock(slot.mu);
      ++slot.info.updates;
    }
    return;
  }
  if (!stats_supported(grad)) return;
  at::DisableRecordFunctionGuard no_observe;
  Stats s = Observer::stats_once(grad);
  if (s.nonfinite() > 0) Observer::note_nonfinite_param_grad(slot.info.layer, slot.info.name, s.nan > 0);
  std::lock_guard<std::mutex> lock(slot.mu);
  slot.info.grad.merge(s);
  ++slot.info.updates;
}

std::shared_ptr<ParamSlot> new_slot_locked(Registry& r, const std::string& name,
                                           const std::string& dtype, LayerId layer) {
  auto slot = std::make_shared<ParamSlot>();
  slot->device = std::make_shared<GradTarget>(slot);
  slot->info.name = name;
  slot->info.dtype = dtype;
  slot->info.layer = layer;
  if (auto it = r.pending_aliases.find(name); it != r.pending_aliases.end()) {
    slot->info.aliases = std::move(it->second);
    r.pending_aliases.erase(it);
  }
  r.params.push_back(slot);
  r.params_by_name.emplace(name, slot);
  return slot;
}

/// The gradient hook of a parameter: records each gradient that reaches it, passes it on as is.
struct GradHook final : torch::autograd::FunctionPreHook {
  explicit GradHook(std::shared_ptr<ParamSlot> s) : slot(std::move(s)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& grads) override {
    try {
      if (!grads.empty()) record_into(*slot, grads[0]);
    } catch (const std::exception&) {
      // a gradient not recorded: never disturb the backward pass
    }
    return grads;
  }
  // Compiled autograd traces the backward instead of running its nodes: this hook is not
  // part of the graph it compiles (the gradients go unrecorded, the run goes on).
  void compiled_args(torch::dynamo::autograd::CompiledNodeArgs&) const override {}
  std::shared_ptr<ParamSlot> slot;
};

/// Hooks the parameter's AccumulateGrad node (a pre-hook: it sees the gradient after the
/// tensor's own hooks, the user's, ran). Not Tensor::register_hook: its first call on a tensor
/// clears the hooks the tensor has, the user's Python hooks included, for good.
void add_grad_hook(HookedParam& h) {
  h.accumulator = torch::autograd::impl::grad_accumulator(h.tensor);
  h.hook = nullptr;
  if (!h.accumulator) return;
  auto hook = std::make_unique<GradHook>(h.slot);
  h.hook = hook.get();
  h.accumulator->add_pre_hook(std::move(hook));
}

/// Takes the hook off the node it is on.
void remove_grad_hook(HookedParam& h) {
  if (!h.accumulator) return;
  auto& list = h.accumulator->pre_hooks();
  list.erase(std::remove_if(list.begin(), list.end(),
                            [&](const auto& hook) { return hook.get() == h.hook; }),
             list.end());
  h.accumulator.reset();
}

void hook_parameter(Registry& r, at::Tensor param, const std::string& name, LayerId layer) {
  auto slot = new_slot_locked(r, name, dtype_name(static_cast<std::int8_t>(param.scalar_type())),
                              layer);
  if (!param.requires_grad()) return;
  Observer::name_param(param, layer);  // AccumulateGrad -> this layer
  HookedParam h{param, nullptr, nullptr, slot};
  add_grad_hook(h);
  r.hooks.push_back(std::move(h));
}

}  // namespace

void attach_modules(torch::nn::Module& root, const std::string& prefix) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  // modules destroyed since they were attached: a new one may live at their address
  for (auto it = r.by_module.begin(); it != r.by_module.end();) {
    it = it->second.gone() ? r.by_module.erase(it) : std::next(it);
  }
  if (r.by_module.count(&root)) return;
  for (const auto& item : root.named_modules(/*name_prefix=*/"", /*include_self=*/true)) {
    const torch::nn::Module* module = item.value().get();
    if (r.by_module.count(module)) continue;  // shared submodule: first name wins
    std::string name = qualified(prefix, item.key());
    LayerId id = add_layer_locked(r, name, type_name(*module));
    std::weak_ptr<const torch::nn::Module> owner = module->weak_from_this();
    const bool shared = !owner.expired();
    r.by_module.emplace(module, AttachedModule{id, std::move(owner), shared});
    for (const auto& p : item.value()->named_parameters(/*recurse=*/false)) {
      hook_parameter(r, p.value(), qualified(name, p.key()), id);
    }
  }
}

void hook_param(const at::Tensor& param, const std::string& name, LayerId layer) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const auto& h : r.hooks)
    if (h.tensor.is_same(param)) return;  // hooked already (one record per parameter)
  hook_parameter(r, param, name, layer);
}

namespace {
void unhook_locked(Registry& r) {
  for (auto& h : r.hooks) remove_grad_hook(h);
  r.hooks.clear();
}
}  // namespace

void unhook_params() {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  unhook_locked(r);
}

void rehook_params() {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (auto& h : r.hooks) {
    // a new node since (e.g. the parameter's .data replaced by one of another type)
    if (torch::autograd::impl::try_get_grad_accumulator(h.tensor) == h.accumulator) continue;
    remove_grad_hook(h);
    add_grad_hook(h);
  }
}

void detach_all_modules() {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  unhook_locked(r);
  Observer::forget_params();  // their layer ids are about to go
  r.params.clear();
  r.params_by_name.clear();
  r.pending_aliases.clear();
  r.by_module.clear();
  r.layers.resize(1);
  r.by_name = {{"<outside>", kOutsideLayerId}};
  r.pinned.clear();
}

std::vector<LayerInfo> known_layers() {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.layers;
}

LayerId find_layer(const torch::nn::Module& module) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.by_module.find(&module);
  return it == r.by_module.end() || it->second.gone() ? -1 : it->second.id;
}

LayerId layer_for_name(std::string_view name, std::string_view type) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return add_layer_locked(r, std::string(name), std::string(type));
}

std::vector<ParamGradInfo> param_grads() {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<ParamGradInfo> out;
  out.reserve(r.params.size());
  for (auto& slot : r.params) {
    std::lock_guard<std::mutex> sl(slot->mu);
    out.push_back(slot->info);
  }
  return out;
}

void record_param_grad(const std::string& name, const std::string& layer,
                       const std::string& layer_type, const at::Tensor& grad) {
  std::shared_ptr<ParamSlot> slot;
  {
    auto& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.params_by_name.find(name);
    if (it != r.params_by_name.end()) {
      slot = it->second;
    } else {
      LayerId id = add_layer_locked(r, layer, layer_type);
      slot = new_slot_locked(r, name, dtype_name(static_cast<std::int8_t>(grad.scalar_type())), id);
    }
  }
  record_into(*slot, grad);
}

void record_param_alias(const std::string& name, const std::string& alias) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.params_by_name.find(name);
  if (it == r.params_by_name.end()) {
    auto& pending = r.pending_aliases[name];
    if (std::find(pending.begin(), pending.end(), alias) == pending.end()) pending.push_back(alias);
    return;
  }
  std::lock_guard<std::mutex> sl(it->second->mu);
  auto& aliases = it->second->info.aliases;
  if (std::find(aliases.begin(), aliases.end(), alias) == aliases.end()) aliases.push_back(alias);
}

void reset_param_grads() {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (auto& slot : r.params) {
    std::lock_guard<std::mutex> sl(slot->mu);
    slot->info.grad = Stats{};
    slot->info.updates = 0;
  }
}

std::vector<std::string> pin_layers(const std::vector<std::string>& names,
                                    std::vector<std::string>* unknown) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> pinned;
  for (const auto& name : names) {
    auto it = r.by_name.find(name);
    if (it == r.by_name.end() || it->second == kOutsideLayerId) {
      if (unknown) unknown->push_back(name);
      continue;
    }
    auto id = static_cast<std::size_t>(it->second);
    if (r.pinned.size() <= id) r.pinned.resize(id + 1, false);
    r.pinned[id] = true;
    pinned.push_back(name);
  }
  return pinned;
}

bool layer_pinned(LayerId id) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return id >= 0 && static_cast<std::size_t>(id) < r.pinned.size() && r.pinned[id];
}

namespace detail {
at::Tensor to_fp32_if(const at::Tensor& t, bool pin) {
  if (!pin || !t.defined() || !t.is_floating_point() || t.scalar_type() == at::kFloat) return t;
  return t.to(at::kFloat);
}
}  // namespace detail

void LayerScope::enter(LayerId id) {
  Observer::push_layer(id);
  pushed_ = true;
  if (!layer_pinned(id)) return;
  for (auto device : {c10::DeviceType::CPU, c10::DeviceType::CUDA}) {
    autocast_off_.push_back(std::make_unique<AutocastGuard>(
        device, at::autocast::get_autocast_dtype(device), /*enabled=*/false));
  }
}

LayerScope::LayerScope(const torch::nn::Module& module) {
  LayerId id = find_layer(module);
  if (id >= 0) enter(id);
}

LayerScope::LayerScope(std::string_view name) { enter(layer_for_name(name)); }

const at::Tensor& LayerScope::returns(const at::Tensor& t) const {
  if (pushed_) Observer::check_module_outputs({t});
  return t;
}

LayerScope::~LayerScope() {
  while (!autocast_off_.empty()) autocast_off_.pop_back();  // innermost first
  if (pushed_) Observer::pop_layer();
}

bool attached_param(const at::Tensor& param, std::string* name, std::string* layer,
                    std::string* layer_type) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const auto& h : r.hooks) {
    if (!h.tensor.is_same(param)) continue;
    *name = h.slot->info.name;
    const auto id = static_cast<std::size_t>(h.slot->info.layer);
    *layer = id < r.layers.size() ? r.layers[id].name : "<outside>";
    *layer_type = id < r.layers.size() ? r.layers[id].type : "outside";
    return true;
  }
  return false;
}

}  // namespace ampscope
