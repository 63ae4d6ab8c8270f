// RecordFunction callbacks: one entry per top-level op call (autocast's outer and inner calls
// merged), backward nodes attributed to the layer of the forward op that created them.
#include <ampscope/profiler/observer.h>
#include <ampscope/profiler/tensor_stats.h>

#include <ATen/ATen.h>
#include <ATen/SequenceNumber.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/graph_task.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <unordered_set>

#include "observer_state.h"
#include "compiled_point.h"
#include "ivalue_tensors.h"
#include "nonfinite_scan.h"
#include "observer_device.h"
#include "own_work.h"
#include "provenance.h"
#include "read_cache.h"
#include "recheck.h"
#include "silent_loss_hooks.h"
#include "stepped_params.h"
#include "wrapper_calls.h"

namespace ampscope {
namespace detail {
namespace {

/// What the observer knows about an op, looked up once per op and thread.
struct OpInfo {
  std::uint32_t id = 0;
  bool autocast_cpu = false;   ///< has an AutocastCPU kernel
  bool autocast_cuda = false;  ///< has an AutocastCUDA kernel
  bool promote = false;        ///< on autocast's promote list
  bool inplace = false;        ///< mutates its first argument (name ends in '_')
  bool cast = false;           ///< aten::to / aten::_to_copy: a cast autocast may insert
  bool update_scale = false;   ///< aten::_amp_update_scale_: a GradScaler update
  bool host_read = false;      ///< aten::item / _local_scalar_dense: a value read by the host
  bool uninitialized = false;  ///< returns uninitialized memory (aten::empty...): no stats
  bool internal = false;       ///< ampscope's own ops (the Python bridge): never recorded
  bool filtered_out = false;   ///< excluded by ObserverOptions::ops: never recorded
  /// Returns a view of an input (schema alias, not written: view, t, transpose, expand,
  /// reshape...) or rewrites only an input's metadata (detach_, t_: value_preserving_inplace):
  /// its values were counted where they were produced, so no stats pass. Casts (aten::to may
  /// alias too) are not views: a cast can overflow.
  bool view = false;
};

// Autocast's promote ops: CUDA's list comes from the linked torch's header; CPU's lives only in
// autocast_mode.cpp (stack, cat, index_copy) and is mirrored here.
const std::unordered_set<std::string>& promote_ops() {
  static const auto* set = [] {
    auto* s = new std::unordered_set<std::string>{"aten::stack", "aten::cat", "aten::index_copy"};
#define AMPSCOPE_ADD_PROMOTE(op) s->insert("aten::" #op);
    AT_FORALL_PROMOTE(AMPSCOPE_ADD_PROMOTE)
#undef AMPSCOPE_ADD_PROMOTE
    return s;
  }();
  return *set;
}

/// True when the op's first return aliases an input without writing it (a view).
bool returns_view(const c10::OperatorHandle& op) {
  if (!op.hasSchema()) return false;
  const auto& returns = op.schema().returns();
  if (returns.empty()) return false;
  const auto* alias = returns[0].alias_info();
  return alias != nullptr && !alias->isWrite();
}

/// In-place ops that change an input's autograd state or shape but no value. libtorch's
/// Optimizer::zero_grad calls detach_ on every gradient: a stats pass there re-read all of them
/// each step (a tenth of a C++ bfloat16 step's reads).
bool value_preserving_inplace(std::string_view name) {
  static constexpr std::string_view kOps[] = {
      "aten::detach_",  "aten::requires_grad_", "aten::t_",         "aten::transpose_",
      "aten::squeeze_", "aten::unsqueeze_",     "aten::swapdims_",  "aten::swapaxes_",
      "aten::as_strided_"};
  return std::find(std::begin(kOps), std::end(kOps), name) != std::end(kOps);
}

OpInfo make_info(const at::RecordFunction& fn, std::string_view name) {
  OpInfo info;
  info.id = global().ops.intern(name);
  info.promote = promote_ops().count(std::string(name)) > 0;
  info.inplace = !name.empty() && name.back() == '_' && name.rfind("aten::", 0) == 0;
  info.cast = name == "aten::to" || name == "aten::_to_copy";
  info.update_scale = name == "aten::_amp_update_scale_";
  info.host_read = name == "aten::item" || name == "aten::_local_scalar_dense";
  info.internal = name.rfind("ampscope::", 0) == 0;
  info.filtered_out = !global().op_filter.allows(name);
  info.uninitialized = name == "aten::empty" || name == "aten::empty_like" ||
                       name == "aten::empty_strided" || name == "aten::new_empty" ||
                       name == "aten::new_empty_strided" || is_collective(name);
  if (auto opname = fn.operator_name()) {
    if (auto handle = c10::Dispatcher::singleton().findOp(*opname)) {
      info.autocast_cpu = handle->hasKernelForDispatchKey(c10::DispatchKey::AutocastCPU);
      info.autocast_cuda = handle->hasKernelForDispatchKey(c10::DispatchKey::AutocastCUDA);
      info.view = !info.cast && returns_view(*handle);
    }
  }
  info.view = info.view || value_preserving_inplace(name);
  return info;
}

/// The data a call carries from its start callback to its end callback.
struct Call : at::ObserverContext {
  bool inner = false;  ///< autocast's inner call of the current top-level call
  bool nested_cast = false;  ///< a cast nested in a top-level call (autocast's)
  bool skip = false;   ///< its layer is filtered out: tracked for nesting, not recorded
  bool node = false;   ///< an autograd node (BACKWARD_FUNCTION scope)
  /// An unsampled step: only the sentinel runs (outputs checked for NaN/Inf, no stats).
  bool sentinel = false;
  const OpInfo* info = nullptr;
  Phase phase = Phase::kForward;
  LayerId layer = kOutsideLayerId;
  std::int64_t step = 0;
  std::int8_t input_dtype = -1;
  std::int8_t inner_dtype = -1;  ///< dtype the inner call computed in
  std::int8_t autocast_dtype = -1;
  bool autocast_candidate = false;
  bool inner_seen = false;
  std::int64_t pending_casts = 0;
  bool inputs_checked = false;   ///< inputs' finiteness known from the start callback
  bool inputs_finite = true;
  std::vector<c10::IValue> inputs;  ///< held for finiteness checks and the FP32 re-check
  Stats stats;                      ///< backward: incoming gradients, taken at start
  Stats input_stats;                ///< ObserverOptions::input_stats: floating inputs
  std::uint64_t ext_id = 0;         ///< CUPTI external id pushed for this call (0: none)
  bool point = false;               ///< a compiled graph's observation point
  /// A module's forward run again inside backward (reentrant activation checkpointing): its
  /// autograd nodes and NaN/Inf origins are the forward's, its values were recorded then.
  bool recompute = false;
  /// Only the observer's callback is active: the ops its nested calls run need not be seen
  /// (quiet_children).
  bool quiet = false;
  std::uint64_t seq0 = 0;  ///< the thread's autograd sequence number when the call started
  AutocastClass point_autocast = AutocastClass::kNone;  ///< what autocast did, from its graph
};

/// An autograd node whose incoming gradients were finite, remembered under each node its
/// outputs flow into: if that consumer then receives NaN/Inf, this node made it.
struct Producer {
  OpKey key;
  std::int64_t step = 0;
  const void* node = nullptr;  ///< the producing node itself
  std::uint64_t thread = 0;    ///< its forward thread and sequence number (see CreationSeqs)
  std::int64_t seq = -1;
  /// Other nodes whose gradients were summed into the same consumer's input buffer before this
  /// one (the engine adds them up: which of them made a NaN/Inf cannot be told from the sum).
  std::vector<Producer> also;
};

struct ThreadState {
  std::uint64_t generation = ~std::uint64_t{0};
  int depth = 0;
  std::vector<LayerId> layers;
  std::vector<Phase> phases;
  LayerId backward_layer = kOutsideLayerId;  ///< layer of the last autograd node on this thread
  Call* top = nullptr;
  std::shared_ptr<ThreadTable> table;
  std::shared_ptr<SeqRing> ring;
  std::uint64_t ring_tid = ~std::uint64_t{0};
  std::unordered_map<const char*, OpInfo> by_pointer;   // dispatcher names are stable pointers
  std::unordered_map<std::string, OpInfo> by_name;      // autograd node names are not
  int replaying = 0;  // Observer::begin_replay depth: the per-op sentinel runs whatever the step
  int quiet_at = -1;  // depth of the event below which RecordFunction is off (quiet_children)
  /// An observed optimizer step running on this thread: its wide parameters, the writes of its
  /// wide ops (check_stepped_parameters).
  SteppedParams stepped;
  bool busy = false;  // inside OwnWork: the ops that run are the observer's own
  int graph_task = -2;                                  // the backward pass `producers` is of
  int loss_task = -2;                                   // the backward pass whose loss was checked
  std::unordered_map<const void*, Producer> producers;  // consumer node -> its producer
};

thread_local ThreadState tls;

ThreadState& thread_state() {
  auto gen = global().generation.load(std::memory_order_acquire);
  if (tls.generation != gen) {
    tls.generation = gen;
    tls.depth = 0;
    tls.replaying = 0;
    if (tls.quiet_at >= 0) at::enableRecordFunction(true);
    tls.quiet_at = -1;
    tls.busy = false;
    tls.top = nullptr;
    tls.by_pointer.clear();  // op filters may differ from the previous run's
    tls.by_name.clear();
    if (!tls.table) tls.table = global().new_table();
  }
  return tls;
}

const OpInfo& lookup(ThreadState& t, const at::RecordFunction& fn) {
  const char* name = fn.name();
  // (a compiled graph's point names itself through a string RecordFunction copies: by name)
  if (fn.scope() == at::RecordScope::FUNCTION && current_point() == nullptr) {
    auto it = t.by_pointer.find(name);
    if (it != t.by_pointer.end()) return it->second;
    return t.by_pointer.emplace(name, make_info(fn, name)).first->second;
  }
  auto it = t.by_name.find(name);
  if (it != t.by_name.end()) return it->second;
  return t.by_name.emplace(name, make_info(fn, name)).first->second;
}

SeqRing& forward_ring(ThreadState& t, const at::RecordFunction& fn) {
  if (!t.ring || t.ring_tid != fn.threadId()) {
    t.ring_tid = fn.threadId();
    t.ring = global().ring(t.ring_tid);
  }
  return *t.ring;
}

// complex and quantized too: stats_supported() skips them with a note
bool is_floating(const at::Tensor& t) {
  return t.defined() && (t.is_floating_point() || t.is_complex() || t.is_quantized());
}

/// Widest floating dtype among the tensors (-1 when none); also reports the first device.
template <typename Range>
std::int8_t floating_dtype(const Range& values, c10::DeviceType* device = nullptr) {
  std::optional<c10::ScalarType> widest;
  bool have_device = false;
  for (const c10::IValue& v : values) {
    for_each_tensor(v, [&](const at::Tensor& t) {
      if (!t.defined()) return;
      if (device && !have_device) {
        *device = t.device().type();
        have_device = true;
      }
      if (!t.is_floating_point()) return;
      widest = widest ? c10::promoteTypes(*widest, t.scalar_type()) : t.scalar_type();
    });
  }
  return widest ? static_cast<std::int8_t>(*widest) : -1;
}

/// First tensor dtype among the values (-1 when none): the output dtype of non-floating ops.
std::int8_t first_dtype(const std::vector<c10::IValue>& values) {
  std::int8_t out = -1;
  for (const c10::IValue& v : values) {
    for_each_tensor(v, [&](const at::Tensor& t) {
      if (out < 0 && t.defined()) out = static_cast<std::int8_t>(t.scalar_type());
    });
  }
  return out;
}

/// The stats of the floating tensors among the values, merged (a tensor read earlier in this
/// step at the same version is not read again: read_cache.h).
template <typename Range>
Stats stats_of(const Range& values) {
  Stats s;
  const std::int64_t step = global().step.load(std::memory_order_relaxed);
  for (const c10::IValue& v : values) {
    for_each_tensor(v, [&](const at::Tensor& t) {
      if (is_floating(t) && stats_supported(t)) s.merge(cached_stats(t, step));
    });
  }
  return s;
}

/// True when no floating tensor among the values holds NaN/Inf (one read, no stats).
template <typename Range>
bool all_finite(const Range& values) {
  bool bad = false;
  const std::int64_t step = global().step.load(std::memory_order_relaxed);
  for (const c10::IValue& v : values) {
    for_each_tensor(v, [&](const at::Tensor& t) {
      bad = bad || (is_floating(t) && cached_has_nonfinite(t, step));
    });
    if (bad) return false;
  }
  return true;
}

/// True when no scalar argument is NaN/inf (masked_fill(mask, -inf) makes -inf on purpose).
bool scalars_finite(const std::vector<c10::IValue>& values) {
  for (const c10::IValue& v : values) {
    if (v.isDouble() && !std::isfinite(v.toDouble())) return false;
  }
  return true;
}

/// The phase of a top-level op outside the autograd engine: a pushed override, else setup
/// until the first layer is entered, between after a backward pass (clipping, unscaling) until
/// the next forward or step, forward otherwise.
Phase forward_phase(const ThreadState& t) {
  if (!t.phases.empty()) return t.phases.back();
  const auto& g = global();
  if (!g.forward_seen.load(std::memory_order_relaxed)) return Phase::kSetup;
  if (g.after_backward.load(std::memory_order_relaxed)) return Phase::kBetween;
  return Phase::kForward;
}

void start_forward_top(ThreadState& t, const at::RecordFunction& fn, Call& call) {
  const bool in_backward = torch::autograd::get_current_graph_task_id() != -1;
  if (in_backward && t.layers.empty()) {
    // Run by the autograd engine outside any node (e.g. validate_outputs' sum_to of a
    // broadcast gradient, gradient hooks): backward work of the node that ran last.
    call.phase = Phase::kBackward;
    call.layer = t.backward_layer;
  } else {
    // Inside backward with a module running and grad mode on: a checkpointed layer's
    // recomputed forward (the original ran without a graph, so the nodes backward meets are
    // made here). A compiled backward's point pushes its layer too, and a module called from a
    // gradient hook runs without grad mode: both are backward work.
    const bool recompute =
        in_backward && current_point() == nullptr && c10::GradMode::is_enabled();
    call.recompute = recompute;
    call.phase = recompute ? Phase::kForward : in_backward ? Phase::kBackward : forward_phase(t);
    call.layer = t.layers.empty() ? kOutsideLayerId : t.layers.back();
    forward_ring(t, fn).put(fn.seqNr(), call.layer);
  }
  if (!global().layer_filter.included(call.layer)) {
    call.skip = true;
    return;
  }
  auto inputs = fn.inputs();
  c10::DeviceType device = c10::DeviceType::CPU;
  call.input_dtype = floating_dtype(inputs, &device);
  if (const CompiledPoint* p = current_point()) {  // dtypes as written: the graph's metadata
    call.point = true;
    call.input_dtype = p->input_dtype;
    call.point_autocast = p->autocast;
  }
  bool has_autocast_kernel = device == c10::DeviceType::CUDA ? call.info->autocast_cuda
                                                              : call.info->autocast_cpu;
  if (!call.point && has_autocast_kernel && at::autocast::is_autocast_enabled(device)) {
    call.autocast_candidate = true;
    call.autocast_dtype = static_cast<std::int8_t>(at::autocast::get_autocast_dtype(device));
  }
  call.inputs.assign(inputs.begin(), inputs.end());
  // An in-place op overwrites its first input; whether that held NaN/Inf before is known from
  // provenance (every non-finite tensor an observed op made is tainted), so no pre-scan, but
  // where filters leave ops or layers out: they may have made NaN/Inf provenance never saw.
  if (global().input_stats && !call.sentinel) {
    call.input_stats = stats_of(call.inputs);
    call.inputs_finite = call.input_stats.nonfinite() == 0;
    call.inputs_checked = true;
  } else if (global().filtered && call.info->inplace) {
    call.inputs_finite = all_finite(call.inputs);
    call.inputs_checked = true;
  }
}

/// The entry key of an autograd node's call: its incoming gradients' dtype stands for input,
/// compute and output dtype alike.
OpKey node_key(const Call& call) {
  OpKey key;
  key.layer = call.layer;
  key.op = call.info->id;
  key.phase = Phase::kBackward;
  key.input_dtype = key.compute_dtype = key.output_dtype = call.input_dtype;
  return key;
}

void record_backward_origin(const Producer& p, const Stats& received, std::int8_t dtype,
                            bool inputs_finite = true, bool forward_nonfinite = false);

/// Whether the node of (thread, seq) was made by a forward call that created NaN/Inf from
/// finite inputs (see CreationSeqs).
bool made_by_forward_creation(std::uint64_t thread, std::int64_t seq) {
  if (seq < 0) return false;
  auto& g = global();
  std::lock_guard<std::mutex> lock(g.creations_mu);
  return std::any_of(g.creations.begin(), g.creations.end(), [&](const auto& c) {
    return c.thread == thread && c.lo <= seq && seq < c.hi;
  });
}

/// Of a consumer's producers (the last and those summed with it), the one whose own forward op
/// created NaN/Inf: the backward formula met them again (nullptr: none).
const Producer* forward_creation_producer(const Producer& p) {
  if (made_by_forward_creation(p.thread, p.seq)) return &p;
  for (const Producer& other : p.also)
    if (made_by_forward_creation(other.thread, other.seq)) return &other;
  return nullptr;
}

/// Backward origins: RecordFunction never shows a node's outputs, but they are the next nodes'
/// inputs. Until the run's first NaN/Inf, each node with finite incoming gradients is
/// remembered under the nodes its outputs flow into (its next edges); a node receiving NaN/Inf
/// then names its producer as the origin.
void track_backward_origin(ThreadState& t, const at::RecordFunction& fn, const Call& call) {
  if (global().have_first_nonfinite.load(std::memory_order_acquire)) return;
  const int task = torch::autograd::get_current_graph_task_id();
  if (task != t.graph_task) {
    t.graph_task = task;
    t.producers.clear();
  }
  auto node = torch::autograd::get_current_node();
  if (!node) return;
  if (call.stats.nonfinite() > 0) {
    auto it = t.producers.find(node.get());
    if (it != t.producers.end()) {
      if (const Producer* made = forward_creation_producer(it->second))
        record_backward_origin(*made, call.stats, call.input_dtype, true, /*forward_nonfinite=*/true);
      else
        record_backward_origin(it->second, call.stats, call.input_dtype);
    } else {
      Producer self;  // no producer seen: the node itself is the first to hold them
      self.key = node_key(call);
      self.step = call.step;
      record_backward_origin(self, call.stats, call.input_dtype, /*inputs_finite=*/false);
    }
    return;
  }
  Producer p;
  p.key = node_key(call);
  p.step = call.step;
  p.node = node.get();
  p.thread = fn.forwardThreadId();
  p.seq = fn.seqNr();
  for (const auto& edge : node->next_edges()) {
    if (!edge.function) continue;
    auto [it, fresh] = t.producers.try_emplace(edge.function.get(), p);
    if (fresh || it->second.node == p.node) continue;  // x * x: two edges, one producer
    std::vector<Producer> also = std::move(it->second.also);
    it->second.also.clear();
    if (also.size() < 8) also.push_back(std::move(it->second));
    it->second = p;
    it->second.also = std::move(also);
  }
}

void check_loss(ThreadState& t);

/// Parameters -> the layer that owns them (Observer::name_param). Held weakly: a parameter
/// freed keeps its TensorImpl's memory while its entry lives, so its address is never mistaken
/// for a new tensor's (a gradient or activation of a later run at the address of an earlier
/// model's parameter was once a "parameter an unobserved optimizer step made non-finite").
/// Entries of parameters gone are dropped at each run's start, all of them when the layers are
/// reset (Observer::forget_params).
class ParamLayers {
 public:
  void set(const at::Tensor& param, LayerId layer) {
    std::lock_guard<std::mutex> lock(mu_);
    by_impl_.insert_or_assign(param.unsafeGetTensorImpl(),
                              Entry{Weak(param.getIntrusivePtr()), layer});
  }
  /// The layer of the parameter `t` is (-1 when it is none).
  LayerId of(const at::Tensor& t) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_impl_.find(t.unsafeGetTensorImpl());
    return it != by_impl_.end() && !it->second.param.expired() ? it->second.layer : -1;
  }
  /// The parameters still alive, with their layers.
  std::vector<std::pair<at::Tensor, LayerId>> live() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::pair<at::Tensor, LayerId>> out;
    out.reserve(by_impl_.size());
    for (auto& [impl, e] : by_impl_)
      if (auto p = e.param.lock()) out.emplace_back(at::Tensor(std::move(p)), e.layer);
    return out;
  }
  void drop_freed() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = by_impl_.begin(); it != by_impl_.end();)
      it = it->second.param.expired() ? by_impl_.erase(it) : std::next(it);
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    by_impl_.clear();
  }

 private:
  using Weak = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;
  struct Entry {
    Weak param;
    LayerId layer;
  };
  std::mutex mu_;
  std::unordered_map<const c10::TensorImpl*, Entry> by_impl_;
};

