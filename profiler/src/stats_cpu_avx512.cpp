// The AVX-512 (F/BW/VL/DQ) build of the CPU stats kernel (x86-64, GCC/Clang), picked at run time.
//
// One read of each full block (kBlock elements) from memory, then short passes over L1 data:
//   1. one pass over the source: max and min of |bits|, the float-group moments, the exponent byte
//      of every value into a 4 KiB key array and the sum of the keys. float16 and bfloat16 are
//      read in place: their ranges, keys and threshold compares work on the 16-bit lanes (32 per
//      vector, no widened copy; a bfloat16 is the high half of its float32, a float16 magnitude
//      orders like its float32 one); only the moments widen, in registers. A float16 block's
//      few subnormals (a zero's key) are counted value by value; blocks with more, or with
//      NaN/inf, are widened to float32 bits into a 16 KiB L1 buffer and counted as float32.
//   2. the exponent histogram. Narrow blocks (up to kMaxSweepBins binades): windows of eight
//      binades from the top down, each key in the window one bit of a byte (a table lookup), the
//      bits added position by position in carry-save form (two ternary-logic ops per vector),
//      the counters summed by bit position at the window's end (with GFNI and BITALG where the
//      CPU has them: a bit-matrix transpose and byte popcounts);
//      the last binade and the zeros follow from the count and the key sum, or, when few values
//      are left, the scan of step 3 finds them. Wider blocks: four scalar tables indexed by key
//      byte, so the cost stays flat however many binades the block spans.
//   3. the format counts from the histogram's cumulative counts. A threshold inside a populated
//      binade (not at its lower edge) needs the values of that binade compared: one scan by mask
//      finds the values of sparse binades and of the binades left by the sweeps (value by value),
//      and dense binades take a compare pass (four thresholds per pass).
// Blocks with NaN/inf have them set apart (NonFinite) and the rest counted as a float32 block;
// blocks with float32 subnormals, partial blocks and float64 go to the portable code.
//
// Moments: as the AVX2 build, float within groups of 128 values (a pairwise tree per lane, two
// steps per group), double across groups; the same error bound holds (fewer roundings per lane).
// Blocks whose squares could overflow or underflow float use double throughout.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>

#include "stats_kernel.h"

#if defined(__x86_64__) && defined(__GNUC__)
// GCC 12's AVX-512 headers start some intrinsics from _mm512_undefined_*: a false
// -Wuninitialized at every use.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#define AMP_512_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,bmi,bmi2,popcnt")))
#define AMP_512 AMP_512_TARGET __attribute__((always_inline)) inline
#define AMP_SIMD_TARGET AMP_512_TARGET
#define AMP_SIMD_INLINE AMP_512
#include "stats_drivers.h"
#include "stats_window.h"

namespace ampscope::detail {
namespace {

AMP_512 double hsum_pd(__m512d v) { return _mm512_reduce_add_pd(v); }

/// Sums and sums of squares: float within a group, double across groups.
struct Moments {
  __m512d s0, s1, q0, q1;
  AMP_512 void zero() { s0 = s1 = q0 = q1 = _mm512_setzero_pd(); }
  AMP_512 void add_group(__m512 s, __m512 q) {
    s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(s)));
    s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm512_extractf32x8_ps(s, 1)));
    q0 = _mm512_add_pd(q0, _mm512_cvtps_pd(_mm512_castps512_ps256(q)));
    q1 = _mm512_add_pd(q1, _mm512_cvtps_pd(_mm512_extractf32x8_ps(q, 1)));
  }
};

/// Float partial sums of four vectors, added into s and q (a pairwise tree per lane).
AMP_512 void moments4(__m512 f0, __m512 f1, __m512 f2, __m512 f3, __m512& s, __m512& q) {
  s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(f0, f1), _mm512_add_ps(f2, f3)));
  const __m512 p0 = _mm512_fmadd_ps(f1, f1, _mm512_mul_ps(f0, f0));
  const __m512 p1 = _mm512_fmadd_ps(f3, f3, _mm512_mul_ps(f2, f2));
  q = _mm512_add_ps(q, _mm512_add_ps(p0, p1));
}

/// Sums and sums of squares of a float32 block in double throughout.
AMP_512 void moments_double(const u32* x, double& sum, double& sum_sq) {
  __m512d s0 = _mm512_setzero_pd(), s1 = s0, q0 = s0, q1 = s0;
  for (int i = 0; i < kBlock; i += 16) {
    const __m512 f = _mm512_loadu_ps(reinterpret_cast<const float*>(x + i));
    const __m512d d0 = _mm512_cvtps_pd(_mm512_castps512_ps256(f));
    const __m512d d1 = _mm512_cvtps_pd(_mm512_extractf32x8_ps(f, 1));
    s0 = _mm512_add_pd(s0, d0);
    s1 = _mm512_add_pd(s1, d1);
    q0 = _mm512_fmadd_pd(d0, d0, q0);
    q1 = _mm512_fmadd_pd(d1, d1, q1);
  }
  sum = hsum_pd(_mm512_add_pd(s0, s1));
  sum_sq = hsum_pd(_mm512_add_pd(q0, q1));
}

