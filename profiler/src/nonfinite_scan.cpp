#include "nonfinite_scan.h"

#include <ampscope/profiler/tensor_stats.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <vector>

#include "torch_pool.h"

namespace ampscope::detail {
namespace {

/// Any element whose exponent bits are all ones (NaN or inf), over raw bit patterns. Written
/// branch-free over blocks so the compiler vectorises it; stops at the first bad block. Cloned
/// for AVX-512BW and AVX2 (chosen at load time by the CPU's features): the baseline SSE2 build
/// was the largest single cost of an unsampled step.
template <typename Bits>
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) bool
any_all_ones_exponent(const void* data, std::int64_t n, Bits exp_mask) {
  const auto* p = static_cast<const Bits*>(data);
  constexpr std::int64_t kBlock = 1024;
  for (std::int64_t i = 0; i < n; i += kBlock) {
    const std::int64_t end = i + kBlock < n ? i + kBlock : n;
    Bits bad = 0;
    for (std::int64_t j = i; j < end; ++j) bad |= static_cast<Bits>((p[j] & exp_mask) == exp_mask);
    if (bad) return true;
  }
  return false;
}

/// The elements a strided tensor's memory holds once: stride-0 (expanded) dimensions
/// collapsed to one element; a permuted or transposed result is still dense in memory.
at::Tensor distinct_elements(const at::Tensor& t) {
  std::vector<std::int64_t> sizes(t.sizes().begin(), t.sizes().end());
  const auto strides = t.strides();
  for (std::size_t d = 0; d < sizes.size(); ++d)
    if (strides[d] == 0) sizes[d] = 1;
  return t.as_strided(sizes, strides);
}

bool span_has_nonfinite(const void* d, std::int64_t n, c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Float:
      return any_all_ones_exponent<std::uint32_t>(d, n, 0x7f800000u);
    case c10::ScalarType::Double:
      return any_all_ones_exponent<std::uint64_t>(d, n, 0x7ff0000000000000ull);
    case c10::ScalarType::Half:
      return any_all_ones_exponent<std::uint16_t>(d, n, 0x7c00u);
    case c10::ScalarType::BFloat16:
      return any_all_ones_exponent<std::uint16_t>(d, n, 0x7f80u);
    default:
      return false;
  }
}

/// Spans of this many elements or more are split over torch's intra-op pool (torch_pool.h).
constexpr std::int64_t kParallelChunk = std::int64_t{1} << 15;

bool dense_has_nonfinite(const void* d, std::int64_t n, c10::ScalarType type) {
  if (n < 2 * kParallelChunk || at::in_parallel_region() || at::get_num_threads() < 2)
    return span_has_nonfinite(d, n, type);
  struct Scan {
    const char* data;
    std::int64_t n, width;
    c10::ScalarType type;
    std::atomic<bool> bad{false};
  } scan{static_cast<const char*>(d), n, static_cast<std::int64_t>(c10::elementSize(type)), type};
  const std::int64_t chunks = (n + kParallelChunk - 1) / kParallelChunk;
  run_on_torch_pool(chunks, &scan, [](void* ctx, std::int64_t c, std::int64_t) {
    auto& s = *static_cast<Scan*>(ctx);
    if (s.bad.load(std::memory_order_relaxed)) return;  // found already: the rest is moot
    const std::int64_t lo = c * kParallelChunk, len = std::min(s.n, lo + kParallelChunk) - lo;
    if (span_has_nonfinite(s.data + lo * s.width, len, s.type))
      s.bad.store(true, std::memory_order_relaxed);
  });
  return scan.bad.load();
}

}  // namespace

bool has_nonfinite(const at::Tensor& t) {
  if (!stats_supported(t) || !t.has_storage() || t.numel() == 0) return false;
  // Whether any element is bad does not depend on their order: a tensor dense in memory
  // (contiguous, transposed, permuted) is one linear scan of its span.
  if (t.is_non_overlapping_and_dense())
    return dense_has_nonfinite(t.data_ptr(), t.numel(), t.scalar_type());
  const at::Tensor once = distinct_elements(t);
  if (once.is_non_overlapping_and_dense())
    return dense_has_nonfinite(once.data_ptr(), once.numel(), t.scalar_type());
  return tensor_stats(once).nonfinite() > 0;  // gaps or overlaps: the kernel walks the layout
}

}  // namespace ampscope::detail
