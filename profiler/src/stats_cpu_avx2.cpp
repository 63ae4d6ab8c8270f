// The AVX2/FMA/F16C build of the CPU stats kernel (x86-64, GCC/Clang), picked at run time.
//
// One read of each full block (kBlock elements) from memory, then passes over L1-resident data:
//   1. one pass over the source: max and min of |bits|, the sum and sum of squares, and the
//      exponent byte of every value (in float32 terms, minus one) into a 4 KiB key array. 16-bit
//      sources are read as they are: no float32 copy of the block is made.
//   2. the exponent histogram over windows of eight binades from the top down: each key in the
//      window becomes one bit of a byte (a table lookup) and the bits are added position by
//      position in carry-save form (about half the work per binade of byte compares), until one
//      binade is left beside the zeros (the two counts follow from the count and key sum left);
//      when few values are left in many binades they are found by mask;
//   3. the format counts from the histogram's cumulative counts: a threshold at a binade's lower
//      edge needs nothing more; for one inside a populated binade the values of that binade are
//      compared exactly (by mask and one by one when few, else a compare pass over the block).
// Blocks with NaN/inf (a tensor that went non-finite) have them set apart (NonFinite) and the
// rest counted as a float32 block; float16 blocks with many subnormals (a few are counted one by
// one) are widened to float32; blocks with float32 subnormals (rare in real tensors; bfloat16
// subnormals are such), partial blocks and float64 go to the portable build's code.
//
// Moments: squares and sums are accumulated in float within groups of 128 values (a pairwise tree
// per lane, then one accumulator per lane over four steps), and each group's partial sums are
// added in double. Per group the relative error of the sum of squares is at most 7 float roundings
// (7 * 2^-24); the sum's error is at most 6 * 2^-24 times the sum of |x|. Blocks whose squares
// could overflow or underflow float (|x| >= 2^59, or every |x| < 2^-40) use double throughout.
#include <algorithm>
#include <cstdint>

#include "stats_kernel.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define AMP_AVX2_TARGET __attribute__((target("avx2,fma,f16c,bmi,bmi2,popcnt,lzcnt")))
#define AMP_AVX2 AMP_AVX2_TARGET __attribute__((always_inline)) inline
#define AMP_SIMD_TARGET AMP_AVX2_TARGET
#define AMP_SIMD_INLINE AMP_AVX2
#include "stats_drivers.h"
#include "stats_window.h"

namespace ampscope::detail {
namespace {

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
AMP_AVX2 u32 hmax_epu16(__m256i v) {
  const __m256i w =
      _mm256_max_epu16(_mm256_and_si256(v, _mm256_set1_epi32(0xFFFF)), _mm256_srli_epi32(v, 16));
  return hmax_epu32(w);
}
AMP_AVX2 u32 hmin_epu16(__m256i v) {
  const __m256i w =
      _mm256_min_epu16(_mm256_and_si256(v, _mm256_set1_epi32(0xFFFF)), _mm256_srli_epi32(v, 16));
  return hmin_epu32(_mm256_and_si256(w, _mm256_set1_epi32(0xFFFF)));
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

// ---------------------------------------------------------------- moments

/// Sums and sums of squares: float within a group, double across groups.
struct Moments {
  __m256d s0, s1, q0, q1;
  AMP_AVX2 void zero() { s0 = s1 = q0 = q1 = _mm256_setzero_pd(); }
  /// Adds one group's float partial sums.
  AMP_AVX2 void add_group(__m256 s, __m256 q) {
    s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(s)));
    s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(s, 1)));
    q0 = _mm256_add_pd(q0, _mm256_cvtps_pd(_mm256_castps256_ps128(q)));
    q1 = _mm256_add_pd(q1, _mm256_cvtps_pd(_mm256_extractf128_ps(q, 1)));
  }
  AMP_AVX2 double sum() const { return hsum_pd(_mm256_add_pd(s0, s1)); }
  AMP_AVX2 double sum_sq() const { return hsum_pd(_mm256_add_pd(q0, q1)); }
};

/// Float partial sums of four vectors, added into s and q (a pairwise tree per lane).
AMP_AVX2 void moments4(__m256 f0, __m256 f1, __m256 f2, __m256 f3, __m256& s, __m256& q) {
  s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(f0, f1), _mm256_add_ps(f2, f3)));
  const __m256 p0 = _mm256_fmadd_ps(f1, f1, _mm256_mul_ps(f0, f0));
  const __m256 p1 = _mm256_fmadd_ps(f3, f3, _mm256_mul_ps(f2, f2));
  q = _mm256_add_ps(q, _mm256_add_ps(p0, p1));
}

