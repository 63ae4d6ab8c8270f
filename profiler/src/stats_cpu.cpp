// The CPU stats kernel: one read of the tensor, in cache-sized blocks, exact counts.
//
// Every source value is first brought to a float32 bit pattern (float16/bfloat16 exactly; float64
// through a "proxy" with the same classification, see below). All counts are then integer compares
// on |bits| (for non-negative floats the bit pattern orders like the value), so they are exact and
// independent of FTZ/DAZ modes. The format counts are "how many |x| lie below threshold T" for
// twelve float32 thresholds, one triple per target format:
//   underflow:  0 < |x| <= Tu   (the largest magnitude that rounds-to-nearest-even to 0)
//   subnormal:  Tu < |x| < Ts   (Ts: the smallest magnitude that rounds up to the min normal)
//   overflow:   |x| >= To, finite (To: the smallest magnitude that rounds past the max finite;
//               for float8_e4m3fn with an unbounded exponent, i.e. |x| > 464)
// These were checked against torch's casts for every non-negative float32 bit pattern.
//
// float64: torch converts a double to float16/bfloat16/float8 by first rounding it to float (the
// c10 types are constructed from float), so the proxy is the RNE float32 of the value, with
// finite values that become float32 inf clamped to FLT_MAX (they overflow every format) and
// nonzero values that become float32 zero set to the smallest subnormal (they underflow every
// format). The float64 stats proper (ranges, sums, exponents) use the double itself.
//
// Work goes in blocks of kBlock elements (strided views are gathered into a local buffer first,
// 16-bit sources converted to float32 bits). There are two builds of the block code, picked once
// at run time: AVX2/FMA/F16C intrinsics, and a portable one (plain loops over lane arrays that GCC
// auto-vectorises for baseline x86-64). Both give identical counts.
//
// AVX2 block (block32_avx2), one read of the data from memory, then L1-resident passes:
//   1. sums and sums of squares in double (4-wide, several accumulators), max and min of |bits|;
//   2. if the block holds NaN/inf or float32 subnormals: the general block instead (below);
//   3. the exponent bytes (minus one, zeros wrap to 255) into a 2 KiB key array;
//   4. the exponent histogram by byte compares, four binades per sweep from the top down, until
//      every value is counted (the last one or two binades follow from the count and the key sum
//      left; past kMaxSweeps the rest are found by mask and counted one by one);
//   5. the format counts from the histogram's cumulative counts: a threshold that is a binade's
//      lower edge needs nothing more; for one inside a populated binade the values of that binade
//      are compared exactly (by mask and one by one when few, else a 32-bit compare pass).
// General block (block32_general): all twelve compares per value, sums masked to finite values,
// scalar histogram with the exact floor(log2) of float32 subnormals. Portable fast block (block32):
// the same as the AVX2 block with auto-vectorised loops and one compare sweep per binade.
// float64 has its own block (block64): the double stats per value plus the float32 proxy above.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <system_error>
#include <thread>
#include <vector>

#include "ampscope/profiler/stats.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define AMP_INLINE inline __attribute__((always_inline))

