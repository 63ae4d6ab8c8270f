// The at::Tensor edge of the stats kernels: which tensors they read and how.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <optional>

#include "ampscope/profiler/stats.h"

namespace ampscope {

/// True when the tensor's elements lie in memory of its own that can be read: strided, not
/// nested or meta, not a wrapper subclass (DTensor, __torch_dispatch__) or functional tensor.
bool has_readable_storage(const at::Tensor& t);

/// True for float32/float16/bfloat16/float64 CPU tensors with readable storage.
bool stats_supported(const at::Tensor& t);

/// The kernel dtype of a torch scalar type; nullopt for any other type.
std::optional<DType> to_dtype(c10::ScalarType st);

/// A view of a supported tensor's elements: data pointer, dtype, sizes and strides in elements.
TensorView make_view(const at::Tensor& t);

/// Stats of a CPU or CUDA tensor (non-floating dtypes or undefined tensors give an empty Stats
/// with count 0). CUDA tensors run the CUDA kernel on the current stream and wait for it (one
/// host sync); CUDA errors (or a stream capturing a CUDA graph) fail with a c10::Error.
/// On CPU, `max_threads` 0 splits tensors of 128 Ki elements or more over torch's intra-op
/// thread pool; 1 runs on the calling thread; N > 1 uses up to N threads of its own.
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
