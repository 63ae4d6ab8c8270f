// The at::Tensor edge: maps a tensor to a TensorView and runs the CPU or the CUDA stats kernel.
#include "ampscope/profiler/tensor_stats.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>

#include <stdexcept>

#include "ampscope/profiler/cuda_stats.h"

namespace ampscope {

std::optional<DType> to_dtype(c10::ScalarType st) {
  switch (st) {
    case c10::ScalarType::Float: return DType::kFloat32;
    case c10::ScalarType::Half: return DType::kFloat16;
    case c10::ScalarType::BFloat16: return DType::kBFloat16;
    case c10::ScalarType::Double: return DType::kFloat64;
    default: return std::nullopt;
  }
}

bool stats_supported(const at::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.layout() == c10::kStrided &&
         to_dtype(t.scalar_type()).has_value();
}

TensorView make_view(const at::Tensor& t) {
  const auto dt = to_dtype(t.scalar_type());
  TORCH_CHECK(dt.has_value(), "ampscope: no stats kernel for dtype ", t.scalar_type());
  TensorView v;
  v.data = t.data_ptr();  // points at element [0, ..., 0] (storage offset included)
  v.dtype = *dt;
  v.sizes.assign(t.sizes().begin(), t.sizes().end());
  v.strides.assign(t.strides().begin(), t.strides().end());
  return v;
}

namespace {

/// A CUDA tensor: the CUDA kernel on the current stream, one sync for the copy back. float64
/// is read on the host (the kernel reads 32- and 16-bit floats only).
Stats tensor_stats_cuda(const at::Tensor& t) {
  TORCH_CHECK(t.layout() == c10::kStrided, "ampscope::tensor_stats: expected a strided tensor, got ",
              t.layout());
  if (t.numel() == 0) return Stats{};
  if (t.scalar_type() == c10::ScalarType::Double) return tensor_stats(t.cpu());
  if (t.is_neg()) return tensor_stats_cuda(t.resolve_neg());
  const int device = t.device().index();
  try {
    return compute_stats_cuda(make_view(t), device, c10::cuda::getCurrentCUDAStream(device).stream());
  } catch (const std::runtime_error& e) {
    TORCH_CHECK(false, "ampscope::tensor_stats: ", e.what());
  }
}

}  // namespace

Stats tensor_stats(const at::Tensor& t, int max_threads) {
  if (!t.defined() || !to_dtype(t.scalar_type()).has_value()) return Stats{};
  if (t.is_cuda()) return tensor_stats_cuda(t);
  TORCH_CHECK(t.device().is_cpu(), "ampscope::tensor_stats: expected a CPU tensor, got one on ",
              t.device());
  TORCH_CHECK(t.layout() == c10::kStrided, "ampscope::tensor_stats: expected a strided tensor, got ",
              t.layout());
  if (t.numel() == 0) return Stats{};
  // Conjugate/negative views carry a lazy flag the raw data does not reflect; real floating
  // tensors have no conjugate bit, but a negative bit would flip signs: materialise it.
  if (t.is_neg()) return tensor_stats(t.resolve_neg(), max_threads);
  return compute_stats(make_view(t), max_threads);
}

}  // namespace ampscope