// ---------------------------------------------------------------- loads of 16 float32 bits

/// Loads of float32 sources: in place.
struct Load32 {
  const u32* x;
  static constexpr bool kWidens = false;
  AMP_512 __m512i operator()(int i) const {
    return _mm512_loadu_si512(reinterpret_cast<const void*>(x + i));
  }
};
/// float16: the hardware conversion (exact: subnormals become normal float32, NaN stays NaN).
struct LoadF16 {
  const u16* x;
  static constexpr bool kWidens = true;
  AMP_512 __m512i operator()(int i) const {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    return _mm512_castps_si512(_mm512_cvtph_ps(h));
  }
};

// ---------------------------------------------------------------- pass 1

/// What the first pass over a block found (float32 terms).
struct Pass1 {
  u32 amax, amin1;  // largest |bits|; smallest nonzero |bits| minus one (~0u: all zeros)
  double sum, sum_sq;
  i64 key_sum;
};

/// 64 values of the first pass: ranges, moments, keys; widened bits into `f32` when loading
/// 16-bit sources.
template <typename Load>
AMP_512 void pass64(const Load& load, int i, u32* __restrict f32, u8* __restrict key, __m512i& mx,
                    __m512i& mn, __m512i& ksum, __m512& s, __m512& q) {
  const __m512i absm = _mm512_set1_epi32(0x7FFFFFFF), ones = _mm512_set1_epi32(-1);
  const __m512i x0 = load(i), x1 = load(i + 16), x2 = load(i + 32), x3 = load(i + 48);
  if constexpr (Load::kWidens) {
    _mm512_store_si512(f32 + i, x0);
    _mm512_store_si512(f32 + i + 16, x1);
    _mm512_store_si512(f32 + i + 32, x2);
    _mm512_store_si512(f32 + i + 48, x3);
  }
  const __m512i a0 = _mm512_and_si512(x0, absm), a1 = _mm512_and_si512(x1, absm);
  const __m512i a2 = _mm512_and_si512(x2, absm), a3 = _mm512_and_si512(x3, absm);
  mx = _mm512_max_epu32(mx, _mm512_max_epu32(_mm512_max_epu32(a0, a1), _mm512_max_epu32(a2, a3)));
  mn = _mm512_min_epu32(
      mn,
      _mm512_min_epu32(_mm512_min_epu32(_mm512_add_epi32(a0, ones), _mm512_add_epi32(a1, ones)),
                       _mm512_min_epu32(_mm512_add_epi32(a2, ones), _mm512_add_epi32(a3, ones))));
  moments4(_mm512_castsi512_ps(x0), _mm512_castsi512_ps(x1), _mm512_castsi512_ps(x2),
           _mm512_castsi512_ps(x3), s, q);
  const __m512i e01 = _mm512_packus_epi32(_mm512_srli_epi32(a0, 23), _mm512_srli_epi32(a1, 23));
  const __m512i e23 = _mm512_packus_epi32(_mm512_srli_epi32(a2, 23), _mm512_srli_epi32(a3, 23));
  const __m512i b = _mm512_packus_epi16(e01, e23);  // in Bits32::elem_of's order
  _mm512_store_si512(key + i, b);
  ksum = _mm512_add_epi64(ksum, _mm512_sad_epu8(b, _mm512_setzero_si512()));
}

/// The loop of a first pass over a full block: step(i, s, q) reads values i..i+63 and adds their
/// float sums and squares into s and q; groups of 128 values then go into double (one prefetch
/// step per 64 values).
template <typename Step>
AMP_512 Moments first_pass(Prefetch& pf, Step step) {
  Moments M;
  M.zero();
  for (int g = 0; g < kBlock; g += 128) {
    __m512 s = _mm512_setzero_ps(), q = s;
    for (int i = g; i < g + 128; i += 64) {
      pf.step();
      step(i, s, q);
    }
    M.add_group(s, q);
  }
  return M;
}

/// The first pass over a full block of float32 bits (read by `load`).
template <typename Load>
AMP_512 Pass1 pass_block(const Load& load, u32* __restrict f32, u8* __restrict key, Prefetch& pf) {
  const __m512i z = _mm512_setzero_si512();
  __m512i mx = z, mn = _mm512_set1_epi32(-1), ksum = z;
  const Moments M = first_pass(pf, [&](int i, __m512& s, __m512& q) AMP_512_TARGET {
    pass64(load, i, f32, key, mx, mn, ksum, s, q);
  });
  return Pass1{static_cast<u32>(_mm512_reduce_max_epu32(mx)),
               static_cast<u32>(_mm512_reduce_min_epu32(mn)), hsum_pd(_mm512_add_pd(M.s0, M.s1)),
               hsum_pd(_mm512_add_pd(M.q0, M.q1)), _mm512_reduce_add_epi64(ksum)};
}

