// The at::Tensor edge of the stats kernels: which tensors they read and how.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ampscope/profiler/stats.h"

namespace ampscope {

/// Whether a tensor's elements can be read through its data pointer, and if not, why.
enum class StorageKind {
  kReadable,     ///< a plain CPU/CUDA strided tensor with storage of its own
  kSubclass,     ///< a tensor subclass without storage (DTensor, FakeTensor, __torch_dispatch__)
  kFunctorch,    ///< a torch.func level (grad/vmap wrapper) or a functionalization wrapper
  kMeta,         ///< a meta tensor (shapes only)
  kNested,       ///< a nested tensor
  kSparse,       ///< a sparse (COO/CSR/...) or other non-strided layout
  kQuantized,    ///< a quantized tensor
  kComplex,      ///< a complex tensor (no stats kernel)
  kOtherDevice,  ///< a device other than CPU and CUDA
};

/// Why `t`'s memory may or may not be read (kReadable: it may). Reads no data; never throws.
StorageKind storage_kind(const at::Tensor& t);

/// True when `t` is defined and its elements live in storage of its own that may be read.
bool has_readable_storage(const at::Tensor& t);

/// True for wrappers whose ops torch re-runs on the tensors they wrap (DTensor and other
/// __torch_dispatch__ subclasses, torch.func levels, functionalization): the inner call is the
/// one worth recording.
bool is_unwrapped_by_torch(const at::Tensor& t);

/// Short human name of a kind, for notes ("tensor subclasses without storage (DTensor...)").
const char* storage_kind_name(StorageKind k);

/// True for float32/float16/bfloat16/float64 tensors with readable storage on the CPU. A
/// floating or complex tensor that cannot be read is counted for the report's notes.
bool stats_supported(const at::Tensor& t);

/// How many reads of each unreadable kind were skipped since reset_storage_skips(), as notes.
std::vector<std::string> storage_skip_notes();

/// Clears the counts behind storage_skip_notes() (a new observation starts).
void reset_storage_skips();

/// The kernel dtype of a torch scalar type; nullopt for any other type.
std::optional<DType> to_dtype(c10::ScalarType st);

/// A view of a supported tensor's elements: data pointer, dtype, sizes and strides in elements.
TensorView make_view(const at::Tensor& t);

/// Stats of a CPU or CUDA tensor (non-floating dtypes or undefined tensors give an empty Stats
/// with count 0). CUDA tensors run the CUDA kernel on the current stream and wait for it (one
/// host sync); CUDA errors (or a stream capturing a CUDA graph) fail with a c10::Error.
/// On CPU, `max_threads` 0 splits tensors of 64 Ki elements or more into chunks run on torch's
/// intra-op pool (at::get_num_threads() threads; compute_stats_chunked); 1 runs on the calling
/// thread; N > 1 starts up to N threads of its own for tensors of 1 Mi elements or more.
Stats tensor_stats(const at::Tensor& t, int max_threads = 0);

/// Receives the stats of CUDA tensors queued with queue_device_stats(), at the observer's next
/// read-back (step end or report), from whichever thread reads back.
class DeviceStatsTarget {
 public:
  virtual ~DeviceStatsTarget() = default;
  /// The merged stats of the tensors queued for this target since the last read-back.
  virtual void add(const Stats& stats) = 0;
};

/// Queues the stats of a CUDA float32/float16/bfloat16 tensor for `target` on the tensor's
/// current stream, with the observer's per-step read-back (no host sync here). False (nothing
/// queued) for other tensors, or when the observer is not running. For stats outside op
/// entries, e.g. parameter gradients.
bool queue_device_stats(const at::Tensor& t, const std::shared_ptr<DeviceStatsTarget>& target);

}  // namespace ampscope