/// Sums and sums of squares in double throughout (blocks outside float's safe range).
template <typename Load8>
AMP_AVX2 void moments_double(int n, Load8 load8, double& sum, double& sum_sq) {
  __m256d s0 = _mm256_setzero_pd(), s1 = s0, q0 = s0, q1 = s0;
  for (int i = 0; i < n; i += 8) {
    const __m256 f = load8(i);
    const __m256d d0 = _mm256_cvtps_pd(_mm256_castps256_ps128(f));
    const __m256d d1 = _mm256_cvtps_pd(_mm256_extractf128_ps(f, 1));
    s0 = _mm256_add_pd(s0, d0);
    s1 = _mm256_add_pd(s1, d1);
    q0 = _mm256_fmadd_pd(d0, d0, q0);
    q1 = _mm256_fmadd_pd(d1, d1, q1);
  }
  sum = hsum_pd(_mm256_add_pd(s0, s1));
  sum_sq = hsum_pd(_mm256_add_pd(q0, q1));
}

// ---------------------------------------------------------------- histogram and thresholds

/// One carry-save adder step: a + b + c = 2 * h + l, bit by bit.
AMP_AVX2 void csa(__m256i& h, __m256i& l, __m256i a, __m256i b, __m256i c) {
  const __m256i u = _mm256_xor_si256(a, b);
  h = _mm256_or_si256(_mm256_and_si256(a, b), _mm256_and_si256(u, c));
  l = _mm256_xor_si256(u, c);
}

/// Adds to c[j] the number of bytes of v with bit j set, times `w`.
AMP_AVX2 void add_bit_counts(__m256i v, u32 w, u32 c[8]) {
  for (int j = 7; j >= 0; --j) {  // bit j to each byte's top (a byte added to itself: << 1)
    c[j] += w * static_cast<u32>(__builtin_popcount(static_cast<u32>(_mm256_movemask_epi8(v))));
    v = _mm256_add_epi8(v, v);
  }
}

/// Counts of key bytes equal to b + j (j = 0..7) over kBlock bytes: each key in the window becomes
/// bit j of a byte (a table lookup), and the bits are added position by position in carry-save
/// form, sixteen vectors a step (Harley-Seal): about half the work of byte compares per binade.
AMP_AVX2 void count_key8(const u8* __restrict key, u8 b, u32 c[8]) {
  static_assert(kBlock % 512 == 0, "sixteen vectors a step");
  const __m256i base = _mm256_set1_epi8(static_cast<char>(b)), top = _mm256_set1_epi8(15);
  const __m256i lut = _mm256_setr_epi8(1, 2, 4, 8, 16, 32, 64, -128, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2,
                                       4, 8, 16, 32, 64, -128, 0, 0, 0, 0, 0, 0, 0, 0);
  auto bits = [&](int i) AMP_AVX2_TARGET {  // key - b in [0, 8): that bit; else none
    const __m256i k = _mm256_load_si256(reinterpret_cast<const __m256i*>(key + i));
    return _mm256_shuffle_epi8(lut, _mm256_min_epu8(_mm256_sub_epi8(k, base), top));
  };
  static_assert(kBlock / 512 < 16, "the sixteens' counter holds up to 15 per bit");
  __m256i ones = _mm256_setzero_si256(), twos = ones, fours = ones, eights = ones;
  __m256i n16 = ones, n32 = ones, n64 = ones, n128 = ones;  // the sixteens, a binary counter
  for (int j = 0; j < 8; ++j) c[j] = 0;
  for (int i = 0; i < kBlock; i += 512) {
    const __m256i sixteens = add_sixteen<__m256i>(
        [&](int j) AMP_AVX2_TARGET { return bits(i + 32 * j); },
        [](__m256i& h, __m256i& l, __m256i a, __m256i b, __m256i c)
            AMP_AVX2_TARGET { csa(h, l, a, b, c); },
        ones, twos, fours, eights);
    __m256i carry = _mm256_and_si256(n16, sixteens);  // half adders
    n16 = _mm256_xor_si256(n16, sixteens);
    const __m256i carry2 = _mm256_and_si256(n32, carry);
    n32 = _mm256_xor_si256(n32, carry);
    carry = _mm256_and_si256(n64, carry2);
    n64 = _mm256_xor_si256(n64, carry2);
    n128 = _mm256_xor_si256(n128, carry);
  }
  const __m256i counters[] = {ones, twos, fours, eights, n16, n32, n64, n128};
  for (int q = 0; q < 8; ++q) add_bit_counts(counters[q], 1u << q, c);
}

