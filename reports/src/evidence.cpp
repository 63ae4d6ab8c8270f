// The JSON of each rule's evidence type (evidence.h), listed once: the same list writes it and
// reads it back. Every field falls back to its default on reading, so evidence of another
// version still reads; a field of the wrong type makes the item unreadable (left out).
#include <ampscope/reports/evidence.h>

#include "report_fields.h"

namespace ampscope::reports {
namespace json_io {

template <typename F, typename R>
auto fields(F& f, R& e) -> if_record<R, OriginEvidence> {
  f.opt("step", e.step, std::int64_t{0});
  f.named_or("phase", e.phase, Phase::kForward);
  f.opt("op", e.op, std::string());
  f.opt("kind", e.kind, std::string());
  f.opt("inputs_finite", e.inputs_finite, true);
  f.maybe_value("compute_dtype", e.compute_dtype);
  f.opt("fp32_recheck", e.fp32_recheck, std::string());
  f.maybe_value("reached", e.reached);
  f.maybe_value("nonfinite_scalar", e.nonfinite_scalar);
  f.maybe("fp32_check", e.fp32_check, Empty::kOmit);
  f.maybe_value("count", e.count);
  f.maybe_value("nan", e.nan);
  f.maybe_value("posinf", e.posinf);
  f.maybe_value("neginf", e.neginf);
  f.maybe_value("absmax", e.absmax);
  f.maybe_value("format_max", e.format_max);
}

template <typename F, typename R>
auto fields(F& f, R& e) -> if_record<R, NonfiniteOpEvidence> {
  f.opt("op", e.op, std::string());
  f.named_or("phase", e.phase, Phase::kForward);
  f.opt("calls", e.calls, std::int64_t{0});
  f.opt("compute_dtype", e.compute_dtype, std::string());
  f.opt("nonfinite_from_finite", e.nonfinite_from_finite, std::int64_t{0});
  f.opt("harmful_nonfinite", e.harmful_nonfinite, std::int64_t{0});
  f.opt("fp32_finite", e.fp32_finite, std::int64_t{0});
  f.opt("first_step", e.first_step, std::int64_t{-1});
  f.opt("nan", e.nan, std::int64_t{0});
  f.opt("posinf", e.posinf, std::int64_t{0});
  f.opt("neginf", e.neginf, std::int64_t{0});
  f.number("absmax", e.absmax, kNaN, kNaN);
  f.maybe_value("format_max", e.format_max);
  f.maybe_value("fp32_recheck", e.fp32_recheck);
}

template <typename F, typename R>
auto fields(F& f, R& e) -> if_record<R, ShadowEvidence> {
  f.opt("op", e.op, std::string());
  f.opt("compute_dtype", e.compute_dtype, std::string());
  f.opt("checks", e.checks, std::int64_t{0});
  f.number("max_rel_err", e.max_rel_err, kNaN, kNaN);
  f.number("max_ulp", e.max_ulp, kNaN, kNaN);
  f.number("min_cosine", e.min_cosine, kNaN, kNaN);
  f.opt("worst_step", e.worst_step, std::int64_t{-1});
}

template <typename F, typename R>
auto fields(F& f, R& e) -> if_record<R, HeadroomEvidence> {
  f.opt("op", e.op, std::string());
  f.opt("compute_dtype", e.compute_dtype, std::string());
  f.number("absmax", e.absmax, kNaN, kNaN);
  f.number("format_max", e.format_max, kNaN, kNaN);
  f.number("headroom_binades", e.headroom_binades, kNaN, kNaN);
  f.number("growth_binades_per_step", e.growth_binades_per_step, 0.0, kNaN);
  f.maybe_value("projected_overflow_step", e.projected_overflow_step);
}

template <typename F, typename R>
auto fields(F& f, R& l) -> if_record<R, LayerGradLoss> {
  f.opt("layer", l.layer, std::string());
  f.number("share", l.share, kNaN, kNaN);
  f.opt("underflow", l.underflow, std::int64_t{0});
  f.opt("subnormal", l.subnormal, std::int64_t{0});
  f.opt("nonzero", l.nonzero, std::int64_t{0});
}

template <typename F, typename R>
auto fields(F& f, R& e) -> if_record<R, GradUnderflowEvidence> {
  f.opt("format", e.format, std::string());
  f.number("share_lost", e.share_lost, kNaN, kNaN);
  f.opt("nonzero_values", e.nonzero_values, std::int64_t{0});
  f.opt("underflow", e.underflow, std::int64_t{0});
  f.opt("subnormal", e.subnormal, std::int64_t{0});
  f.maybe_value(("zeros_in_" + e.format + "_grads").c_str(), e.zeros_in_format);
  f.maybe_value(("values_in_" + e.format + "_grads").c_str(), e.values_in_format);
  f.number("grad_absmax", e.grad_absmax, kNaN, kNaN);
  f.opt("grad_exp_low", e.grad_exp_low, 0);
  f.opt("grad_exp_high", e.grad_exp_high, 0);
  f.nullable("loss_scale_in_use", e.loss_scale_in_use);
  f.number("suggested_scale", e.suggested_scale, kNaN, kNaN);
  f.number("tail_scale", e.tail_scale, kNaN, kNaN);
  f.opt("range_too_wide", e.range_too_wide, false);
  f.list("worst_layers", e.worst_layers);
}

template <typename F, typename R>
auto fields(F& f, R& e) -> if_record<R, LossScaleEvidence> {
  f.opt("updates", e.updates, std::int64_t{0});
  f.opt("skipped_steps", e.skipped_steps, std::int64_t{0});
  f.opt("first_found_inf_step", e.first_found_inf_step, std::int64_t{-1});
  f.opt("trailing_found_inf", e.trailing_found_inf, std::int64_t{0});
  f.number("min_scale", e.min_scale, kNaN, kNaN);
  f.number("max_scale", e.max_scale, kNaN, kNaN);
  f.number("final_scale", e.final_scale, kNaN, kNaN);
}

template <typename F, typename R>
auto fields(F& f, R& e) -> if_record<R, CastLossEvidence> {
  f.opt("op", e.op, std::string());
  f.opt("argument", e.argument, std::string());
  f.opt("cast", e.cast, std::string());
  f.opt("parameter", e.parameter, false);
  f.opt("source_dtype", e.source_dtype, std::string());
  f.opt("target_dtype", e.target_dtype, std::string());
  f.opt("values", e.values, std::int64_t{0});
  f.opt("underflow", e.underflow, std::int64_t{0});
  f.opt("overflow", e.overflow, std::int64_t{0});
  f.opt("subnormal", e.subnormal, std::int64_t{0});
  f.number("share_lost", e.share_lost, kNaN, kNaN);
  f.number("lost_rel_l2", e.lost_rel_l2, kNaN, kNaN);
  f.number("worst_rel_l2", e.worst_rel_l2, kNaN, kNaN);
  f.opt("first_step", e.first_step, std::int64_t{-1});
  f.opt("worst_step", e.worst_step, std::int64_t{-1});
}

template <typename F, typename R>
auto fields(F& f, R& e) -> if_record<R, DegenerateEvidence> {
  f.opt("op", e.op, std::string());
  f.opt("compute_dtype", e.compute_dtype, std::string());
  f.opt("zero_outputs", e.zero_outputs, std::int64_t{0});
  f.opt("checked", e.checked, std::int64_t{0});
  f.opt("degenerate", e.degenerate, std::int64_t{0});
  f.number("nonzero_share", e.nonzero_share, kNaN, kNaN);
  f.number("max_rel_err", e.max_rel_err, kNaN, kNaN);
  f.number("fp32_absmax", e.fp32_absmax, kNaN, kNaN);
  f.opt("first_step", e.first_step, std::int64_t{-1});
}

template <typename F, typename R>
auto fields(F& f, R& e) -> if_record<R, StaleUpdateEvidence> {
  f.opt("param", e.param, std::string());
  f.opt("tensor", e.tensor, std::string());
  f.opt("dtype", e.dtype, std::string());
  f.opt("steps", e.steps, std::int64_t{0});
  f.opt("updated", e.updated, std::int64_t{0});
  f.opt("stale", e.stale, std::int64_t{0});
  f.number("share_stale", e.share_stale, kNaN, kNaN);
  f.opt("worst_step", e.worst_step, std::int64_t{-1});
  f.number("worst_share", e.worst_share, kNaN, kNaN);
}

}  // namespace json_io

using json = nlohmann::json;

template <typename Ev>
void add_evidence(json& evidence, const Ev& ev) {
  json item(json_io::to_ojson(ev));
  if constexpr (Ev::kList) {
    json& list = evidence[Ev::kKey];
    if (!list.is_array()) list = json::array();
    list.push_back(std::move(item));
  } else {
    evidence[Ev::kKey] = std::move(item);
  }
}

template <typename Ev>
std::vector<Ev> evidence_of(const json& evidence) {
  std::vector<Ev> out;
  if (!evidence.is_object()) return out;
  auto it = evidence.find(Ev::kKey);
  if (it == evidence.end()) return out;
  auto read = [&](const json& j, const std::string& where) {
    try {
      out.push_back(json_io::from_json_at<Ev>(j, where));
    } catch (const ReportError&) {
      // not an Ev: left out (see evidence.h)
    }
  };
  if constexpr (Ev::kList) {
    if (it->is_array())
      for (std::size_t i = 0; i < it->size(); ++i) read((*it)[i], json_io::index(Ev::kKey, i));
  } else {
    read(*it, Ev::kKey);
  }
  return out;
}

#define AMPSCOPE_EVIDENCE_TYPE(Ev)                              \
  template void add_evidence<Ev>(json & evidence, const Ev& ev); \
  template std::vector<Ev> evidence_of<Ev>(const json& evidence);
AMPSCOPE_EVIDENCE_TYPE(OriginEvidence)
AMPSCOPE_EVIDENCE_TYPE(NonfiniteOpEvidence)
AMPSCOPE_EVIDENCE_TYPE(ShadowEvidence)
AMPSCOPE_EVIDENCE_TYPE(HeadroomEvidence)
AMPSCOPE_EVIDENCE_TYPE(GradUnderflowEvidence)
AMPSCOPE_EVIDENCE_TYPE(LossScaleEvidence)
AMPSCOPE_EVIDENCE_TYPE(CastLossEvidence)
AMPSCOPE_EVIDENCE_TYPE(DegenerateEvidence)
AMPSCOPE_EVIDENCE_TYPE(StaleUpdateEvidence)
#undef AMPSCOPE_EVIDENCE_TYPE

}  // namespace ampscope::reports
