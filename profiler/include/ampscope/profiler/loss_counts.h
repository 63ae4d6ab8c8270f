// What silent precision loss did to one op entry, as tallies with one add() each: the counts of
// one narrowing cast of an argument (CastLossTally) and of near-zero low-precision outputs
// (DegenerateCounts). The observer's records (silent_loss.h) and the report's (report.h) are
// these plus their own keys, so threads, snapshots and ranks all merge the same way. Plain C++.
#pragma once

#include <cstdint>

namespace ampscope {

/// What the narrowing casts of one argument of one op entry destroyed, counted on the casts'
/// sources exactly as `src.to(target)` rounds them (recorded steps only).
struct CastLossTally {
  std::int64_t casts = 0;      ///< casts counted
  std::int64_t values = 0;     ///< source elements
  std::int64_t nonzero = 0;    ///< nonzero finite source values
  std::int64_t underflow = 0;  ///< nonzero finite values that became 0
  std::int64_t overflow = 0;   ///< finite values that became +-inf
  std::int64_t subnormal = 0;  ///< nonzero finite values that became subnormal
  double source_sq = 0.0;      ///< sum of the squared finite source values
  /// Upper bound (within 4x) of the sum of the squared values that became 0, from the source's
  /// exponent histogram: sqrt(lost_sq / source_sq) bounds the relative L2 norm lost.
  double lost_sq = 0.0;
  std::int64_t first_step = -1;  ///< first step with an underflowed or overflowed value
  std::int64_t worst_step = -1;  ///< recorded step whose casts lost the largest part of their norm
  double worst_rel_l2 = 0.0;     ///< sqrt(lost_sq / source_sq) over that step's casts

  /// Upper bound of the relative L2 norm the underflow took away over all casts (0..1).
  double lost_rel_l2() const;
  /// Adds the tally of the same cast from another thread, snapshot or rank.
  void add(const CastLossTally& o);
};

/// Low-precision calls of an entry whose output was (almost) all zeros, re-run in float32.
struct DegenerateCounts {
  std::int64_t zero_outputs = 0;  ///< calls with at most kDegenerateNonzeroShare nonzero
  std::int64_t checked = 0;       ///< of those, re-run in float32 (the first few per entry)
  std::int64_t degenerate = 0;    ///< re-runs whose float32 result was far from zero
  std::int64_t first_step = -1;   ///< step of the first degenerate call
  double min_nonzero_share = 1.0;  ///< lowest nonzero share of a degenerate output
  double max_rel_err = 0.0;        ///< worst ||lowp - fp32|| / ||fp32|| of those re-runs
  double fp32_absmax = 0.0;        ///< largest |value| the float32 re-runs produced
  /// Adds the counts of the same entry from another thread, snapshot or rank.
  void add(const DegenerateCounts& o);
};

}  // namespace ampscope
