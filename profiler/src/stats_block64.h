// The float64 block of the CPU stats kernel, inlined into both builds (portable and AVX2).
//
// torch converts a double to float16/bfloat16/float8 by first rounding it to float (the c10
// types are constructed from float), so the format counts use a float32 "proxy": the RNE float32
// of the value, with finite values that become float32 inf clamped to FLT_MAX (they overflow
// every format) and nonzero values that become float32 zero set to the smallest subnormal (they
// underflow every format). The float64 stats proper (ranges, sums, exponents) use the double.
#pragma once

#include <algorithm>

#include "stats_kernel.h"

namespace ampscope::detail {

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

/// One block of float64 values (n <= kBlock).
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

}  // namespace ampscope::detail