ParamLayers& param_layers() {
  static auto* table = new ParamLayers();  // never destroyed: callbacks may outlive main
  return *table;
}

/// The layer that owns the parameter an AccumulateGrad node accumulates into (-1: not known).
LayerId accumulate_grad_layer() {
  auto node = torch::autograd::get_current_node();
  auto* acc = dynamic_cast<torch::autograd::AccumulateGrad*>(node.get());
  if (!acc || !acc->variable.defined()) return -1;
  return param_layers().of(acc->variable);
}

LayerId backward_layer(ThreadState& t, const at::RecordFunction& fn) {
  LayerId layer = -1;
  if (auto ring = global().find_ring(fn.forwardThreadId())) layer = ring->get(fn.seqNr());
  if (layer < 0) layer = accumulate_grad_layer();
  if (layer < 0) layer = t.layers.empty() ? kOutsideLayerId : t.layers.back();
  return layer;
}

void start_backward_top(ThreadState& t, const at::RecordFunction& fn, Call& call) {
  call.phase = Phase::kBackward;
  call.node = true;
  global().after_backward.store(true, std::memory_order_relaxed);
  check_loss(t);
  call.layer = backward_layer(t, fn);
  t.backward_layer = call.layer;
  if (!global().layer_filter.included(call.layer)) {
    call.skip = true;
    return;
  }
  auto inputs = fn.inputs();  // the gradients flowing into the node: valid only here
  call.input_dtype = floating_dtype(inputs);
  if (call.sentinel) {
    if (!all_finite(inputs)) call.stats = stats_of(inputs);  // rare: the full block
  } else {
    call.stats = stats_of(inputs);
    // CUDA gradients: into the entry's device slot (its key is known now; see finish_top).
    device_record(inputs, *t.table, node_key(call), call.step);
  }
  track_backward_origin(t, fn, call);
}