/// Largest and smallest of the 32 unsigned 16-bit lanes of v.
AMP_512 u32 reduce_max_epu16(__m512i v) {
  const __m512i lo = _mm512_and_si512(v, _mm512_set1_epi32(0xFFFF));
  return static_cast<u32>(_mm512_reduce_max_epu32(_mm512_max_epu32(lo, _mm512_srli_epi32(v, 16))));
}
AMP_512 u32 reduce_min_epu16(__m512i v) {
  const __m512i lo = _mm512_and_si512(v, _mm512_set1_epi32(0xFFFF));
  return static_cast<u32>(_mm512_reduce_min_epu32(_mm512_min_epu32(lo, _mm512_srli_epi32(v, 16))));
}

/// The first pass over a full float16 or bfloat16 block, on its 16-bit lanes: max and min of |h|
/// (amax16, amin1_16: the smallest nonzero minus one, 0xFFFF when all are zeros), the moments
/// (widened in registers) and the keys: the float32 exponent byte of each value, |h| >> 7 for
/// bfloat16 (a bfloat16 is the high half of its float32), (|h| >> 10) + 112 for a float16 of
/// nonzero exponent field, 0 for float16 zeros and subnormals (see Subnormals16).
template <bool kBF16>
AMP_512 Pass1 pass_block16(const u16* __restrict x, u8* __restrict key, u32& amax16,
                           u32& amin1_16, Prefetch& pf) {
  const __m512i z = _mm512_setzero_si512(), absm = _mm512_set1_epi16(0x7FFF);
  const __m512i one = _mm512_set1_epi16(1), rebias = _mm512_set1_epi16(112);
  __m512i mx = z, mn = _mm512_set1_epi16(-1), ksum = z;
  auto key16 = [&](__m512i a) AMP_512_TARGET {
    if constexpr (kBF16) return _mm512_srli_epi16(a, 7);
    const __m512i e = _mm512_srli_epi16(a, 10);
    return _mm512_mask_add_epi16(e, _mm512_test_epi16_mask(e, e), e, rebias);
  };
  const Moments M = first_pass(pf, [&](int i, __m512& s, __m512& q) AMP_512_TARGET {
    const __m512i x0 = _mm512_loadu_si512(x + i), x1 = _mm512_loadu_si512(x + i + 32);
    const __m512i a0 = _mm512_and_si512(x0, absm), a1 = _mm512_and_si512(x1, absm);
    mx = _mm512_max_epu16(mx, _mm512_max_epu16(a0, a1));
    mn = _mm512_min_epu16(mn,
                          _mm512_min_epu16(_mm512_sub_epi16(a0, one), _mm512_sub_epi16(a1, one)));
    const __m512i b = _mm512_packus_epi16(key16(a0), key16(a1));
    _mm512_store_si512(key + i, b);
    ksum = _mm512_add_epi64(ksum, _mm512_sad_epu8(b, z));
    if constexpr (kBF16) {  // the order does not matter to the sums
      moments4(_mm512_castsi512_ps(_mm512_unpacklo_epi16(z, x0)),
               _mm512_castsi512_ps(_mm512_unpackhi_epi16(z, x0)),
               _mm512_castsi512_ps(_mm512_unpacklo_epi16(z, x1)),
               _mm512_castsi512_ps(_mm512_unpackhi_epi16(z, x1)), s, q);
    } else {
      moments4(_mm512_cvtph_ps(_mm512_castsi512_si256(x0)),
               _mm512_cvtph_ps(_mm512_extracti64x4_epi64(x0, 1)),
               _mm512_cvtph_ps(_mm512_castsi512_si256(x1)),
               _mm512_cvtph_ps(_mm512_extracti64x4_epi64(x1, 1)), s, q);
    }
  });
  amax16 = reduce_max_epu16(mx);
  amin1_16 = reduce_min_epu16(mn);
  return Pass1{bits16_to_f32<kBF16>(amax16),
               amin1_16 == 0xFFFFu ? ~0u : bits16_to_f32<kBF16>(amin1_16 + 1) - 1u,
               hsum_pd(_mm512_add_pd(M.s0, M.s1)), hsum_pd(_mm512_add_pd(M.q0, M.q1)),
               _mm512_reduce_add_epi64(ksum)};
}

/// Finds a float16 block's subnormals (1 <= |h| <= 0x3FF) into `subs`; false when there are
/// more than Subnormals16::kMax.
AMP_512 bool find_subnormals16(const u16* __restrict x, Subnormals16& subs) {
  const __m512i absm = _mm512_set1_epi16(0x7FFF), one = _mm512_set1_epi16(1);
  const __m512i top = _mm512_set1_epi16(0x3FF);
  for (int i = 0; i < kBlock; i += 32) {
    const __m512i a = _mm512_and_si512(_mm512_loadu_si512(x + i), absm);
    u32 m = _mm512_cmplt_epu16_mask(_mm512_sub_epi16(a, one), top);  // zeros wrap
    if (m == 0) continue;
    if (subs.n + __builtin_popcount(m) > Subnormals16::kMax) return false;
    for (; m != 0; m = _blsr_u32(m)) subs.add(x[i + static_cast<int>(_tzcnt_u32(m))] & 0x7FFFu);
  }
  return true;
}

// ---------------------------------------------------------------- the bits of a block

