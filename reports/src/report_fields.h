// The fields of the report's record types, each listed once: the same list writes report.json
// (FieldWriter, in the SPEC's key order) and reads it back (FieldReader, with each field's
// presence rule and default). A new field is one line here. Internal to reports/.
#pragma once

#include <ampscope/reports/report.h>

#include <type_traits>

#include "json_fields.h"

namespace ampscope::reports::json_io {

/// Enables a fields() overload for R = T or const T (writing reads a const record).
template <typename R, typename T>
using if_record = std::enable_if_t<std::is_same_v<std::remove_const_t<R>, T>>;

/// After reading: checks beyond each field's own, and fields derived from others. Types
/// without any:
template <typename T>
void finish_read(const T&, const Obj&) {}

/// A record as an ordered JSON object, its fields in the listed order.
template <typename T>
ojson to_ojson(const T& v) {
  ojson o = ojson::object();
  FieldWriter w(o);
  fields(w, v);
  return o;
}

/// The record at `where`; throws ReportError naming the path of what is wrong.
template <typename T>
T from_json_at(const json& j, const std::string& where) {
  Obj o(j, where);
  T v;
  FieldReader r(o);
  fields(r, v);
  finish_read(v, o);
  return v;
}

// Stats: not a field list (mean and rms are derived, exp_hist is keyed by exponent).
template <>
ojson to_ojson<Stats>(const Stats& s);  // report_json.cpp
template <>
inline Stats from_json_at<Stats>(const json& j, const std::string& where) { return stats_from_json(j, where); }

template <typename F, typename R>
auto fields(F& f, R& c) -> if_record<R, CastLossRecord> {
  f.req("argument", c.argument);
  f.opt("arg_index", c.arg_index, -1);
  f.opt("parameter", c.parameter, false);
  f.req("source_dtype", c.source_dtype);
  f.req("target_dtype", c.target_dtype);
  f.opt("casts", c.casts, std::int64_t{0});
  f.req("values", c.values);
  f.req("nonzero", c.nonzero);
  f.req("underflow", c.underflow);
  f.req("overflow", c.overflow);
  f.opt("subnormal", c.subnormal, std::int64_t{0});
  f.number("source_sq", c.source_sq, 0.0, 0.0);
  f.number("lost_sq", c.lost_sq, 0.0, 0.0);
  f.derived("lost_rel_l2", [&] { return num(c.lost_rel_l2()); });
  f.opt("first_step", c.first_step, std::int64_t{-1});
  f.opt("worst_step", c.worst_step, std::int64_t{-1});
  f.number("worst_rel_l2", c.worst_rel_l2, 0.0, 0.0);
}
inline void finish_read(const CastLossRecord& c, const Obj& o) {
  check_counts({c.casts, c.values, c.nonzero, c.underflow, c.overflow, c.subnormal}, o.where());
}

template <typename F, typename R>
auto fields(F& f, R& d) -> if_record<R, DegenerateRecord> {
  f.req("zero_outputs", d.zero_outputs);
  f.opt("checked", d.checked, std::int64_t{0});
  f.req("degenerate", d.degenerate);
  f.opt("first_step", d.first_step, std::int64_t{-1});
  f.number("min_nonzero_share", d.min_nonzero_share, 1.0, 1.0);
  f.number("max_rel_err", d.max_rel_err, 0.0, kNaN);
  f.number("fp32_absmax", d.fp32_absmax, 0.0, kNaN);
}
inline void finish_read(const DegenerateRecord& d, const Obj& o) {
  check_counts({d.zero_outputs, d.checked, d.degenerate}, o.where());
}

template <typename F, typename R>
auto fields(F& f, R& s) -> if_record<R, StaleUpdateRecord> {
  f.opt("tensor", s.tensor, std::string("value"));
  f.req("dtype", s.dtype);
  f.req("steps", s.steps);
  f.req("updated", s.updated);
  f.req("stale", s.stale);
  f.opt("worst_step", s.worst_step, std::int64_t{-1});
  f.number("worst_share", s.worst_share, 0.0, 0.0);
}
inline void finish_read(const StaleUpdateRecord& s, const Obj& o) {
  check_counts({s.steps, s.updated, s.stale}, o.where());
  if (s.stale > s.updated) value_error(o.path("stale"), "more stale than updated elements");
}

template <typename F, typename R>
auto fields(F& f, R& c) -> if_record<R, Fp32Check> {
  f.req("also_nonfinite", c.also_nonfinite);
  f.opt("compared", c.compared, std::int64_t{0});
  f.opt("lowp_only_nonfinite", c.lowp_only_nonfinite, std::int64_t{0});
  f.number_req("rel_err", c.rel_err, kNaN);
  f.number_req("max_ulp", c.max_ulp, kNaN);
  f.number_req("cosine", c.cosine, kNaN);
  f.number_req("fp32_absmax", c.fp32_absmax, kNaN);
}

template <typename F, typename R>
auto fields(F& f, R& k) -> if_record<R, KernelName> {
  f.req("name", k.name);
  f.opt("launches", k.launches, std::int64_t{0});
  f.opt("time_ns", k.time_ns, std::int64_t{0});
}

template <typename F, typename R>
auto fields(F& f, R& s) -> if_record<R, Sampling> {
  f.opt("every", s.every, 1);
  f.opt("stats_on", s.stats_on, std::string("outputs"));
  f.opt("include_layers", s.include_layers, std::vector<std::string>{});
  f.opt("exclude_layers", s.exclude_layers, std::vector<std::string>{});
  f.opt("include_ops", s.include_ops, std::vector<std::string>{});
  f.opt("exclude_ops", s.exclude_ops, std::vector<std::string>{});
  f.opt("loss_scale_updates", s.loss_scale_updates, std::int64_t{0});
}
inline void finish_read(const Sampling& s, const Obj& o) {
  check_one_of(s.stats_on, {"outputs", "inputs_and_outputs"}, o.path("stats_on"));
}

template <typename F, typename R>
auto fields(F& f, R& k) -> if_record<R, KernelSummary> {
  f.opt("launches", k.launches, std::int64_t{0});
  f.opt("time_ns", k.time_ns, std::int64_t{0});
  f.opt("matrix_launches", k.matrix_launches, std::int64_t{0});
  f.opt("tensor_core_launches", k.tensor_core_launches, std::int64_t{0});
  // derived: null when no matrix kernel ran
  f.derived("tensor_cores", [&] { return k.matrix_launches > 0 ? ojson(k.tensor_core_launches > 0) : ojson(nullptr); });
  f.opt("memcpys", k.memcpys, std::int64_t{0});
  f.opt("memcpy_bytes", k.memcpy_bytes, std::int64_t{0});
  f.opt("memcpy_time_ns", k.memcpy_time_ns, std::int64_t{0});
  f.list("top", k.top);
}
inline void finish_read(const KernelSummary& k, const Obj& o) {
  if (k.launches < 0 || k.memcpys < 0) value_error(o.where(), "negative count");
}

template <typename F, typename R>
auto fields(F& f, R& s) -> if_record<R, ShadowSummary> {
  f.req("checks", s.checks);
  f.number_req("max_rel_err", s.max_rel_err, kNaN);
  f.number_req("max_ulp", s.max_ulp, kNaN);
  f.number_req("min_cosine", s.min_cosine, kNaN);
  f.opt("worst_step", s.worst_step, std::int64_t{-1});
}
inline void finish_read(const ShadowSummary& s, const Obj& o) {
  if (s.checks < 0) value_error(o.path("checks"), "negative count");
}

template <typename F, typename R>
auto fields(F& f, R& op) -> if_record<R, OpRecord> {
  f.req("op", op.op);
  f.named("phase", op.phase);
  f.req("calls", op.calls);
  f.req("input_dtype", op.input_dtype);
  f.req("compute_dtype", op.compute_dtype);
  f.req("output_dtype", op.output_dtype);
  f.named("autocast", op.autocast);
  f.req("casts", op.casts);
  f.opt("first_step", op.first_step, std::int64_t{0});
  f.opt("last_step", op.last_step, op.first_step);
  f.opt("nonfinite_from_finite", op.nonfinite_from_finite, std::int64_t{0});
  f.opt("first_nonfinite_step", op.first_nonfinite_step, std::int64_t{-1});
  f.opt("benign_nonfinite", op.benign_nonfinite, std::int64_t{0});
  f.opt("harmful_nonfinite", op.harmful_nonfinite, op.nonfinite_from_finite);
  f.opt("fp32_finite", op.fp32_finite, std::int64_t{0});
  f.opt("fp32_nonfinite", op.fp32_nonfinite, std::int64_t{0});
  f.record("stats", op.stats);
  f.maybe("input_stats", op.input_stats, Empty::kOmit);
  f.record_if("shadow", op.shadow, op.shadow.checks > 0);
  f.record_if("kernels", op.kernels, !op.kernels.empty());
  f.list("cast_loss", op.cast_loss, Empty::kOmit);
  f.maybe("degenerate_output", op.degenerate, Empty::kOmit);
  f.series("absmax_by_step", op.absmax_by_step);
}

template <typename F, typename R>
auto fields(F& f, R& p) -> if_record<R, ParamRecord> {
  f.req("name", p.name);
  f.req("dtype", p.dtype);
  f.opt("updates", p.updates, std::int64_t{0});
  f.record("grad", p.grad);
  f.opt_if("aliases", p.aliases, std::vector<std::string>{}, !p.aliases.empty());
  f.maybe("values", p.values, Empty::kOmit);
  f.list("stale_updates", p.stale_updates, Empty::kOmit);
}

template <typename F, typename R>
auto fields(F& f, R& e) -> if_record<R, NonFiniteEvent> {
  f.req("step", e.step);
  f.named("phase", e.phase);
  f.req("layer", e.layer);
  f.req("op", e.op);
  f.req("kind", e.kind);
  f.req("inputs_finite", e.inputs_finite);
  f.maybe_bool("fp32_also_nonfinite", e.fp32_also_nonfinite);
  f.maybe("fp32_check", e.fp32_check, Empty::kOmit);
  f.opt("compute_dtype", e.compute_dtype, std::string());
  f.maybe("output_stats", e.output_stats, Empty::kNull);
  f.opt("rank", e.rank, 0);
  f.opt("nonfinite_scalar", e.nonfinite_scalar, false);
  f.opt("forward_nonfinite", e.forward_nonfinite, false);
  f.opt("reached", e.reached, std::string());
  f.opt("reached_step", e.reached_step, std::int64_t{-1});
}
inline void finish_read(const NonFiniteEvent& e, const Obj& o) { check_one_of(e.kind, {"nan", "inf"}, o.path("kind")); }

template <typename F, typename R>
auto fields(F& f, R& r) -> if_record<R, RunInfo> {
  f.req("torch_version", r.torch_version);
  f.req("device", r.device);
  f.req("autocast_dtype", r.autocast_dtype);
  f.req("steps", r.steps);
  f.req("started", r.started);
  f.number_req("duration_s", r.duration_s, kNaN);
  f.req("command", r.command);
  f.req("rank", r.rank);
  f.req("world_size", r.world_size);
  f.opt("every", r.every, 1);
  f.opt("shadow", r.shadow, false);
  f.opt("stopped", r.stopped, std::string());
  f.opt("notes", r.notes, std::vector<std::string>{});
  f.opt_if("host_syncs", r.host_syncs, std::int64_t{-1}, r.host_syncs >= 0);
  f.record_if("sampling", r.sampling, true);
}
inline void finish_read(RunInfo& r, const Obj& o) {
  if (const json* sm = o.find("sampling"); !sm || sm->is_null()) r.sampling.every = r.every;  // older files
}

template <typename F, typename R>
auto fields(F& f, R& l) -> if_record<R, Layer> {
  f.req("name", l.name);
  f.req("type", l.type);
  f.list_req("ops", l.ops);
  f.list_req("params", l.params);
}

template <typename F, typename R>
auto fields(F& f, R& c) -> if_record<R, ScalerCaught> {
  f.req("steps", c.steps);
  f.record("first", c.first);
}

template <typename F, typename R>
auto fields(F& f, R& p) -> if_record<R, LossScalePoint> {
  f.req("step", p.step);
  f.number_req("scale", p.scale, kNaN);
  f.req("found_inf", p.found_inf);
}

template <typename F, typename R>
auto fields(F& f, R& r) -> if_record<R, Recommendation> {
  f.req("layer", r.layer);
  f.named("action", r.action);
  f.named("severity", r.severity);
  f.req("reasons", r.reasons);
  f.object("evidence", r.evidence);
}

/// The derived what-if table (report_json.cpp; recomputed from the stats, never read back).
ojson what_if_to_ojson(const Report& r);

template <typename F, typename R>
auto fields(F& f, R& r) -> if_record<R, Report> {
  f.derived("schema", [] { return ojson(kReportSchema); });  // checked before reading
  f.record("run", r.run);
  f.list_req("layers", r.layers);
  f.maybe_req("first_nonfinite", r.first_nonfinite);
  f.maybe("nonfinite_caught_by_scaler", r.scaler_caught, Empty::kOmit);
  f.list("first_nonfinite_by_rank", r.first_nonfinite_by_rank, Empty::kOmit);
  f.list_req("loss_scale", r.loss_scale);
  f.list_req("recommendations", r.recommendations);
  f.derived("what_if", [&] { return what_if_to_ojson(r); });
}

}  // namespace ampscope::reports::json_io