/// The autograd engine wraps each node in an "autograd::engine::evaluate_function: <Node>"
/// event of scope FUNCTION; it is not an op. Its context marks it so that its end does not
/// change the depth either.
struct EngineWrapper : at::ObserverContext {};
/// A compiled region (see compiled_point.h): transparent, and its own ATen calls are folded in.
struct CompiledRegion : EngineWrapper {};
constexpr std::string_view kEngineWrapperPrefix = "autograd::engine::evaluate_function";

bool is_engine_wrapper(const at::RecordFunction& fn) {
  return fn.scope() == at::RecordScope::FUNCTION &&
         std::string_view(fn.name()).substr(0, kEngineWrapperPrefix.size()) == kEngineWrapperPrefix;
}

constexpr std::string_view kUpdateScale = "aten::_amp_update_scale_";
constexpr std::string_view kUnscale = "aten::_amp_foreach_non_finite_check_and_unscale_";

void commit_pending();
void scaler_catches_pending();

/// A GradScaler update decides the fate of the step's non-finite gradients: caught (found inf,
/// the optimizer step was skipped) or not. Reads found_inf (one device sync on CUDA) only when
/// such gradients are pending.
void resolve_pending_by_scaler(const at::RecordFunction& fn) {
  if (!global().have_pending.load(std::memory_order_acquire)) return;
  auto inputs = fn.inputs();
  if (inputs.size() < 3 || !inputs[2].isTensor() || !inputs[2].toTensor().defined()) return;
  OwnWork own;
  if (inputs[2].toTensor().item<double>() != 0.0) {
    scaler_catches_pending();
  } else {
    commit_pending();
  }
}

/// An unsampled step the front end watches (ObserverOptions::watch_unsampled): the per-op
/// sentinel is not armed for it.
bool watched_step(const GlobalState& g, std::int64_t step) {
  if (!g.watch || g.every <= 1 || step % g.every == 0) return false;
  const std::int64_t armed = g.armed_from.load(std::memory_order_relaxed);
  return armed < 0 || step < armed;
}

/// A watched step on this thread (no replay running here).
bool watched(const GlobalState& g, std::int64_t step, const ThreadState& t) {
  return t.replaying == 0 && watched_step(g, step);
}

/// Switches the op callbacks off for watched steps (up to a GradScaler's unscale), on otherwise.
void refresh_callbacks();
/// A GradScaler unscaled: the op callbacks stay on until its update.
void scaler_unscaled();

/// On a watched step the per-op sentinel keeps only forward ops outside every module (a loss
/// computed in the training loop) and compiled graphs' points: module outputs, parameter
/// gradients and replays cover the rest.
bool watch_skips(const at::RecordFunction& fn, const ThreadState& t) {
  if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION) return true;
  if (current_point() != nullptr) return false;
  if (!t.layers.empty() || torch::autograd::get_current_graph_task_id() != -1) return true;
  const Phase p = forward_phase(t);
  return p != Phase::kForward && p != Phase::kSetup;
}

/// The per-op sentinel replaces the watch from the current step on.
void arm(GlobalState& g) {
  std::int64_t none = -1;
  if (g.armed_from.compare_exchange_strong(none, g.step.load())) refresh_callbacks();
}

/// A GradScaler update ends its iteration. When the optimizer step was skipped (inf/NaN found),
/// no optimizer hook marked the step, so the update marks it. Returns the step the update
/// belongs to.
std::int64_t update_scale_step(GlobalState& g) {
  std::lock_guard<std::mutex> lock(g.records_mu);
  std::int64_t now = g.step.load();
  std::int64_t belongs = now;
  if (now > g.step_at_last_update) {
    belongs = now - 1;  // the optimizer step of this iteration already ended it
  } else {
    g.step.fetch_add(1);
    g.after_backward.store(false, std::memory_order_relaxed);
    refresh_callbacks();
  }
  g.step_at_last_update = g.step.load();
  return belongs;
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn);

/// True when a callback other than the observer's is active on this thread (torch.profiler,
/// another tool).
bool others_observing() {
  for (const auto& c : at::getStepCallbacks(at::RecordScope::FUNCTION).callbacks_) {
    if (c.start_ != &on_start) return true;
  }
  return false;
}

/// Switches RecordFunction off for the ops the current event (at `depth`) runs inside it, until
/// it ends (on_end switches it back). The observer needs only top-level calls and their direct
/// nested calls (autocast's inner call and casts); the rest (an `aten::to`'s `_to_copy`,
/// `empty_strided`, `copy_`; an autograd node's arithmetic) was most of the callbacks a recorded
/// step paid for. Autograd nodes their ops create are attributed through the sequence numbers the
/// top-level call spanned (finish_forward_ring). Never while another callback is active.
void quiet_children(ThreadState& t, int depth, bool allowed) {
  if (!allowed || t.quiet_at >= 0) return;
  at::enableRecordFunction(false);
  t.quiet_at = depth;
}

