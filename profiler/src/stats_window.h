// The carry-save tree of the exponent histogram's windows, shared by the SIMD builds of the CPU
// stats kernel (stats_cpu_avx2.cpp, stats_cpu_avx512.cpp; see the count_key8 of each). Each
// build defines AMP_WINDOW_FN as its own function attributes (target ISA, always_inline) before
// including this header, so that the tree compiles into that build only.
#pragma once

#ifndef AMP_WINDOW_FN
#error "define AMP_WINDOW_FN (the including build's function attributes) first"
#endif

namespace ampscope::detail {
namespace {

/// Adds sixteen vectors of bits, bits(0) .. bits(15), into carry-save counters (Harley-Seal):
/// ones, twos, fours and eights hold, one vector per binary digit, how many of the vectors added
/// so far (modulo sixteen) have each bit of each byte set; returns the carries out of eights
/// (the sixteens). `csa(h, l, a, b, c)` is the build's carry-save adder: a + b + c = 2h + l, bit
/// by bit.
template <typename V, typename Bits, typename Csa>
AMP_WINDOW_FN V add_sixteen(Bits bits, Csa csa, V& ones, V& twos, V& fours, V& eights) {
  V twos_a, twos_b, fours_a, fours_b, eights_a, eights_b, sixteens;
  csa(twos_a, ones, ones, bits(0), bits(1));
  csa(twos_b, ones, ones, bits(2), bits(3));
  csa(fours_a, twos, twos, twos_a, twos_b);
  csa(twos_a, ones, ones, bits(4), bits(5));
  csa(twos_b, ones, ones, bits(6), bits(7));
  csa(fours_b, twos, twos, twos_a, twos_b);
  csa(eights_a, fours, fours, fours_a, fours_b);
  csa(twos_a, ones, ones, bits(8), bits(9));
  csa(twos_b, ones, ones, bits(10), bits(11));
  csa(fours_a, twos, twos, twos_a, twos_b);
  csa(twos_a, ones, ones, bits(12), bits(13));
  csa(twos_b, ones, ones, bits(14), bits(15));
  csa(fours_b, twos, twos, twos_a, twos_b);
  csa(eights_b, fours, fours, fours_a, fours_b);
  csa(sixteens, eights, eights, eights_a, eights_b);
  return sixteens;
}

}  // namespace
}  // namespace ampscope::detail
