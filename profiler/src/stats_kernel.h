// Internals shared by the builds of the CPU stats kernel (stats_cpu_portable.cpp,
// stats_cpu_avx2.cpp, stats_cpu_avx512.cpp): element types, the per-call accumulator, bit-level
// helpers and the entry points of each build. Not a public header; no torch.
//
// Every count is an integer compare on |bits| of a float32 bit pattern (for non-negative floats
// the bit pattern orders like the value), so counts are exact and independent of FTZ/DAZ modes.
// The format counts are "how many |x| lie below threshold T" for the twelve float32 thresholds of
// stats_thresholds.h (three per target format: underflow, subnormal, overflow).
#pragma once

#include <algorithm>
#include <cstdint>

#include "ampscope/profiler/stats.h"
#include "stats_thresholds.h"

#define AMP_INLINE inline __attribute__((always_inline))
#define AMP_INLINE_CE constexpr __attribute__((always_inline))

namespace ampscope::detail {

using u8 = std::uint8_t;
using u16 = std::uint16_t;
using u32 = std::uint32_t;
using u64 = std::uint64_t;
using i32 = std::int32_t;
using i64 = std::int64_t;

inline constexpr int kBlock = 4096;  // elements per block (16 KiB of float32 bits)
inline constexpr int kNumTh = kNumThresholds;

/// Thresholds on |float32 bits|, counted as "|x| < T" (shared with the CUDA kernel).
inline constexpr const u32 (&kTh)[kNumTh] = kFormatThresholds.v;

inline constexpr u32 kAbs32 = 0x7FFFFFFFu;
inline constexpr u32 kInf32 = 0x7F800000u;
inline constexpr u64 kAbs64 = 0x7FFFFFFFFFFFFFFFull;
inline constexpr u64 kInf64 = 0x7FF0000000000000ull;

// Exponent histogram index ranges: float32 domain [-149, 127], float64 domain [-1074, 1023].
inline constexpr int kOff32 = kExpOffset32;
inline constexpr int kBins32 = kExpBins32;
inline constexpr int kOff64 = 1074;
inline constexpr int kBins64 = 1074 + 1024;

/// The running sums of one accumulate call.
template <int NBins>
struct Acc {
  i64 count = 0, nan = 0, posinf = 0, neginf = 0, zeros = 0;
  i64 lt[kNumTh] = {};
  double sum = 0.0, sum_sq = 0.0;
  u64 amax = 0;          // largest finite |bits| (float32 or float64 domain)
  u64 amin1 = ~0ull;     // smallest finite nonzero |bits| minus 1
  i64 hist[NBins] = {};  // index: exponent + offset
};
using Acc32 = Acc<kBins32>;
using Acc64 = Acc<kBins64>;

/// For every float32 exponent byte, the (up to two) thresholds inside that binade that are not
/// its lower edge; kNumTh (a dummy slot with threshold 0) where there is none.
struct BinadeThresholds {
  u8 k[256][2];
  u32 th[kNumTh + 1];
  constexpr BinadeThresholds() : k{}, th{} {
    for (auto& b : k) b[0] = b[1] = kNumTh;
    for (int t = 0; t < kNumTh; ++t) {
      th[t] = kTh[t];
      if ((kTh[t] & 0x7FFFFFu) == 0) continue;
      auto& b = k[kTh[t] >> 23];
      if (b[0] == kNumTh)
        b[0] = static_cast<u8>(t);
      else
        b[1] = static_cast<u8>(t);
    }
    th[kNumTh] = 0;
  }
};
inline constexpr BinadeThresholds kBinadeTh{};

#if defined(__x86_64__)
/// Sets MXCSR flush-to-zero for its scope (restored after). The SIMD builds' float moments square
/// tiny values: subnormal products would take a microcode assist each (tens of times slower),
/// and their size is far below the moments' error bound. Counts are integer compares: unaffected.
/// Denormals-are-zero stays off, so float inputs keep their values.
class FlushToZeroScope {
 public:
  FlushToZeroScope() : saved_(__builtin_ia32_stmxcsr()) {
    __builtin_ia32_ldmxcsr(saved_ | 0x8000u);
  }
  ~FlushToZeroScope() { __builtin_ia32_ldmxcsr(saved_); }
  FlushToZeroScope(const FlushToZeroScope&) = delete;
  FlushToZeroScope& operator=(const FlushToZeroScope&) = delete;