namespace ampscope {
namespace {

using u8 = std::uint8_t;
using u16 = std::uint16_t;
using u32 = std::uint32_t;
using u64 = std::uint64_t;
using i32 = std::int32_t;
using i64 = std::int64_t;

constexpr int kBlock = 2048;     // elements per block (8 KiB of float32 bits)
constexpr int kLanes = 16;       // lane-array width of the vectorisable loops
constexpr int kNumTh = 12;       // three thresholds per format
constexpr int kMaxVecBins = 24;  // widest exponent range counted with byte compares

// Thresholds on |float32 bits|, counted as "|x| < T". Index 3*format + {0: Tu+1, 1: Ts, 2: To}.
constexpr u32 kTh[kNumTh] = {
    0x33000001u, 0x387FE000u, 0x477FF000u,  // float16: Tu = 2^-25, Ts = 2^-14*(1-2^-11), To = 65520
    0x00008001u, 0x007F8000u, 0x7F7F8000u,  // bfloat16: Tu = 2^-134, Ts = 2^-126*(1-2^-8), To = (2-2^-8)*2^127
    0x3A800001u, 0x3C700000u, 0x43E80001u,  // e4m3fn: Tu = 2^-10, Ts = 0.9375*2^-6, |x| > 464
    0x37000001u, 0x38600000u, 0x47700000u,  // e5m2: Tu = 2^-17, Ts = 0.875*2^-14, To = 61440
};

constexpr u32 kAbs32 = 0x7FFFFFFFu;
constexpr u32 kInf32 = 0x7F800000u;
constexpr u64 kAbs64 = 0x7FFFFFFFFFFFFFFFull;
constexpr u64 kInf64 = 0x7FF0000000000000ull;

// Exponent histogram index ranges: float32 domain [-149, 127], float64 domain [-1074, 1023].
constexpr int kOff32 = 149;
constexpr int kBins32 = 149 + 128;
constexpr int kOff64 = 1074;
constexpr int kBins64 = 1074 + 1024;

/// The running sums of one accumulate call.
template <int NBins>
struct Acc {
  i64 count = 0, nan = 0, posinf = 0, neginf = 0, zeros = 0;
  i64 lt[kNumTh] = {};
  double sum = 0.0, sum_sq = 0.0;
  u64 amax = 0;         // largest finite |bits| (float32 or float64 domain)
  u64 amin1 = ~0ull;    // smallest finite nonzero |bits| minus 1
  i64 hist[NBins] = {};  // index: exponent + offset
};
using Acc32 = Acc<kBins32>;
using Acc64 = Acc<kBins64>;

AMP_INLINE float f32_of(u32 b) { return __builtin_bit_cast(float, b); }
AMP_INLINE double f64_of(u64 b) { return __builtin_bit_cast(double, b); }

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

// ---------------------------------------------------------------- conversions to float32 bits

/// bfloat16 -> float32 bits: exact by construction.
AMP_INLINE void bf16_to_f32(const u16* __restrict src, int n, u32* __restrict dst) {
  for (int i = 0; i < n; ++i) dst[i] = static_cast<u32>(src[i]) << 16;
}

/// float16 -> float32 bits, bit exact and branchless (selects, so it vectorises). NaN payloads
/// keep their bits (the quiet bit included); subnormals become normal float32 via an exact
/// integer-to-float conversion scaled by 2^-24.
AMP_INLINE void f16_to_f32(const u16* __restrict src, int n, u32* __restrict dst) {
  for (int i = 0; i < n; ++i) {
    const u32 h = src[i];
    const u32 sign = (h & 0x8000u) << 16;
    const u32 mag = h & 0x7FFFu;
    const u32 normal = (mag << 13) + 0x38000000u;                         // rebias 15 -> 127
    const u32 special = (mag << 13) | 0x7F800000u;                        // inf / NaN
    const u32 sub = __builtin_bit_cast(u32, static_cast<float>(static_cast<i32>(mag)) * 0x1p-24f);
    const u32 r = mag >= 0x7C00u ? special : (mag >= 0x0400u ? normal : sub);  // sub(0) = +0
    dst[i] = r | sign;
  }
}

// ---------------------------------------------------------------- float32-domain blocks

/// The general block: every count by compare, sums masked to finite values, scalar histogram.
AMP_INLINE void block32_general(const u32* __restrict x, int n, Acc32& A) {
  constexpr int L = 8;
  i32 c_nan[L] = {}, c_pinf[L] = {}, c_ninf[L] = {}, c_zero[L] = {};
  i32 c_lt[kNumTh][L] = {};
  u32 mx[L] = {}, mn[L];
  double s[L] = {}, q[L] = {};
  for (int l = 0; l < L; ++l) mn[l] = ~0u;
  int i = 0;
  auto body = [&](int l, u32 xb) __attribute__((always_inline)) {
    const u32 a = xb & kAbs32;
    const bool fin = a < kInf32;
    c_nan[l] += a > kInf32;
    c_pinf[l] += xb == kInf32;
    c_ninf[l] += xb == (kInf32 | 0x80000000u);
    c_zero[l] += a == 0;
    for (int k = 0; k < kNumTh; ++k) c_lt[k][l] += static_cast<i32>(a) < static_cast<i32>(kTh[k]);
    const u32 am = fin ? a : 0u;
    const u32 an = fin ? a - 1u : ~0u;
    mx[l] = mx[l] > am ? mx[l] : am;
    mn[l] = mn[l] < an ? mn[l] : an;
    const double d = fin ? static_cast<double>(f32_of(xb)) : 0.0;
    s[l] += d;
    q[l] += d * d;
  };
  for (; i + L <= n; i += L)
    for (int l = 0; l < L; ++l) body(l, x[i + l]);
  for (; i < n; ++i) body(0, x[i]);
  for (int l = 0; l < L; ++l) {
    A.nan += c_nan[l];
    A.posinf += c_pinf[l];
    A.neginf += c_ninf[l];
    A.zeros += c_zero[l];
    for (int k = 0; k < kNumTh; ++k) A.lt[k] += c_lt[k][l];
    A.amax = std::max<u64>(A.amax, mx[l]);
    A.amin1 = std::min<u64>(A.amin1, mn[l] == ~0u ? ~0ull : mn[l]);
  }
  double ss = 0.0, qq = 0.0;
  for (int l = 0; l < L; ++l) {
    ss += s[l];
    qq += q[l];
  }
  A.sum += ss;
  A.sum_sq += qq;
  for (int j = 0; j < n; ++j) {
    const u32 a = x[j] & kAbs32;
    if (a - 1u < kInf32 - 1u) ++A.hist[exp_of32(a) + kOff32];
  }
  A.count += n;
}

/// Number of exponent bytes equal to `e` among `n32` (a multiple of 32, at most 255*32) bytes.
AMP_INLINE u32 count_eq_u8(const u8* __restrict k, int n32, u8 e) {
  u8 acc[32] = {};
  for (int g = 0; g < n32; g += 32)
    for (int l = 0; l < 32; ++l) acc[l] += static_cast<u8>(k[g + l] == e);
  u32 t = 0;
  for (int l = 0; l < 32; ++l) t += acc[l];
  return t;
}

/// Counts of |x| < T for four thresholds (unused ones 0).
AMP_INLINE void count_lt4(const u32* __restrict x, int n, const u32 T[4], i64 out[4]) {
  constexpr int L = 8;
  i32 c[4][L] = {};
  const i32 t0 = static_cast<i32>(T[0]), t1 = static_cast<i32>(T[1]);
  const i32 t2 = static_cast<i32>(T[2]), t3 = static_cast<i32>(T[3]);
  int i = 0;
  for (; i + L <= n; i += L)
    for (int l = 0; l < L; ++l) {
      const i32 a = static_cast<i32>(x[i + l] & kAbs32);
      c[0][l] += a < t0;
      c[1][l] += a < t1;
      c[2][l] += a < t2;
      c[3][l] += a < t3;
    }
  for (; i < n; ++i) {
    const i32 a = static_cast<i32>(x[i] & kAbs32);
    c[0][0] += a < t0;
    c[1][0] += a < t1;
    c[2][0] += a < t2;
    c[3][0] += a < t3;
  }
  for (int k = 0; k < 4; ++k) {
    i64 t = 0;
    for (int l = 0; l < L; ++l) t += c[k][l];
    out[k] = t;
  }
}

/// One block of float32 bits: the fast path when it applies, the general block otherwise.
AMP_INLINE void block32(const u32* __restrict x, int n, Acc32& A) {
  constexpr int L = kLanes;
  u32 mx[L] = {}, mn[L];
  i32 zc[L] = {};
  double s[L] = {}, q[L] = {};
  for (int l = 0; l < L; ++l) mn[l] = ~0u;
  int i = 0;
  for (; i + L <= n; i += L)
    for (int l = 0; l < L; ++l) {
      const u32 xb = x[i + l];
      const u32 a = xb & kAbs32;
      mx[l] = mx[l] > a ? mx[l] : a;
      const u32 an = a - 1u;
      mn[l] = mn[l] < an ? mn[l] : an;
      zc[l] += a == 0;
      const double d = static_cast<double>(f32_of(xb));
      s[l] += d;
      q[l] += d * d;
    }
  for (; i < n; ++i) {
    const u32 xb = x[i];
    const u32 a = xb & kAbs32;
    mx[0] = mx[0] > a ? mx[0] : a;
    const u32 an = a - 1u;
    mn[0] = mn[0] < an ? mn[0] : an;
    zc[0] += a == 0;
    const double d = static_cast<double>(f32_of(xb));
    s[0] += d;
    q[0] += d * d;
  }
  u32 amax = 0, amin1 = ~0u;
  for (int l = 0; l < L; ++l) {
    amax = std::max(amax, mx[l]);
    amin1 = std::min(amin1, mn[l]);
  }
  // Non-finite values or float32 subnormals: the general block (rare in real tensors).
  if (amax >= kInf32 || amin1 < 0x007FFFFFu) {
    block32_general(x, n, A);
    return;
  }
  i64 zeros = 0;
  for (int l = 0; l < L; ++l) zeros += zc[l];
  const int emax = static_cast<int>(amax >> 23);
  const int emin = amin1 == ~0u ? emax + 1 : static_cast<int>((amin1 + 1u) >> 23);  // all zero: none
  if (emax - emin + 1 > kMaxVecBins) {
    block32_general(x, n, A);
    return;
  }
  double ss = 0.0, qq = 0.0;
  for (int l = 0; l < L; ++l) {
    ss += s[l];
    qq += q[l];
  }
  A.sum += ss;
  A.sum_sq += qq;
  A.zeros += zeros;
  A.count += n;
  if (amax > A.amax) A.amax = amax;
  if (amin1 != ~0u && amin1 < A.amin1) A.amin1 = amin1;

  // Per-bin exponent counts over the exponent bytes (zeros have byte 0, never a bin here).
  u32 hb[256];
  if (emin <= emax) {
    alignas(64) u8 key[kBlock];
    const int n32 = (n + 31) & ~31;
    for (int j = 0; j < n; ++j) key[j] = static_cast<u8>(x[j] >> 23);  // sign bit falls off
    for (int j = n; j < n32; ++j) key[j] = 0;
    for (int e = emin; e <= emax; ++e) {
      hb[e] = count_eq_u8(key, n32, static_cast<u8>(e));
      A.hist[e - 127 + kOff32] += hb[e];
    }
  }
  // Thresholds from cumulative counts; an exact compare pass where a threshold's binade is
  // populated and the threshold is not that binade's lower edge.
  u32 need_t[kNumTh];
  int need_k[kNumTh];
  int nneed = 0;
  for (int k = 0; k < kNumTh; ++k) {
    const u32 T = kTh[k];
    const int E = static_cast<int>(T >> 23);
    if ((T & 0x7FFFFFu) != 0 && E >= emin && E <= emax && hb[E] != 0) {
      need_t[nneed] = T;
      need_k[nneed++] = k;
      continue;
    }
    i64 cum = zeros;
    for (int e = emin; e <= emax && e < E; ++e) cum += hb[e];
    A.lt[k] += cum;
  }
  for (int j = 0; j < nneed; j += 4) {
    u32 T[4] = {0, 0, 0, 0};
    for (int m = 0; m < 4 && j + m < nneed; ++m) T[m] = need_t[j + m];
    i64 c[4];
    count_lt4(x, n, T, c);
    for (int m = 0; m < 4 && j + m < nneed; ++m) A.lt[need_k[j + m]] += c[m];
  }
}

// ---------------------------------------------------------------- AVX2 fast path (x86-64)

#if defined(__x86_64__) && defined(__GNUC__)
#define AMP_HAVE_AVX2_PATH 1
#define AMP_AVX2_TARGET __attribute__((target("avx2,fma,f16c,bmi,bmi2,popcnt,lzcnt")))
#define AMP_AVX2 AMP_AVX2_TARGET __attribute__((always_inline)) inline


/// For every float32 exponent byte, the (up to two) thresholds inside that binade that are not
/// its lower edge; kNumTh (a dummy slot with threshold 0) where there is none.
struct BinadeThresholds {
  std::uint8_t k[256][2];
  u32 th[kNumTh + 1];
  constexpr BinadeThresholds() : k{}, th{} {
    for (auto& b : k) b[0] = b[1] = kNumTh;
    for (int t = 0; t < kNumTh; ++t) {
      th[t] = kTh[t];
      if ((kTh[t] & 0x7FFFFFu) == 0) continue;
      auto& b = k[kTh[t] >> 23];
      if (b[0] == kNumTh)
        b[0] = static_cast<std::uint8_t>(t);
      else
        b[1] = static_cast<std::uint8_t>(t);
    }
    th[kNumTh] = 0;
  }
};
constexpr BinadeThresholds kBinadeTh{};

AMP_AVX2 u32 hmax_epu32(__m256i v) {
  __m128i m = _mm_max_epu32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0x4E));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0xB1));
  return static_cast<u32>(_mm_cvtsi128_si32(m));
}
AMP_AVX2 u32 hmin_epu32(__m256i v) {
  __m128i m = _mm_min_epu32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  m = _mm_min_epu32(m, _mm_shuffle_epi32(m, 0x4E));
  m = _mm_min_epu32(m, _mm_shuffle_epi32(m, 0xB1));
  return static_cast<u32>(_mm_cvtsi128_si32(m));
}
AMP_AVX2 double hsum_pd(__m256d v) {
  __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}