/// Counts of |x| < kTh[ks[q]] over a block of float32 bits, K thresholds per pass.
template <int K>
AMP_512 void count_lt32(const u32* __restrict x, const int* ks, i64* out, Prefetch& pf) {
  const __m512i absm = _mm512_set1_epi32(0x7FFFFFFF), one = _mm512_set1_epi32(1);
  __m512i t[K], c[K];
  for (int k = 0; k < K; ++k) {
    t[k] = _mm512_set1_epi32(static_cast<int>(kTh[ks[k]]));
    c[k] = _mm512_setzero_si512();
  }
  for (int i = 0; i < kBlock; i += 16) {
    const __m512i a = _mm512_and_si512(_mm512_loadu_si512(x + i), absm);
    if (i % 32 == 0) pf.step();
    for (int k = 0; k < K; ++k)
      c[k] = _mm512_mask_add_epi32(c[k], _mm512_cmplt_epu32_mask(a, t[k]), c[k], one);
  }
  for (int k = 0; k < K; ++k) out[k] = _mm512_reduce_add_epi32(c[k]);
}

/// The same over float16 or bfloat16 bits: |x| < T exactly when |h| < T16 (Thresholds16; 16-bit
/// lane counters: at most kBlock / 32 per lane).
template <bool kBF16, int K>
AMP_512 void count_lt16(const u16* __restrict x, const int* ks, i64* out, Prefetch& pf) {
  static_assert(kBlock / 32 <= 0xFFFF, "16-bit counters");
  const auto& T16 = kBF16 ? kTh16BF16 : kTh16F16;
  const __m512i absm = _mm512_set1_epi16(0x7FFF), one = _mm512_set1_epi16(1);
  __m512i t[K], c[K];
  for (int k = 0; k < K; ++k) {
    t[k] = _mm512_set1_epi16(static_cast<short>(T16.t[ks[k]]));
    c[k] = _mm512_setzero_si512();
  }
  for (int i = 0; i < kBlock; i += 32) {
    const __m512i a = _mm512_and_si512(_mm512_loadu_si512(x + i), absm);
    pf.step();
    for (int k = 0; k < K; ++k)
      c[k] = _mm512_mask_add_epi16(c[k], _mm512_cmplt_epu16_mask(a, t[k]), c[k], one);
  }
  for (int k = 0; k < K; ++k) out[k] = _mm512_reduce_add_epi32(_mm512_madd_epi16(c[k], one));
}

/// A block of float32 bits in memory (float32 in place, float16 widened): pass64's key order.
struct Bits32 {
  const u32* x;
  /// The element of key position p of a 64-key group.
  static AMP_512 int elem_of(int p) { return ((p >> 2) & 3) * 16 + (p >> 4) * 4 + (p & 3); }
  AMP_512 u32 abs_bits(int i) const { return x[i] & kAbs32; }
  template <int K>
  AMP_512 void count_lt(const int* ks, i64* out, Prefetch& pf) const {
    count_lt32<K>(x, ks, out, pf);
  }
};
/// A float16 or bfloat16 block in place: pass_block16's key order, float32 bits by widening.
template <bool kBF16>
struct Bits16 {
  const u16* x;
  static AMP_512 int elem_of(int p) { return (p & 8) * 4 + (p >> 4) * 8 + (p & 7); }
  AMP_512 u32 abs_bits(int i) const { return bits16_to_f32<kBF16>(x[i] & 0x7FFFu); }
  template <int K>
  AMP_512 void count_lt(const int* ks, i64* out, Prefetch& pf) const {
    count_lt16<kBF16, K>(x, ks, out, pf);
  }
};
/// Exact counts below the thresholds ks[0..n) by compare passes (four at a time).
template <typename Bits>
AMP_512 void count_lt_all(const Bits& bits, const int* ks, int n, i64* out, Prefetch& pf) {
  for (int j = 0; j < n; j += 4) {
    const int m = std::min(4, n - j);
    if (m == 1) bits.template count_lt<1>(ks + j, out + j, pf);
    if (m == 2) bits.template count_lt<2>(ks + j, out + j, pf);
    if (m == 3) bits.template count_lt<3>(ks + j, out + j, pf);
    if (m == 4) bits.template count_lt<4>(ks + j, out + j, pf);
  }
}

// ---------------------------------------------------------------- histogram

constexpr int kMaxSweepBins = 32;  // wider blocks: the scalar multi-table histogram
constexpr i64 kScanLeft = 32;      // values left (zeros included) in 2+ binades: found by mask
constexpr i64 kSparseMax = 64;     // populated threshold binades of up to this many: by mask

/// Calls each(element, key) for the keys that `pick` (64 keys -> mask) selects, `count` of them.
template <typename Bits, typename Pick, typename Each>
AMP_512 void scan_keys(const u8* __restrict key, i64 count, Prefetch& pf, Pick pick, Each each) {
  for (int g = 0; g < kBlock && count > 0; g += 64) {
    pf.step();
    u64 m = pick(_mm512_load_si512(key + g));
    count -= __builtin_popcountll(m);
    for (; m != 0; m = _blsr_u64(m)) {
      const int p = static_cast<int>(_tzcnt_u64(m));
      each(g + Bits::elem_of(p), key[g + p]);
    }
  }
}

