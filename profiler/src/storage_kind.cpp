// Which tensors have memory ampscope may read. Wrapper subclasses (DTensor, FakeTensor,
// torch.func levels, functionalization), meta, nested, sparse, quantized and complex tensors
// all flow through the dispatcher like plain ones; reading their data pointer crashes or
// throws. Every reader asks here first; skipped reads are counted for the report's notes.
#include <ampscope/profiler/tensor_stats.h>
#include <c10/core/DispatchKeySet.h>

#include <array>
#include <atomic>
#include <string>

namespace ampscope {
namespace {

constexpr std::size_t kKinds = static_cast<std::size_t>(StorageKind::kOtherDevice) + 1;

std::array<std::atomic<std::int64_t>, kKinds>& skip_counts() {
  static std::array<std::atomic<std::int64_t>, kKinds> counts{};
  return counts;
}

const c10::DispatchKeySet& functorch_keys() {
  static const c10::DispatchKeySet keys(
      {c10::DispatchKey::FuncTorchBatched, c10::DispatchKey::FuncTorchGradWrapper,
       c10::DispatchKey::BatchedNestedTensor, c10::DispatchKey::Functionalize});
  return keys;
}

/// The storage's own device and data, read without the checks that throw (FakeTensor and
/// wrapper subclasses carry meta storage or none).
bool storage_holds_data(const c10::TensorImpl& impl) {
  if (!impl.has_storage()) return false;
  c10::StorageImpl* s = impl.unsafe_storage().unsafeGetStorageImpl();
  if (s == nullptr) return false;
  const at::DataPtr& data = s->_mutable_data_ptr_no_checks();
  if (data.device().type() != impl.device_type()) return false;  // e.g. meta storage
  return data.get() != nullptr || impl.numel() == 0;
}

}  // namespace

StorageKind storage_kind(const at::Tensor& t) {
  if (!t.defined()) return StorageKind::kReadable;  // nothing to read, nothing to skip
  const c10::TensorImpl& impl = *t.unsafeGetTensorImpl();
  const c10::DispatchKeySet keys = impl.key_set();
  if (!(keys & functorch_keys()).empty()) return StorageKind::kFunctorch;
  if (impl.is_nested()) return StorageKind::kNested;
  if (impl.layout() != c10::kStrided) return StorageKind::kSparse;
  if (impl.is_quantized()) return StorageKind::kQuantized;
  // before any device question: a FakeTensor's device is answered by Python, its storage is meta
  if (keys.has(c10::DispatchKey::Python) && !storage_holds_data(impl))
    return StorageKind::kSubclass;
  if (impl.is_meta()) return StorageKind::kMeta;
  if (impl.device_type() != c10::DeviceType::CPU && impl.device_type() != c10::DeviceType::CUDA)
    return StorageKind::kOtherDevice;
  if (!storage_holds_data(impl)) return StorageKind::kFunctorch;  // e.g. a functorch level
  if (c10::isComplexType(impl.dtype().toScalarType())) return StorageKind::kComplex;
  return StorageKind::kReadable;
}

bool has_readable_storage(const at::Tensor& t) {
  return t.defined() && storage_kind(t) == StorageKind::kReadable;
}

bool is_unwrapped_by_torch(const at::Tensor& t) {
  if (!t.defined()) return false;
  const c10::DispatchKeySet keys = t.unsafeGetTensorImpl()->key_set();
  if (!(keys & functorch_keys()).empty()) return true;
  return keys.has(c10::DispatchKey::Python) && storage_kind(t) == StorageKind::kSubclass;
}

const char* storage_kind_name(StorageKind k) {
  switch (k) {
    case StorageKind::kReadable:
      return "plain tensors";
    case StorageKind::kSubclass:
      return "tensor subclasses without storage of their own (DTensor, FakeTensor, "
             "__torch_dispatch__ wrappers)";
    case StorageKind::kFunctorch:
      return "torch.func / functionalization wrappers";
    case StorageKind::kMeta:
      return "meta tensors";
    case StorageKind::kNested:
      return "nested tensors";
    case StorageKind::kSparse:
      return "sparse or other non-strided tensors";
    case StorageKind::kQuantized:
      return "quantized tensors";
    case StorageKind::kComplex:
      return "complex tensors";
    case StorageKind::kOtherDevice:
      return "tensors on devices other than CPU and CUDA";
  }
  return "tensors";
}

namespace detail {
/// Counts one skipped read of a tensor of kind `k` (not kReadable).
void note_storage_skip(StorageKind k) {
  skip_counts()[static_cast<std::size_t>(k)].fetch_add(1, std::memory_order_relaxed);
}
}  // namespace detail

std::vector<std::string> storage_skip_notes() {
  std::vector<std::string> notes;
  for (std::size_t k = 1; k < kKinds; ++k) {
    const std::int64_t n = skip_counts()[k].load(std::memory_order_relaxed);
    if (n == 0) continue;
    const auto kind = static_cast<StorageKind>(k);
    const bool wrapper = kind == StorageKind::kSubclass || kind == StorageKind::kFunctorch;
    notes.push_back(std::to_string(n) + " tensor reads skipped: " + storage_kind_name(kind) +
                    (wrapper ? " have no memory of their own (the ops torch runs on the tensors "
                               "they wrap, e.g. a DTensor's local shard, are recorded as such)"
                             : " are not read (their calls are still counted, without stats)"));
  }
  return notes;
}

void reset_storage_skips() {
  for (auto& c : skip_counts()) c.store(0, std::memory_order_relaxed);
}

}  // namespace ampscope