AMP_AVX2 u64 hsum_epi64(__m256i v) {
  __m128i s = _mm_add_epi64(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  return static_cast<u64>(_mm_cvtsi128_si64(_mm_add_epi64(s, _mm_unpackhi_epi64(s, s))));
}
AMP_AVX2 i64 hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

/// Counts of |x| < T[k] for K thresholds over n (a multiple of 8) elements.
template <int K>
AMP_AVX2 void count_lt_avx2(const u32* __restrict x, int n, const u32* T, i64* out) {
  const __m256i absm = _mm256_set1_epi32(0x7FFFFFFF);
  __m256i t[K], c[K];
  for (int k = 0; k < K; ++k) {
    t[k] = _mm256_set1_epi32(static_cast<int>(T[k]));
    c[k] = _mm256_setzero_si256();
  }
  for (int i = 0; i < n; i += 8) {
    const __m256i a = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)), absm);
    for (int k = 0; k < K; ++k) c[k] = _mm256_sub_epi32(c[k], _mm256_cmpgt_epi32(t[k], a));
  }
  for (int k = 0; k < K; ++k) out[k] = hsum_epi32(c[k]);
}

/// Counts of key bytes equal to each of kv[0..3] over n (a multiple of 32, at most 255*32) bytes.
AMP_AVX2 void count_key4(const u8* __restrict key, int n, const u8 kv[4], u32 c[4]) {
  const __m256i t0 = _mm256_set1_epi8(static_cast<char>(kv[0])), t1 = _mm256_set1_epi8(static_cast<char>(kv[1]));
  const __m256i t2 = _mm256_set1_epi8(static_cast<char>(kv[2])), t3 = _mm256_set1_epi8(static_cast<char>(kv[3]));
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (int i = 0; i < n; i += 32) {
    const __m256i k = _mm256_load_si256(reinterpret_cast<const __m256i*>(key + i));
    a0 = _mm256_sub_epi8(a0, _mm256_cmpeq_epi8(k, t0));
    a1 = _mm256_sub_epi8(a1, _mm256_cmpeq_epi8(k, t1));
    a2 = _mm256_sub_epi8(a2, _mm256_cmpeq_epi8(k, t2));
    a3 = _mm256_sub_epi8(a3, _mm256_cmpeq_epi8(k, t3));
  }
  const __m256i z = _mm256_setzero_si256();
  c[0] = static_cast<u32>(hsum_epi64(_mm256_sad_epu8(a0, z)));
  c[1] = static_cast<u32>(hsum_epi64(_mm256_sad_epu8(a1, z)));
  c[2] = static_cast<u32>(hsum_epi64(_mm256_sad_epu8(a2, z)));
  c[3] = static_cast<u32>(hsum_epi64(_mm256_sad_epu8(a3, z)));
}

