// The recommendation engine: reads only the report model, so it is testable on hand-made reports.
#pragma once

#include <ampscope/reports/report.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ampscope::reports {

// Thresholds of the rules (see recommend.cpp and the README's reason codes).
/// precision_loss: --shadow relative L2 error above this ...
inline constexpr double kPrecisionLossRelErr = 0.05;
/// ... or cosine similarity with the float32 result below this.
inline constexpr double kPrecisionLossCosine = 0.99;
/// ... high when the re-run differs completely: rel. error at least this, or cosine at most this.
inline constexpr double kShadowLostRelErr = 0.5;
inline constexpr double kShadowLostCosine = 0.5;
/// cast_underflow_<format> / cast_overflow_<format>: a narrowing cast of an op's argument turned at
/// least this share of its nonzero finite values into 0 (or any into inf) ...
inline constexpr double kCastLossShare = 0.01;
/// ... high (rather than medium) from this share on.
inline constexpr double kCastLossHighShare = 0.25;
/// stale_updates_<format>: of a float16/bfloat16 parameter's elements with a nonzero gradient,
/// at least this share kept its stored value through an optimizer step ...
inline constexpr double kStaleUpdateShare = 0.1;
/// ... high from this share on.
inline constexpr double kStaleUpdateHighShare = 0.5;
/// headroom_<format>: peak absmax within this many binades (powers of two) of the format's max.
inline constexpr double kHeadroomWarnBinades = 1.0;
/// headroom_<format> by trend: growth of at least this many binades per step (fitted over the
/// last kHeadroomFitPoints points, at least kHeadroomMinPoints) reaching the max within
/// max(run steps, kHeadroomMinHorizon) more steps.
inline constexpr double kHeadroomMinGrowth = 0.1;
inline constexpr std::size_t kHeadroomFitPoints = 16;
inline constexpr std::size_t kHeadroomMinPoints = 4;
inline constexpr std::int64_t kHeadroomMinHorizon = 10;
/// grad_underflow_<format>: share of nonzero gradient values that underflow or are subnormal.
inline constexpr double kGradUnderflowShare = 0.01;
/// The suggested loss scale lifts this quantile of gradient magnitudes to the smallest normal.
inline constexpr double kScaleQuantile = 0.001;
/// loss_scale_collapse: this many trailing GradScaler updates that all found inf/NaN.
inline constexpr std::int64_t kCollapseRun = 5;
/// loss_scale_collapse also when this many updates, from the first on, all found inf/NaN: the
/// model never trained (backing off from a too-high initial scale takes fewer).
inline constexpr std::int64_t kNeverCleanRun = 10;

/// Severity rank: critical 3, high 2, medium 1, low 0; -1 for an unknown name.
int severity_rank(const std::string& severity);

/// Evidence-backed recommendations for a report, most severe first. A clean run gives none.
std::vector<Recommendation> recommend(const Report& report);
/// The key evidence of a recommendation in one line: each rule's line for its part, "; "-joined
/// (the summary's, the HTML's and `ampscope fix`'s).
std::string key_evidence(const Recommendation& rec);
/// True when a recommendation of the report has a reason code starting with `prefix`
/// ("grad_overflow_" for every format, or a whole code).
bool has_reason(const Report& r, const std::string& prefix);

}  // namespace ampscope::reports
