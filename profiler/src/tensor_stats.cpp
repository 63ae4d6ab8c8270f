// The at::Tensor edge: maps a tensor to a TensorView and runs the CPU or the CUDA stats kernel.
#include "ampscope/profiler/tensor_stats.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
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

/// Elements per chunk of a parallel stats pass (a multiple of the kernel's block).
constexpr std::int64_t kStatsChunk = std::int64_t{1} << 16;

/// The CPU kernel over torch's intra-op thread pool: its threads are idle between ops (the
/// observer runs at op boundaries), so mid-size tensors are split too, not only those big enough
/// to pay for starting threads. Fixed chunks merged in chunk order: the result does not depend
/// on the schedule. Inside a parallel region (or with one thread) it runs serially.
Stats compute_stats_on_pool(const TensorView& view) {
  const std::int64_t n = view.numel();
  if (n < 2 * kStatsChunk || at::get_num_threads() <= 1 || at::in_parallel_region()) {
    return compute_stats(view, 1);
  }
  const std::int64_t chunks = (n + kStatsChunk - 1) / kStatsChunk;
  std::vector<Stats> parts(static_cast<std::size_t>(chunks));
  at::parallel_for(0, chunks, 1, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t c = b; c < e; ++c) {
      accumulate_stats(view, c * kStatsChunk, std::min(n, (c + 1) * kStatsChunk),
                       parts[static_cast<std::size_t>(c)]);
    }
  });
  Stats out;
  for (const Stats& p : parts) out.merge(p);
  return out;
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
