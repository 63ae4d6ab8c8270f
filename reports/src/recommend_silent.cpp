// Rules for silent precision loss: what low precision destroys without ever producing a NaN.
//
//   cast_loss_rule     a narrowing cast of a forward op's argument (autocast's casts of inputs and
//                      weights, or the model's own .half()/.to() cast) turned at least
//                      kCastLossShare of its nonzero finite values into 0 and took away at least
//                      kCastLossShare of the tensor's L2 norm (tiny values in a tensor of large
//                      ones, such as softmax tails, are lost harmlessly), or took away at
//                      least kCastLossHighShare of the norm in one recorded step, or turned any
//                      value into inf -> pin_fp32 for autocast's casts, fix_model for the model's
//                      own (a pin cannot undo a cast in the model's code): cast_underflow_<format>
//                      (high from kCastLossHighShare of the norm), cast_overflow_<format> (high).
//                      A bias's underflow counts only when the root mean square of what it lost
//                      is at least kCastLossShare of the op output's (it is added to it).
//   degenerate_output_rule  a low-precision op's output was (almost) all zeros while its
//                      float32 re-run was not (silent_loss.h: kDegenerateNonzeroShare,
//                      kDegenerateRelErr) -> pin_fp32 (high, degenerate_output_<format>).
//   stale_updates_rule  at least kStaleUpdateShare of a float16/bfloat16 parameter's elements
//                      with a nonzero gradient kept their stored value through the optimizer
//                      step -> fp32_master_weights (medium; high from kStaleUpdateHighShare,
//                      stale_updates_<format>).
#include <ampscope/reports/recommend.h>

#include <algorithm>
#include <cmath>

#include "dtypes.h"
#include "recommend_rules.h"
#include "text_util.h"

