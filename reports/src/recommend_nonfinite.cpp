// Rules for NaN/Inf: where the run's first harmful ones came from, and which low-precision ops
// made them.
//
//   origin_rule        first_nonfinite, the origin of the first *harmful* NaN/Inf (one that
//                      reached a module output, a gradient, a parameter or optimizer state) ->
//                      pin_fp32 (critical, nonfinite_origin) when it came from finite inputs in
//                      low precision; fix_model (critical) when the FP32 re-check was also
//                      non-finite or the op already computed in float32/64 (nonfinite_in_fp32),
//                      or the op was handed NaN/Inf: a NaN/inf constant (nonfinite_constant)
//                      or values of unknown source (nonfinite_input); in backward ->
//                      pin_fp32 (critical, backward_of_forward_nonfinite) when the node met
//                      NaN/Inf its own forward call made in low precision (consumed there, met
//                      again by the backward formula: forward_nonfinite), else loss_scaling (critical,
//                      grad_overflow_<format>) unless a GradScaler ran, or fix_model for a
//                      float32 gradient. In the optimizer step computing in low precision ->
//                      fp32_master_weights (critical, optimizer_nonfinite_<format>). An origin whose maker was not recorded (a gradient the
//                      watch saw on an unsampled step; NaN/Inf handed in, or a backward origin,
//                      in a run with layer/op filters) -> watch (critical,
//                      nonfinite_origin_unobserved): re-run that step recorded.
//   lowp_op_rule       an op computing in the run's low-precision dtype produced harmful NaN/Inf
//                      from finite inputs and its FP32 re-run was finite (or could not run) ->
//                      pin_fp32 (high, overflow_<format> | nonfinite_lowp).
#include <ampscope/reports/recommend.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "dtypes.h"
#include "recommend_rules.h"
#include "text_util.h"

