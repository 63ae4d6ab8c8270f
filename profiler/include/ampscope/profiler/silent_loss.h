// Silent precision loss seen by the observer: values that narrowing casts destroyed (autocast's
// casts of an op's inputs and weights, and the model's own .half()/.to() casts), and
// low-precision ops whose output lost (almost) every nonzero value. No torch types here.
#pragma once

#include <ampscope/profiler/observer.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ampscope {

/// What narrowing casts of one argument of one op entry destroyed, counted on the cast's
/// source exactly as `src.to(target)` rounds (the source's stats block). Recorded steps only;
/// a parameter is counted once per step however often it is cast.
struct CastLossCounts {
  /// Position of the cast tensor in the outer op's schema; -1 when the op is the cast itself
  /// (an explicit narrowing cast in the model's code).
  int arg_index = -1;
  std::string argument;     ///< schema name of that argument ("input", "weight", "self"...)
  bool parameter = false;   ///< the source was a parameter (a leaf that requires grad)
  std::int8_t source_dtype = -1;  ///< c10::ScalarType of the source
  std::int8_t target_dtype = -1;  ///< ... and of the cast's result
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
  std::int64_t worst_step = -1;  ///< step of the cast that lost the largest part of its norm
  double worst_rel_l2 = 0.0;     ///< sqrt(lost_sq / source_sq) of that cast
  /// Adds another record of the same argument.
  void add(const CastLossCounts& o);
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
  /// Adds another record of the same entry.
  void add(const DegenerateCounts& o);
};

/// An output counts as (almost) all zeros when at most this share of it is nonzero.
inline constexpr double kDegenerateNonzeroShare = 0.01;
/// ... and as degenerate when its float32 re-run differs by at least this relative error.
inline constexpr double kDegenerateRelErr = 0.5;
/// Float32 re-runs per entry for near-zero outputs (the first calls tell).
inline constexpr std::int64_t kMaxDegenerateChecks = 4;

/// The silent-loss records of one op entry.
struct SilentLossEntry {
  OpKey key;
  std::vector<CastLossCounts> casts;  ///< one per (argument, target dtype)
  DegenerateCounts degenerate;
};

/// Every entry with silent-loss records so far in this run (thread-safe).
std::vector<SilentLossEntry> silent_loss_snapshot();

}  // namespace ampscope
