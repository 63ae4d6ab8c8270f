#include "read_cache.h"

#include <ampscope/profiler/tensor_stats.h>
#include <c10/core/StorageImpl.h>
#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/autograd/function.h>

#include <atomic>
#include <cstddef>
#include <functional>
#include <unordered_map>

#include "nonfinite_scan.h"

namespace ampscope::detail {
namespace {

/// Which elements a read covers: the storage, the span (dense tensors only: a transposed or
/// permuted view covers the same span as the tensor it views) and the dtype.
struct Span {
  const c10::StorageImpl* storage = nullptr;
  const void* data = nullptr;  ///< lowest address of the span (element [0, ..., 0])
  std::int64_t numel = 0;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  bool operator==(const Span& o) const {
    return storage == o.storage && data == o.data && numel == o.numel && dtype == o.dtype;
  }
};

struct SpanHash {
  std::size_t operator()(const Span& s) const noexcept {
    const auto a = reinterpret_cast<std::uintptr_t>(s.data);
    const auto b = reinterpret_cast<std::uintptr_t>(s.storage);
    return std::hash<std::uintptr_t>()(a ^ (b << 1) ^ static_cast<std::uintptr_t>(s.numel));
  }
};

/// What a read of a span found at one version of its values.
struct Entry {
  std::uint32_t version = 0;
  /// Held weakly: a freed storage's address is never mistaken for a new one's.
  c10::weak_intrusive_ptr<c10::StorageImpl> alive{
      c10::weak_intrusive_ptr<c10::StorageImpl>(c10::intrusive_ptr<c10::StorageImpl>())};
  bool nonfinite = false;
  bool has_stats = false;
  Stats stats;
};

/// One thread's reads of the current step (cleared when the step changes).
struct Cache {
  std::int64_t step = -1;
  std::unordered_map<Span, Entry, SpanHash> entries;
};

thread_local Cache tls_cache;

/// read_counts(): relaxed adds, one per read (a few hundred a recorded step).
std::atomic<std::int64_t> g_read_stats{0}, g_read_scanned{0}, g_read_cached{0};
void count(std::atomic<std::int64_t>& c, const at::Tensor& t) {
  c.fetch_add(t.numel(), std::memory_order_relaxed);
}

/// The span of a read of `t`, or false when `t` is not cached (small, strided with gaps,
/// inference tensors without a version counter, lazily negated views).
bool span_of(const at::Tensor& t, Span* span, std::uint32_t* version) {
  if (t.numel() < kMinCachedElements || !t.device().is_cpu() || t.is_inference() || t.is_neg() ||
      !t.has_storage() || !t.is_non_overlapping_and_dense()) {
    return false;
  }
  span->storage = t.storage().unsafeGetStorageImpl();
  span->data = t.data_ptr();
  span->numel = t.numel();
  span->dtype = t.scalar_type();
  *version = t.unsafeGetTensorImpl()->version_counter().current_version();
  return true;
}

/// The entry of `t`'s span at its current version in `step`, created (empty) when there is none.
/// `fresh` says whether it was created.
Entry& entry_of(const at::Tensor& t, const Span& span, std::uint32_t version, std::int64_t step,
                bool* fresh) {
  Cache& c = tls_cache;
  if (c.step != step) {
    c.entries.clear();
    c.step = step;
  }
  Entry& e = c.entries[span];
  *fresh = e.alive.expired() || e.version != version;  // a new entry holds no storage
  if (*fresh) {
    e.version = version;
    e.alive = t.storage().getWeakStorageImpl();
    e.nonfinite = false;
    e.has_stats = false;
  }
  return e;
}

/// Every value of `from` is a value of `to` (same dtype, or a wider float with the same or a
/// larger exponent range).
bool holds_every_value(c10::ScalarType from, c10::ScalarType to) {
  using c10::ScalarType;
  if (from == to) return true;
  switch (from) {
    case ScalarType::Half:
    case ScalarType::BFloat16:
      return to == ScalarType::Float || to == ScalarType::Double;
    case ScalarType::Float:
      return to == ScalarType::Double;
    default:
      return false;
  }
}

/// On a ToCopyBackward0 node whose forward cast narrowed: its output is its input widened.
/// Its step is the forward's: a backward run in another step finds no read of that step to take.
struct WidenedGradientHook : torch::autograd::FunctionPostHook {
  explicit WidenedGradientHook(std::int64_t s) : step(s) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& inputs) override {
    try {
      if (outputs.size() == 1 && inputs.size() == 1 && outputs[0].defined() && inputs[0].defined())
        note_exact_copy(inputs[0], outputs[0], step);
    } catch (const std::exception&) {
      // a read not reused is read again: never disturb the backward pass
    }
    return outputs;
  }
  // Under compiled autograd the nodes do not run (nor does the observer's node callback):
  // nothing to reuse, and nothing to register.
  void compiled_args(torch::dynamo::autograd::CompiledNodeArgs&) const override {}
  std::int64_t step;
};

}  // namespace