/// The layer of every autograd node a top-level call created, nested calls included: the
/// sequence numbers it spanned on this thread.
void finish_forward_ring(ThreadState& t, const at::RecordFunction& fn, const Call& call) {
  if (call.phase == Phase::kBackward || call.node) return;
  const std::uint64_t end = at::sequence_number::peek();
  if (end <= call.seq0) return;
  SeqRing& ring = forward_ring(t, fn);
  for (std::uint64_t s = call.seq0; s < end; ++s) ring.put(static_cast<std::int64_t>(s), call.layer);
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  auto& g = global();
  if (!g.running.load(std::memory_order_relaxed)) return nullptr;
  auto& t = thread_state();
  if (t.busy) return nullptr;
  if (is_engine_wrapper(fn) || is_point_call(fn)) return std::make_unique<EngineWrapper>();
  if (t.depth == 0 && is_compiled_region(fn)) {
    ++compiled_regions();
    return std::make_unique<CompiledRegion>();
  }
  // A DTensor (or torch.func) call: transparent like the engine's wrapper; its inner call on
  // the local tensors becomes the top-level call.
  if (t.depth == 0 && (is_transparent_record(fn) || is_wrapper_call(fn))) {
    if (torch::autograd::get_current_graph_task_id() == -1)  // its node: this layer's
      forward_ring(t, fn).put(fn.seqNr(), t.layers.empty() ? kOutsideLayerId : t.layers.back());
    return std::make_unique<EngineWrapper>();
  }
  int depth = t.depth++;
  // inside a compiled graph only its observation points are calls (the rest is its plumbing)
  if (depth == 0 && compiled_regions() > 0 && current_point() == nullptr) return nullptr;
  std::int64_t step = g.step.load(std::memory_order_relaxed);
  if (depth == 0 && fn.scope() == at::RecordScope::FUNCTION && fn.name()[0] == 'a') {
    if (fn.name() == kUnscale) scaler_unscaled();
    if (fn.name() == kUpdateScale) {
      resolve_pending_by_scaler(fn);
      step = update_scale_step(g);
      g.scaler_open.store(false);  // this call keeps its callbacks (RecordFunction took them)
      refresh_callbacks();
    }
  }
  // Unsampled steps keep the sentinel: outputs checked for NaN/Inf, nothing else recorded.
  const bool sentinel = g.every > 1 && step % g.every != 0;
  bool backward = fn.scope() == at::RecordScope::BACKWARD_FUNCTION;
  try {
    if (depth == 0) {
      if (sentinel && watched(g, step, t) && watch_skips(fn, t)) {
        quiet_children(t, depth, !others_observing());
        return nullptr;
      }
      const OpInfo& info = lookup(t, fn);
      if (info.internal || info.filtered_out) {
        quiet_children(t, depth, !others_observing());
        return nullptr;
      }
      auto call = std::make_unique<Call>();
      call->info = &info;
      call->step = step;
      call->sentinel = sentinel;
      call->seq0 = at::sequence_number::peek();  // (fn.seqNr() is -1 for some calls)
      call->quiet = !others_observing();
      if (backward) {
        start_backward_top(t, fn, *call);
        quiet_children(t, depth, call->quiet);  // a node's own arithmetic: nothing to see
      } else {
        start_forward_top(t, fn, *call);
      }
      if (!call->skip && !sentinel) call->ext_id = device_call_begin();
      t.top = call.get();
      return call;
    }
    Call* top = t.top;
    if (!top || backward) return nullptr;
    if (depth != 1) return nullptr;
    // the direct nested calls are what autocast did; what they run inside is not needed
    quiet_children(t, depth, top->quiet);
    if (top->skip) return nullptr;
    const OpInfo& info = lookup(t, fn);
    if (info.cast) {
      ++top->pending_casts;
      // what autocast's cast of an input or weight destroys (issue 13)
      if (top->autocast_candidate && !top->sentinel && !top->info->cast)
        on_autocast_cast(top, fn.inputs(), top->inputs, top->step);
      if (top->sentinel) return nullptr;
      auto cast = std::make_unique<Call>();  // its end hands reads on (finish_cast)
      cast->nested_cast = true;
      cast->step = top->step;
      auto inputs = fn.inputs();
      if (!inputs.empty()) cast->inputs.push_back(inputs[0]);
      return cast;
    }
    if (top->autocast_candidate && !top->inner_seen && info.id == top->info->id) {
      auto inner = std::make_unique<Call>();
      inner->inner = true;
      inner->inner_dtype = floating_dtype(fn.inputs());
      return inner;
    }
  } catch (const std::exception&) {
    // Never disturb the training loop; an op we fail to read is simply not recorded.
  }
  return nullptr;
}

AutocastClass classify(const Call& call, std::int8_t compute) {
  if (!call.inner_seen) return AutocastClass::kNone;
  if (call.info->promote) return AutocastClass::kPromote;
  if (compute == call.autocast_dtype) return AutocastClass::kLowerPrecision;
  return AutocastClass::kFp32;
}

/// A GradScaler update whose scale and found_inf are still device tensors: copies taken on the
/// op's stream, read back in batches so that no update syncs with the device by itself.
struct PendingLossScale {
  std::int64_t step = 0;
  at::Tensor scale, found_inf;
  c10::Stream stream;
};
constexpr std::size_t kMaxPendingLossScales = 64;
/// Guarded by global().records_mu; never destroyed (device tensors must not be freed at exit).
std::vector<PendingLossScale>& pending_loss_scales() {
  static auto* pending = new std::vector<PendingLossScale>();
  return *pending;
}

/// Reads every pending update into g.loss_scale, in order (one device sync for the batch).
/// Caller holds records_mu.
void resolve_pending_loss_scales(GlobalState& g) {
  OwnWork own;
  for (auto& p : pending_loss_scales()) {
    std::optional<c10::StreamGuard> on_stream;
    if (p.stream.device_type() != c10::DeviceType::CPU) on_stream.emplace(p.stream);
    append_loss_scale(g.loss_scale,
                      {p.step, p.scale.item<double>(), p.found_inf.item<double>() != 0.0});
    ++g.loss_scale_updates;
  }
  pending_loss_scales().clear();
}

void record_loss_scale(const Call& call, std::int64_t step) {
  // _amp_update_scale_(scale, growth_tracker, found_inf, ...): scale is updated in place, so
  // its value now is copied (on the current stream, after the update) and read later.
  if (call.inputs.size() < 3 || !call.inputs[0].isTensor() || !call.inputs[2].isTensor()) return;
  const at::Tensor& scale = call.inputs[0].toTensor();
  const at::Tensor& found_inf = call.inputs[2].toTensor();
  if (!scale.defined() || !found_inf.defined()) return;
  OwnWork own;
  const auto device = scale.device();
  PendingLossScale p{step, scale.clone(), found_inf.clone(),
                     c10::impl::getDeviceGuardImpl(device.type())->getStream(device)};
  auto& g = global();
  std::lock_guard<std::mutex> lock(g.records_mu);
  pending_loss_scales().push_back(std::move(p));
  if (pending_loss_scales().size() >= kMaxPendingLossScales) resolve_pending_loss_scales(g);
}

bool is_low_precision(std::int8_t dtype) {
  const auto t = static_cast<c10::ScalarType>(dtype);
  return dtype >= 0 && (t == at::kHalf || t == at::kBFloat16 || t == at::kFloat8_e4m3fn ||
                        t == at::kFloat8_e5m2);
}

// ---- harm: where non-finite values become the run's first_nonfinite -------------------------

/// Takes the step's pending non-finite gradients, if any. Caller holds records_mu.
std::optional<NonFiniteRecord> take_pending_locked(GlobalState& g) {
  std::optional<NonFiniteRecord> p = std::move(g.pending_gradient);
  g.pending_gradient.reset();
  g.have_pending.store(false, std::memory_order_release);
  return p;
}

/// Records the run's first harmful NaN/Inf (no-op once one is). Caller holds records_mu.
void set_first_locked(GlobalState& g, NonFiniteRecord rec) {
  if (g.first_nonfinite) return;
  g.first_nonfinite = std::move(rec);
  g.have_first_nonfinite.store(true, std::memory_order_release);
}

/// Records `rec` as the run's first harmful NaN/Inf. Non-finite gradients still pending came
/// earlier in the run's order, so they win.
void set_first_harmful(NonFiniteRecord rec, const char* reached) {
  auto& g = global();
  std::lock_guard<std::mutex> lock(g.records_mu);
  if (g.first_nonfinite) return;
  if (auto pending = take_pending_locked(g)) return set_first_locked(g, std::move(*pending));
  rec.reached = reached;
  rec.reached_step = g.step.load();
  set_first_locked(g, std::move(rec));
}

/// Origin `id`'s values reached something that matters.
void make_harmful(std::int64_t id, const char* reached) {
  if (auto rec = provenance().make_harmful(id)) set_first_harmful(std::move(*rec), reached);
}

/// The step's non-finite gradients are harmful (no GradScaler caught them).
void commit_pending() {
  auto& g = global();
  std::lock_guard<std::mutex> lock(g.records_mu);
  if (auto pending = take_pending_locked(g)) set_first_locked(g, std::move(*pending));
}