/// Exact threshold compares for the elements whose key byte satisfies `pick` (a mask builder),
/// `count` of them: found by byte mask, handled one by one (branchless per element).
template <typename Pick>
AMP_AVX2 void scan_keys(const u8* __restrict key, const u32* __restrict x, int n, i64 count, Pick pick,
                        u32* __restrict hb, i64* __restrict ex) {
  for (int g = 0; g < n && count > 0; g += 32) {
    const __m256i k = _mm256_load_si256(reinterpret_cast<const __m256i*>(key + g));
    u32 m = static_cast<u32>(_mm256_movemask_epi8(pick(k)));
    count -= __builtin_popcount(m);
    while (m != 0) {
      const int idx = g + static_cast<int>(_tzcnt_u32(m));
      m = _blsr_u32(m);
      const int e = key[idx] + 1;
      if (hb != nullptr) ++hb[e];
      const u32 a = x[idx] & kAbs32;
      const int k0 = kBinadeTh.k[e][0], k1 = kBinadeTh.k[e][1];
      ex[k0] += a < kBinadeTh.th[k0];
      ex[k1] += a < kBinadeTh.th[k1];
    }
  }
}

constexpr int kMaxSweeps = 10;  // byte-compare sweeps (four binades each) before the scalar tail
constexpr i64 kScanMax = 64;    // populated threshold binades up to this many values are scanned

