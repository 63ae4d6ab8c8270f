// The exponent histogram by windows of eight binades, shared by the SIMD builds of the CPU stats
// kernel (stats_cpu_avx2.cpp, stats_cpu_avx512.cpp): the walk over the windows and the
// carry-save tree that counts one (each build's count_key8 wraps the tree in its own vectors).
// Each build defines AMP_SIMD_INLINE as its own function attributes (target ISA, always_inline)
// before including this header, so that these functions compile into that build only.
#pragma once

#ifndef AMP_SIMD_INLINE
#error "define AMP_SIMD_INLINE (the including build's function attributes) first"
#endif

#include <algorithm>

#include "stats_kernel.h"

namespace ampscope::detail {
namespace {

/// Adds eight vectors of bits, bits(first) .. bits(first + 7), into the carry-save counters
/// ones, twos and fours (one vector per binary digit); returns the carries out of fours (the
/// eights). `csa(h, l, a, b, c)` is the build's carry-save adder: a + b + c = 2h + l, bit by bit.
template <typename V, typename Bits, typename Csa>
AMP_SIMD_INLINE V add_eight(Bits& bits, Csa& csa, int first, V& ones, V& twos, V& fours) {
  V twos_a, twos_b, fours_a, fours_b, eights;
  csa(twos_a, ones, ones, bits(first), bits(first + 1));
  csa(twos_b, ones, ones, bits(first + 2), bits(first + 3));
  csa(fours_a, twos, twos, twos_a, twos_b);
  csa(twos_a, ones, ones, bits(first + 4), bits(first + 5));
  csa(twos_b, ones, ones, bits(first + 6), bits(first + 7));
  csa(fours_b, twos, twos, twos_a, twos_b);
  csa(eights, fours, fours, fours_a, fours_b);
  return eights;
}

/// Adds sixteen vectors of bits, bits(0) .. bits(15), into carry-save counters (Harley-Seal):
/// ones, twos, fours and eights hold, one vector per binary digit, how many of the vectors added
/// so far (modulo sixteen) have each bit of each byte set; returns the carries out of eights
/// (the sixteens).
template <typename V, typename Bits, typename Csa>
AMP_SIMD_INLINE V add_sixteen(Bits bits, Csa csa, V& ones, V& twos, V& fours, V& eights) {
  const V eights_a = add_eight<V>(bits, csa, 0, ones, twos, fours);
  const V eights_b = add_eight<V>(bits, csa, 8, ones, twos, fours);
  V sixteens;
  csa(sixteens, eights, eights, eights_a, eights_b);
  return sixteens;
}

/// Per-binade counts hb[emin..emax] of a full block by windows of eight binades from the top
/// down. Binade e has key e - koff (a zero's key is 0; emin - koff >= 1), `key_sum` is the sum
/// of all keys, and `count8(b, c)` counts the keys equal to b + j into c[j]. The walk ends when
/// one binade is left beside the zeros (the two counts follow from the count and key sum left),
/// when none is, or when the binades below lo go to a scan by mask: after `max_windows`
/// windows, or after one when at most `scan_left` values are left in more than `scan_binades`
/// binades. Returns the lowest binade counted; `left` is what was not counted: the zeros, and
/// the values of the binades below the returned one (their hb zero).
struct WindowLimits {
  int max_windows;
  i64 scan_left;
  int scan_binades;
};
template <typename Count8>
AMP_SIMD_INLINE int sweep_windows(int emin, int emax, int koff, i64 key_sum, Count8 count8,
                                  WindowLimits lim, u32* hb, i64& left) {
  for (int e = emin; e <= emax; ++e) hb[e] = 0;
  left = kBlock;           // values not counted yet (zeros included)
  i64 left_sum = key_sum;  // and the sum of their keys
  int lo = emax + 1;       // lowest binade counted so far
  for (int windows = 0; lo > emin; ++windows) {
    if (lo - emin == 1) {  // c_e + zeros = left,  (emin - koff) c_e = left_sum
      hb[emin] = static_cast<u32>(left_sum / (emin - koff));
      left -= hb[emin];
      return emin;
    }
    if (windows == lim.max_windows ||
        (windows > 0 && left <= lim.scan_left && lo - emin > lim.scan_binades))
      break;
    const int b = std::max(lo - 8 - koff, 0);  // the window's lowest key
    u32 c[8];
    count8(static_cast<u8>(b), c);
    // the binades not counted yet (a window near key 0 reaches into counted ones; key 0, the
    // zeros, is what is left at the end)
    for (int e = std::max(b + koff, emin); e < lo; ++e) {
      const u32 n = c[e - koff - b];
      hb[e] = n;
      left -= n;
      left_sum -= static_cast<i64>(e - koff) * n;
    }
    lo = std::max(b + koff, emin);
  }
  return lo;
}

}  // namespace
}  // namespace ampscope::detail