/// One carry-save adder step: a + b + c = 2 * h + l, bit by bit (majority and parity).
AMP_512 void csa(__m512i& h, __m512i& l, __m512i a, __m512i b, __m512i c) {
  h = _mm512_ternarylogic_epi32(a, b, c, 0xE8);
  l = _mm512_ternarylogic_epi32(a, b, c, 0x96);
}

/// Adds to c[j] the number of bytes of v with bit j set, times `w`.
AMP_512 void add_bit_counts(__m512i v, u32 w, u32 c[8]) {
  for (int j = 7; j >= 0; --j) {  // bit j to each byte's top (a byte added to itself: << 1)
    c[j] += w * static_cast<u32>(__builtin_popcountll(_mm512_movepi8_mask(v)));
    v = _mm512_add_epi8(v, v);
  }
}

/// Whether the windows' bit counters are summed by bit_counts_gfni (see set_stats_avx512_gfni).
std::atomic<bool> g_gfni{stats_avx512_gfni_usable()};

/// The same sums as add_bit_counts over the seven counters (weights 1, 2, ..., 64), with GFNI and
/// BITALG: each qword's 8x8 bit matrix transposed (GF2P8AFFINEQB with the unit bytes: byte j of
/// a qword gets bit j of its eight bytes), the bytes' popcounts, weighted in bytes (weights 1..16
/// reach 8 * 31 = 248 at most; 32 and 64 apart, as 1 and 2), then summed across the qwords in
/// 16-bit lanes. About 40 vector operations for the loop's ~220 (9-10% of the whole kernel on
/// randn data in cache, 2026-12-08).
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,gfni,avx512bitalg"), noinline))
void bit_counts_gfni(const __m512i* counters, u32 c[8]) {
  const __m512i units = _mm512_set1_epi64(static_cast<long long>(0x8040201008040201ull));
  __m512i t[7];
  for (int q = 0; q < 7; ++q)
    t[q] = _mm512_popcnt_epi8(_mm512_gf2p8affine_epi64_epi8(units, counters[q], 0));
  __m512i low = t[4];
  for (int q = 3; q >= 0; --q) low = _mm512_add_epi8(_mm512_add_epi8(low, low), t[q]);
  const __m512i high = _mm512_add_epi8(_mm512_add_epi8(t[6], t[6]), t[5]);
  const __m512i z = _mm512_setzero_si512();
  auto pairs = [&](__m512i v) __attribute__((target("avx512f,avx512bw"))) {
    return _mm512_add_epi16(_mm512_unpacklo_epi8(v, z), _mm512_unpackhi_epi8(v, z));
  };
  const __m512i w = _mm512_add_epi16(pairs(low), _mm512_slli_epi16(pairs(high), 5));
  const __m256i w256 =
      _mm256_add_epi16(_mm512_castsi512_si256(w), _mm512_extracti64x4_epi64(w, 1));
  const __m128i w128 =
      _mm_add_epi16(_mm256_castsi256_si128(w256), _mm256_extracti128_si256(w256, 1));
  alignas(16) u16 sums[8];
  _mm_store_si128(reinterpret_cast<__m128i*>(sums), w128);
  for (int j = 0; j < 8; ++j) c[j] = sums[j];
}

/// Counts of key bytes equal to b + j (j = 0..7) over the block's keys: each key in the window
/// becomes bit j of a byte (a table lookup), and the bits are added position by position in
/// carry-save form, sixteen vectors a step (Harley-Seal): about a third of the work per binade of
/// masked byte counts.
AMP_512 void count_keys8(const u8* __restrict key, u8 b, u32 c[8], Prefetch& pf) {
  static_assert(kBlock % 1024 == 0, "sixteen vectors a step");
  const __m512i base = _mm512_set1_epi8(static_cast<char>(b)), top = _mm512_set1_epi8(15);
  const __m512i lut = _mm512_broadcast_i32x4(
      _mm_setr_epi8(1, 2, 4, 8, 16, 32, 64, -128, 0, 0, 0, 0, 0, 0, 0, 0));
  auto bits = [&](int i) AMP_512_TARGET {  // key - b in [0, 8): that bit; else none
    pf.step();
    const __m512i k = _mm512_load_si512(key + i);
    return _mm512_shuffle_epi8(lut, _mm512_min_epu8(_mm512_sub_epi8(k, base), top));
  };
  static_assert(kBlock / 1024 < 8, "the sixteens' counter holds up to 7 per bit");
  __m512i ones = _mm512_setzero_si512(), twos = ones, fours = ones, eights = ones;
  __m512i n16 = ones, n32 = ones, n64 = ones;  // the sixteens, a binary counter
  for (int j = 0; j < 8; ++j) c[j] = 0;
  for (int i = 0; i < kBlock; i += 1024) {
    const __m512i sixteens = add_sixteen<__m512i>(
        [&](int j) AMP_512_TARGET { return bits(i + 64 * j); },
        [](__m512i& h, __m512i& l, __m512i a, __m512i b, __m512i c)
            AMP_512_TARGET { csa(h, l, a, b, c); },
        ones, twos, fours, eights);
    const __m512i carry = _mm512_and_si512(n16, sixteens);  // half adders
    n16 = _mm512_xor_si512(n16, sixteens);
    n64 = _mm512_ternarylogic_epi32(n64, n32, carry, 0x78);  // n64 ^ (n32 & carry)
    n32 = _mm512_xor_si512(n32, carry);
  }
  const __m512i counters[] = {ones, twos, fours, eights, n16, n32, n64};
  if (g_gfni.load(std::memory_order_relaxed)) return bit_counts_gfni(counters, c);
  for (int q = 0; q < 7; ++q) add_bit_counts(counters[q], 1u << q, c);
}