/// A GradScaler found inf and skipped the step: the pending gradients are information.
void scaler_catches_pending() {
  auto& g = global();
  std::lock_guard<std::mutex> lock(g.records_mu);
  auto pending = take_pending_locked(g);
  if (!pending) return;
  ++g.scaler_caught_steps;
  // a watched step names only the parameter whose gradient went non-finite ("grad of ..."); a
  // later skipped step observed op by op names the op, which then stands for them all
  const auto coarse = [](const NonFiniteRecord& r) { return r.op.rfind("grad of ", 0) == 0; };
  if (!g.scaler_caught || (coarse(*g.scaler_caught) && !coarse(*pending)))
    g.scaler_caught = std::move(*pending);
}

/// Gradients went non-finite. A forward origin of this step whose values are still alive
/// (saved for backward) is what they carry; otherwise `rec` (made in backward) is pending
/// until the step's fate is known: a GradScaler may catch it.
void gradient_nonfinite(NonFiniteRecord rec) {
  auto& g = global();
  if (g.have_first_nonfinite.load(std::memory_order_acquire)) return;
  if (auto fwd = provenance().live_forward_origin(g.step.load()); fwd >= 0) {
    make_harmful(fwd, "gradient");
    return;
  }
  rec.reached = rec.reached.empty() ? "gradient" : rec.reached;
  rec.reached_step = g.step.load();
  std::lock_guard<std::mutex> lock(g.records_mu);
  if (g.first_nonfinite || g.pending_gradient) return;
  g.pending_gradient = std::move(rec);
  g.have_pending.store(true, std::memory_order_release);
}

void record_backward_origin(const Producer& p, const Stats& received, std::int8_t dtype,
                            bool inputs_finite, bool forward_nonfinite) {
  auto& g = global();
  NonFiniteRecord rec;
  rec.step = p.step;
  rec.phase = Phase::kBackward;
  rec.layer = p.key.layer;
  rec.op = g.ops.name(p.key.op);
  rec.forward_nonfinite = forward_nonfinite;
  const bool ambiguous = !forward_nonfinite && !p.also.empty();
  if (ambiguous) {
    // Several gradients were summed: the last one is named, the others said, none counted.
    rec.op += " (or another of the gradients summed with it:";
    for (std::size_t i = 0; i < p.also.size(); ++i)
      rec.op += (i == 0 ? " " : ", ") + g.ops.name(p.also[i].key.op);
    rec.op += ")";
  }
  rec.nan = received.nan > 0;
  rec.inputs_finite = inputs_finite;
  rec.compute_dtype = dtype;  // the dtype its output gradient arrived in
  rec.output_stats = received;
  gradient_nonfinite(std::move(rec));
  if (!inputs_finite || ambiguous) return;
  // The producer's own entry (already in this thread's table) counts the call as an origin.
  auto& t = tls;
  std::lock_guard<std::mutex> lock(t.table->mu);
  auto it = t.table->entries.find(p.key);
  if (it != t.table->entries.end()) {
    ++it->second.nonfinite_from_finite;
    if (it->second.first_nonfinite_step < 0) it->second.first_nonfinite_step = p.step;
  }
}

// ---- creation and propagation of non-finite outputs -----------------------------------------

/// Most FP32 re-runs per entry for creations (the first calls tell; the rest cost time).
constexpr std::int64_t kMaxRechecksPerEntry = 4;

std::int64_t rechecks_done(ThreadState& t, const OpKey& key) {
  std::lock_guard<std::mutex> lock(t.table->mu);
  auto it = t.table->entries.find(key);
  return it == t.table->entries.end() ? 0 : it->second.fp32_finite + it->second.fp32_nonfinite;
}

/// The record of a creation. An op already computing in float32 or wider is non-finite in
/// float32 by definition; a low-precision one is re-run in float32 (a few times per entry).
NonFiniteRecord creation_record(const at::RecordFunction& fn, const Call& call, const OpKey& key,
                                const Stats& out, ThreadState& t, OpAggregate& agg) {
  NonFiniteRecord rec;
  rec.step = call.step;
  rec.phase = call.phase;
  rec.layer = call.layer;
  rec.op = global().ops.name(call.info->id);
  rec.nan = out.nan > 0;
  rec.inputs_finite = call.inputs_finite;
  rec.nonfinite_scalar = !scalars_finite(call.inputs);
  rec.compute_dtype = key.compute_dtype;
  rec.output_stats = out;
  if (!call.inputs_finite) return rec;
  if (!is_low_precision(key.compute_dtype)) {
    if (key.compute_dtype >= 0) rec.fp32_also_nonfinite = true;
  } else if (!call.info->inplace && rechecks_done(t, key) < kMaxRechecksPerEntry) {
    if (const CompiledPoint* point = current_point()) {  // fused code: re-run its region
      rec.fp32_also_nonfinite = rerun_region_fp32(point->region, call.inputs);
    } else {
      rec.fp32_check = recheck_fp32(fn, call.inputs, fn.outputs());
      if (rec.fp32_check) rec.fp32_also_nonfinite = rec.fp32_check->also_nonfinite;
    }
  }
  if (rec.fp32_also_nonfinite) ++(*rec.fp32_also_nonfinite ? agg.fp32_nonfinite : agg.fp32_finite);
  return rec;
}

/// Whether the call's inputs were finite, for an op whose output holds NaN/Inf. The first input
/// of an in-place op is its output now: its state before is what provenance says.
bool inputs_were_finite(const Call& call, std::int64_t carried) {
  if (call.inputs_checked) return call.inputs_finite && scalars_finite(call.inputs);
  if (carried >= 0 || !scalars_finite(call.inputs)) return false;
  if (!call.info->inplace) return all_finite(call.inputs);
  return call.inputs.size() <= 1 ||
         all_finite(std::vector<c10::IValue>(call.inputs.begin() + 1, call.inputs.end()));
}

/// A parameter among the inputs holding NaN/Inf no observed op put there: an optimizer step that
/// was not observed op by op (a watched step, see ObserverOptions::watch_unsampled) wrote it.
/// Its layer, or -1 when there is none (or no optimizer has stepped yet: the values came in).
LayerId unobserved_parameter_write(const Call& call) {
  auto& g = global();
  if (call.phase == Phase::kOptimizer || !g.optimizer_stepped.load(std::memory_order_relaxed))
    return -1;
  LayerId found = -1;
  // an in-place op's first input is its output now
  for (std::size_t i = call.info->inplace ? 1 : 0; i < call.inputs.size(); ++i) {
    for_each_tensor(call.inputs[i], [&](const at::Tensor& t) {
      if (found >= 0 || !is_floating(t) || !has_nonfinite(t)) return;
      found = param_layers().of(t);
    });
  }
  return found;
}

/// The origin record of parameters an unobserved optimizer step made non-finite: the step
/// before this one, phase optimizer, in the parameters' layer and dtype.
NonFiniteRecord parameter_write_record(const Call& call, LayerId layer, const Stats& out) {
  NonFiniteRecord rec;
  rec.step = std::max<std::int64_t>(call.step - 1, 0);
  rec.phase = Phase::kOptimizer;
  rec.layer = layer;
  rec.op = "optimizer step (parameters of this layer became non-finite)";
  rec.nan = out.nan > 0;
  rec.compute_dtype = call.input_dtype;
  rec.output_stats = out;
  return rec;
}

/// An observed optimizer step (recorded, or under the per-op sentinel) begins on thread `t`:
/// its wide CPU parameters and their versions (the ones it writes are those whose version
/// moves or whose storage its ops wrote: note_optimizer_writes; another model's are left alone).
void note_versions_before_step(ThreadState& t) {
  auto live = param_layers().live();
  // in model order (layers are numbered as registered; a layer's own parameters as found)
  std::stable_sort(live.begin(), live.end(),
                   [](const auto& a, const auto& b) { return a.second < b.second; });
  std::vector<at::Tensor> wide;
  for (auto& [param, layer] : live)
    if (is_floating(param) && !is_low_precision(static_cast<std::int8_t>(param.scalar_type())) &&
        param.device().is_cpu())
      wide.push_back(std::move(param));
  t.stepped.begin(std::move(wide));
}

/// The end of an observed optimizer step, whose float32/float64 outputs were not read
/// (wide_optimizer_output): a wide parameter it wrote and left non-finite, with no origin known
/// (gradients carrying NaN/Inf to the optimizer made the run's origin known before it ran), is
/// its work. Named as the step's, in the parameter's layer: which op made the value is not known.
void check_stepped_parameters(ThreadState& t, std::int64_t step) {
  if (global().have_first_nonfinite.load(std::memory_order_acquire)) {
    t.stepped.forget();
    return;
  }
  OwnWork own;
  const at::Tensor param = t.stepped.end(step);
  if (!param.defined()) return;
  NonFiniteRecord rec;
  rec.step = step;
  rec.phase = Phase::kOptimizer;
  rec.layer = param_layers().of(param);
  rec.op = "optimizer step (parameters of this layer became non-finite)";
  const Stats out = cached_stats(param, step);
  rec.nan = out.nan > 0;
  rec.compute_dtype = static_cast<std::int8_t>(param.scalar_type());
  rec.output_stats = out;
  set_first_harmful(std::move(rec), "parameter");
}

/// A forward call created NaN/Inf from finite inputs: the autograd nodes it made (sequence
/// numbers from its start to now) will meet them again in backward.
void note_forward_creation(const at::RecordFunction& fn, const Call& call) {
  const std::uint64_t hi = at::sequence_number::peek();
  if (hi <= call.seq0) return;  // no node: nothing to meet in backward
  auto& g = global();
  std::lock_guard<std::mutex> lock(g.creations_mu);
  if (g.creations.size() >= GlobalState::kMaxCreations) g.creations.erase(g.creations.begin());
  g.creations.push_back({fn.threadId(), static_cast<std::int64_t>(call.seq0),
                         static_cast<std::int64_t>(hi)});
}

