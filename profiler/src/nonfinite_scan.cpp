#include "nonfinite_scan.h"

#include <ampscope/profiler/tensor_stats.h>

#include <cstdint>
#include <cstring>

namespace ampscope::detail {
namespace {

/// Any element whose exponent bits are all ones (NaN or inf), over raw bit patterns. Written
/// branch-free over blocks so the compiler vectorises it; stops at the first bad block.
template <typename Bits>
bool any_all_ones_exponent(const void* data, std::int64_t n, Bits exp_mask) {
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

bool dense_has_nonfinite(const at::Tensor& t) {
  const void* d = t.data_ptr();
  const std::int64_t n = t.numel();
  switch (t.scalar_type()) {
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

}  // namespace

bool has_nonfinite(const at::Tensor& t) {
  if (!stats_supported(t) || !t.has_storage() || t.numel() == 0) return false;
  if (t.is_contiguous()) return dense_has_nonfinite(t);
  return tensor_stats(t).nonfinite() > 0;  // strided or expanded: the kernel walks the layout
}

}  // namespace ampscope::detail