/// A block's keys and what is known of them.
template <typename Bits>
struct Keys {
  const u8* key;
  Bits bits;       // the block's values
  int emin, emax;  // exponent bytes of the smallest and largest nonzero |x| (emin >= 1)
  i64 key_sum;     // sum of all keys (a zero's key is 0)
  Prefetch* pf;    // stepped once per 64 keys or 32 values by every later pass
};

/// Per binade: the histogram, and the exact in-binade threshold counts found by scans.
struct Counts {
  u32 hb[256];
  i64 zeros = 0;  // after hist_sweeps: with the values left to the scan, until it has run
  i64 ex[kNumTh + 1] = {};  // per threshold: values inside its binade below it (slot kNumTh: none)
  int scan_lo = 0;          // binades emin..scan_lo-1 are left to the scan by mask (hb zero)
  i64 scan_left = 0;        // how many values they hold
};

/// Threshold compares of one element found by a scan (its binade's up to two thresholds).
template <typename Bits>
AMP_512 void threshold_of(const Keys<Bits>& kb, int i, int e, Counts& c) {
  const u32 a = kb.bits.abs_bits(i);
  const int k0 = kBinadeTh.k[e][0], k1 = kBinadeTh.k[e][1];
  c.ex[k0] += a < kBinadeTh.th[k0];
  c.ex[k1] += a < kBinadeTh.th[k1];
}

/// Narrow blocks: binades from the top down by windows of eight (sweep_windows), or the last
/// few values left to the scan by mask (add_thresholds). The zeros are what is left.
template <typename Bits>
AMP_512 void hist_sweeps(const Keys<Bits>& kb, Counts& c) {
  i64 left = 0;
  const int lo = sweep_windows(
      kb.emin, kb.emax, /*koff=*/0, kb.key_sum,
      [&](u8 b, u32 n[8]) AMP_512_TARGET { count_keys8(kb.key, b, n, *kb.pf); },
      WindowLimits{kMaxSweepBins / 8 + 1, kScanLeft, 1}, c.hb, left);
  if (lo > kb.emin) c.scan_lo = lo, c.scan_left = left;
  c.zeros = left;
}

/// Wide blocks: four tables indexed by key byte (no store-forwarding chain on repeated keys).
template <typename Bits>
AMP_512 void hist_tables(const Keys<Bits>& kb, Counts& c) {
  u32 t[4][256];
  for (auto& row : t) {
    row[0] = 0;
    std::memset(row + kb.emin, 0, sizeof(u32) * static_cast<std::size_t>(kb.emax - kb.emin + 1));
  }
  for (int j = 0; j < kBlock; j += 8) {
    u64 w;
    std::memcpy(&w, kb.key + j, 8);
    ++t[0][w & 0xFF], ++t[1][(w >> 8) & 0xFF], ++t[2][(w >> 16) & 0xFF], ++t[3][(w >> 24) & 0xFF];
    ++t[0][(w >> 32) & 0xFF], ++t[1][(w >> 40) & 0xFF], ++t[2][(w >> 48) & 0xFF], ++t[3][w >> 56];
  }
  c.zeros = t[0][0] + t[1][0] + t[2][0] + t[3][0];
  for (int e = kb.emin; e <= kb.emax; ++e) c.hb[e] = t[0][e] + t[1][e] + t[2][e] + t[3][e];
}

// ---------------------------------------------------------------- thresholds

/// One scan by mask over the keys: the binades below c.scan_lo (histogram and thresholds) and
/// the N sparse threshold binades sparse[0..N) (thresholds; `count` values). N is a template
/// argument: the scan's cost per 64 keys is one compare per binade key.
template <int N, typename Bits>
AMP_512 void scan_rest(const Keys<Bits>& kb, const u8* sparse, i64 count, Counts& c) {
  const __m512i base = _mm512_set1_epi8(static_cast<char>(kb.emin));
  const __m512i span = _mm512_set1_epi8(static_cast<char>(std::max(c.scan_lo - kb.emin, 0)));
  __m512i t[N > 0 ? N : 1];
  for (int q = 0; q < N; ++q) t[q] = _mm512_set1_epi8(static_cast<char>(sparse[q]));
  scan_keys<Bits>(
      kb.key, c.scan_left + count, *kb.pf,
      [&](__m512i k) AMP_512_TARGET {
        __mmask64 m = _mm512_cmplt_epu8_mask(_mm512_sub_epi8(k, base), span);  // zeros wrap
        for (int q = 0; q < N; ++q) m = _kor_mask64(m, _mm512_cmpeq_epi8_mask(k, t[q]));
        return m;
      },
      [&](int i, int e) AMP_512_TARGET {
        c.hb[e] += e < c.scan_lo;
        threshold_of(kb, i, e, c);
      });
}