/// An op returned NaN/Inf: it either carries an earlier origin's values on (a tainted input)
/// or creates new ones (from finite inputs, from a NaN/inf constant, or from non-finite values
/// of unknown source). Its outputs are tainted with that origin; optimizer state or parameters
/// holding them are harmful at once.
void on_nonfinite_output(const at::RecordFunction& fn, Call& call, const OpKey& key,
                         OpAggregate& agg, ThreadState& t) {
  auto& prov = provenance();
  const std::int64_t carried = prov.origin_of(call.inputs);
  call.inputs_finite = inputs_were_finite(call, carried);
  std::int64_t id = carried;
  if (id < 0) {
    if (call.inputs_finite) {
      agg.nonfinite_from_finite = 1;
      agg.first_nonfinite_step = call.step;
      if (call.phase == Phase::kForward) note_forward_creation(fn, call);
    }
    Origin o;
    o.key = key;
    const LayerId written = call.inputs_finite ? -1 : unobserved_parameter_write(call);
    o.rec = written >= 0 ? parameter_write_record(call, written, agg.stats)
                         : creation_record(fn, call, key, agg.stats, t, agg);
    id = prov.add(std::move(o));
    if (written >= 0) make_harmful(id, "parameter");
  }
  prov.taint(fn.outputs(), id);
  prov.taint_nodes(fn.outputs(), id);
  if (call.phase == Phase::kOptimizer) make_harmful(id, "optimizer");
}

/// A view's output shares its input's storage, and with it the taint. A view op that copies
/// (reshape, flatten or contiguous of a non-contiguous tensor: attention's heads merged back)
/// makes a new storage, whose values are its input's: it carries the input's origin on.
void carry_taint_of_view(const Call& call, const std::vector<c10::IValue>& outputs) {
  auto& prov = provenance();
  if (!prov.any_tainted()) return;
  const std::int64_t id = prov.origin_of(call.inputs);
  if (id < 0 || prov.origin_of(outputs) == id) return;
  prov.taint(outputs, id);
  prov.taint_nodes(outputs, id);
}

/// The host read a value (loss.item(), printing): NaN/Inf it held have left the program's
/// tensors and reached the user.
void check_host_read(const Call& call) {
  auto& prov = provenance();
  if (!prov.any_tainted() || call.inputs.empty() || !call.inputs[0].isTensor()) return;
  const at::Tensor& t = call.inputs[0].toTensor();
  const std::int64_t id = prov.origin_of(t);
  if (id >= 0 && t.is_floating_point() && has_nonfinite(t)) make_harmful(id, "host_read");
}

/// A backward pass starts from the loss's grad_fn (after GraphRoot): a loss some origin made
/// non-finite is harmful, whatever the gradients look like (log of a negative is NaN in the
/// loss but its gradient is finite).
void check_loss(ThreadState& t) {
  const int task = torch::autograd::get_current_graph_task_id();
  if (task == t.loss_task || !provenance().any_tainted()) return;
  t.loss_task = task;
  auto node = torch::autograd::get_current_node();
  if (!node) return;
  auto check = [](const torch::autograd::Node* n) {
    if (auto id = provenance().origin_of_node(n); id >= 0) make_harmful(id, "loss");
  };
  check(node.get());
  for (const auto& edge : node->next_edges())  // GraphRoot's edges lead to the loss(es)
    if (edge.function) check(edge.function.get());
}

// ---- folding calls into entries -------------------------------------------------------------

/// --shadow: the first finite low-precision call of each entry in a recorded step is re-run in
/// float32 and its error kept on the entry.
bool wants_shadow(const Call& call, const OpKey& key, const OpAggregate& agg, ThreadState& t) {
  if (!global().shadow || call.info->inplace || call.info->uninitialized || call.info->cast ||
      !is_low_precision(key.compute_dtype) || agg.stats.nonfinite() > 0 || agg.stats.count == 0) {
    return false;
  }
  std::lock_guard<std::mutex> lock(t.table->mu);
  auto it = t.table->entries.find(key);
  return it == t.table->entries.end() || it->second.shadow_step != call.step;
}

/// Adds one call to its entry: moved in when the entry is new, merged otherwise; the absmax
/// series gets the call's point directly (no per-call vector).
void fold_call(OpAggregate& entry, OpAggregate&& one, std::int64_t step) {
  const bool finite = one.stats.finite() > 0;
  const double absmax = one.stats.absmax;
  if (entry.calls == 0 && !entry.has_nonfinite_counts()) {
    entry = std::move(one);
  } else {
    entry.merge(one);
  }
  if (finite) add_series_point(entry.absmax_by_step, step, absmax);
}

/// A cast ended (top-level, or nested in one): a copy that keeps every value takes its source's
/// read; a narrowing one's backward will hand its incoming gradient's read to the gradient it
/// returns (read_cache.h).
void finish_cast(const Call& call, const std::vector<c10::IValue>& outputs) {
  if (call.inputs.empty() || !call.inputs[0].isTensor() || outputs.size() != 1 ||
      !outputs[0].isTensor()) {
    return;
  }
  const at::Tensor& src = call.inputs[0].toTensor();
  const at::Tensor& out = outputs[0].toTensor();
  note_exact_copy(src, out, call.step);
  if (!call.sentinel) reuse_read_in_backward(src, out, call.step);
}

/// True when the op returned one of its inputs itself (dropout with p=0, contiguous of a
/// contiguous tensor): its values were counted where they were produced.
bool returns_an_input(const Call& call, const std::vector<c10::IValue>& outputs) {
  if (call.info->inplace || outputs.empty() || !outputs[0].isTensor()) return false;
  const auto* out = outputs[0].toTensor().unsafeGetTensorImpl();
  for (const c10::IValue& v : call.inputs)
    if (v.isTensor() && v.toTensor().unsafeGetTensorImpl() == out) return true;
  return false;
}

OpKey forward_key(const Call& call, const std::vector<c10::IValue>& outputs) {
  OpKey key;
  key.layer = call.layer;
  key.op = call.info->id;
  key.phase = call.phase;
  key.input_dtype = call.input_dtype;
  const std::int8_t out_float = floating_dtype(outputs);
  key.output_dtype = out_float >= 0 ? out_float : first_dtype(outputs);
  key.compute_dtype = call.inner_seen && call.inner_dtype >= 0 ? call.inner_dtype
                      : out_float >= 0                         ? out_float
                                                               : call.input_dtype;
  key.autocast = call.point ? call.point_autocast : classify(call, key.compute_dtype);
  return key;
}

/// An optimizer's float32/float64 arithmetic (master weights, optimizer state): its values are
/// not a precision question. On a recorded step, and on an unsampled one under the per-op
/// sentinel, its outputs are not read at all (each op's finiteness scan was ~22 M elements a
/// step in an AdamW loop, a third of the step's reads); the parameters are checked once when
/// the step ends (check_stepped_parameters), so a NaN it makes is named as that optimizer
/// step's, in the parameter's layer, as on a watched step. Low-precision optimizer outputs keep
/// their stats (and the sentinel's check).
bool wide_optimizer_output(const Call& call, const OpKey& key) {
  return call.phase == Phase::kOptimizer && key.output_dtype >= 0 &&
         !is_low_precision(key.output_dtype);
}

/// What a wide optimizer op wrote (its outputs; an in-place op's first argument), for
/// check_stepped_parameters (stepped_params.h: the parameters written through aliases, each
/// parameter scanned when the ops go on to the next one).
void note_optimizer_writes(ThreadState& t, const Call& call, const std::vector<c10::IValue>& outputs) {
  if (!t.stepped.active() || global().have_first_nonfinite.load(std::memory_order_relaxed)) return;
  auto note = [&](const at::Tensor& x) { t.stepped.note_write(x); };
  if (call.info->inplace && !call.inputs.empty()) for_each_tensor(call.inputs[0], note);
  for (const c10::IValue& v : outputs) for_each_tensor(v, note);
  t.stepped.end_op(call.step);
}

/// A forward/optimizer call: stats of its outputs (sampled steps) or the sentinel's check
/// (unsampled steps, wide optimizer outputs), provenance of any NaN/Inf, loss-scale updates,
/// shadow re-checks.
void finish_op(const at::RecordFunction& fn, Call& call, ThreadState& t, const OpKey& key,
               OpAggregate& agg) {
  const auto& outputs = fn.outputs();
  const bool passthrough =
      call.info->uninitialized || call.info->view || returns_an_input(call, outputs);
  if (!call.sentinel) {
    agg.casts = call.inner_seen ? call.pending_casts : 0;
    if (call.input_stats.count > 0) agg.input_stats = std::move(call.input_stats);
  }
  if (call.info->cast && !passthrough) finish_cast(call, outputs);
  // An in-place write through an alias with a version counter of its own (`p.data()`) leaves
  // the version of the tensors it aliases where it was: what a read of them found is gone.
  if (call.info->inplace && !call.info->view && !call.inputs.empty())
    for_each_tensor(call.inputs[0], forget_read);
  if (wide_optimizer_output(call, key)) {
    note_optimizer_writes(t, call, outputs);  // not read: check_stepped_parameters at the end
  } else if (!call.sentinel) {
    if (!passthrough) agg.stats = stats_of(outputs);
  } else if (!passthrough && !all_finite(outputs)) {
    agg.stats = stats_of(outputs);  // rare: the full block of the non-finite output
  }
  if (agg.stats.nonfinite() > 0) {
    on_nonfinite_output(fn, call, key, agg, t);
  } else if (call.info->view) {
    carry_taint_of_view(call, outputs);
  } else if (call.info->inplace) {
    provenance().untaint(outputs);  // rewritten finite (e.g. masked_fill_ over the NaNs)
  }
  if (call.info->update_scale) record_loss_scale(call, call.step);
  if (call.info->host_read) check_host_read(call);
  if (!call.sentinel && wants_shadow(call, key, agg, t)) {
    agg.shadow_step = call.step;
    if (auto check = recheck_fp32(fn, call.inputs, outputs)) agg.shadow.add(*check, call.step);
  }
}

