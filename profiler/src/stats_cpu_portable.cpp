// The portable build of the CPU stats kernel: plain loops over lane arrays that GCC
// auto-vectorises for baseline x86-64 (or any target). Also the AVX2 build's fallback for blocks
// it does not handle itself (partial blocks, NaN/inf, float32 subnormals, float64).
// float64 blocks: stats_block64.h.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>

#include "stats_block64.h"
#include "stats_gather.h"
#include "stats_kernel.h"

namespace ampscope::detail {
namespace {

constexpr int kLanes = 16;       // lane-array width of the vectorisable loops
constexpr int kMaxVecBins = 24;  // widest exponent range counted with byte compares

}  // namespace

/// The general block: every count by compare, sums masked to finite values, scalar histogram.
void block32_general(const u32* __restrict x, int n, Acc32& A) {
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
static u32 count_eq_u8(const u8* __restrict k, int n32, u8 e) {
  u8 acc[32] = {};
  for (int g = 0; g < n32; g += 32)
    for (int l = 0; l < 32; ++l) acc[l] += static_cast<u8>(k[g + l] == e);
  u32 t = 0;
  for (int l = 0; l < 32; ++l) t += acc[l];
  return t;
}

/// One block of float32 bits: the fast path when it applies, the general block otherwise.
void block32_portable(const u32* __restrict x, int n, Acc32& A) {
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
  const int emin =
      amin1 == ~0u ? emax + 1 : static_cast<int>((amin1 + 1u) >> 23);  // all zero: none
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

// ---------------------------------------------------------------- results

namespace {

template <int NBins>
void finish(const Acc<NBins>& A, Stats& out) {
  constexpr bool f64 = NBins == kBins64;  // float64 sources, else float32-domain ones
  constexpr int off = f64 ? kOff64 : kOff32;
  const auto value_of = [](u64 bits) {
    if constexpr (f64) return f64_of(bits);
    else return static_cast<double>(f32_of(static_cast<u32>(bits)));
  };
  const auto exp_of = [](u64 bits) {
    if constexpr (f64) return exp_of64(bits);
    else return exp_of32(static_cast<u32>(bits));
  };
  Stats s;
  s.count = A.count;
  s.nan = A.nan;
  s.posinf = A.posinf;
  s.neginf = A.neginf;
  s.zeros = A.zeros;
  s.sum = A.sum;
  s.sum_sq = A.sum_sq;
  s.absmax = value_of(A.amax);
  if (A.amin1 != ~0ull) s.absmin_nonzero = value_of(A.amin1 + 1);
  const i64 nonfinite = A.nan + A.posinf + A.neginf;
  for (int f = 0; f < kNumFormats; ++f) {
    const i64 le_u = A.lt[3 * f], lt_s = A.lt[3 * f + 1], lt_o = A.lt[3 * f + 2];
    s.underflow[f] = le_u - A.zeros;
    s.subnormal[f] = lt_s - le_u;
    s.overflow[f] = (A.count - lt_o) - nonfinite;
  }
  out.merge(s);
  if (A.amin1 == ~0ull) return;  // no finite nonzero value: an empty histogram
  // the histogram's values lie in [|x|min, |x|max]: only those bins are read (a small tensor's
  // call would otherwise scan all NBins for its few)
  const int lo = exp_of(A.amin1 + 1), hi = exp_of(A.amax);
  out.exp_hist.add_bins(lo, A.hist + lo + off, hi - lo + 1);
}

}  // namespace

void finish32(const Acc32& A, Stats& out) { finish(A, out); }
void finish64(const Acc64& A, Stats& out) { finish(A, out); }

// ---------------------------------------------------------------- drivers

namespace {

/// Reads blocks of T from a view (contiguous: in place; strided: gathered) and hands each block
/// to `block(ptr, n)`.
template <typename T, typename Block>
void for_each_block(const TensorView& v, i64 begin, i64 end, T* buf, Block&& block) {
  const bool contig = v.is_contiguous();
  std::optional<Gather> g;  // strided views only (its index vectors are allocations)
  if (!contig) g.emplace(v, begin, sizeof(T));
  const T* base = static_cast<const T*>(v.data) + (contig ? begin : 0);
  for (i64 pos = begin; pos < end; pos += kBlock) {
    const int n = static_cast<int>(std::min<i64>(kBlock, end - pos));
    const T* src = base + (pos - begin);
    if (!contig) {
      g->next(n, buf);
      src = buf;
    }
    block(src, n);
  }
}

void run16(const TensorView& v, i64 begin, i64 end, bool bf16, Stats& out) {
  Acc32 A;  // on the stack: a heap one was an allocation per chunk read
  alignas(64) u32 buf[kBlock];
  alignas(64) u16 raw[kBlock];
  for_each_block(v, begin, end, raw, [&](const u16* src, int n) {
    if (bf16)
      bf16_to_f32(src, n, buf);
    else
      f16_to_f32(src, n, buf);
    block32_portable(buf, n, A);
  });
  finish32(A, out);
}

void run32(const TensorView& v, i64 begin, i64 end, Stats& out) {
  Acc32 A;  // on the stack: a heap one was an allocation per chunk read
  alignas(64) u32 buf[kBlock];
  for_each_block(v, begin, end, buf, [&](const u32* src, int n) { block32_portable(src, n, A); });
  finish32(A, out);
}

void run64(const TensorView& v, i64 begin, i64 end, Stats& out) {
  auto A = std::make_unique<Acc64>();
  alignas(64) u64 buf[kBlock];
  for_each_block(v, begin, end, buf, [&](const u64* src, int n) { block64(src, n, *A); });
  finish64(*A, out);
}

}  // namespace

void run_stats_portable(const TensorView& v, i64 begin, i64 end, Stats& out) {
  switch (v.dtype) {
    case DType::kFloat32:
      run32(v, begin, end, out);
      break;
    case DType::kFloat16:
      run16(v, begin, end, false, out);
      break;
    case DType::kBFloat16:
      run16(v, begin, end, true, out);
      break;
    case DType::kFloat64:
      run64(v, begin, end, out);
      break;
  }
}

}  // namespace ampscope::detail