 private:
  unsigned saved_;
};
#endif

/// Float moments are safe when no square can overflow a group's float sum (|x| < 2^59) and the
/// largest value's square is far from float's underflow (|x| >= 2^-40): float32 bits of |x|max.
constexpr bool float_moments_safe(u32 amax32) {
  return amax32 < 0x5D000000u && amax32 >= 0x2B800000u;
}

AMP_INLINE_CE float f32_of(u32 b) { return __builtin_bit_cast(float, b); }
AMP_INLINE_CE double f64_of(u64 b) { return __builtin_bit_cast(double, b); }

/// Exact floor(log2) of a nonzero finite float32 magnitude (bits without sign).
AMP_INLINE int exp_of32(u32 a) {
  const int b = static_cast<int>(a >> 23);
  if (b != 0) return b - 127;
  return -149 + (31 - __builtin_clz(a));
}
/// Exact floor(log2) of a nonzero finite float64 magnitude.
AMP_INLINE int exp_of64(u64 a) {
  const int b = static_cast<int>(a >> 52);
  if (b != 0) return b - 1023;
  return -1074 + (63 - __builtin_clzll(a));
}

/// float16 bits -> float32 bits, exact, branchless (selects, so it vectorises). NaN payloads keep
/// their bits; subnormals become normal float32 via an exact int-to-float conversion times 2^-24.
AMP_INLINE_CE u32 f16_bits_to_f32(u32 h) {
  const u32 sign = (h & 0x8000u) << 16;
  const u32 mag = h & 0x7FFFu;
  const u32 normal = (mag << 13) + 0x38000000u;   // rebias 15 -> 127
  const u32 special = (mag << 13) | 0x7F800000u;  // inf / NaN
  const u32 sub = __builtin_bit_cast(u32, static_cast<float>(static_cast<i32>(mag)) * 0x1p-24f);
  const u32 r = mag >= 0x7C00u ? special : (mag >= 0x0400u ? normal : sub);  // sub(0) = +0
  return r | sign;
}
/// bfloat16 bits -> float32 bits: exact by construction.
AMP_INLINE_CE u32 bf16_bits_to_f32(u32 h) { return h << 16; }
/// float32 bits of a 16-bit source's bits (bfloat16 or float16), exact.
template <bool kBF16>
AMP_INLINE_CE u32 bits16_to_f32(u32 h) {
  return kBF16 ? bf16_bits_to_f32(h) : f16_bits_to_f32(h);
}

AMP_INLINE void bf16_to_f32(const u16* __restrict src, int n, u32* __restrict dst) {
  for (int i = 0; i < n; ++i) dst[i] = bf16_bits_to_f32(src[i]);
}
AMP_INLINE void f16_to_f32(const u16* __restrict src, int n, u32* __restrict dst) {
  for (int i = 0; i < n; ++i) dst[i] = f16_bits_to_f32(src[i]);
}

// ---- 16-bit sources read in place (the SIMD builds)

inline constexpr u32 kInfF16 = 0x7C00u, kInfBF16 = 0x7F80u;        // |h| of infinity
inline constexpr u32 kMinNormalF16 = 0x0400u, kMinNormalBF16 = 0x0080u;  // |h| of the least normal

/// The thresholds in a 16-bit source's own bits: |h| < T16[k] exactly when |float32(h)| < kTh[k],
/// for every finite h (the conversion is exact and monotonic on magnitudes).
struct Thresholds16 {
  u16 t[kNumTh];
  template <typename Conv>
  constexpr explicit Thresholds16(Conv conv, u32 inf16) : t{} {
    for (int k = 0; k < kNumTh; ++k) {  // the first h in [0, inf16] with conv(h) >= T, or inf16
      u32 lo = 0, hi = inf16;
      while (lo < hi) {
        const u32 mid = (lo + hi) / 2;
        if (conv(mid) < kTh[k])
          lo = mid + 1;
        else
          hi = mid;
      }
      t[k] = static_cast<u16>(lo);
    }
  }
};
inline constexpr Thresholds16 kTh16F16([](u32 h) { return f16_bits_to_f32(h); }, kInfF16);
inline constexpr Thresholds16 kTh16BF16([](u32 h) { return bf16_bits_to_f32(h); }, kInfBF16);

/// The float16 subnormals of a block read in place, found by a build's own scan: their exponent
/// field is 0, a zero's key, so the block's histogram and threshold counts took them for zeros;
/// counted here value by value (a block holding a few, one randn block in five, stays on the
/// fast path) and moved to their binades and thresholds by correct().
struct Subnormals16 {
  static constexpr int kMax = 128;            ///< more than this: the block is converted
  static constexpr int kLo = 103, kHi = 112;  ///< their float32 exponent bytes (2^-24 .. 2^-15)
  int n = 0;
  u32 hist[kHi - kLo + 1] = {};
  u32 lt[kNumTh] = {};  ///< how many lie below each threshold

