#include "read_cache.h"

#include <ampscope/profiler/tensor_stats.h>
#include <c10/core/StorageImpl.h>
#include <c10/util/intrusive_ptr.h>

#include <cstddef>
#include <functional>
#include <unordered_map>

#include "nonfinite_scan.h"

namespace ampscope::detail {
namespace {

/// Below this many elements a read costs about what a lookup does: not cached.
constexpr std::int64_t kMinCachedElements = 4096;

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

}  // namespace

Stats cached_stats(const at::Tensor& t, std::int64_t step) {
  Span span;
  std::uint32_t version = 0;
  if (!span_of(t, &span, &version)) return tensor_stats(t);
  bool fresh = false;
  Entry& e = entry_of(t, span, version, step, &fresh);
  if (e.has_stats) return e.stats;
  e.stats = tensor_stats(t);
  e.has_stats = true;
  e.nonfinite = e.stats.nonfinite() > 0;
  return e.stats;
}

bool cached_has_nonfinite(const at::Tensor& t, std::int64_t step) {
  Span span;
  std::uint32_t version = 0;
  if (!span_of(t, &span, &version)) return has_nonfinite(t);
  bool fresh = false;
  Entry& e = entry_of(t, span, version, step, &fresh);
  if (!fresh) return e.nonfinite;
  e.nonfinite = has_nonfinite(t);
  return e.nonfinite;
}

}  // namespace ampscope::detail