void finish_top(const at::RecordFunction& fn, Call& call, ThreadState& t) {
  OpAggregate agg;
  agg.calls = call.sentinel ? 0 : 1;
  agg.first_step = agg.last_step = call.step;
  OpKey key;
  if (call.node) {
    if (call.sentinel) return;  // the sentinel's work was done at the node's start
    key = node_key(call);
    agg.stats = std::move(call.stats);
  } else {
    key = forward_key(call, fn.outputs());
    finish_op(fn, call, t, key, agg);
    if (call.recompute) return;  // origins and nodes noted; its values were counted in forward
    // cast loss and degenerate outputs (issue 13); a compiled graph's point has no source or
    // re-runnable op of its own
    if (!call.sentinel && !call.point)
      on_top_finished(fn, &call, key, call.inputs, agg.stats, call.info->cast, call.info->inplace, call.step);
  }
  if (call.sentinel) {
    if (!agg.has_nonfinite_counts()) return;
    std::lock_guard<std::mutex> lock(t.table->mu);
    t.table->entries[key].add_nonfinite_counts(agg);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(t.table->mu);
    fold_call(t.table->entries[key], std::move(agg), call.step);
  }
  // CUDA outputs: stats enqueued on the device, read back at the step's end (no sync here).
  if (!call.node && !call.info->uninitialized && !call.info->view) device_record(fn.outputs(), *t.table, key, call.step);
  device_bind(call.ext_id, *t.table, key);
}
void on_end(const at::RecordFunction& fn, at::ObserverContext* ctx) {
  auto& t = thread_state();
  if (t.busy) return;
  if (ctx && dynamic_cast<EngineWrapper*>(ctx)) {
    if (dynamic_cast<CompiledRegion*>(ctx)) --compiled_regions();
    return;
  }
  if (t.depth > 0) --t.depth;
  if (t.quiet_at >= 0 && t.depth == t.quiet_at) {  // the event that switched it off ends
    at::enableRecordFunction(true);
    t.quiet_at = -1;
  }
  if (!ctx) return;
  auto* call = static_cast<Call*>(ctx);
  try {
    if (call->nested_cast) {
      finish_cast(*call, fn.outputs());
      return;
    }
    if (call->inner) {
      if (Call* top = t.top) {
        std::int8_t out = floating_dtype(fn.outputs());
        top->inner_dtype = out >= 0 ? out : call->inner_dtype;
        top->inner_seen = true;
      }
      return;
    }
    if (t.top == call) t.top = nullptr;
    if (call->ext_id != 0) device_call_end();
    finish_forward_ring(t, fn, *call);
    if (call->skip) return;
    OwnWork own;
    finish_top(fn, *call, t);
  } catch (const std::exception&) {
    if (t.top == call) t.top = nullptr;
  }
}

at::CallbackHandle g_handle = at::INVALID_CALLBACK_HANDLE;
/// The light callback of watched steps in runs with a GradScaler (on_scaler_start): no inputs or
/// outputs boxed, it only waits for the scaler's unscale.
at::CallbackHandle g_scaler_handle = at::INVALID_CALLBACK_HANDLE;
bool g_scaler_callback_on = false;  ///< guarded by g_callback_mu
std::mutex g_control_mu;

std::mutex g_callback_mu;
bool g_callback_on = true;     ///< g_handle is enabled (guarded by g_callback_mu)
std::atomic<int> g_replays{0};  ///< replays running on any thread

/// Enables or disables a callback; `on` is its current state (caller holds g_callback_mu).
void switch_callback(at::CallbackHandle handle, bool want, bool& on) {
  if (handle == at::INVALID_CALLBACK_HANDLE || want == on) return;
  if (want) {
    at::reenableCallback(handle);
  } else {
    at::disableCallback(handle);
  }
  on = want;
}

/// The op callbacks run on every step except watched ones, where the front end's checks (module
/// outputs, parameter gradients) replace them; a replay needs them. In a run with a GradScaler, a
/// watched step turns them back on at the scaler's unscale (seen by the light callback, which
/// boxes nothing) until its update: the update decides the fate of the step's non-finite
/// gradients, ends skipped steps and goes into the loss-scale history.
void refresh_callbacks() {
  auto& g = global();
  std::lock_guard<std::mutex> lock(g_callback_mu);
  if (g_handle == at::INVALID_CALLBACK_HANDLE) return;
  const bool on = !watched_step(g, g.step.load()) || g.scaler_open.load() || g_replays.load() > 0;
  switch_callback(g_handle, on, g_callback_on);
  switch_callback(g_scaler_handle, !on && g.scaler_seen.load(), g_scaler_callback_on);
}

/// A GradScaler unscaled (seen by either callback): its update is due, and the op callbacks are
/// on until then (see refresh_callbacks).
void scaler_unscaled() {
  auto& g = global();
  g.scaler_seen.store(true);
  g.scaler_open.store(true);
  refresh_callbacks();
}

/// The light callback: the GradScaler's unscale opens the end of the iteration.
std::unique_ptr<at::ObserverContext> on_scaler_start(const at::RecordFunction& fn) {
  auto& g = global();
  const char* name = fn.name();
  if (g.running.load(std::memory_order_relaxed) && std::strncmp(name, "aten::_amp_", 11) == 0 &&
      name == kUnscale)
    scaler_unscaled();
  return nullptr;
}

/// A step ended: non-finite gradients of a run without a GradScaler are harmful now (with a
/// scaler, its update decides, see resolve_pending_by_scaler).
void on_step_end() {
  auto& g = global();
  g.after_backward.store(false, std::memory_order_relaxed);
  if (g.have_pending.load(std::memory_order_acquire) &&
      !g.scaler_seen.load(std::memory_order_relaxed)) {
    commit_pending();
  }
}

}  // namespace

OwnWork::OwnWork() : was_busy_(tls.busy) {
  if (others_observing()) others_off_.emplace();
  tls.busy = true;
}

OwnWork::~OwnWork() { tls.busy = was_busy_; }

}  // namespace detail

