// The at::Tensor edge: maps a tensor to a TensorView and runs the CPU or the CUDA stats kernel.
#include "ampscope/profiler/tensor_stats.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
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

namespace detail {
void note_storage_skip(StorageKind k);
}

bool stats_supported(const at::Tensor& t) {
  if (!t.defined()) return false;
  const StorageKind kind = storage_kind(t);
  if (kind != StorageKind::kReadable) {
    // counted only where a stats kernel would have had something to say
    if (t.is_floating_point() || t.is_complex() || t.is_quantized()) detail::note_storage_skip(kind);
    return false;
  }
  return t.device().is_cpu() && to_dtype(t.scalar_type()).has_value();
}

namespace {

/// A clear error for a tensor whose memory cannot be read (never torch's internal error).
void check_readable(const at::Tensor& t) {
  const StorageKind kind = storage_kind(t);
  TORCH_CHECK_VALUE(kind == StorageKind::kReadable, "ampscope::tensor_stats: cannot read ",
                    storage_kind_name(kind),
                    kind == StorageKind::kSubclass
                        ? " (for a DTensor pass .to_local() or .full_tensor())"
                    : kind == StorageKind::kNested    ? " (pass its .unbind() components)"
                    : kind == StorageKind::kSparse    ? " (pass .values() or .to_dense())"
                    : kind == StorageKind::kQuantized ? " (pass .dequantize())"
                    : kind == StorageKind::kComplex   ? " (pass torch.view_as_real(t))"
                                                      : "");
}

}  // namespace

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

/// The CPU kernel on as many threads as torch's intra-op setting allows (torch.set_num_threads
/// is the user's knob), serially inside a parallel region. Not through at::parallel_for: with the
/// wheel's OpenMP backend that is an inline `#pragma omp parallel`, which runs serially in a TU
/// built without -fopenmp (and building with it would load a second OpenMP runtime next to
/// torch's). compute_stats starts its threads only for tensors big enough to pay for them and
/// merges fixed chunks in order, so the result does not depend on the thread count.
Stats compute_stats_on_pool(const TensorView& view) {
  const int threads = at::in_parallel_region() ? 1 : std::max(1, at::get_num_threads());
  return compute_stats(view, threads);
}

}  // namespace

Stats tensor_stats(const at::Tensor& t, int max_threads) {
  if (!t.defined()) return Stats{};
  check_readable(t);
  if (!to_dtype(t.scalar_type()).has_value()) return Stats{};
  if (t.is_cuda()) return tensor_stats_cuda(t);
  TORCH_CHECK(t.device().is_cpu(), "ampscope::tensor_stats: expected a CPU tensor, got one on ",
              t.device());
  TORCH_CHECK(t.layout() == c10::kStrided, "ampscope::tensor_stats: expected a strided tensor, got ",
              t.layout());
  if (t.numel() == 0) return Stats{};
  // Conjugate/negative views carry a lazy flag the raw data does not reflect; real floating
  // tensors have no conjugate bit, but a negative bit would flip signs: materialise it.
  if (t.is_neg()) return tensor_stats(t.resolve_neg(), max_threads);
  if (max_threads == 0) return compute_stats_on_pool(make_view(t));
  return compute_stats(make_view(t), max_threads);
}

}  // namespace ampscope