/// Threshold counts of a block from its histogram: cumulative counts below each threshold's
/// binade, plus the part inside it (from the scan by mask where sparse, compare passes where
/// dense). Also completes the histogram of the binades left to the scan.
template <typename Bits>
AMP_512 void add_thresholds(const Keys<Bits>& kb, Counts& c, Acc32& A) {
  const int emin = kb.emin, emax = kb.emax;
  u8 sparse[4];
  int nsparse = 0, dense[kNumTh], ndense = 0;
  i64 nscan = 0;
  for (int E = std::max(emin, c.scan_lo); E <= emax; ++E) {
    const auto& bt = kBinadeTh.k[E];
    if (bt[0] == kNumTh || c.hb[E] == 0) continue;
    if (nsparse < 4 && nscan + c.hb[E] <= kSparseMax) {
      sparse[nsparse++] = static_cast<u8>(E), nscan += c.hb[E];
      continue;
    }
    for (int q = 0; q < 2; ++q)
      if (bt[q] != kNumTh) dense[ndense++] = bt[q];
  }
  if (c.scan_left + nscan > 0) {
    if (nsparse == 3) sparse[3] = sparse[2], nsparse = 4;  // four compares, one repeated
    if (nsparse == 0) scan_rest<0>(kb, sparse, nscan, c);
    if (nsparse == 1) scan_rest<1>(kb, sparse, nscan, c);
    if (nsparse == 2) scan_rest<2>(kb, sparse, nscan, c);
    if (nsparse == 4) scan_rest<4>(kb, sparse, nscan, c);
    for (int e = emin; e < c.scan_lo; ++e) c.zeros -= c.hb[e];  // (the sweeps' zeros held them)
  }
  i64 below[257];  // zeros plus the values in binades under e, for e in [emin, emax + 1]
  below[emin] = c.zeros;
  for (int e = emin; e <= emax; ++e) below[e + 1] = below[e] + c.hb[e];
  i64 n[kNumTh];
  count_lt_all(kb.bits, dense, ndense, n, *kb.pf);
  for (int j = 0; j < ndense; ++j)  // the pass counted every |x| < T: keep the part in T's binade
    c.ex[dense[j]] += n[j] - below[static_cast<int>(kTh[dense[j]] >> 23)];
  for (int k = 0; k < kNumTh; ++k)
    A.lt[k] += below[std::clamp(static_cast<int>(kTh[k] >> 23), emin, emax + 1)] + c.ex[k];
}

// ---------------------------------------------------------------- blocks

/// Range and moment bookkeeping of a fast block: false when the block is all zeros (then fully
/// counted).
AMP_512 bool add_ranges(const Pass1& r, Acc32& A) {
  A.count += kBlock;
  if (r.amin1 == ~0u) {
    A.zeros += kBlock;
    for (int k = 0; k < kNumTh; ++k) A.lt[k] += kBlock;
    return false;
  }
  A.sum += r.sum;
  A.sum_sq += r.sum_sq;
  A.amax = std::max<u64>(A.amax, r.amax);
  A.amin1 = std::min<u64>(A.amin1, r.amin1);
  return true;
}

/// Everything after the first pass of a fast block: ranges, histogram, thresholds. `key_min`: the
/// least key a nonzero value of the block has (float16: 113, its subnormals have a zero's key).
template <typename Bits>
AMP_512 void block_counts(const Pass1& r, const u8* key, Bits bits, Prefetch& pf, Acc32& A,
                          int key_min) {
  if (!add_ranges(r, A)) return;
  const Keys<Bits> kb{key,
                      bits,
                      std::max(static_cast<int>((r.amin1 + 1u) >> 23), key_min),
                      static_cast<int>(r.amax >> 23),
                      r.key_sum,
                      &pf};
  Counts c;
  if (kb.emax - kb.emin < kMaxSweepBins)
    hist_sweeps(kb, c);
  else
    hist_tables(kb, c);
  add_thresholds(kb, c, A);
  A.zeros += c.zeros;
  for (int e = kb.emin; e <= kb.emax; ++e) A.hist[e - 127 + kOff32] += c.hb[e];
}

template <typename Load>
AMP_512_TARGET __attribute__((noinline)) void block_avx512(const Load& load, u32* f32, Prefetch pf,
                                                           Acc32& A);

