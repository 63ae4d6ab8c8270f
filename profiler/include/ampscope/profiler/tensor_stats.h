// The at::Tensor edge of the stats kernels: which tensors they read and how.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

#include "ampscope/profiler/stats.h"

namespace ampscope {

/// True for float32/float16/bfloat16/float64 CPU tensors (defined, strided layout).
bool stats_supported(const at::Tensor& t);

/// The kernel dtype of a torch scalar type; nullopt for any other type.
std::optional<DType> to_dtype(c10::ScalarType st);

/// A view of a supported tensor's elements: data pointer, dtype, sizes and strides in elements.
TensorView make_view(const at::Tensor& t);

/// Stats of a CPU or CUDA tensor (non-floating dtypes or undefined tensors give an empty Stats
/// with count 0). CUDA tensors run the CUDA kernel on the current stream and wait for it (one
/// host sync); CUDA errors (or a stream capturing a CUDA graph) fail with a c10::Error.
Stats tensor_stats(const at::Tensor& t, int max_threads = 0);

}  // namespace ampscope
