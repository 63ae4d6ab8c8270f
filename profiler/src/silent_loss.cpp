// Silent precision loss: what narrowing casts destroy (counted on the cast's source, whose stats
// block has exact underflow/overflow/subnormal counts per format) and low-precision outputs that
// lost every nonzero value (confirmed by a float32 re-run). Recorded steps only.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>
#include <ampscope/profiler/tensor_stats.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "observer_state.h"
#include "own_work.h"
#include "read_cache.h"
#include "recheck.h"
#include "silent_loss_hooks.h"

namespace ampscope {

namespace detail {
namespace {

/// The stats format of a low-precision dtype; false for float32/float64 and non-floating ones.
bool format_of(c10::ScalarType t, Format* f) {
  for (const FormatTraits& traits : kFormats) {
    if (traits.torch_dtype == static_cast<int>(t)) {
      *f = traits.format;
      return true;
    }
  }
  return false;
}

// formats.h is torch-free: its dtype numbers are checked here.
static_assert(traits(Format::kFloat16).torch_dtype == static_cast<int>(at::kHalf));
static_assert(traits(Format::kBFloat16).torch_dtype == static_cast<int>(at::kBFloat16));
static_assert(traits(Format::kFloat8E4M3FN).torch_dtype == static_cast<int>(at::kFloat8_e4m3fn));
static_assert(traits(Format::kFloat8E5M2).torch_dtype == static_cast<int>(at::kFloat8_e5m2));

/// True when casting `from` to `to` can lose values: `to` is a low-precision format and `from`
/// a different floating dtype whose range is not inside it (float16 -> bfloat16 loses none).
bool narrowing(c10::ScalarType from, c10::ScalarType to, Format* f) {
  if (!format_of(to, f) || from == to || !c10::isFloatingType(from)) return false;
  return !(from == at::kHalf && to == at::kBFloat16);
}

/// The dtype a cast's boxed inputs ask for: the first ScalarType (int) or Tensor (to.other)
/// after `self`; nullopt when none (e.g. to(device) only).
std::optional<c10::ScalarType> cast_target(c10::ArrayRef<c10::IValue> inputs) {
  for (std::size_t i = 1; i < inputs.size(); ++i) {
    if (inputs[i].isInt()) return static_cast<c10::ScalarType>(inputs[i].toInt());
    if (inputs[i].isTensor()) return inputs[i].toTensor().scalar_type();
  }
  return std::nullopt;
}

/// floor(log2) of the largest magnitude format `f` rounds to 0: values of lower binades all
/// become 0.
int underflow_exponent(Format f) { return traits(f).underflow_exp; }

/// Upper bound of the sum of squares of the `underflow` values of `s` that format `f` rounds to
/// 0: each binade below the threshold at its top, the rest (exactly the threshold) at it.
double lost_sq_bound(const Stats& s, Format f, std::int64_t underflow) {
  if (underflow == 0 || s.exp_hist.empty()) return 0.0;
  const int k = underflow_exponent(f);
  double sq = 0.0;
  std::int64_t below = 0;
  for (int e = s.exp_hist.lo(); e < std::min(k, s.exp_hist.hi()); ++e) {
    below += s.exp_hist.at(e);
    sq += static_cast<double>(s.exp_hist.at(e)) * std::ldexp(1.0, 2 * (e + 1));
  }
  return sq + static_cast<double>(std::max<std::int64_t>(0, underflow - below)) * std::ldexp(1.0, 2 * k);
}

/// The counts of casting a source with stats `s` to format `f`, as one cast of `step`.
CastLossCounts counts_of(const Stats& s, Format f, std::int64_t step) {
  CastLossCounts c;
  c.casts = 1;
  c.values = s.count;
  c.nonzero = s.finite() - s.zeros;
  c.underflow = s.underflow_in(f);
  c.overflow = s.overflow_in(f);
  c.subnormal = s.subnormal_in(f);
  c.source_sq = s.sum_sq;
  c.lost_sq = lost_sq_bound(s, f, c.underflow);
  if (c.underflow + c.overflow > 0) c.first_step = step;
  c.open_step = step;  // the worst step is decided over the whole step (add_call, close_step)
  return c;
}

struct Pending {
  const void* tag = nullptr;
  CastLossCounts counts;
};
thread_local std::vector<Pending> tls_pending;

/// The run's records. Reset lazily when the observer starts a new run (its generation).
struct Store {
  std::mutex mu;
  std::uint64_t generation = ~std::uint64_t{0};
  std::unordered_map<OpKey, SilentLossEntry, OpKeyHash> entries;
  std::int64_t param_step = -1;                   ///< step `params_cast` is of
  std::unordered_set<std::uint64_t> params_cast;  ///< (TensorImpl, target) cast this step
  std::unordered_map<std::uint32_t, std::vector<std::string>> arg_names;  ///< by op id
};

Store& store() {
  static auto* s = new Store();  // never destroyed: callbacks may run during shutdown
  return *s;
}

/// The store, cleared when a new run started since its last use. Caller holds mu.
Store& current_locked(Store& s) {
  const auto gen = global().generation.load(std::memory_order_acquire);
  if (s.generation != gen) {
    s.generation = gen;
    s.entries.clear();
    s.params_cast.clear();
    s.param_step = -1;
  }
  return s;
}

/// True the first time parameter `impl` is cast to `to` in `step` (once per step is enough:
/// weights change only at the optimizer step).
bool first_param_cast(const void* impl, c10::ScalarType to, std::int64_t step) {
  auto& s = store();
  std::lock_guard<std::mutex> lock(s.mu);
  current_locked(s);
  if (s.param_step != step) {
    s.param_step = step;
    s.params_cast.clear();
  }
  auto k = reinterpret_cast<std::uintptr_t>(impl) * 31u + static_cast<std::uint64_t>(to);
  return s.params_cast.insert(k).second;
}

/// Index of `src` among the outer call's inputs (a tensor or a tensor list holding it); -1.
int arg_index_of(const at::Tensor& src, const std::vector<c10::IValue>& outer) {
  const auto* impl = src.unsafeGetTensorImpl();
  for (std::size_t i = 0; i < outer.size(); ++i) {
    bool hit = false;
    if (outer[i].isTensor()) {
      hit = outer[i].toTensor().unsafeGetTensorImpl() == impl;
    } else if (outer[i].isTensorList()) {
      for (const at::Tensor& t : outer[i].toTensorList().vec())
        hit = hit || t.unsafeGetTensorImpl() == impl;
    }
    if (hit) return static_cast<int>(i);
  }
  return -1;
}

/// The counts of casting `src` to `to`, or nullopt when the cast cannot lose values, is not a
/// CPU tensor the stats kernel reads, or is a parameter already counted in this step.
std::optional<CastLossCounts> source_loss(const at::Tensor& src, c10::ScalarType to,
                                          std::int64_t step) {
  Format f;
  if (!src.defined() || !narrowing(src.scalar_type(), to, &f)) return std::nullopt;
  if (src.is_cuda() || !stats_supported(src)) return std::nullopt;  // no host sync per op
  const bool param = src.is_leaf() && src.requires_grad();
  if (param && !first_param_cast(src.unsafeGetTensorImpl(), to, step)) return std::nullopt;
  OwnWork own;
  CastLossCounts c = counts_of(cached_stats(src, step), f, step);  // often read as an output
  c.parameter = param;
  c.source_dtype = static_cast<std::int8_t>(src.scalar_type());
  c.target_dtype = static_cast<std::int8_t>(to);
  return c;
}

/// Schema argument names of the op of `fn`, cached by op id.
std::vector<std::string> arg_names(const at::RecordFunction& fn, std::uint32_t op) {
  auto& s = store();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (auto it = s.arg_names.find(op); it != s.arg_names.end()) return it->second;
  }
  std::vector<std::string> names;
  if (auto opname = fn.operator_name()) {
    if (auto handle = c10::Dispatcher::singleton().findOp(*opname); handle && handle->hasSchema()) {
      for (const auto& a : handle->schema().arguments()) names.push_back(a.name());
    }
  }
  std::lock_guard<std::mutex> lock(s.mu);
  return s.arg_names.emplace(op, std::move(names)).first->second;
}

/// Adds `c` to the entry `key`, merged with the record of the same argument and target.
void file_cast_loss(const OpKey& key, const CastLossCounts& c) {
  auto& s = store();
  std::lock_guard<std::mutex> lock(s.mu);
  auto& entry = current_locked(s).entries[key];
  entry.key = key;
  for (auto& have : entry.casts) {
    if (have.arg_index == c.arg_index && have.target_dtype == c.target_dtype &&
        have.source_dtype == c.source_dtype) {
      have.add_call(c);
      return;
    }
  }
  CastLossCounts& fresh = entry.casts.emplace_back(c);  // its keys, and no tally yet
  static_cast<CastLossTally&>(fresh) = CastLossTally{};
  fresh.open_step = -1;
  fresh.add_call(c);
}

/// Pending casts of call `tag` filed under `key`; every other pending record is stale (its call
/// never finished) and dropped.
void file_pending(const at::RecordFunction& fn, const void* tag, const OpKey& key) {
  if (tls_pending.empty()) return;
  std::vector<Pending> pending;
  pending.swap(tls_pending);
  const auto names = arg_names(fn, key.op);
  for (auto& p : pending) {
    if (p.tag != tag) continue;
    const auto i = static_cast<std::size_t>(p.counts.arg_index);
    p.counts.argument = p.counts.arg_index >= 0 && i < names.size() ? names[i] : "?";
    file_cast_loss(key, std::move(p.counts));
  }
}

bool low_precision(std::int8_t dtype) {
  Format f;
  return dtype >= 0 && format_of(static_cast<c10::ScalarType>(dtype), &f);
}

/// Float32 re-runs of near-zero outputs this entry already had.
std::int64_t degenerate_checks(const OpKey& key) {
  auto& s = store();
  std::lock_guard<std::mutex> lock(s.mu);
  auto& e = current_locked(s).entries;
  auto it = e.find(key);
  return it == e.end() ? 0 : it->second.degenerate.checked;
}

/// A low-precision call whose output is (almost) all zeros: re-run in float32 (the first few
/// per entry); degenerate when the float32 result is far from zero.
void check_degenerate(const at::RecordFunction& fn, const OpKey& key,
                      const std::vector<c10::IValue>& inputs, const Stats& out, std::int64_t step) {
  if (!low_precision(key.compute_dtype) || out.count == 0 || out.nonfinite() > 0) return;
  const double nonzero =
      static_cast<double>(out.count - out.zeros) / static_cast<double>(out.count);
  if (nonzero > kDegenerateNonzeroShare) return;
  // A factory (zeros, empty...) has no input to lose: nothing to re-run.
  if (std::none_of(inputs.begin(), inputs.end(), [](const c10::IValue& v) { return v.isTensor(); }))
    return;
  DegenerateCounts d;
  d.zero_outputs = 1;
  if (degenerate_checks(key) < kMaxDegenerateChecks) {
    d.checked = 1;
    auto c = recheck_fp32(fn, inputs, fn.outputs());
    if (c && !c->also_nonfinite && c->fp32_absmax > 0 && c->rel_err >= kDegenerateRelErr) {
      d.degenerate = 1;
      d.first_step = step;
      d.min_nonzero_share = nonzero;
      d.max_rel_err = c->rel_err;
      d.fp32_absmax = c->fp32_absmax;
    }
  }
  auto& s = store();
  std::lock_guard<std::mutex> lock(s.mu);
  auto& entry = current_locked(s).entries[key];
  entry.key = key;
  entry.degenerate.add(d);
}

}  // namespace

void on_autocast_cast(const void* tag, c10::ArrayRef<c10::IValue> cast_inputs,
                      const std::vector<c10::IValue>& outer_inputs, std::int64_t step) {
  if (cast_inputs.empty() || !cast_inputs[0].isTensor()) return;
  auto to = cast_target(cast_inputs);
  if (!to) return;
  const at::Tensor& src = cast_inputs[0].toTensor();
  if (auto c = source_loss(src, *to, step)) {
    c->arg_index = arg_index_of(src, outer_inputs);
    tls_pending.push_back({tag, std::move(*c)});
  }
}

void on_top_finished(const at::RecordFunction& fn, const void* tag, const OpKey& key,
                     const std::vector<c10::IValue>& inputs, const Stats& out_stats, bool is_cast,
                     bool inplace, std::int64_t step) {
  file_pending(fn, tag, key);
  if (is_cast) {
    if (inputs.empty() || !inputs[0].isTensor() || key.output_dtype < 0) return;
    if (auto c = source_loss(inputs[0].toTensor(), static_cast<c10::ScalarType>(key.output_dtype),
                             step)) {
      c->argument = "self";
      file_cast_loss(key, std::move(*c));
    }
    return;
  }
  if (!inplace) check_degenerate(fn, key, inputs, out_stats, step);
}

}  // namespace detail