/// A full block (kBlock elements) of float32 bits.
AMP_AVX2_TARGET __attribute__((noinline)) void block32_avx2(const u32* __restrict x, Acc32& A) {
  constexpr int n = kBlock;
  static_assert(kBlock % 32 == 0 && kBlock <= 255 * 32, "byte counters");
  // Pass 1: sums in double, max and min of |bits|.
  const __m256i absm = _mm256_set1_epi32(0x7FFFFFFF);
  const __m256i ones = _mm256_set1_epi32(-1);
  __m256i mx = _mm256_setzero_si256(), mn = ones;
  __m256d s0 = _mm256_setzero_pd(), s1 = s0, q0 = s0, q1 = s0, q2 = s0, q3 = s0;
  const float* xf = reinterpret_cast<const float*>(x);
  for (int i = 0; i < n; i += 16) {
    const __m256i a0 = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)), absm);
    const __m256i a1 = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i + 8)), absm);
    mx = _mm256_max_epu32(mx, _mm256_max_epu32(a0, a1));
    mn = _mm256_min_epu32(mn, _mm256_min_epu32(_mm256_add_epi32(a0, ones), _mm256_add_epi32(a1, ones)));
    const __m256d d0 = _mm256_cvtps_pd(_mm_loadu_ps(xf + i));
    const __m256d d1 = _mm256_cvtps_pd(_mm_loadu_ps(xf + i + 4));
    const __m256d d2 = _mm256_cvtps_pd(_mm_loadu_ps(xf + i + 8));
    const __m256d d3 = _mm256_cvtps_pd(_mm_loadu_ps(xf + i + 12));
    // One add per sum accumulator per step keeps the loop-carried chains short.
    s0 = _mm256_add_pd(s0, _mm256_add_pd(d0, d1));
    s1 = _mm256_add_pd(s1, _mm256_add_pd(d2, d3));
    q0 = _mm256_fmadd_pd(d0, d0, q0);
    q1 = _mm256_fmadd_pd(d1, d1, q1);
    q2 = _mm256_fmadd_pd(d2, d2, q2);
    q3 = _mm256_fmadd_pd(d3, d3, q3);
  }
  const u32 amax = hmax_epu32(mx), amin1 = hmin_epu32(mn);
  // Non-finite values or float32 subnormals: the general block (rare in real tensors).
  if (amax >= kInf32 || amin1 < 0x007FFFFFu) {
    block32_general(x, n, A);
    return;
  }
  A.count += n;
  if (amin1 == ~0u) {  // all zeros
    A.zeros += n;
    for (int k = 0; k < kNumTh; ++k) A.lt[k] += n;
    return;
  }
  const int emax = static_cast<int>(amax >> 23);
  const int emin = static_cast<int>((amin1 + 1u) >> 23);
  A.sum += hsum_pd(_mm256_add_pd(s0, s1));
  A.sum_sq += hsum_pd(_mm256_add_pd(_mm256_add_pd(q0, q1), _mm256_add_pd(q2, q3)));
  if (amax > A.amax) A.amax = amax;
  if (amin1 < A.amin1) A.amin1 = amin1;

  // Exponent bytes minus one, in element order: zeros wrap to 255, never a binade.
  alignas(32) u8 key[kBlock];
  i64 key_sum;  // the sum of all keys: resolves the last two binades without a sweep
  {
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const __m256i one8 = _mm256_set1_epi8(1);
    const __m256i z = _mm256_setzero_si256();
    __m256i ksum = z;
    for (int i = 0; i < n; i += 32) {
      const __m256i* p = reinterpret_cast<const __m256i*>(x + i);
      const __m256i e0 = _mm256_srli_epi32(_mm256_slli_epi32(_mm256_loadu_si256(p), 1), 24);
      const __m256i e1 = _mm256_srli_epi32(_mm256_slli_epi32(_mm256_loadu_si256(p + 1), 1), 24);
      const __m256i e2 = _mm256_srli_epi32(_mm256_slli_epi32(_mm256_loadu_si256(p + 2), 1), 24);
      const __m256i e3 = _mm256_srli_epi32(_mm256_slli_epi32(_mm256_loadu_si256(p + 3), 1), 24);
      __m256i b = _mm256_packus_epi16(_mm256_packus_epi32(e0, e1), _mm256_packus_epi32(e2, e3));
      b = _mm256_sub_epi8(_mm256_permutevar8x32_epi32(b, perm), one8);
      _mm256_store_si256(reinterpret_cast<__m256i*>(key + i), b);
      ksum = _mm256_add_epi64(ksum, _mm256_sad_epu8(b, z));
    }
    key_sum = static_cast<i64>(hsum_epi64(ksum));
  }
  // Binades from the top down by byte compares, four per sweep (the first sweep also counts the
  // zeros), until every value is counted; past kMaxSweeps the rest are found by mask. A key that
  // no value has (254: the exponent byte of inf) fills unused slots.
  u32 hb[256];
  for (int e = emin; e <= emax; ++e) hb[e] = 0;
  i64 zeros = 0;
  i64 left = n;              // values not yet counted (zeros included until the first sweep)
  i64 left_sum = key_sum;    // and the sum of their keys
  int lo = emax + 1;         // lowest binade counted so far
  for (int sweeps = 0; left > 0 && lo > emin && sweeps < kMaxSweeps; ++sweeps) {
    if (sweeps > 0 && lo - emin <= 2) {
      // One or two binades left: their counts follow from the count and key sum left.
      const int ea = lo - 1, eb = emin;
      if (ea == eb) {
        hb[ea] = static_cast<u32>(left);
      } else {  // c_a + c_b = left,  (ea-1) c_a + (eb-1) c_b = left_sum, ea - eb = 1
        const i64 ca = left_sum - static_cast<i64>(eb - 1) * left;
        hb[ea] = static_cast<u32>(ca);
        hb[eb] = static_cast<u32>(left - ca);
      }
      left = 0;
      lo = emin;
      break;
    }
    u8 kv[4];
    int bins[4];
    int nb = 0;
    if (sweeps == 0) kv[nb] = 255, bins[nb++] = -1;  // the zeros
    while (nb < 4 && lo - 1 >= emin) {
      --lo;
      kv[nb] = static_cast<u8>(lo - 1);
      bins[nb++] = lo;
    }
    for (int q = nb; q < 4; ++q) kv[q] = 254, bins[q] = -2;
    u32 c[4];
    count_key4(key, n, kv, c);
    for (int q = 0; q < 4; ++q) {
      if (bins[q] == -2) continue;
      if (bins[q] == -1)
        zeros = c[q];
      else
        hb[bins[q]] = c[q];
      left -= c[q];
      left_sum -= static_cast<i64>(kv[q]) * c[q];
    }
  }
  i64 ex[kNumTh + 1] = {};
  if (left > 0) {  // wide blocks: the binades below the swept ones, value by value
    for (int e = emin; e < lo; ++e) hb[e] = 0;
    const __m256i lim = _mm256_set1_epi8(static_cast<char>(lo - 2));  // key <= lo-2  <=>  e < lo
    scan_keys(key, x, n, left, [&](__m256i k) AMP_AVX2_TARGET { return _mm256_cmpeq_epi8(_mm256_min_epu8(k, lim), k); },
              hb, ex);
  }
  // below[e]: zeros plus the values in binades under e, for e in [emin, emax + 1].
  i64 below[257];
  below[emin] = zeros;
  for (int e = emin; e <= emax; ++e) {
    A.hist[e - 127 + kOff32] += hb[e];
    below[e + 1] = below[e] + hb[e];
  }
  auto below_binade = [&](int E) { return below[std::clamp(E, emin, emax + 1)]; };
  A.zeros += zeros;
  // Exact compares in the populated swept binades that hold a threshold: the sparse ones in one
  // scan by mask, the dense ones by a compare pass.
  {
    u8 sparse[4];
    int nsparse = 0;
    i64 nscan = 0;
    u32 need_t[kNumTh];
    int need_k[kNumTh];
    int nneed = 0;
    for (int E = std::max(lo, 1); E <= emax; ++E) {
      const auto& bt = kBinadeTh.k[E];
      if (bt[0] == kNumTh || hb[E] == 0) continue;
      if (nsparse < 4 && nscan + hb[E] <= kScanMax) {
        sparse[nsparse++] = static_cast<u8>(E - 1);
        nscan += hb[E];
      } else {
        for (int q = 0; q < 2; ++q)
          if (bt[q] != kNumTh) {
            need_t[nneed] = kTh[bt[q]];
            need_k[nneed++] = bt[q];
          }
      }
    }
    if (nsparse > 0) {
      for (int q = nsparse; q < 4; ++q) sparse[q] = 254;  // never a key in a fast block
      const __m256i t0 = _mm256_set1_epi8(static_cast<char>(sparse[0]));
      const __m256i t1 = _mm256_set1_epi8(static_cast<char>(sparse[1]));
      const __m256i t2 = _mm256_set1_epi8(static_cast<char>(sparse[2]));
      const __m256i t3 = _mm256_set1_epi8(static_cast<char>(sparse[3]));
      scan_keys(key, x, n, nscan,
                [&](__m256i k) AMP_AVX2_TARGET {
                  return _mm256_or_si256(_mm256_or_si256(_mm256_cmpeq_epi8(k, t0), _mm256_cmpeq_epi8(k, t1)),
                                         _mm256_or_si256(_mm256_cmpeq_epi8(k, t2), _mm256_cmpeq_epi8(k, t3)));
                },
                nullptr, ex);
    }
    for (int j = 0; j < nneed; j += 4) {
      i64 c[4];
      const int m = std::min(4, nneed - j);
      switch (m) {
        case 1: count_lt_avx2<1>(x, n, need_t + j, c); break;
        case 2: count_lt_avx2<2>(x, n, need_t + j, c); break;
        case 3: count_lt_avx2<3>(x, n, need_t + j, c); break;
        default: count_lt_avx2<4>(x, n, need_t + j, c); break;
      }
      // The pass counted every |x| < T; keep only the part inside T's binade.
      for (int q = 0; q < m; ++q) {
        const int k = need_k[j + q];
        ex[k] += c[q] - below_binade(static_cast<int>(kTh[k] >> 23));
      }
    }
  }
  // Thresholds: the cumulative counts below each threshold's binade, plus the exact part inside.
  for (int k = 0; k < kNumTh; ++k) A.lt[k] += below_binade(static_cast<int>(kTh[k] >> 23)) + ex[k];
}