void Observer::start(const ObserverOptions& options) {
  auto& g = detail::global();
  std::lock_guard<std::mutex> lock(detail::g_control_mu);
  if (g.running.load()) throw std::logic_error("ampscope: the observer is already running");
  g.reset();
  detail::reset_read_counts();
  detail::param_layers().drop_freed();
  reset_storage_skips();
  detail::provenance().reset();
  detail::device_start();
  {
    std::lock_guard<std::mutex> records(g.records_mu);
    detail::pending_loss_scales().clear();
  }
  g.every = options.every < 1 ? 1 : options.every;
  g.shadow = options.shadow;
  g.input_stats = options.input_stats;
  g.watch = options.watch_unsampled;
  g.op_filter = options.ops;
  g.op_filter.hierarchical = false;
  NameFilter layers = options.layers;
  layers.hierarchical = true;
  g.layer_filter.configure(layers);
  g.filtered = !g.op_filter.empty() || !layers.empty();
  {
    std::lock_guard<std::mutex> lock(g.creations_mu);
    g.creations.clear();
  }
  g.generation.fetch_add(1, std::memory_order_acq_rel);
  g.running.store(true);
  detail::g_handle = at::addGlobalCallback(
      at::RecordFunctionCallback(&detail::on_start, &detail::on_end)
          .needsInputs(true)
          .needsOutputs(true)
          .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
  detail::g_scaler_handle = at::addGlobalCallback(
      at::RecordFunctionCallback(&detail::on_scaler_start).scopes({at::RecordScope::FUNCTION}));
  at::disableCallback(detail::g_scaler_handle);
  {
    std::lock_guard<std::mutex> cb(detail::g_callback_mu);
    detail::g_callback_on = true;
    detail::g_scaler_callback_on = false;
  }
}

void Observer::stop() {
  auto& g = detail::global();
  std::lock_guard<std::mutex> lock(detail::g_control_mu);
  if (!g.running.load()) return;
  g.running.store(false);
  {
    std::lock_guard<std::mutex> cb(detail::g_callback_mu);
    at::removeCallback(detail::g_handle);
    at::removeCallback(detail::g_scaler_handle);
    detail::g_handle = detail::g_scaler_handle = at::INVALID_CALLBACK_HANDLE;
    detail::g_callback_on = true;
    detail::g_scaler_callback_on = false;
  }
  detail::device_stop();
}

bool Observer::running() { return detail::global().running.load(); }

void Observer::mark_step() {
  detail::device_flush();  // CUDA stats and kernel records of the step: one read-back
  detail::global().step.fetch_add(1);
  detail::refresh_callbacks();
  detail::on_step_end();
}

void Observer::name_layer(LayerId id, std::string_view name) {
  detail::global().layer_filter.name(id, name);
}

std::int64_t Observer::current_step() { return detail::global().step.load(); }

bool Observer::sampling_now() {
  auto& g = detail::global();
  return g.running.load() && (g.every <= 1 || g.step.load() % g.every == 0);
}

void Observer::push_layer(LayerId id) {
  auto& g = detail::global();
  if (!g.forward_seen.load(std::memory_order_relaxed)) g.forward_seen.store(true);
  if (g.after_backward.load(std::memory_order_relaxed)) g.after_backward.store(false);
  detail::tls.layers.push_back(id);
}
void Observer::pop_layer() {
  if (!detail::tls.layers.empty()) detail::tls.layers.pop_back();
}
LayerId Observer::current_layer() {
  return detail::tls.layers.empty() ? kOutsideLayerId : detail::tls.layers.back();
}
void Observer::push_phase(Phase p) {
  if (p == Phase::kOptimizer) {
    detail::global().after_backward.store(false, std::memory_order_relaxed);
    detail::global().optimizer_stepped.store(true, std::memory_order_relaxed);
    // its ops observed (a recorded step or the per-op sentinel): their wide outputs are not
    // read, the parameters the step wrote are checked at its end (check_stepped_parameters)
    if (detail::global().running.load() && !watching_now())
      detail::note_versions_before_step(detail::tls);
  }
  detail::tls.phases.push_back(p);
}
void Observer::pop_phase() {
  if (detail::tls.phases.empty()) return;
  const Phase p = detail::tls.phases.back();
  detail::tls.phases.pop_back();
  if (p == Phase::kOptimizer && detail::tls.stepped.active())
    detail::check_stepped_parameters(detail::tls, detail::global().step.load());
}

bool Observer::nonfinite_seen() {
  return detail::global().have_first_nonfinite.load(std::memory_order_acquire);
}

bool Observer::nonfinite_pending() {
  return detail::global().running.load(std::memory_order_relaxed) && detail::provenance().any_tainted();
}

void Observer::check_module_outputs(const std::vector<at::Tensor>& outputs) {
  auto& prov = detail::provenance();
  if (!detail::global().running.load() || !prov.any_tainted()) return;
  detail::OwnWork own;
  for (const at::Tensor& t : outputs) {
    const std::int64_t id = prov.origin_of(t);
    if (id >= 0 && t.is_floating_point() && detail::has_nonfinite(t)) {
      detail::make_harmful(id, "module_output");
    }
  }
}

void Observer::note_nonfinite_param_grad(LayerId layer, const std::string& param, bool nan) {
  auto& g = detail::global();
  if (!g.running.load() || g.have_first_nonfinite.load()) return;
  NonFiniteRecord rec;
  rec.step = g.step.load();
  rec.phase = Phase::kBackward;
  rec.layer = layer;
  rec.op = "grad of " + param;
  rec.nan = nan;
  rec.inputs_finite = false;  // its producer is not known here
  rec.reached = "parameter_gradient";
  detail::gradient_nonfinite(std::move(rec));
}

void Observer::check_param_grad(LayerId layer, const std::string& param, const at::Tensor& grad) {
  if (!detail::global().running.load() || detail::global().have_first_nonfinite.load()) return;
  const std::int64_t step = detail::global().step.load();
  if (!grad.defined() || !grad.is_floating_point() || !detail::cached_has_nonfinite(grad, step)) return;
  detail::OwnWork own;
  // on a watched step no node was observed: the op is named if it happens again
  if (watching_now()) detail::arm(detail::global());
  note_nonfinite_param_grad(layer, param, detail::cached_stats(grad, step).nan > 0);
}

bool Observer::watching_now() {
  auto& g = detail::global();
  return g.running.load(std::memory_order_relaxed) &&
         detail::watched(g, g.step.load(std::memory_order_relaxed), detail::thread_state());
}

int Observer::watch_mode() {
  if (!watching_now()) return 0;
  std::lock_guard<std::mutex> lock(detail::g_callback_mu);
  return detail::g_callback_on ? 1 : 2;
}

bool Observer::any_nonfinite(const std::vector<at::Tensor>& tensors) {
  auto& g = detail::global();
  if (!g.running.load(std::memory_order_relaxed)) return false;
  detail::OwnWork own;
  const std::int64_t step = g.step.load(std::memory_order_relaxed);
  for (const at::Tensor& t : tensors) {
    if (detail::is_floating(t) && t.device().is_cpu() && stats_supported(t) &&
        detail::cached_has_nonfinite(t, step)) {
      return true;
    }
  }
  return false;
}

std::array<std::int64_t, 3> Observer::read_counts() {
  const detail::ReadCounts c = detail::read_counts();
  return {c.stats, c.scanned, c.cached};
}

void Observer::begin_replay() {
  ++detail::thread_state().replaying;
  ++detail::g_replays;
  detail::refresh_callbacks();
}
void Observer::end_replay() {
  auto& t = detail::thread_state();
  if (t.replaying == 0) return;
  --t.replaying;
  --detail::g_replays;
  detail::refresh_callbacks();
}

void Observer::note_unattributed(LayerId layer, const std::string& what, Phase phase,
                                 std::int8_t dtype, bool nan, std::int64_t step,
                                 bool inputs_finite) {
  auto& g = detail::global();
  if (!g.running.load()) return;
  detail::arm(g);
  NonFiniteRecord rec;
  rec.step = step >= 0 ? step : g.step.load();
  rec.phase = phase;
  rec.layer = layer;
  rec.op = what;
  rec.nan = nan;
  rec.compute_dtype = dtype;
  rec.inputs_finite = inputs_finite;
  detail::set_first_harmful(std::move(rec), phase == Phase::kOptimizer ? "parameter" : "module_output");
}

bool Observer::blame_model_inputs(const std::vector<at::Tensor>& tensors, const std::string& what) {
  auto& g = detail::global();
  if (!g.have_first_nonfinite.load(std::memory_order_acquire)) return false;
  {
    std::lock_guard<std::mutex> lock(g.records_mu);
    const auto& f = g.first_nonfinite;
    if (!f || f->inputs_finite || f->phase != Phase::kForward || f->layer == kOutsideLayerId ||
        f->step != g.step.load())
      return false;
  }
  if (!any_nonfinite(tensors)) return false;
  std::lock_guard<std::mutex> lock(g.records_mu);
  g.first_nonfinite->layer = kOutsideLayerId;
  g.first_nonfinite->op = what;
  return true;
}

Stats Observer::stats_once(const at::Tensor& t) {
  return detail::cached_stats(t, detail::global().step.load());
}

void Observer::optimizer_step_begins() { detail::commit_pending(); }

void Observer::name_param(const at::Tensor& param, LayerId layer) {
  detail::param_layers().set(param, layer);
}

void Observer::forget_params() { detail::param_layers().clear(); }

std::string Observer::op_name(std::uint32_t id) { return detail::global().ops.name(id); }

ObserverSnapshot Observer::snapshot() {
  auto& g = detail::global();
  ObserverSnapshot snap;
  detail::device_flush();
  std::unordered_map<OpKey, OpAggregate, OpKeyHash> merged;
  {
    std::lock_guard<std::mutex> lock(g.tables_mu);
    for (auto& table : g.tables) {
      std::lock_guard<std::mutex> tl(table->mu);
      for (const auto& [key, agg] : table->entries) merged[key].merge(agg);
    }
  }
  for (const auto& [key, n] : detail::provenance().counts()) {
    merged[key].benign_nonfinite += n.benign;
    merged[key].harmful_nonfinite += n.harmful;
  }
  snap.entries.assign(merged.begin(), merged.end());
  snap.op_names = g.ops.names();
  {
    std::lock_guard<std::mutex> lock(g.records_mu);
    snap.first_nonfinite = g.first_nonfinite;
    if (!snap.first_nonfinite && g.pending_gradient) {  // the run ended before its fate was known
      snap.first_nonfinite = g.pending_gradient;
    }
    snap.scaler_caught = g.scaler_caught;
    snap.scaler_caught_steps = g.scaler_caught_steps;
    detail::resolve_pending_loss_scales(g);
    snap.loss_scale = g.loss_scale;
    snap.loss_scale_updates = g.loss_scale_updates;
  }
  snap.steps = g.step.load();
  detail::device_report(snap);
  for (auto& note : storage_skip_notes()) snap.notes.push_back(std::move(note));
  if (g.watch && g.every > 1) {
    snap.notes.push_back(
        "unsampled steps were watched at module outputs and parameter gradients (ops outside "
        "every module, such as a loss computed in the training loop, are not checked there: "
        "their NaN/Inf show as the gradients they reach); a module whose output went non-finite "
        "was replayed under the per-op sentinel to find the op; NaN/Inf consumed harmlessly are "
        "counted on recorded steps only");
  }
  if (const std::int64_t armed = g.armed_from.load(); armed >= 0 && g.watch && g.every > 1) {
    snap.notes.push_back("from step " + std::to_string(armed) +
                         " unsampled steps ran the per-op sentinel: a NaN/Inf seen there could "
                         "not be attributed to an op by the watch");
  }
  return snap;
}

}  // namespace ampscope
