// The format thresholds of the stats kernels, shared by the CPU kernel (stats_cpu.cpp) and the
// CUDA kernel (stats_cuda.cu) so both count exactly the same values. Plain literals: usable from
// host code and as initialisers of CUDA __constant__ memory.
//
// Counts are "how many |x| (float32 bits without sign) lie below T", three thresholds per target
// format (index 3 * format + {0: Tu + 1, 1: Ts, 2: To}):
//   underflow:  0 < |x| <= Tu   (the largest magnitude that rounds-to-nearest-even to 0)
//   subnormal:  Tu < |x| < Ts   (Ts: the smallest magnitude that rounds up to the min normal)
//   overflow:   |x| >= To, finite (To: the smallest magnitude that rounds past the max finite;
//               for float8_e4m3fn with an unbounded exponent, i.e. |x| > 464)
// Checked against torch's casts for every non-negative float32 bit pattern (tests/test_stats.cpp).
#pragma once

// clang-format off
#define AMPSCOPE_FORMAT_THRESHOLDS                                                             \
  0x33000001u, 0x387FE000u, 0x477FF000u, /* float16: Tu = 2^-25, Ts = 2^-14*(1-2^-11), To = 65520 */ \
  0x00008001u, 0x007F8000u, 0x7F7F8000u, /* bfloat16: Tu = 2^-134, Ts = 2^-126*(1-2^-8), To = (2-2^-8)*2^127 */ \
  0x3A800001u, 0x3C700000u, 0x43E80001u, /* e4m3fn: Tu = 2^-10, Ts = 0.9375*2^-6, |x| > 464 */ \
  0x37000001u, 0x38600000u, 0x47700000u  /* e5m2: Tu = 2^-17, Ts = 0.875*2^-14, To = 61440 */
// clang-format on

namespace ampscope::detail {

/// Number of format thresholds (three per target format).
inline constexpr int kNumThresholds = 12;
/// Exponent histogram of float32-domain sources: floor(log2|x|) in [-149, 127], index e + 149.
inline constexpr int kExpOffset32 = 149;
inline constexpr int kExpBins32 = 149 + 128;

}  // namespace ampscope::detail