AMP_AVX2_TARGET __attribute__((noinline)) void bf16_to_f32_avx2(const u16* __restrict src, u32* __restrict dst) {
  // Element order inside a block does not matter to any statistic: unpack in lane order.
  const __m256i z = _mm256_setzero_si256();
  for (int i = 0; i < kBlock; i += 16) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm256_store_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_unpacklo_epi16(z, v));
    _mm256_store_si256(reinterpret_cast<__m256i*>(dst + i + 8), _mm256_unpackhi_epi16(z, v));
  }
}

AMP_AVX2_TARGET __attribute__((noinline)) void f16_to_f32_avx2(const u16* __restrict src, u32* __restrict dst) {
  // F16C is exact for every float16, subnormals included (NaNs stay NaNs).
  for (int i = 0; i < kBlock; i += 8) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_store_ps(reinterpret_cast<float*>(dst + i), _mm256_cvtph_ps(v));
  }
}
#endif

// ---------------------------------------------------------------- float64 blocks

AMP_INLINE void block64(const u64* __restrict x, int n, Acc64& A) {
  constexpr int L = 8;
  i32 c_nan[L] = {}, c_pinf[L] = {}, c_ninf[L] = {}, c_zero[L] = {};
  u64 mx[L] = {}, mn[L];
  double s[L] = {}, q[L] = {};
  alignas(64) u32 proxy[kBlock];
  for (int l = 0; l < L; ++l) mn[l] = ~0ull;
  auto body = [&](int l, int j) __attribute__((always_inline)) {
    const u64 xb = x[j];
    const u64 a = xb & kAbs64;
    const bool fin = a < kInf64;
    c_nan[l] += a > kInf64;
    c_pinf[l] += xb == kInf64;
    c_ninf[l] += xb == (kInf64 | 0x8000000000000000ull);
    c_zero[l] += a == 0;
    const u64 am = fin ? a : 0ull;
    const u64 an = fin ? a - 1ull : ~0ull;
    mx[l] = mx[l] > am ? mx[l] : am;
    mn[l] = mn[l] < an ? mn[l] : an;
    const double v = f64_of(xb);
    const double d = fin ? v : 0.0;
    s[l] += d;
    q[l] += d * d;
    // The float32 proxy (see the file comment): same classification as torch's casts.
    u32 p = __builtin_bit_cast(u32, static_cast<float>(v)) & kAbs32;
    p = (fin && p == kInf32) ? 0x7F7FFFFFu : p;
    p = (a != 0 && p == 0) ? 1u : p;
    proxy[j] = p;
  };
  int i = 0;
  for (; i + L <= n; i += L)
    for (int l = 0; l < L; ++l) body(l, i + l);
  for (; i < n; ++i) body(0, i);
  double ss = 0.0, qq = 0.0;
  for (int l = 0; l < L; ++l) {
    A.nan += c_nan[l];
    A.posinf += c_pinf[l];
    A.neginf += c_ninf[l];
    A.zeros += c_zero[l];
    A.amax = std::max(A.amax, mx[l]);
    A.amin1 = std::min(A.amin1, mn[l]);
    ss += s[l];
    qq += q[l];
  }
  A.sum += ss;
  A.sum_sq += qq;
  for (int k = 0; k < kNumTh; k += 4) {
    i64 c[4];
    count_lt4(proxy, n, &kTh[k], c);
    for (int m = 0; m < 4; ++m) A.lt[k + m] += c[m];
  }
  for (int j = 0; j < n; ++j) {
    const u64 a = x[j] & kAbs64;
    if (a - 1ull < kInf64 - 1ull) ++A.hist[exp_of64(a) + kOff64];
  }
  A.count += n;
}