/// Exact threshold compares for the elements whose key byte satisfies `pick` (a mask builder),
/// `count` of them (the scan stops when all are found; a count that includes values `pick` does
/// not take reads every key): found by byte mask, handled one by one. `src.abs32(i)`: |float32
/// bits| of element i; `src.elem(p)`: the element whose key is at position p of a 32-key group.
/// With `hb`, also counts each found element's binade.
template <typename Src, typename Pick>
AMP_AVX2 void scan_keys(const u8* __restrict key, int koff, const Src& src, i64 count, Pick pick,
                        u32* __restrict hb, i64* __restrict ex) {
  auto visit = [&](u32 m, int g) AMP_AVX2_TARGET {
    for (; m != 0; m = _blsr_u32(m)) {
      const int p = static_cast<int>(_tzcnt_u32(m));
      const int e = key[g + p] + koff;
      if (hb != nullptr) ++hb[e];
      const u32 a = src.abs32(g + src.elem(p));
      const int k0 = kBinadeTh.k[e][0], k1 = kBinadeTh.k[e][1];
      ex[k0] += a < kBinadeTh.th[k0];
      ex[k1] += a < kBinadeTh.th[k1];
    }
  };
  // 64 keys a step; a step with no match costs two compares and a test (matches are few here)
  for (int g = 0; g < kBlock && count > 0; g += 64) {
    const __m256i m0 = pick(_mm256_load_si256(reinterpret_cast<const __m256i*>(key + g)));
    const __m256i m1 = pick(_mm256_load_si256(reinterpret_cast<const __m256i*>(key + g + 32)));
    const __m256i m01 = _mm256_or_si256(m0, m1);
    if (_mm256_testz_si256(m01, m01)) continue;
    const u32 a = static_cast<u32>(_mm256_movemask_epi8(m0));
    const u32 b = static_cast<u32>(_mm256_movemask_epi8(m1));
    count -= __builtin_popcount(a) + __builtin_popcount(b);
    visit(a, g);
    visit(b, g + 32);
  }
}

constexpr int kMaxSweeps = 5;  // windows (eight binades each) before the scan by mask
constexpr i64 kScanLeft = 24;  // values left in more than a window's binades: found by mask

/// What the sweeps know about a block: the keys (the source's exponent field: 0 for a zero, as
/// the block has no subnormals but float16 ones, see Subnormals16), its float32-domain exponent
/// range, and the offset from key to float32 exponent byte (112 for float16, 0 otherwise). Key
/// 255 (inf/NaN) never occurs.
struct KeyBlock {
  const u8* key;
  int emin, emax;
  int koff;
  i64 key_sum;
  Prefetch* pf;
};

/// Per-binade counts hb[emin..emax] (sweep_windows): returns the lowest binade counted, the
/// binades below it (if any) left to a scan by mask; `left` holds the values not counted (the
/// zeros among them).
AMP_AVX2 int sweep_binades(const KeyBlock& kb, u32* hb, i64& left) {
  return sweep_windows(
      kb.emin, kb.emax, kb.koff, kb.key_sum,
      [&](u8 b, u32 c[8]) AMP_AVX2_TARGET { count_key8(kb.key, b, c); },
      WindowLimits{kMaxSweeps, kScanLeft, 8}, hb, left);
}

/// The binades below the swept ones (emin <= e < lo), value by value: histogram and thresholds.
template <typename Src>
AMP_AVX2 void scan_below(const KeyBlock& kb, const Src& src, int lo, i64 left, u32* hb, i64* ex) {
  // emin <= key + koff < lo (a zero's key 0 is below emin - koff >= 1: wraps past lim)
  const __m256i base = _mm256_set1_epi8(static_cast<char>(kb.emin - kb.koff));
  const __m256i lim = _mm256_set1_epi8(static_cast<char>(lo - 1 - kb.emin));
  scan_keys(
      kb.key, kb.koff, src, left,
      [&](__m256i k) AMP_AVX2_TARGET {
        const __m256i r = _mm256_sub_epi8(k, base);
        return _mm256_cmpeq_epi8(_mm256_min_epu8(r, lim), r);
      },
      hb, ex);
}