/// The rest of a full block after its first pass: blocks with float32 subnormals (rare) go to the
/// general code; NaN/inf are set apart and the rest counted as a float32 block; out-of-range
/// moments are summed in double; all three on the float32 bits that `f32()` gives. The others
/// are counted on `bits`.
template <typename Bits, typename F32>
AMP_512 void after_pass(Pass1& r, const u8* key, Bits bits, F32 f32, Prefetch& pf, Acc32& A,
                        int key_min = 1) {
  if (r.amin1 < 0x007FFFFFu) {
    block32_general(f32(), kBlock, A);
  } else if (r.amax >= kInf32) {
    alignas(64) u32 finite[kBlock];
    NonFinite nf;
    nf.zero_into(f32(), finite);
    block_avx512(Load32{finite}, finite, pf, A);
    nf.correct(A);
    return;
  } else {
    if (!float_moments_safe(r.amax)) moments_double(f32(), r.sum, r.sum_sq);
    block_counts(r, key, bits, pf, A, key_min);
  }
  pf.drain();
}

/// A full float32 block, or a float16 one widened into `f32` (LoadF16): `load` reads it
/// (float32 bits); `f32` holds those bits for the later passes.
template <typename Load>
AMP_512_TARGET __attribute__((noinline)) void block_avx512(const Load& load, u32* f32, Prefetch pf,
                                                           Acc32& A) {
  alignas(64) u8 key[kBlock];
  Pass1 r = pass_block(load, f32, key, pf);
  after_pass(r, key, Bits32{f32}, [&] { return f32; }, pf, A);
}

/// A full bfloat16 block, counted in place; widened into `f32` only for the rare blocks that take
/// the general path (NaN/inf, subnormals) or double moments.
AMP_512_TARGET __attribute__((noinline)) void block_bf16(const u16* x, u32* f32, Prefetch pf,
                                                         Acc32& A) {
  alignas(64) u8 key[kBlock];
  u32 amax16, amin1_16;
  Pass1 r = pass_block16<true>(x, key, amax16, amin1_16, pf);
  after_pass(r, key, Bits16<true>{x}, [&]() AMP_512_TARGET {
    bf16_to_f32(x, kBlock, f32);
    return f32;
  }, pf, A);
}

/// A full float16 block, counted in place, its few subnormals (up to Subnormals16::kMax) value by
/// value. Blocks with NaN/inf, more subnormals or no normal value are widened into `f32` and
/// counted as float32 (their subnormals are normal float32 values).
AMP_512_TARGET __attribute__((noinline)) void block_f16(const u16* x, u32* f32, Prefetch pf,
                                                        Acc32& A) {
  alignas(64) u8 key[kBlock];
  u32 amax16, amin1_16;
  Pass1 r = pass_block16<false>(x, key, amax16, amin1_16, pf);
  Subnormals16 subs;
  const bool has_subnormals = amin1_16 < kMinNormalF16 - 1;
  if (amax16 >= kInfF16 ||
      (has_subnormals && (amax16 < kMinNormalF16 || !find_subnormals16(x, subs))))
    return block_avx512(LoadF16{x}, f32, pf, A);
  // widened float16 values are normal float32 ones: the general path is never needed
  after_pass(r, key, Bits16<false>{x}, [&]() AMP_512_TARGET {
    f16_to_f32(x, kBlock, f32);
    return f32;
  }, pf, A, /*key_min=*/113);
  if (has_subnormals) subs.correct(A);
}

// ---------------------------------------------------------------- drivers

/// This build's full-block kernels, for the drivers (stats_drivers.h).
struct Avx512Kernel {
  static AMP_512 void block32(const u32* x, Prefetch pf, Acc32& A) {
    block_avx512(Load32{x}, const_cast<u32*>(x), pf, A);
  }
  template <bool kBF16>
  static AMP_512 void block16(const u16* x, u32* scratch, Prefetch pf, Acc32& A) {
    if constexpr (kBF16)
      block_bf16(x, scratch, pf, A);
    else
      block_f16(x, scratch, pf, A);
  }
};

}  // namespace

bool stats_avx512_usable() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                         __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                         __builtin_cpu_supports("f16c") && __builtin_cpu_supports("bmi2") &&
                         __builtin_cpu_supports("popcnt");
  return ok;
}

void run_stats_avx512(const TensorView& v, i64 begin, i64 end, Stats& out) {
  run_stats_with<Avx512Kernel>(v, begin, end, out);
}

bool stats_avx512_gfni_usable() {
  static const bool ok = [] {
    __builtin_cpu_init();  // (may run from a static initializer: g_gfni's)
    return stats_avx512_usable() && __builtin_cpu_supports("gfni") &&
           __builtin_cpu_supports("avx512bitalg");
  }();
  return ok;
}

bool stats_avx512_gfni() { return g_gfni.load(std::memory_order_relaxed); }

bool set_stats_avx512_gfni(bool on) {
  g_gfni.store(on && stats_avx512_gfni_usable());
  return g_gfni.load();
}

}  // namespace ampscope::detail

#else  // no AVX-512 build on this target

namespace ampscope::detail {
bool stats_avx512_usable() { return false; }
void run_stats_avx512(const TensorView& v, i64 begin, i64 end, Stats& out) {
  run_stats_portable(v, begin, end, out);
}
bool stats_avx512_gfni_usable() { return false; }
bool stats_avx512_gfni() { return false; }
bool set_stats_avx512_gfni(bool) { return false; }
}  // namespace ampscope::detail

#endif