  /// One subnormal, |h| in [1, 0x3FF].
  AMP_INLINE void add(u32 h) {
    const u32 a = f16_bits_to_f32(h);
    ++n;
    ++hist[(a >> 23) - kLo];
    for (int k = 0; k < kNumTh; ++k) lt[k] += a < kTh[k];
  }
  /// Moves them from the zeros (below every threshold) to their binades and thresholds.
  void correct(Acc32& A) const {
    A.zeros -= n;
    for (int k = 0; k < kNumTh; ++k) A.lt[k] -= n - static_cast<i64>(lt[k]);
    for (int e = kLo; e <= kHi; ++e) A.hist[e - 127 + kOff32] += hist[e - kLo];
  }
};

// ---- the portable build (stats_cpu_portable.cpp), also the AVX2 build's fallback for rare blocks

/// Any block of float32 bits (n <= kBlock): the fast path when it applies, the general one else.
void block32_portable(const u32* __restrict x, int n, Acc32& A);
/// The general block: every count by compare; handles NaN/inf and float32 subnormals.
void block32_general(const u32* __restrict x, int n, Acc32& A);
/// Adds an accumulator's results into `out` (float32 domain or float64 domain).
void finish32(const Acc32& A, Stats& out);
void finish64(const Acc64& A, Stats& out);
/// Elements [begin, end) of any view, portable build.
void run_stats_portable(const TensorView& v, i64 begin, i64 end, Stats& out);

// ---- the AVX2/FMA/F16C build (stats_cpu_avx2.cpp; x86-64 GCC/Clang only)

/// Whether this CPU and compiler can run the AVX2 build.
bool stats_avx2_usable();
/// Elements [begin, end) of any view, AVX2 build (call only when stats_avx2_usable()).
void run_stats_avx2(const TensorView& v, i64 begin, i64 end, Stats& out);

// ---- the AVX-512 F/BW/VL/DQ build (stats_cpu_avx512.cpp; x86-64 GCC/Clang only)

/// Whether this CPU and compiler can run the AVX-512 build.
bool stats_avx512_usable();
/// Elements [begin, end) of any view, AVX-512 build (call only when stats_avx512_usable()).
void run_stats_avx512(const TensorView& v, i64 begin, i64 end, Stats& out);
/// Whether the CPU has GFNI and AVX512-BITALG (Ice Lake and later, Zen 4; not Skylake-X), with
/// which the AVX-512 build sums the bit counters of its histogram windows (GF2P8AFFINEQB,
/// VPOPCNTB) instead of a mask-and-popcount loop: the same counts, ~10% less time.
bool stats_avx512_gfni_usable();
/// Whether the build uses them now: where the CPU has them, unless a test switched them off.
bool stats_avx512_gfni();
/// Test and benchmark hook: on (where usable) or off; returns whether they are used now.
bool set_stats_avx512_gfni(bool on);

/// Elements [begin, end) of any view by the build in use (stats_isa(), stats_isa.cpp).
void run_stats_isa(const TensorView& v, i64 begin, i64 end, Stats& out);

/// How far a contiguous read on this thread may prefetch past its own range [begin, end): up to
/// element `tls_prefetch_end` of the view (-1: its end). compute_stats_chunked sets it, for each
/// chunk, to the end of the run of chunks its thread reads in a row (PrefetchBound): a chunk's
/// prefetch that reached into the next thread's share pulled the lines that core had just
/// written and was about to read (a 128 Ki-element tensor: one thread's two chunks 5 us each,
/// the other's 10 us).
inline thread_local i64 tls_prefetch_end = -1;
class PrefetchBound {
 public:
  explicit PrefetchBound(i64 end) : before_(tls_prefetch_end) { tls_prefetch_end = end; }
  ~PrefetchBound() { tls_prefetch_end = before_; }
  PrefetchBound(const PrefetchBound&) = delete;
  PrefetchBound& operator=(const PrefetchBound&) = delete;

 private:
  i64 before_;
};

}  // namespace ampscope::detail