/// Exact threshold compares for the values of up to four sparse binades (keys `sk`), `count` of
/// them, found by mask.
template <typename Src>
AMP_AVX2 void scan_sparse(const KeyBlock& kb, const Src& src, const u8* sk, int nsk, i64 count,
                          i64* ex) {
  const __m256i t0 = _mm256_set1_epi8(static_cast<char>(sk[0]));
  const __m256i t1 = _mm256_set1_epi8(static_cast<char>(sk[nsk > 1 ? 1 : 0]));
  const __m256i t2 = _mm256_set1_epi8(static_cast<char>(sk[nsk > 2 ? 2 : 0]));
  const __m256i t3 = _mm256_set1_epi8(static_cast<char>(sk[nsk > 3 ? 3 : 0]));
  auto eq2 = [&](__m256i k) AMP_AVX2_TARGET {
    return _mm256_or_si256(_mm256_cmpeq_epi8(k, t0), _mm256_cmpeq_epi8(k, t1));
  };
  if (nsk <= 2) {
    scan_keys(kb.key, kb.koff, src, count, eq2, nullptr, ex);
    return;
  }
  scan_keys(
      kb.key, kb.koff, src, count,
      [&](__m256i k) AMP_AVX2_TARGET {
        return _mm256_or_si256(eq2(k),
                               _mm256_or_si256(_mm256_cmpeq_epi8(k, t2), _mm256_cmpeq_epi8(k, t3)));
      },
      nullptr, ex);
}

/// Compare passes over the block for thresholds ks[0..n): adds to ex[k] the count of values
/// inside threshold k's binade that lie below it (`below(E)`: the count under binade E).
template <typename Src, typename Below>
AMP_AVX2 void count_dense(const Src& src, const int* ks, int n, Below below, i64* ex) {
  for (int j = 0; j < n; j += 4) {
    i64 c[4];
    const int m = std::min(4, n - j);
    if (m == 1)
      src.template count_lt<1>(ks + j, c);
    else if (m == 2)
      src.template count_lt<2>(ks + j, c);
    else if (m == 3)
      src.template count_lt<3>(ks + j, c);
    else
      src.template count_lt<4>(ks + j, c);
    for (int q = 0; q < m;
         ++q) {  // the pass counted every |x| < T: keep the part inside T's binade
      const int k = ks[j + q];
      ex[k] += c[q] - below(static_cast<int>(kTh[k] >> 23));
    }
  }
}

/// The histogram and threshold counts of a full block whose keys are in `kb`. `src` gives
/// element access: abs32(i) (|float32 bits| of element i), elem(p) (the element of key position
/// p in a group of 32) and count_lt<K>(ks, out) (counts of |x| < kTh[ks[q]] over the block).
template <typename Src>
AMP_AVX2 void count_block(const KeyBlock& kb, const Src& src, Acc32& A) {
  const int emin = kb.emin, emax = kb.emax;
  u32 hb[256];
  i64 left = 0;
  const int lo = sweep_binades(kb, hb, left);
  i64 ex[kNumTh + 1] = {};  // per threshold: values inside its binade below it
  if (lo > emin) {  // found by mask: what is left after them are the zeros
    scan_below(kb, src, lo, left, hb, ex);
    for (int e = emin; e < lo; ++e) left -= hb[e];
  }
  const i64 zeros = left;
  i64 below[257];  // zeros plus the values in binades under e, for e in [emin, emax + 1]
  below[emin] = zeros;
  for (int e = emin; e <= emax; ++e) {
    A.hist[e - 127 + kOff32] += hb[e];
    below[e + 1] = below[e] + hb[e];
  }
  auto below_binade = [&](int E) { return below[std::clamp(E, emin, emax + 1)]; };
  A.zeros += zeros;
  // Populated swept binades that hold a threshold: sparse ones scanned by mask, dense ones by a
  // compare pass.
  u8 sparse[4];
  int nsparse = 0, nneed = 0, need_k[kNumTh];
  i64 nscan = 0;
  for (int E = std::max(lo, 1); E <= emax; ++E) {
    const auto& bt = kBinadeTh.k[E];
    if (bt[0] == kNumTh || hb[E] == 0) continue;
    if (nsparse < 4 && nscan + hb[E] <= Src::kScanMax) {
      sparse[nsparse++] = static_cast<u8>(E - kb.koff);
      nscan += hb[E];
    } else {
      for (int q = 0; q < 2; ++q)
        if (bt[q] != kNumTh) need_k[nneed++] = bt[q];
    }
  }
  if (nsparse > 0) scan_sparse(kb, src, sparse, nsparse, nscan, ex);
  count_dense(src, need_k, nneed, below_binade, ex);
  kb.pf->drain();
  // Thresholds: the cumulative counts below each threshold's binade, plus the exact part inside.
  for (int k = 0; k < kNumTh; ++k) A.lt[k] += below_binade(static_cast<int>(kTh[k] >> 23)) + ex[k];
}

