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
//   degenerate_output_rule  a low-precision op's output was (almost) all zeros while its
//                      float32 re-run was not (silent_loss.h: kDegenerateNonzeroShare,
//                      kDegenerateRelErr) -> pin_fp32 (high, degenerate_output_<format>).
//   stale_updates_rule  at least kStaleUpdateShare of a float16/bfloat16 parameter's elements
//                      with a nonzero gradient kept their stored value through the optimizer
//                      step -> fp32_master_weights (medium; high from kStaleUpdateHighShare,
//                      stale_updates_<format>).
#include <ampscope/reports/recommend.h>

#include <algorithm>

#include "dtypes.h"
#include "recommend_rules.h"
#include "text_util.h"

namespace ampscope::reports {
namespace {

using json = nlohmann::json;
using detail::num;

double share(std::int64_t part, std::int64_t whole) {
  return whole > 0 ? static_cast<double>(part) / static_cast<double>(whole) : 0.0;
}

json cast_evidence(const OpRecord& op, const CastLossRecord& c) {
  json ev = json::object();
  ev["op"] = op.op;
  ev["argument"] = c.argument;
  ev["cast"] = c.arg_index < 0 ? "model" : "autocast";
  ev["parameter"] = c.parameter;
  ev["source_dtype"] = c.source_dtype;
  ev["target_dtype"] = c.target_dtype;
  ev["values"] = c.values;
  ev["underflow"] = c.underflow;
  ev["overflow"] = c.overflow;
  ev["subnormal"] = c.subnormal;
  ev["share_lost"] = num(share(c.underflow + c.overflow, c.nonzero));
  ev["lost_rel_l2"] = num(c.lost_rel_l2());
  ev["worst_rel_l2"] = num(c.worst_rel_l2);
  ev["first_step"] = c.first_step;
  ev["worst_step"] = c.worst_step;
  return ev;
}

/// The finding of one cast record, or none when what it lost is immaterial.
std::optional<Finding> cast_finding(const Layer& layer, const OpRecord& op,
                                    const CastLossRecord& c) {
  const std::string fmt = dtypes::bare(c.target_dtype);
  const bool overflow = c.overflow > 0;
  // Material over the run, or in one recorded step (a weight that SGD later lifts out of
  // float16's underflow still computed nothing until then).
  const double l2 = std::max(c.lost_rel_l2(), c.worst_rel_l2);
  const bool underflow =
      (share(c.underflow, c.nonzero) >= kCastLossShare && c.lost_rel_l2() >= kCastLossShare) ||
      c.worst_rel_l2 >= kCastLossHighShare;
  if (!overflow && !underflow) return std::nullopt;
  Finding f;
  f.layer = layer.name;
  f.action = c.arg_index < 0 ? Action::kFixModel : Action::kPinFp32;
  f.severity = overflow || l2 >= kCastLossHighShare ? Severity::kHigh : Severity::kMedium;
  if (underflow) f.reasons.push_back("cast_underflow_" + fmt);
  if (overflow) f.reasons.push_back("cast_overflow_" + fmt);
  f.evidence["cast_loss"] = json::array({cast_evidence(op, c)});
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

void cast_loss_line(const nlohmann::json& ev, std::vector<std::string>& lines) {
  for (const auto& c : ev) {
    double lost = 0, l2 = 0;
    std::string s = detail::ev_str(c, "op") + " " + detail::ev_str(c, "cast") + " cast of " +
                    detail::ev_str(c, "argument") + " to " + detail::ev_str(c, "target_dtype");
    if (detail::ev_num(c, "share_lost", &lost)) s += fmt::format(": {:.3g}% of nonzero values lost", 100 * lost);
    if (detail::ev_num(c, "lost_rel_l2", &l2)) s += fmt::format(" ({:.3g}% of its norm)", 100 * l2);
    lines.push_back(std::move(s));
  }
}

void degenerate_output_rule(const Report& r, Findings& out) {
  for (const Layer& layer : r.layers) {
    for (const OpRecord& op : layer.ops) {
      if (!op.degenerate || op.degenerate->degenerate == 0) continue;
      const DegenerateRecord& d = *op.degenerate;
      json ev = json::object();
      ev["op"] = op.op;
      ev["compute_dtype"] = op.compute_dtype;
      ev["zero_outputs"] = d.zero_outputs;
      ev["checked"] = d.checked;
      ev["degenerate"] = d.degenerate;
      ev["nonzero_share"] = num(d.min_nonzero_share);
      ev["max_rel_err"] = num(d.max_rel_err);
      ev["fp32_absmax"] = num(d.fp32_absmax);
      ev["first_step"] = d.first_step;
      Finding f;
      f.layer = layer.name;
      f.action = Action::kPinFp32;
      f.severity = Severity::kHigh;
      f.reasons = {"degenerate_output_" + dtypes::bare(op.compute_dtype)};
      f.evidence["degenerate"] = json::array({std::move(ev)});
      out.push_back(std::move(f));
    }
  }
}

void degenerate_output_line(const nlohmann::json& ev, std::vector<std::string>& lines) {
  for (const auto& d : ev) {
    double n = 0, err = 0;
    std::string s = detail::ev_str(d, "op") + " in " + detail::ev_str(d, "compute_dtype") + ": output all zeros";
    if (detail::ev_num(d, "degenerate", &n)) s += " in " + text::number(n) + " re-checked calls";
    if (detail::ev_num(d, "max_rel_err", &err)) s += fmt::format(", float32 differs by {:.3g}", err);
    lines.push_back(std::move(s));
  }
}

void stale_updates_rule(const Report& r, Findings& out) {
  for (const Layer& layer : r.layers) {
    for (const ParamRecord& p : layer.params) {
      for (const StaleUpdateRecord& s : p.stale_updates) {
        const double sh = share(s.stale, s.updated);
        if (s.updated == 0 || sh < kStaleUpdateShare) continue;
        json ev = json::object();
        ev["param"] = p.name;
        ev["tensor"] = s.tensor;
        ev["dtype"] = s.dtype;
        ev["steps"] = s.steps;
        ev["updated"] = s.updated;
        ev["stale"] = s.stale;
        ev["share_stale"] = num(sh);
        ev["worst_step"] = s.worst_step;
        ev["worst_share"] = num(s.worst_share);
        Finding f;
        f.layer = layer.name;
        f.action = Action::kFp32MasterWeights;
        f.severity = sh >= kStaleUpdateHighShare ? Severity::kHigh : Severity::kMedium;
        f.reasons = {"stale_updates_" + dtypes::bare(s.dtype)};
        f.evidence["stale_updates"] = json::array({std::move(ev)});
        out.push_back(std::move(f));
      }
    }
  }
}

void stale_updates_line(const nlohmann::json& ev, std::vector<std::string>& lines) {
  for (const auto& u : ev) {
    double sh = 0;
    std::string s = detail::ev_str(u, "param");
    if (detail::ev_num(u, "share_stale", &sh))
      s += fmt::format(": {:.3g}% of due updates rounded away in {}", 100 * sh, detail::ev_str(u, "dtype"));
    lines.push_back(std::move(s));
  }
}

}  // namespace ampscope::reports