// ---------------------------------------------------------------- strided gather

/// Walks elements [begin, end) of a view in row-major order, copying them into small buffers.
class Gather {
 public:
  Gather(const TensorView& v, i64 begin, std::size_t elem) : elem_(elem) {
    base_ = static_cast<const char*>(v.data);
    for (std::size_t d = 0; d < v.sizes.size(); ++d) {
      if (v.sizes[d] == 1) continue;  // size-1 dims never move
      sizes_.push_back(v.sizes[d]);
      strides_.push_back(v.strides[d]);
    }
    if (sizes_.empty()) {  // zero-dim or all-ones: one element at the base
      sizes_.push_back(1);
      strides_.push_back(0);
    }
    idx_.assign(sizes_.size(), 0);
    i64 rem = begin;
    offset_ = 0;
    for (std::size_t d = sizes_.size(); d-- > 0;) {
      idx_[d] = rem % sizes_[d];
      rem /= sizes_[d];
      offset_ += idx_[d] * strides_[d];
    }
  }

  /// Copies the next `n` elements into `dst`.
  template <typename T>
  void next(int n, T* __restrict dst) {
    const std::size_t last = sizes_.size() - 1;
    const i64 s = strides_[last];
    int done = 0;
    while (done < n) {
      const i64 run = std::min<i64>(n - done, sizes_[last] - idx_[last]);
      const T* p = reinterpret_cast<const T*>(base_ + offset_ * static_cast<i64>(elem_));
      if (s == 1) {
        std::memcpy(dst + done, p, static_cast<std::size_t>(run) * sizeof(T));
      } else {
        for (i64 j = 0; j < run; ++j) dst[done + j] = p[j * s];
      }
      done += static_cast<int>(run);
      idx_[last] += run;
      offset_ += run * s;
      // Carry into the outer dimensions.
      for (std::size_t d = last; idx_[d] == sizes_[d] && d > 0; --d) {
        offset_ -= idx_[d] * strides_[d];
        idx_[d] = 0;
        ++idx_[d - 1];
        offset_ += strides_[d - 1];
      }
    }
  }

 private:
  const char* base_;
  std::size_t elem_;
  std::vector<i64> sizes_, strides_, idx_;
  i64 offset_ = 0;
};

// ---------------------------------------------------------------- drivers


template <int NBins>
void finish(const Acc<NBins>& A, bool f64, Stats& out) {
  Stats s;
  s.count = A.count;
  s.nan = A.nan;
  s.posinf = A.posinf;
  s.neginf = A.neginf;
  s.zeros = A.zeros;
  s.sum = A.sum;
  s.sum_sq = A.sum_sq;
  if (f64) {
    s.absmax = f64_of(A.amax);
    if (A.amin1 != ~0ull) s.absmin_nonzero = f64_of(A.amin1 + 1);
  } else {
    s.absmax = static_cast<double>(f32_of(static_cast<u32>(A.amax)));
    if (A.amin1 != ~0ull) s.absmin_nonzero = static_cast<double>(f32_of(static_cast<u32>(A.amin1 + 1)));
  }
  const i64 nonfinite = A.nan + A.posinf + A.neginf;
  for (int f = 0; f < kNumFormats; ++f) {
    const i64 le_u = A.lt[3 * f], lt_s = A.lt[3 * f + 1], lt_o = A.lt[3 * f + 2];
    s.underflow[f] = le_u - A.zeros;
    s.subnormal[f] = lt_s - le_u;
    s.overflow[f] = (A.count - lt_o) - nonfinite;
  }
  const int off = f64 ? kOff64 : kOff32;
  for (int b = 0; b < NBins; ++b)
    if (A.hist[b] != 0) s.exp_hist.add(b - off, A.hist[b]);
  out.merge(s);
}

/// One block of float32 bits, full blocks through the AVX2 path where it is compiled in.
template <bool kAvx2>
AMP_INLINE void block32_any(const u32* __restrict x, int n, Acc32& A) {
#ifdef AMP_HAVE_AVX2_PATH
  if constexpr (kAvx2) {
    if (n == kBlock) {
      block32_avx2(x, A);
      return;
    }
  }
#endif
  block32(x, n, A);
}

/// Sources read as 16-bit words and converted to float32 bits.
template <bool kAvx2, bool kIsBF16>
AMP_INLINE void run16(const TensorView& v, i64 begin, i64 end, Stats& out) {
  auto A = std::make_unique<Acc32>();
  alignas(64) u32 buf[kBlock];
  alignas(64) u16 raw[kBlock];
  const bool contig = v.is_contiguous();
  Gather g(v, contig ? 0 : begin, sizeof(u16));
  const u16* base = static_cast<const u16*>(v.data) + (contig ? begin : 0);
  for (i64 pos = begin; pos < end; pos += kBlock) {
    const int n = static_cast<int>(std::min<i64>(kBlock, end - pos));
    const u16* src = base + (pos - begin);
    if (!contig) {
      g.next(n, raw);
      src = raw;
    }
#ifdef AMP_HAVE_AVX2_PATH
    if constexpr (kAvx2) {
      if (n == kBlock) {
        if (kIsBF16)
          bf16_to_f32_avx2(src, buf);
        else
          f16_to_f32_avx2(src, buf);
        block32_avx2(buf, *A);
        continue;
      }
    }
#endif
    if (kIsBF16)
      bf16_to_f32(src, n, buf);
    else
      f16_to_f32(src, n, buf);
    block32(buf, n, *A);
  }
  finish(*A, false, out);
}