/// Range and moment bookkeeping shared by the block kinds, once a block is known to be fast:
/// false when the block is all zeros (already fully counted).
AMP_AVX2 bool add_ranges(u32 amax32, u32 amin1_32, double sum, double sum_sq, Acc32& A) {
  A.count += kBlock;
  if (amin1_32 == ~0u) {  // all zeros
    A.zeros += kBlock;
    for (int k = 0; k < kNumTh; ++k) A.lt[k] += kBlock;
    return false;
  }
  A.sum += sum;
  A.sum_sq += sum_sq;
  if (amax32 > A.amax) A.amax = amax32;
  if (amin1_32 < A.amin1) A.amin1 = amin1_32;
  return true;
}

// ---------------------------------------------------------------- float32 blocks

/// Element access of a float32 block for count_block.
struct Src32 {
  /// Populated threshold binades of up to this many values are scanned by mask, not compared.
  static constexpr i64 kScanMax = 64;
  const u32* x;
  AMP_AVX2 u32 abs32(int i) const { return x[i] & kAbs32; }
  /// Keys of 32 elements (four vectors v0..v3) are packed per 128-bit lane: v0 0-3, v1 0-3, v2 0-3,
  /// v3 0-3 | v0 4-7, v1 4-7, v2 4-7, v3 4-7.
  AMP_AVX2 static int elem(int p) { return ((p >> 2) & 3) * 8 + (p >> 4) * 4 + (p & 3); }
  template <int K>
  AMP_AVX2 void count_lt(const int* ks, i64* out) const {
    const __m256i absm = _mm256_set1_epi32(0x7FFFFFFF);
    __m256i t[K], c[K];
    for (int k = 0; k < K; ++k) {
      t[k] = _mm256_set1_epi32(static_cast<int>(kTh[ks[k]]));
      c[k] = _mm256_setzero_si256();
    }
    for (int i = 0; i < kBlock; i += 8) {
      const __m256i a =
          _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)), absm);
      for (int k = 0; k < K; ++k) c[k] = _mm256_sub_epi32(c[k], _mm256_cmpgt_epi32(t[k], a));
    }
    for (int k = 0; k < K; ++k) out[k] = hsum_epi32(c[k]);
  }
};

/// What the first pass over a block found: |bits| range in float32 terms, the float-group
/// moments and the sum of the keys.
struct Pass1 {
  u32 amax, amin1;  // largest |bits|; smallest nonzero |bits| minus one (~0u: all zeros)
  double sum, sum_sq;
  i64 key_sum;
};

/// One pass over a float32 block: max and min of |bits|, float moments per group of 128, and the
/// exponent bytes into `key` (see Src32).
AMP_AVX2 Pass1 pass32(const u32* __restrict x, u8* __restrict key, Prefetch& pf) {
  const __m256i absm = _mm256_set1_epi32(0x7FFFFFFF), ones = _mm256_set1_epi32(-1);
  const __m256i z = _mm256_setzero_si256();
  __m256i mx = z, mn = ones, ksum = z;
  Moments M;
  M.zero();
  for (int g = 0; g < kBlock; g += 128) {
    __m256 s = _mm256_setzero_ps(), q = s;
#pragma GCC unroll 1  // unrolled, the loop spills registers
    for (int i = g; i < g + 128; i += 32) {
      pf.step();  // two lines a step: the next block is asked for at the rate this one is read
      pf.step();
      const __m256i* p = reinterpret_cast<const __m256i*>(x + i);
      const __m256i x0 = _mm256_loadu_si256(p), x1 = _mm256_loadu_si256(p + 1);
      const __m256i x2 = _mm256_loadu_si256(p + 2), x3 = _mm256_loadu_si256(p + 3);
      const __m256i a0 = _mm256_and_si256(x0, absm), a1 = _mm256_and_si256(x1, absm);
      const __m256i a2 = _mm256_and_si256(x2, absm), a3 = _mm256_and_si256(x3, absm);
      mx = _mm256_max_epu32(mx,
                            _mm256_max_epu32(_mm256_max_epu32(a0, a1), _mm256_max_epu32(a2, a3)));
      mn = _mm256_min_epu32(
          mn, _mm256_min_epu32(
                  _mm256_min_epu32(_mm256_add_epi32(a0, ones), _mm256_add_epi32(a1, ones)),
                  _mm256_min_epu32(_mm256_add_epi32(a2, ones), _mm256_add_epi32(a3, ones))));
      moments4(_mm256_castsi256_ps(x0), _mm256_castsi256_ps(x1), _mm256_castsi256_ps(x2),
               _mm256_castsi256_ps(x3), s, q);
      const __m256i e01 = _mm256_packus_epi32(_mm256_srli_epi32(a0, 23), _mm256_srli_epi32(a1, 23));
      const __m256i e23 = _mm256_packus_epi32(_mm256_srli_epi32(a2, 23), _mm256_srli_epi32(a3, 23));
      const __m256i b = _mm256_packus_epi16(e01, e23);
      _mm256_store_si256(reinterpret_cast<__m256i*>(key + i), b);
      ksum = _mm256_add_epi64(ksum, _mm256_sad_epu8(b, z));
    }
    M.add_group(s, q);
  }
  return Pass1{hmax_epu32(mx), hmin_epu32(mn), M.sum(), M.sum_sq(),
               static_cast<i64>(hsum_epi64(ksum))};
}