ReadCounts read_counts() {
  return {g_read_stats.load(std::memory_order_relaxed),
          g_read_scanned.load(std::memory_order_relaxed),
          g_read_cached.load(std::memory_order_relaxed)};
}

void reset_read_counts() {
  g_read_stats.store(0);
  g_read_scanned.store(0);
  g_read_cached.store(0);
}

Stats cached_stats(const at::Tensor& t, std::int64_t step) {
  Span span;
  std::uint32_t version = 0;
  if (!span_of(t, &span, &version)) {
    count(g_read_stats, t);
    return tensor_stats(t);
  }
  bool fresh = false;
  Entry& e = entry_of(t, span, version, step, &fresh);
  if (e.has_stats) {
    count(g_read_cached, t);
    return e.stats;
  }
  count(g_read_stats, t);
  e.stats = tensor_stats(t);
  e.has_stats = true;
  e.nonfinite = e.stats.nonfinite() > 0;
  return e.stats;
}

void forget_read(const at::Tensor& t) {
  Span span;
  std::uint32_t version = 0;
  if (span_of(t, &span, &version)) tls_cache.entries.erase(span);
}

bool cached_has_nonfinite(const at::Tensor& t, std::int64_t step) {
  Span span;
  std::uint32_t version = 0;
  if (!span_of(t, &span, &version)) {
    count(g_read_scanned, t);
    return has_nonfinite(t);
  }
  bool fresh = false;
  Entry& e = entry_of(t, span, version, step, &fresh);
  if (!fresh) {
    count(g_read_cached, t);
    return e.nonfinite;
  }
  count(g_read_scanned, t);
  e.nonfinite = has_nonfinite(t);
  return e.nonfinite;
}

void note_exact_copy(const at::Tensor& src, const at::Tensor& dst, std::int64_t step) {
  if (!src.defined() || !dst.defined() || src.numel() != dst.numel() ||
      !holds_every_value(src.scalar_type(), dst.scalar_type())) {
    return;
  }
  Span from, to;
  std::uint32_t from_version = 0, to_version = 0;
  if (!span_of(src, &from, &from_version) || !span_of(dst, &to, &to_version)) return;
  Cache& c = tls_cache;
  if (c.step != step) return;
  auto it = c.entries.find(from);
  if (it == c.entries.end() || it->second.alive.expired() || it->second.version != from_version)
    return;
  const Entry found = it->second;  // (entry_of may rehash the map)
  bool fresh = false;
  Entry& e = entry_of(dst, to, to_version, step, &fresh);
  if (!fresh) return;  // read already
  e.nonfinite = found.nonfinite;
  e.has_stats = found.has_stats;
  e.stats = found.stats;
}

void reuse_read_in_backward(const at::Tensor& src, const at::Tensor& out, std::int64_t step) {
  if (!src.defined() || !out.defined() || src.scalar_type() == out.scalar_type() ||
      !holds_every_value(out.scalar_type(), src.scalar_type()) || !out.device().is_cpu() ||
      !out.requires_grad()) {
    return;
  }
  const auto& node = out.grad_fn();
  if (!node || node->name() != "ToCopyBackward0") return;
  node->add_post_hook(std::make_unique<WidenedGradientHook>(step));
}

}  // namespace ampscope::detail