std::vector<SilentLossEntry> silent_loss_snapshot() {
  auto& s = detail::store();
  std::lock_guard<std::mutex> lock(s.mu);
  std::vector<SilentLossEntry> out;
  for (const auto& [key, e] : detail::current_locked(s).entries) {
    out.push_back(e);
    for (auto& c : out.back().casts) c.close_step();  // the last step counts too
  }
  return out;
}

void CastLossCounts::add_call(const CastLossCounts& call) {
  if (call.open_step != open_step) {
    close_step();
    open_step = call.open_step;
  }
  open_lost_sq += call.lost_sq;
  open_source_sq += call.source_sq;
  open_underflow += call.underflow;
  CastLossTally::add(call);  // a call's own worst_step is -1: the step decides
}

void CastLossCounts::close_step() {
  if (open_step < 0) return;
  const double rel = open_source_sq > 0 ? std::min(1.0, std::sqrt(open_lost_sq / open_source_sq))
                                        : (open_underflow > 0 ? 1.0 : 0.0);
  if (rel > 0 && (worst_step < 0 || rel > worst_rel_l2)) {  // no step is "worst" at losing nothing
    worst_rel_l2 = rel;
    worst_step = open_step;
  }
  open_step = -1;
  open_lost_sq = open_source_sq = 0.0;
  open_underflow = 0;
}

}  // namespace ampscope