/// A full block of float32 bits.
AMP_AVX2_TARGET __attribute__((noinline)) void block32_avx2(const u32* __restrict x, Acc32& A,
                                                            Prefetch pf) {
  static_assert(kBlock % 128 == 0 && kBlock <= 255 * 32, "groups and byte counters");
  alignas(32) u8 key[kBlock];
  Pass1 r = pass32(x, key, pf);
  // float32 subnormals (rare in real tensors): the general block
  if (r.amin1 < 0x007FFFFFu) {
    pf.drain();
    block32_general(x, kBlock, A);
    return;
  }
  if (r.amax >= kInf32) {  // NaN/inf: set apart, the rest on the fast path
    alignas(32) u32 finite[kBlock];
    NonFinite nf;
    nf.zero_into(x, finite);
    block32_avx2(finite, A, pf);
    nf.correct(A);
    return;
  }
  if (!float_moments_safe(r.amax))
    moments_double(
        kBlock,
        [&](int i)
            AMP_AVX2_TARGET { return _mm256_loadu_ps(reinterpret_cast<const float*>(x + i)); },
        r.sum, r.sum_sq);
  if (!add_ranges(r.amax, r.amin1, r.sum, r.sum_sq, A)) return pf.drain();
  const KeyBlock kb{
      key, static_cast<int>((r.amin1 + 1u) >> 23), static_cast<int>(r.amax >> 23), 0, r.key_sum,
      &pf};
  count_block(kb, Src32{x}, A);
}

// ---------------------------------------------------------------- float16 / bfloat16 blocks

/// Element access of a 16-bit block for count_block.
template <bool kBF16>
struct Src16 {
  /// A compare pass over 16-bit data costs no more than a scan by mask (2026-12-06, AMD Zen 4:
  /// scanning binades of up to 16, 40 or 64 values was no faster): never scan.
  static constexpr i64 kScanMax = 0;
  const u16* x;
  /// Keys of 32 elements (two vectors v0, v1) are packed per 128-bit lane: v0 0-7, v1 0-7 |
  /// v0 8-15, v1 8-15.
  AMP_AVX2 static int elem(int p) { return ((p >> 3) & 1) * 16 + (p >> 4) * 8 + (p & 7); }
  AMP_AVX2 u32 abs32(int i) const { return bits16_to_f32<kBF16>(x[i] & 0x7FFFu); }
  template <int K>
  AMP_AVX2 void count_lt(const int* ks, i64* out) const {
    const auto& T16 = kBF16 ? kTh16BF16 : kTh16F16;
    const __m256i absm = _mm256_set1_epi16(0x7FFF);
    __m256i t[K], c[K];
    for (int k = 0; k < K; ++k) {
      t[k] = _mm256_set1_epi16(static_cast<short>(T16.t[ks[k]]));
      c[k] = _mm256_setzero_si256();
    }
    // 16-bit lane counters: at most kBlock/16 per lane; two vectors a step into one counter
    // (two compares' sum first: -2..0 per lane and step)
    for (int i = 0; i < kBlock; i += 32) {
      const __m256i a =
          _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)), absm);
      const __m256i b =
          _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i + 16)), absm);
      for (int k = 0; k < K; ++k)
        c[k] = _mm256_sub_epi16(
            c[k], _mm256_add_epi16(_mm256_cmpgt_epi16(t[k], a), _mm256_cmpgt_epi16(t[k], b)));
    }
    const __m256i one16 = _mm256_set1_epi16(1);
    for (int k = 0; k < K; ++k) out[k] = hsum_epi32(_mm256_madd_epi16(c[k], one16));
  }
};