namespace ampscope::reports {
namespace {


double share(std::int64_t part, std::int64_t whole) {
  return whole > 0 ? static_cast<double>(part) / static_cast<double>(whole) : 0.0;
}

CastLossEvidence cast_evidence(const OpRecord& op, const CastLossRecord& c) {
  CastLossEvidence ev;
  ev.op = op.op;
  ev.argument = c.argument;
  ev.cast = c.arg_index < 0 ? "model" : "autocast";
  ev.parameter = c.parameter;
  ev.source_dtype = c.source_dtype;
  ev.target_dtype = c.target_dtype;
  ev.values = c.values;
  ev.underflow = c.underflow;
  ev.overflow = c.overflow;
  ev.subnormal = c.subnormal;
  ev.share_lost = share(c.underflow + c.overflow, c.nonzero);
  ev.lost_rel_l2 = c.lost_rel_l2();
  ev.worst_rel_l2 = c.worst_rel_l2;
  ev.first_step = c.first_step;
  ev.worst_step = c.worst_step;
  return ev;
}

/// What a bias's cast lost against the output it is added to: the root mean square of the
/// lost values (an upper bound, from lost_sq) over the output's, both per element. A zero-
/// initialised bias a few small steps in (1e-10 .. 1e-7) loses all its values to float16 and
/// changes no output element. NaN when the op's output stats are missing.
double bias_loss_vs_output(const OpRecord& op, const CastLossRecord& c) {
  if (c.values <= 0 || op.stats.finite() <= 0 || !(op.stats.sum_sq > 0)) return NAN;
  const double lost_ms = c.lost_sq / static_cast<double>(c.values);
  const double out_ms = op.stats.sum_sq / static_cast<double>(op.stats.finite());
  return std::sqrt(lost_ms / out_ms);
}

/// The finding of one cast record, or none when what it lost is immaterial.
std::optional<Finding> cast_finding(const Layer& layer, const OpRecord& op,
                                    const CastLossRecord& c) {
  const std::string fmt = dtypes::bare(c.target_dtype);
  const bool overflow = c.overflow > 0;
  // Material over the run, or in one recorded step (a weight that SGD later lifts out of
  // float16's underflow still computed nothing until then).
  const double l2 = std::max(c.lost_rel_l2(), c.worst_rel_l2);
  bool underflow =
      (share(c.underflow, c.nonzero) >= kCastLossShare && c.lost_rel_l2() >= kCastLossShare) ||
      c.worst_rel_l2 >= kCastLossHighShare;
  // A bias is added to the output: its loss matters against the output, not against itself.
  if (underflow && c.argument == "bias") {
    const double vs_output = bias_loss_vs_output(op, c);
    if (std::isfinite(vs_output) && vs_output < kCastLossShare) underflow = false;
  }
  if (!overflow && !underflow) return std::nullopt;
  Finding f;
  f.layer = layer.name;
  f.action = c.arg_index < 0 ? Action::kFixModel : Action::kPinFp32;
  f.severity = overflow || l2 >= kCastLossHighShare ? Severity::kHigh : Severity::kMedium;
  if (underflow) f.reasons.push_back("cast_underflow_" + fmt);
  if (overflow) f.reasons.push_back("cast_overflow_" + fmt);
  add_evidence(f.evidence, cast_evidence(op, c));
  return f;
}

}  // namespace

void cast_loss_rule(const Report& r, Findings& out) {
  for (const Layer& layer : r.layers) {
    for (const OpRecord& op : layer.ops) {
      if (op.phase != Phase::kForward) continue;  // gradients: grad_underflow_rule and loss scaling
      for (const CastLossRecord& c : op.cast_loss)
        if (auto f = cast_finding(layer, op, c)) out.push_back(std::move(*f));
    }
  }
}

void cast_loss_line(const CastLossEvidence& c, std::vector<std::string>& lines) {
  std::string s = c.op + " " + c.cast + " cast of " + c.argument + " to " + c.target_dtype;
  if (std::isfinite(c.share_lost)) s += fmt::format(": {:.3g}% of nonzero values lost", 100 * c.share_lost);
  if (std::isfinite(c.lost_rel_l2)) s += fmt::format(" ({:.3g}% of its norm)", 100 * c.lost_rel_l2);
  lines.push_back(std::move(s));
}

void degenerate_output_rule(const Report& r, Findings& out) {
  for (const Layer& layer : r.layers) {
    for (const OpRecord& op : layer.ops) {
      if (!op.degenerate || op.degenerate->degenerate == 0) continue;
      const DegenerateRecord& d = *op.degenerate;
      DegenerateEvidence ev;
      ev.op = op.op;
      ev.compute_dtype = op.compute_dtype;
      ev.zero_outputs = d.zero_outputs;
      ev.checked = d.checked;
      ev.degenerate = d.degenerate;
      ev.nonzero_share = d.min_nonzero_share;
      ev.max_rel_err = d.max_rel_err;
      ev.fp32_absmax = d.fp32_absmax;
      ev.first_step = d.first_step;
      Finding f;
      f.layer = layer.name;
      f.action = Action::kPinFp32;
      f.severity = Severity::kHigh;
      f.reasons = {"degenerate_output_" + dtypes::bare(op.compute_dtype)};
      add_evidence(f.evidence, ev);
      out.push_back(std::move(f));
    }
  }
}

void degenerate_output_line(const DegenerateEvidence& d, std::vector<std::string>& lines) {
  std::string s = d.op + " in " + d.compute_dtype + ": output all zeros in " +
                  text::number(static_cast<double>(d.degenerate)) + " re-checked calls";
  if (std::isfinite(d.max_rel_err)) s += fmt::format(", float32 differs by {:.3g}", d.max_rel_err);
  lines.push_back(std::move(s));
}

void stale_updates_rule(const Report& r, Findings& out) {
  for (const Layer& layer : r.layers) {
    for (const ParamRecord& p : layer.params) {
      for (const StaleUpdateRecord& s : p.stale_updates) {
        const double sh = share(s.stale, s.updated);
        if (s.updated == 0 || sh < kStaleUpdateShare) continue;
        StaleUpdateEvidence ev;
        ev.param = p.name;
        ev.tensor = s.tensor;
        ev.dtype = s.dtype;
        ev.steps = s.steps;
        ev.updated = s.updated;
        ev.stale = s.stale;
        ev.share_stale = sh;
        ev.worst_step = s.worst_step;
        ev.worst_share = s.worst_share;
        Finding f;
        f.layer = layer.name;
        f.action = Action::kFp32MasterWeights;
        f.severity = sh >= kStaleUpdateHighShare ? Severity::kHigh : Severity::kMedium;
        f.reasons = {"stale_updates_" + dtypes::bare(s.dtype)};
        add_evidence(f.evidence, ev);
        out.push_back(std::move(f));
      }
    }
  }
}

void stale_updates_line(const StaleUpdateEvidence& u, std::vector<std::string>& lines) {
  std::string s = u.param;
  if (std::isfinite(u.share_stale))
    s += fmt::format(": {:.3g}% of due updates rounded away in {}", 100 * u.share_stale, u.dtype);
  lines.push_back(std::move(s));
}

}  // namespace ampscope::reports