template <bool kAvx2>
AMP_INLINE void run32(const TensorView& v, i64 begin, i64 end, Stats& out) {
  auto A = std::make_unique<Acc32>();
  alignas(64) u32 buf[kBlock];
  const bool contig = v.is_contiguous();
  Gather g(v, contig ? 0 : begin, sizeof(u32));
  const u32* base = static_cast<const u32*>(v.data) + (contig ? begin : 0);
  for (i64 pos = begin; pos < end; pos += kBlock) {
    const int n = static_cast<int>(std::min<i64>(kBlock, end - pos));
    const u32* src = base + (pos - begin);
    if (!contig) {
      g.next(n, buf);
      src = buf;
    }
    block32_any<kAvx2>(src, n, *A);
  }
  finish(*A, false, out);
}

AMP_INLINE void run64(const TensorView& v, i64 begin, i64 end, Stats& out) {
  auto A = std::make_unique<Acc64>();
  alignas(64) u64 buf[kBlock];
  const bool contig = v.is_contiguous();
  Gather g(v, contig ? 0 : begin, sizeof(u64));
  const u64* base = static_cast<const u64*>(v.data) + (contig ? begin : 0);
  for (i64 pos = begin; pos < end; pos += kBlock) {
    const int n = static_cast<int>(std::min<i64>(kBlock, end - pos));
    const u64* src = base + (pos - begin);
    if (!contig) {
      g.next(n, buf);
      src = buf;
    }
    block64(src, n, *A);
  }
  finish(*A, true, out);
}

template <bool kAvx2>
AMP_INLINE void run_any(const TensorView& v, i64 begin, i64 end, Stats& out) {
  switch (v.dtype) {
    case DType::kFloat32: run32<kAvx2>(v, begin, end, out); break;
    case DType::kFloat16: run16<kAvx2, false>(v, begin, end, out); break;
    case DType::kBFloat16: run16<kAvx2, true>(v, begin, end, out); break;
    case DType::kFloat64: run64(v, begin, end, out); break;
  }
}

// Two builds of the same code: baseline x86-64 and AVX2/FMA/F16C, picked once at run time.
#ifdef AMP_HAVE_AVX2_PATH
__attribute__((target("avx2,fma,f16c,bmi,bmi2,popcnt,lzcnt"))) void run_avx2(const TensorView& v, i64 b,
                                                                           i64 e, Stats& out) {
  run_any<true>(v, b, e, out);
}
bool have_avx2() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                         __builtin_cpu_supports("f16c") && __builtin_cpu_supports("bmi") &&
                         __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("popcnt") &&
                         __builtin_cpu_supports("abm");
  return ok;
}
#endif
void run_base(const TensorView& v, i64 b, i64 e, Stats& out) { run_any<false>(v, b, e, out); }

std::atomic<bool> g_simd{true};

void run_dispatch(const TensorView& v, i64 b, i64 e, Stats& out) {
#ifdef AMP_HAVE_AVX2_PATH
  if (g_simd.load(std::memory_order_relaxed) && have_avx2()) {
    run_avx2(v, b, e, out);
    return;
  }
#endif
  run_base(v, b, e, out);
}

}  // namespace

void set_stats_simd(bool enabled) { g_simd.store(enabled, std::memory_order_relaxed); }

bool stats_simd() {
#ifdef AMP_HAVE_AVX2_PATH
  return g_simd.load(std::memory_order_relaxed) && have_avx2();
#else
  return false;
#endif
}

void accumulate_stats(const TensorView& view, std::int64_t begin, std::int64_t end, Stats& out) {
  const i64 n = view.numel();
  begin = std::max<i64>(begin, 0);
  end = std::min<i64>(end, n);
  if (view.data == nullptr || begin >= end) return;
  run_dispatch(view, begin, end, out);
}

Stats compute_stats(const TensorView& view, int max_threads) {
  Stats result;
  const i64 n = view.numel();
  if (n <= 0 || view.data == nullptr) return result;
  constexpr i64 kMinParallel = i64{1} << 20;  // below this, starting threads costs more than it saves
  constexpr i64 kMinPerThread = i64{1} << 19;
  if (n < kMinParallel || max_threads == 1) {
    accumulate_stats(view, 0, n, result);
    return result;
  }
  // hardware_concurrency() may read /sys: ask once.
  static const int hw = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  int threads = max_threads > 0 ? max_threads : hw;
  if (threads == 1) {
    accumulate_stats(view, 0, n, result);
    return result;
  }
  // Fixed chunks handed out dynamically (a thread slowed by other work takes fewer), each chunk's
  // stats kept apart and merged in chunk order, so the result does not depend on the schedule.
  constexpr i64 kChunk = i64{256} * kBlock;
  const i64 nchunks = (n + kChunk - 1) / kChunk;
  threads = static_cast<int>(std::min<i64>({static_cast<i64>(threads), n / kMinPerThread, nchunks}));
  std::vector<Stats> parts(static_cast<std::size_t>(nchunks));
  std::atomic<i64> next{0};
  auto work = [&] {
    for (i64 c; (c = next.fetch_add(1, std::memory_order_relaxed)) < nchunks;)
      accumulate_stats(view, c * kChunk, std::min(n, (c + 1) * kChunk), parts[static_cast<std::size_t>(c)]);
  };
  std::vector<std::thread> pool;
  pool.reserve(static_cast<std::size_t>(threads - 1));
  try {
    for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  } catch (const std::system_error&) {
    // Fewer threads than asked for: the ones running share the chunks.
  }
  work();
  for (auto& th : pool) th.join();
  for (auto& p : parts) result.merge(p);
  return result;
}

}  // namespace ampscope