/// float32 values of eight 16-bit elements.
template <bool kBF16>
AMP_AVX2 __m256 load8_as_f32(const u16* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if constexpr (kBF16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  return _mm256_cvtph_ps(h);
}

/// Converts a 16-bit block to float32 bits (exact; element order kept).
template <bool kBF16>
AMP_AVX2 void convert16(const u16* __restrict src, u32* __restrict dst) {
  for (int i = 0; i < kBlock; i += 8)
    _mm256_store_ps(reinterpret_cast<float*>(dst + i), load8_as_f32<kBF16>(src + i));
}

/// One pass over a float16 (kBF16 false) or bfloat16 block: as pass32, with |bits| in the
/// source's own terms (amax16, amin1_16) and the exponent fields into `key` (see Src16).
template <bool kBF16>
AMP_AVX2 Pass1 pass16(const u16* __restrict x, u8* __restrict key, u32& amax16, u32& amin1_16,
                      Prefetch& pf) {
  constexpr int kShift = kBF16 ? 7 : 10;  // exponent field
  const __m256i absm = _mm256_set1_epi16(0x7FFF), ones = _mm256_set1_epi16(-1);
  const __m256i hi16 = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
  const __m256i z = _mm256_setzero_si256();
  __m256i mx = z, mn = ones, ksum = z;
  Moments M;
  M.zero();
  for (int g = 0; g < kBlock; g += 128) {
    __m256 s = _mm256_setzero_ps(), q = s;
#pragma GCC unroll 1  // unrolled, the loop spills registers
    for (int i = g; i < g + 128; i += 32) {
      pf.step();
      const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
      const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i + 16));
      const __m256i a0 = _mm256_and_si256(v0, absm), a1 = _mm256_and_si256(v1, absm);
      mx = _mm256_max_epu16(mx, _mm256_max_epu16(a0, a1));
      mn = _mm256_min_epu16(
          mn, _mm256_min_epu16(_mm256_add_epi16(a0, ones), _mm256_add_epi16(a1, ones)));
      if constexpr (kBF16) {  // odd and even elements: the order does not matter to the sums
        moments4(_mm256_castsi256_ps(_mm256_and_si256(v0, hi16)),
                 _mm256_castsi256_ps(_mm256_slli_epi32(v0, 16)),
                 _mm256_castsi256_ps(_mm256_and_si256(v1, hi16)),
                 _mm256_castsi256_ps(_mm256_slli_epi32(v1, 16)), s, q);
      } else {
        const __m128i* h = reinterpret_cast<const __m128i*>(x + i);
        moments4(_mm256_cvtph_ps(_mm_loadu_si128(h)), _mm256_cvtph_ps(_mm_loadu_si128(h + 1)),
                 _mm256_cvtph_ps(_mm_loadu_si128(h + 2)), _mm256_cvtph_ps(_mm_loadu_si128(h + 3)),
                 s, q);
      }
      const __m256i b =
          _mm256_packus_epi16(_mm256_srli_epi16(a0, kShift), _mm256_srli_epi16(a1, kShift));
      _mm256_store_si256(reinterpret_cast<__m256i*>(key + i), b);
      ksum = _mm256_add_epi64(ksum, _mm256_sad_epu8(b, z));
    }
    M.add_group(s, q);
  }
  amax16 = hmax_epu16(mx);
  amin1_16 = hmin_epu16(mn);
  return Pass1{bits16_to_f32<kBF16>(amax16),
               amin1_16 == 0xFFFFu ? ~0u : bits16_to_f32<kBF16>(amin1_16 + 1) - 1u, M.sum(),
               M.sum_sq(), static_cast<i64>(hsum_epi64(ksum))};
}

