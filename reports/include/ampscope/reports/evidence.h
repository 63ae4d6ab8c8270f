// The evidence of a recommendation, one type per rule. A rule fills its type; the type goes into
// Recommendation::evidence under its key (add_evidence), and whoever reads the evidence back (the
// summary's key evidence, `ampscope fix`) gets the type again (evidence_of), not keys by name.
// The JSON of each type is listed once, in reports/src/evidence.cpp. No torch here.
#pragma once

#include <ampscope/profiler/fp32_check.h>
#include <ampscope/profiler/phases.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace ampscope::reports {

/// origin_rule: the first harmful non-finite value ("first_nonfinite", one object).
struct OriginEvidence {
  static constexpr const char* kKey = "first_nonfinite";
  static constexpr bool kList = false;
  std::int64_t step = 0;
  Phase phase = Phase::kForward;
  std::string op;
  std::string kind;  ///< "nan" | "inf"
  bool inputs_finite = true;
  std::optional<std::string> compute_dtype;
  std::string fp32_recheck;  ///< "not_run" | "also_nonfinite" | "finite"
  std::optional<std::string> reached;
  std::optional<bool> nonfinite_scalar;  ///< written only when true
  std::optional<Fp32Check> fp32_check;
  /// The op's output, when its stats were taken (absmax of the finite values).
  std::optional<std::int64_t> count, nan, posinf, neginf;
  std::optional<double> absmax;
  std::optional<double> format_max;  ///< largest finite value of the compute format (float16, ...)
};

/// lowp_op_rule: an op computing in low precision that made NaN/Inf ("ops", a list).
struct NonfiniteOpEvidence {
  static constexpr const char* kKey = "ops";
  static constexpr bool kList = true;
  std::string op;
  Phase phase = Phase::kForward;
  std::int64_t calls = 0;
  std::string compute_dtype;
  std::int64_t nonfinite_from_finite = 0;
  std::int64_t harmful_nonfinite = 0;
  std::int64_t fp32_finite = 0;
  std::int64_t first_step = -1;
  std::int64_t nan = 0, posinf = 0, neginf = 0;
  double absmax = 0.0;  ///< of the finite outputs
  std::optional<double> format_max;
  std::optional<std::string> fp32_recheck;  ///< when this op is the run's first origin
};

/// precision_loss_rule: an op's --shadow re-runs in float32 ("shadow", a list).
struct ShadowEvidence {
  static constexpr const char* kKey = "shadow";
  static constexpr bool kList = true;
  std::string op;
  std::string compute_dtype;
  std::int64_t checks = 0;
  double max_rel_err = 0.0;
  double max_ulp = 0.0;
  double min_cosine = 1.0;
  std::int64_t worst_step = -1;
};

/// headroom_rule: a low-precision output close to, or heading for, the format's max
/// ("headroom", a list).
struct HeadroomEvidence {
  static constexpr const char* kKey = "headroom";
  static constexpr bool kList = true;
  std::string op;
  std::string compute_dtype;
  double absmax = 0.0;
  double format_max = 0.0;
  double headroom_binades = 0.0;
  double growth_binades_per_step = 0.0;
  std::optional<std::int64_t> projected_overflow_step;
};

/// One layer's share of the gradient values lost to underflow.
struct LayerGradLoss {
  std::string layer;
  double share = 0.0;
  std::int64_t underflow = 0;
  std::int64_t subnormal = 0;
  std::int64_t nonzero = 0;
};

/// grad_underflow_rule: gradients underflowing the run's format ("gradients", one object).
struct GradUnderflowEvidence {
  static constexpr const char* kKey = "gradients";
  static constexpr bool kList = false;
  std::string format;
  double share_lost = 0.0;
  std::int64_t nonzero_values = 0;
  std::int64_t underflow = 0;
  std::int64_t subnormal = 0;
  /// Of the gradients stored in the format itself (JSON "zeros_in_<format>_grads", ...).
  std::optional<std::int64_t> zeros_in_format, values_in_format;
  double grad_absmax = 0.0;
  int grad_exp_low = 0;
  int grad_exp_high = 0;
  std::optional<double> loss_scale_in_use;  ///< null without a GradScaler
  double suggested_scale = 1.0;
  double tail_scale = 1.0;
  bool range_too_wide = false;
  std::vector<LayerGradLoss> worst_layers;
};

/// loss_scale_rule: a GradScaler whose scale collapsed ("loss_scale", one object).
struct LossScaleEvidence {
  static constexpr const char* kKey = "loss_scale";
  static constexpr bool kList = false;
  std::int64_t updates = 0;
  std::int64_t skipped_steps = 0;
  std::int64_t first_found_inf_step = -1;
  std::int64_t trailing_found_inf = 0;
  double min_scale = 0.0, max_scale = 0.0, final_scale = 0.0;
};

/// cast_loss_rule: a narrowing cast that destroyed values ("cast_loss", a list).
struct CastLossEvidence {
  static constexpr const char* kKey = "cast_loss";
  static constexpr bool kList = true;
  std::string op;
  std::string argument;
  std::string cast;  ///< "autocast" | "model"
  bool parameter = false;
  std::string source_dtype;
  std::string target_dtype;
  std::int64_t values = 0, underflow = 0, overflow = 0, subnormal = 0;
  double share_lost = 0.0;
  double lost_rel_l2 = 0.0;
  double worst_rel_l2 = 0.0;
  std::int64_t first_step = -1;
  std::int64_t worst_step = -1;
};

/// degenerate_output_rule: a low-precision output of (almost) only zeros ("degenerate", a list).
struct DegenerateEvidence {
  static constexpr const char* kKey = "degenerate";
  static constexpr bool kList = true;
  std::string op;
  std::string compute_dtype;
  std::int64_t zero_outputs = 0, checked = 0, degenerate = 0;
  double nonzero_share = 0.0;
  double max_rel_err = 0.0;
  double fp32_absmax = 0.0;
  std::int64_t first_step = -1;
};

/// stale_updates_rule: parameter updates rounding swallowed ("stale_updates", a list).
struct StaleUpdateEvidence {
  static constexpr const char* kKey = "stale_updates";
  static constexpr bool kList = true;
  std::string param;
  std::string tensor;
  std::string dtype;
  std::int64_t steps = 0, updated = 0, stale = 0;
  double share_stale = 0.0;
  std::int64_t worst_step = -1;
  double worst_share = 0.0;
};

/// Adds `ev` to a recommendation's evidence under Ev::kKey (appended when a list).
template <typename Ev>
void add_evidence(nlohmann::json& evidence, const Ev& ev);

/// The items of type Ev in a recommendation's evidence (none, one, or a list's); an item that
/// is not a valid Ev (a report edited by hand, another version's) is left out.
template <typename Ev>
std::vector<Ev> evidence_of(const nlohmann::json& evidence);

}  // namespace ampscope::reports