namespace ampscope::reports {
namespace {

std::string dtype_name(const std::string& d) { return dtypes::bare(d); }

std::string fp32_recheck_word(const std::optional<bool>& v) {
  if (!v) return "not_run";
  return *v ? "also_nonfinite" : "finite";
}

/// True when the report's first non-finite origin was shown to be non-finite in FP32 too, for
/// this (layer, op): pinning that op to FP32 cannot help.
bool fails_in_fp32_too(const Report& r, const std::string& layer, const std::string& op) {
  const auto& e = r.first_nonfinite;
  return e && e->inputs_finite && e->fp32_also_nonfinite.value_or(false) && e->layer == layer &&
         e->op == op;
}

/// Whether the run recorded only some layers or ops (include/exclude patterns): what it did not
/// record may have made NaN/Inf it never saw.
bool filtered(const Report& r) {
  const Sampling& s = r.run.sampling;
  return !s.include_layers.empty() || !s.exclude_layers.empty() || !s.include_ops.empty() ||
         !s.exclude_ops.empty();
}

/// A forward op of `layer` that made NaN/Inf from finite inputs by `step`, harmful or not: the
/// evidence of a backward origin that met its own forward's NaN/Inf (forward_nonfinite; GELU's
/// pow(x, 3) overflows float16 and tanh turns the inf into 1; its backward's 3 * x^2 is inf and
/// 0 * inf NaN). Ops in a low-precision format first.
const OpRecord* forward_creation(const Report& r, const std::string& layer, std::int64_t step) {
  const OpRecord* found = nullptr;
  for (const Layer& l : r.layers) {
    if (l.name != layer) continue;
    for (const OpRecord& op : l.ops) {
      if (op.phase != Phase::kForward || op.nonfinite_from_finite <= 0) continue;
      if (op.first_nonfinite_step < 0 || op.first_nonfinite_step > step) continue;
      Format fmt;
      if (dtypes::as_format(op.compute_dtype, &fmt)) return &op;
      if (!found) found = &op;
    }
  }
  return found;
}

/// The evidence of an op that made NaN/Inf from finite inputs ("ops").
NonfiniteOpEvidence forward_op_evidence(const OpRecord& op) {
  NonfiniteOpEvidence ev;
  ev.op = op.op;
  ev.phase = op.phase;
  ev.calls = op.calls;
  ev.compute_dtype = op.compute_dtype;
  ev.nonfinite_from_finite = op.nonfinite_from_finite;
  ev.harmful_nonfinite = op.harmful_nonfinite;
  ev.fp32_finite = op.fp32_finite;
  ev.first_step = op.first_nonfinite_step;
  ev.nan = op.stats.nan;
  ev.posinf = op.stats.posinf;
  ev.neginf = op.stats.neginf;
  ev.absmax = op.stats.absmax;  // of the finite outputs
  ev.format_max = format_max_of(op.compute_dtype);
  return ev;
}

/// The op's float32 re-runs were all non-finite too: a model bug, which no pin fixes.
bool nonfinite_in_fp32_too(const OpRecord& op) { return op.fp32_nonfinite > 0 && op.fp32_finite == 0; }

/// Whether pinning fixes the NaN/Inf a backward node `e` met from its own forward call `fwd`
/// (nullptr when its entry is not in the report: the node's dtype tells): the call computed in
/// a low-precision format and its float32 re-runs were not non-finite too.
bool pin_fixes_forward_creation(const NonFiniteEvent& e, const OpRecord* fwd) {
  Format fmt;
  if (!dtypes::as_format(fwd ? fwd->compute_dtype : e.compute_dtype, &fmt)) return false;
  return !(fwd && nonfinite_in_fp32_too(*fwd));
}

/// The finding of a first NaN/Inf that came out of a backward node.
void backward_origin(const Report& r, const NonFiniteEvent& e, const OriginEvidence& origin,
                     Finding& f) {
  add_evidence(f.evidence, origin);
  // The node was handed NaN/Inf (the watch saw the gradient only where it reached a parameter)
  // or the run did not record every op: where they came from was not seen, so no cause can be
  // named. Re-running that step with every op recorded names it.
  if (!e.inputs_finite || (filtered(r) && !e.forward_nonfinite)) {
    f.action = Action::kWatch;
    f.reasons = {"nonfinite_origin_unobserved"};
    return;
  }
  // The node's own forward op made NaN/Inf from finite inputs (consumed there) and its backward
  // formula meets them again: the forward's precision is what is wrong, not the gradients' scale.
  if (e.forward_nonfinite) {
    const OpRecord* fwd = forward_creation(r, e.layer, e.step);
    if (fwd) add_evidence(f.evidence, forward_op_evidence(*fwd));
    const bool pin = pin_fixes_forward_creation(e, fwd);
    f.action = pin ? Action::kPinFp32 : Action::kFixModel;
    f.reasons = {pin ? "backward_of_forward_nonfinite" : "nonfinite_in_fp32"};
    return;
  }
  // A gradient that overflowed: pinning one layer only moves the overflow to the next one
  // down; the gradients' scale is what is wrong. Under a GradScaler that is its job (it
  // skips the step and backs off), so only a run without one gets the finding.
  // A float32 gradient going non-finite from finite ones (sqrt at 0, ...) is a model bug.
  Format fmt;
  if (dtypes::as_format(e.compute_dtype, &fmt)) {
    if (!r.loss_scale.empty()) {
      f.reasons.clear();  // no finding
      return;
    }
    f.action = Action::kLossScaling;
    f.layer = "";  // a loss scale acts on the whole model (the origin's layer is in its evidence)
    f.reasons = {"grad_overflow_" + dtype_name(e.compute_dtype)};
  } else {
    f.action = Action::kFixModel;
    f.reasons = {"nonfinite_in_fp32"};
  }
}

/// The evidence of a non-finite event: where, what, and the re-check.
OriginEvidence origin_evidence(const NonFiniteEvent& e) {
  OriginEvidence origin;
  origin.step = e.step;
  origin.phase = e.phase;
  origin.op = e.op;
  origin.kind = e.kind;
  origin.inputs_finite = e.inputs_finite;
  if (!e.compute_dtype.empty()) origin.compute_dtype = e.compute_dtype;
  origin.fp32_recheck = fp32_recheck_word(e.fp32_also_nonfinite);
  if (!e.reached.empty()) origin.reached = e.reached;
  if (e.nonfinite_scalar) origin.nonfinite_scalar = true;
  origin.fp32_check = e.fp32_check;
  if (e.output_stats) {
    origin.count = e.output_stats->count;
    origin.nan = e.output_stats->nan;
    origin.posinf = e.output_stats->posinf;
    origin.neginf = e.output_stats->neginf;
    origin.absmax = e.output_stats->absmax;  // of the finite outputs
  }
  origin.format_max = format_max_of(e.compute_dtype);
  return origin;
}

/// Gradients a GradScaler caught because a backward node met NaN/Inf its own forward call made
/// in low precision: no scale makes 0 * inf finite, so the scaler skips every such step and
/// training stalls while the scale falls. A pin, one severity below an uncaught origin's.
void scaler_caught_origin(const Report& r, Findings& out) {
  if (!r.scaler_caught) return;
  const NonFiniteEvent& e = r.scaler_caught->first;
  if (e.phase != Phase::kBackward || !e.forward_nonfinite || !e.inputs_finite) return;
  const OpRecord* fwd = forward_creation(r, e.layer, e.step);
  if (!pin_fixes_forward_creation(e, fwd)) return;
  Finding f;
  f.layer = e.layer;
  f.severity = Severity::kHigh;
  f.action = Action::kPinFp32;
  f.reasons = {"backward_of_forward_nonfinite"};
  add_evidence(f.evidence, origin_evidence(e));
  if (fwd) add_evidence(f.evidence, forward_op_evidence(*fwd));
  out.push_back(std::move(f));
}

}  // namespace

// (a) The origin of the run's first harmful NaN/Inf.
void origin_rule(const Report& r, Findings& out) {
  scaler_caught_origin(r, out);
  if (!r.first_nonfinite) return;
  const NonFiniteEvent& e = *r.first_nonfinite;
  const OriginEvidence origin = origin_evidence(e);
  Finding f;
  f.layer = e.layer;
  f.severity = Severity::kCritical;
  if (e.phase == Phase::kBackward) {
    backward_origin(r, e, origin, f);
    if (!f.reasons.empty()) out.push_back(std::move(f));
    return;
  }
  // Already computed in float32 or wider: pinning to float32 changes nothing, so it is a
  // model bug even when the re-check could not run. So are NaN/Inf the op was given: a NaN/inf
  // constant of the model's (masked_fill(mask, -inf) whose row is all masked) or non-finite
  // values of unknown source (the data).
  const std::string cd = dtype_name(e.compute_dtype);
  const bool ran_wide = cd == "float32" || cd == "float64";
  if (!e.inputs_finite && !e.nonfinite_scalar && filtered(r)) {
    f.action = Action::kWatch;  // perhaps made by an op the filters left unrecorded
    f.reasons = {"nonfinite_origin_unobserved"};
  } else if (!e.inputs_finite) {
    f.action = Action::kFixModel;
    f.reasons = {e.nonfinite_scalar ? "nonfinite_constant" : "nonfinite_input"};
  } else if (e.fp32_also_nonfinite.value_or(false) || ran_wide) {
    f.action = Action::kFixModel;
    f.reasons = {"nonfinite_in_fp32"};
  } else if (e.phase == Phase::kOptimizer) {
    // The optimizer's own arithmetic in float16/bfloat16 (parameters and state of a model
    // converted as a whole): AdamW's eps of 1e-8 is 0 in float16, 0/0 where a gradient is 0.
    // No module to pin: its parameters and state must be float32.
    f.action = Action::kFp32MasterWeights;
    f.reasons = {"optimizer_nonfinite_" + cd};
  } else {
    f.action = Action::kPinFp32;
    f.reasons = {"nonfinite_origin"};
  }
  add_evidence(f.evidence, origin);
  out.push_back(std::move(f));
}

// (b) Ops computing in the run's low-precision dtype that made NaN/Inf from finite inputs.
void lowp_op_rule(const Report& r, Findings& out) {
  const std::string lowp = dtype_name(r.run.autocast_dtype);
  if (lowp.empty() || lowp == "float32" || lowp == "float64") return;
  for (const Layer& layer : r.layers) {
    for (const OpRecord& op : layer.ops) {
      if (dtype_name(op.compute_dtype) != lowp || op.nonfinite_from_finite <= 0) continue;
      // NaN/Inf consumed harmlessly (benign) are no finding; neither is an op that is
      // non-finite in float32 too: a pin cannot fix a model bug.
      if (op.harmful_nonfinite <= 0) continue;
      if (nonfinite_in_fp32_too(op)) continue;
      // Gradients that overflow are a matter of scale, not of one layer's precision
      // (origin_rule and the GradScaler deal with them): never a pin.
      if (op.phase == Phase::kBackward) continue;
      if (fails_in_fp32_too(r, layer.name, op.op)) continue;  // origin_rule says fix_model
      // The stats are the recorded steps'; an op whose NaN/Inf the sentinel saw on an unsampled
      // step has only the first origin's kind to tell.
      const auto& first = r.first_nonfinite;
      const bool infs = op.stats.posinf + op.stats.neginf > 0 ||
                        (first && first->layer == layer.name && first->op == op.op &&
                         first->kind == "inf");
      NonfiniteOpEvidence ev = forward_op_evidence(op);
      if (first && first->layer == layer.name && first->op == op.op && first->fp32_also_nonfinite)
        ev.fp32_recheck = fp32_recheck_word(first->fp32_also_nonfinite);

      Finding f;
      f.layer = layer.name;
      f.action = Action::kPinFp32;
      f.severity = Severity::kHigh;
      f.reasons = {infs ? "overflow_" + lowp : "nonfinite_lowp"};
      add_evidence(f.evidence, ev);
      out.push_back(std::move(f));
    }
  }
}

void origin_line(const OriginEvidence& e, std::vector<std::string>& lines) {
  std::string s = e.op + " at step " + text::number(static_cast<double>(e.step));
  if (!e.kind.empty()) s += " (" + e.kind + ")";
  if (!e.fp32_recheck.empty()) s += ", fp32 re-check " + e.fp32_recheck;
  lines.push_back(std::move(s));
}

void nonfinite_op_line(const NonfiniteOpEvidence& e, std::vector<std::string>& lines) {
  // `calls` counts the recorded steps' calls, the origins every step's (the sentinel's too).
  std::string s = e.op + ": " + text::number(static_cast<double>(e.nonfinite_from_finite));
  if (e.calls >= e.nonfinite_from_finite)
    s += "/" + text::number(static_cast<double>(e.calls)) + " calls non-finite";
  else
    s += " calls non-finite (" + text::number(static_cast<double>(e.calls)) +
         " on recorded steps)";
  if (std::isfinite(e.absmax)) {
    s += ", absmax " + text::number(e.absmax);
    if (e.format_max) s += " (max " + text::number(*e.format_max) + ")";
  }
  lines.push_back(std::move(s));
}

}  // namespace ampscope::reports