/// Finds a float16 block's subnormals (1 <= |h| <= 0x3FF) among the values of key 0 (zeros and
/// subnormals) into `subs`: only the 64-value stretches holding such a key are tested. False
/// when there are more than Subnormals16::kMax.
AMP_AVX2 bool find_subnormals16(const u16* __restrict x, const u8* __restrict key,
                                Subnormals16& subs) {
  const __m256i absm = _mm256_set1_epi16(0x7FFF), one = _mm256_set1_epi16(1);
  const __m256i top = _mm256_set1_epi16(0x3FE), z = _mm256_setzero_si256();
  auto subnormal = [&](__m256i v) AMP_AVX2_TARGET {  // 0 <= |h| - 1 <= 0x3FE
    const __m256i t = _mm256_sub_epi16(_mm256_and_si256(v, absm), one);
    return _mm256_cmpeq_epi16(_mm256_min_epu16(t, top), t);
  };
  for (int g = 0; g < kBlock; g += 64) {
    const __m256i k0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(key + g));
    const __m256i k1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(key + g + 32));
    const __m256i m = _mm256_or_si256(_mm256_cmpeq_epi8(k0, z), _mm256_cmpeq_epi8(k1, z));
    if (_mm256_testz_si256(m, m)) continue;
    for (int h = g; h < g + 64; h += 32) {
      const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + h));
      const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + h + 16));
      // bytes packed per 128-bit lane like the keys (Src16::elem)
      const __m256i m8 = _mm256_packs_epi16(subnormal(v0), subnormal(v1));
      u32 mm = static_cast<u32>(_mm256_movemask_epi8(m8));
      if (subs.n + __builtin_popcount(mm) > Subnormals16::kMax) return false;
      for (; mm != 0; mm = _blsr_u32(mm))
        subs.add(x[h + Src16<false>::elem(static_cast<int>(_tzcnt_u32(mm)))] & 0x7FFFu);
    }
  }
  return true;
}

/// A full block of float16 (kBF16 false) or bfloat16 bits, read in place. Blocks with NaN/inf, a
/// bfloat16 subnormal, more than Subnormals16::kMax float16 ones or no normal value are converted
/// to float32 and counted as such.
template <bool kBF16>
AMP_AVX2_TARGET __attribute__((noinline)) void block16_avx2(const u16* __restrict x, Acc32& A,
                                                            Prefetch pf) {
  constexpr u32 kInf16 = kBF16 ? kInfBF16 : kInfF16;
  constexpr u32 kMinNormal16 = kBF16 ? kMinNormalBF16 : kMinNormalF16;
  constexpr int kKeyOff = kBF16 ? 0 : 112;  // key + kKeyOff: the float32 exponent byte
  alignas(32) u8 key[kBlock];
  u32 amax16 = 0, amin1_16 = 0;
  Pass1 r = pass16<kBF16>(x, key, amax16, amin1_16, pf);
  Subnormals16 subs;
  const bool has_subnormals = amin1_16 < kMinNormal16 - 1;
  if (amax16 >= kInf16 ||
      (has_subnormals && (kBF16 || amax16 < kMinNormal16 || !find_subnormals16(x, key, subs)))) {
    alignas(64) u32 buf[kBlock];
    convert16<kBF16>(x, buf);
    block32_avx2(buf, A, pf);
    return;
  }
  if (kBF16 && !float_moments_safe(r.amax))
    moments_double(
        kBlock, [&](int i) AMP_AVX2_TARGET { return load8_as_f32<kBF16>(x + i); }, r.sum, r.sum_sq);
  if (!add_ranges(r.amax, r.amin1, r.sum, r.sum_sq, A)) return pf.drain();
  // the sweeps count the binades of normal values (a subnormal's key is a zero's)
  const int emin = std::max(static_cast<int>((r.amin1 + 1u) >> 23), kKeyOff + 1);
  const KeyBlock kb{key, emin, static_cast<int>(r.amax >> 23), kKeyOff, r.key_sum, &pf};
  count_block(kb, Src16<kBF16>{x}, A);
  if (has_subnormals) subs.correct(A);
}

/// This build's full-block kernels, for the drivers (stats_drivers.h).
struct Avx2Kernel {
  static AMP_AVX2 void block32(const u32* x, Prefetch pf, Acc32& A) { block32_avx2(x, A, pf); }
  template <bool kBF16>
  static AMP_AVX2 void block16(const u16* x, u32* /*scratch*/, Prefetch pf, Acc32& A) {
    block16_avx2<kBF16>(x, A, pf);
  }
};

}  // namespace

bool stats_avx2_usable() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                         __builtin_cpu_supports("f16c") && __builtin_cpu_supports("bmi") &&
                         __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("popcnt") &&
                         __builtin_cpu_supports("abm");
  return ok;
}

void run_stats_avx2(const TensorView& v, i64 begin, i64 end, Stats& out) {
  run_stats_with<Avx2Kernel>(v, begin, end, out);
}

}  // namespace ampscope::detail

#else  // no AVX2 build on this target

namespace ampscope::detail {
bool stats_avx2_usable() { return false; }
void run_stats_avx2(const TensorView& v, i64 begin, i64 end, Stats& out) {
  run_stats_portable(v, begin, end, out);
}
}  // namespace ampscope::detail

#endif
