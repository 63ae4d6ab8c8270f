// Silent precision loss seen by the observer: values that narrowing casts destroyed (autocast's
// casts of an op's inputs and weights, and the model's own .half()/.to() casts), and
// low-precision ops whose output lost (almost) every nonzero value. No torch types here.
#pragma once

#include <ampscope/profiler/loss_counts.h>
#include <ampscope/profiler/observer.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ampscope {

/// The casts of one argument of one op entry that narrowed its values: which argument and which
/// cast, and what they destroyed (the tally). A parameter is counted once per step however
/// often it is cast.
struct CastLossCounts : CastLossTally {
  /// Position of the cast tensor in the outer op's schema; -1 when the op is the cast itself
  /// (an explicit narrowing cast in the model's code).
  int arg_index = -1;
  std::string argument;     ///< schema name of that argument ("input", "weight", "self"...)
  bool parameter = false;   ///< the source was a parameter (a leaf that requires grad)
  std::int8_t source_dtype = -1;  ///< c10::ScalarType of the source
  std::int8_t target_dtype = -1;  ///< ... and of the cast's result

  /// The step being tallied (one call's: its step) and the run's record's sums over it.
  /// `worst_rel_l2` is a step's share of the norm lost over every cast of this argument in it:
  /// a model that loops over frames casts one argument many times a step, and one frame of
  /// tiny values is not the step's input.
  std::int64_t open_step = -1;
  double open_lost_sq = 0.0;
  double open_source_sq = 0.0;
  std::int64_t open_underflow = 0;

  /// Adds the tally of one call, a cast of step `call.open_step`.
  void add_call(const CastLossCounts& call);
  /// Folds the open step into worst_rel_l2 / worst_step.
  void close_step();
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
