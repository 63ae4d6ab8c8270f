// The at::Tensor edge: maps a tensor to a TensorView and runs the CPU or the CUDA stats kernel.
#include "ampscope/profiler/tensor_stats.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <vector>

#include "ampscope/profiler/cuda_stats.h"
#include "torch_pool.h"

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

}  // namespace

namespace detail {

void run_on_torch_pool(std::int64_t chunks, void* ctx,
                       void (*body)(void*, std::int64_t, std::int64_t)) {
  if (chunks <= 0) return;
  const std::int64_t shares = std::clamp<std::int64_t>(at::get_num_threads(), 1, chunks);
  const std::int64_t per = (chunks + shares - 1) / shares;
  std::vector<std::atomic<std::int64_t>> next(static_cast<std::size_t>(shares));
  for (std::int64_t s = 0; s < shares; ++s) next[static_cast<std::size_t>(s)].store(s * per);
  auto drain = [&](std::int64_t s) {
    const std::int64_t end = std::min(chunks, (s + 1) * per);
    auto& cursor = next[static_cast<std::size_t>(s)];
    for (std::int64_t c; (c = cursor.fetch_add(1, std::memory_order_relaxed)) < end;)
      body(ctx, c, end);
  };
  at::parallel_for(0, shares, 1, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t s = b; s < e; ++s) drain(s);  // its own share first,
    for (std::int64_t s = 0; s < shares; ++s) drain((e + s) % shares);  // then what is left
  });
}

}  // namespace detail

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
  TensorView view = make_view(t);
  // A transposed or permuted tensor dense in memory: one linear read of its span (the counts do
  // not depend on the order, and every view of the same elements then gives the same sums).
  if (!t.is_contiguous() && t.is_non_overlapping_and_dense()) {
    view.sizes = {t.numel()};
    view.strides = {1};
  }
  if (max_threads == 0) return compute_stats_chunked(view, detail::run_on_torch_pool);
  return compute_stats(view, max_threads);
}

}  // namespace ampscope
