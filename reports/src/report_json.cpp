// report.json <-> the report model, and the file helpers every reader and writer shares.
//
// Writing builds an nlohmann::ordered_json so the file keeps the SPEC's key order; the API type
// (nlohmann::json) is produced from it. Reading validates every field's presence and type and
// throws ReportError with the JSON path of the offending value ("layers[2].ops[0].calls").

#include <ampscope/reports/report_json.h>
#include <ampscope/reports/report_validate.h>
#include <ampscope/reports/what_if.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ampscope/reports/files.h>

#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <system_error>
#include <unistd.h>

namespace ampscope::reports {

using ojson = nlohmann::ordered_json;
using json = nlohmann::json;

namespace {

/// Makes a message safe to print on one line: newlines and other control bytes become spaces.
std::string one_line(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) out.push_back(c < 0x20 || c == 0x7f ? ' ' : static_cast<char>(c));
  return out;
}

/// Like one_line, but also replaces non-ASCII bytes: for text quoted from a corrupt file.
std::string printable(const std::string& s, std::size_t max_len = 200) {
  std::string out;
  for (unsigned char c : s) {
    if (out.size() >= max_len) {
      out += "...";
      break;
    }
    out.push_back(c >= 0x20 && c < 0x7f ? static_cast<char>(c) : '?');
  }
  return out;
}

}  // namespace

ReportError::ReportError(std::string id, const std::string& message)
    : std::runtime_error(one_line(message)), id_(std::move(id)) {}

const Layer* Report::find_layer(const std::string& name) const {
  for (const Layer& l : layers)
    if (l.name == name) return &l;
  return nullptr;
}

// ---------------------------------------------------------------------------------------------
// Writing

namespace {

/// A double as JSON: null when it is NaN or infinite (JSON has no such numbers).
ojson num(double v) { return std::isfinite(v) ? ojson(v) : ojson(nullptr); }

ojson format_counts(const std::array<std::int64_t, kNumFormats>& a) {
  ojson o = ojson::object();
  for (int i = 0; i < kNumFormats; ++i)
    o[std::string(format_name(static_cast<Format>(i)))] = a[static_cast<std::size_t>(i)];
  return o;
}

ojson stats_to_ojson(const Stats& s) {
  ojson o = ojson::object();
  o["count"] = s.count;
  o["nan"] = s.nan;
  o["posinf"] = s.posinf;
  o["neginf"] = s.neginf;
  o["zeros"] = s.zeros;
  o["absmax"] = num(s.absmax);
  o["absmin_nonzero"] = num(s.absmin_nonzero);  // inf (no finite nonzero value) -> null
  o["mean"] = num(s.mean());
  o["rms"] = num(s.rms());
  ojson h = ojson::object();
  if (!s.exp_hist.empty())
    for (int e = s.exp_hist.lo(); e < s.exp_hist.hi(); ++e)
      if (std::int64_t n = s.exp_hist.at(e); n != 0) h[std::to_string(e)] = n;
  o["exp_hist"] = std::move(h);
  o["overflow"] = format_counts(s.overflow);
  o["underflow"] = format_counts(s.underflow);
  o["subnormal"] = format_counts(s.subnormal);
  return o;
}

/// CUPTI kernels of an op: counts and times in ns; "tensor_cores" is derived (null: no matrix
/// kernel ran).
ojson kernels_to_ojson(const KernelSummary& k) {
  ojson o = ojson::object();
  o["launches"] = k.launches;
  o["time_ns"] = k.time_ns;
  o["matrix_launches"] = k.matrix_launches;
  o["tensor_core_launches"] = k.tensor_core_launches;
  o["tensor_cores"] = k.matrix_launches > 0 ? ojson(k.tensor_core_launches > 0) : ojson(nullptr);
  o["memcpys"] = k.memcpys;
  o["memcpy_bytes"] = k.memcpy_bytes;
  o["memcpy_time_ns"] = k.memcpy_time_ns;
  ojson top = ojson::array();
  for (const auto& n : k.top) top.push_back({{"name", n.name}, {"launches", n.launches}, {"time_ns", n.time_ns}});
  o["top"] = std::move(top);
  return o;
}

ojson cast_loss_to_ojson(const CastLossRecord& c) {
  ojson o = ojson::object();
  o["argument"] = c.argument;
  o["arg_index"] = c.arg_index;
  o["parameter"] = c.parameter;
  o["source_dtype"] = c.source_dtype;
  o["target_dtype"] = c.target_dtype;
  o["casts"] = c.casts;
  o["values"] = c.values;
  o["nonzero"] = c.nonzero;
  o["underflow"] = c.underflow;
  o["overflow"] = c.overflow;
  o["subnormal"] = c.subnormal;
  o["source_sq"] = num(c.source_sq);
  o["lost_sq"] = num(c.lost_sq);
  o["lost_rel_l2"] = num(c.lost_rel_l2());  // derived, not read back
  o["first_step"] = c.first_step;
  o["worst_step"] = c.worst_step;
  o["worst_rel_l2"] = num(c.worst_rel_l2);
  return o;
}

ojson degenerate_to_ojson(const DegenerateRecord& d) {
  ojson o = ojson::object();
  o["zero_outputs"] = d.zero_outputs;
  o["checked"] = d.checked;
  o["degenerate"] = d.degenerate;
  o["first_step"] = d.first_step;
  o["min_nonzero_share"] = num(d.min_nonzero_share);
  o["max_rel_err"] = num(d.max_rel_err);
  o["fp32_absmax"] = num(d.fp32_absmax);
  return o;
}

ojson stale_to_ojson(const StaleUpdateRecord& s) {
  ojson o = ojson::object();
  o["tensor"] = s.tensor;
  o["dtype"] = s.dtype;
  o["steps"] = s.steps;
  o["updated"] = s.updated;
  o["stale"] = s.stale;
  o["worst_step"] = s.worst_step;
  o["worst_share"] = num(s.worst_share);
  return o;
}

ojson op_to_ojson(const OpRecord& op) {
  ojson o = ojson::object();
  o["op"] = op.op;
  o["phase"] = op.phase;
  o["calls"] = op.calls;
  o["input_dtype"] = op.input_dtype;
  o["compute_dtype"] = op.compute_dtype;
  o["output_dtype"] = op.output_dtype;
  o["autocast"] = op.autocast;
  o["casts"] = op.casts;
  o["first_step"] = op.first_step;
  o["last_step"] = op.last_step;
  o["nonfinite_from_finite"] = op.nonfinite_from_finite;
  o["first_nonfinite_step"] = op.first_nonfinite_step;
  o["benign_nonfinite"] = op.benign_nonfinite;
  o["harmful_nonfinite"] = op.harmful_nonfinite;
  o["fp32_finite"] = op.fp32_finite;
  o["fp32_nonfinite"] = op.fp32_nonfinite;
  o["stats"] = stats_to_ojson(op.stats);
  if (op.input_stats) o["input_stats"] = stats_to_ojson(*op.input_stats);
  if (op.shadow.checks > 0) {
    ojson sh = ojson::object();
    sh["checks"] = op.shadow.checks;
    sh["max_rel_err"] = num(op.shadow.max_rel_err);
    sh["max_ulp"] = num(op.shadow.max_ulp);
    sh["min_cosine"] = num(op.shadow.min_cosine);
    sh["worst_step"] = op.shadow.worst_step;
    o["shadow"] = std::move(sh);
  }
  if (!op.kernels.empty()) o["kernels"] = kernels_to_ojson(op.kernels);
  if (!op.cast_loss.empty()) {
    ojson cl = ojson::array();
    for (const auto& c : op.cast_loss) cl.push_back(cast_loss_to_ojson(c));
    o["cast_loss"] = std::move(cl);
  }
  if (op.degenerate) o["degenerate_output"] = degenerate_to_ojson(*op.degenerate);
  ojson series = ojson::array();
  for (const auto& [step, absmax] : op.absmax_by_step) series.push_back(ojson::array({step, num(absmax)}));
  o["absmax_by_step"] = std::move(series);
  return o;
}

ojson param_to_ojson(const ParamRecord& p) {
  ojson o = ojson::object();
  o["name"] = p.name;
  o["dtype"] = p.dtype;
  o["updates"] = p.updates;
  o["grad"] = stats_to_ojson(p.grad);
  if (!p.aliases.empty()) o["aliases"] = p.aliases;
  if (p.values) o["values"] = stats_to_ojson(*p.values);
  if (!p.stale_updates.empty()) {
    ojson st = ojson::array();
    for (const auto& u : p.stale_updates) st.push_back(stale_to_ojson(u));
    o["stale_updates"] = std::move(st);
  }
  return o;
}

ojson run_to_ojson(const RunInfo& r) {
  ojson o = ojson::object();
  o["torch_version"] = r.torch_version;
  o["device"] = r.device;
  o["autocast_dtype"] = r.autocast_dtype;
  o["steps"] = r.steps;
  o["started"] = r.started;
  o["duration_s"] = num(r.duration_s);
  o["command"] = r.command;
  o["rank"] = r.rank;
  o["world_size"] = r.world_size;
  o["every"] = r.every;
  o["shadow"] = r.shadow;
  o["stopped"] = r.stopped;
  o["notes"] = r.notes;
  if (r.host_syncs >= 0) o["host_syncs"] = r.host_syncs;
  ojson sm = ojson::object();
  sm["every"] = r.sampling.every;
  sm["stats_on"] = r.sampling.stats_on;
  sm["include_layers"] = r.sampling.include_layers;
  sm["exclude_layers"] = r.sampling.exclude_layers;
  sm["include_ops"] = r.sampling.include_ops;
  sm["exclude_ops"] = r.sampling.exclude_ops;
  sm["loss_scale_updates"] = r.sampling.loss_scale_updates;
  o["sampling"] = std::move(sm);
  return o;
}

ojson fp32_check_to_ojson(const Fp32Check& c) {
  ojson o = ojson::object();
  o["also_nonfinite"] = c.also_nonfinite;
  o["compared"] = c.compared;
  o["lowp_only_nonfinite"] = c.lowp_only_nonfinite;
  o["rel_err"] = num(c.rel_err);
  o["max_ulp"] = num(c.max_ulp);
  o["cosine"] = num(c.cosine);
  o["fp32_absmax"] = num(c.fp32_absmax);
  return o;
}

ojson nonfinite_to_ojson(const NonFiniteEvent& e) {
  ojson o = ojson::object();
  o["step"] = e.step;
  o["phase"] = e.phase;
  o["layer"] = e.layer;
  o["op"] = e.op;
  o["kind"] = e.kind;
  o["inputs_finite"] = e.inputs_finite;
  o["fp32_also_nonfinite"] = e.fp32_also_nonfinite ? ojson(*e.fp32_also_nonfinite) : ojson(nullptr);
  if (e.fp32_check) o["fp32_check"] = fp32_check_to_ojson(*e.fp32_check);
  o["compute_dtype"] = e.compute_dtype;
  o["output_stats"] = e.output_stats ? stats_to_ojson(*e.output_stats) : ojson(nullptr);
  o["rank"] = e.rank;
  o["nonfinite_scalar"] = e.nonfinite_scalar;
  o["reached"] = e.reached;
  o["reached_step"] = e.reached_step;
  return o;
}

ojson what_if_counts(const WhatIfCounts& c) {
  ojson o = ojson::object();
  o["values"] = c.values;
  o["overflow"] = c.overflow;
  o["underflow"] = c.underflow;
  o["subnormal"] = c.subnormal;
  o["absmax"] = num(c.absmax);
  return o;
}

/// The derived what-if table (recomputed from the stats on reading, so never read back).
ojson what_if_to_ojson(const Report& r) {
  ojson o = ojson::object();
  ojson formats = ojson::array();
  for (Format f : kWhatIfFormats) formats.push_back(std::string(format_name(f)));
  o["formats"] = std::move(formats);
  ojson rows = ojson::array();
  for (const WhatIfRow& row : what_if(r)) {
    ojson ro = ojson::object();
    ro["layer"] = row.layer;
    for (std::size_t i = 0; i < kWhatIfFormats.size(); ++i) {
      ojson fo = ojson::object();
      fo["verdict"] = what_if_verdict(row, i);
      fo["activations"] = what_if_counts(row.activations[i]);
      fo["gradients"] = what_if_counts(row.gradients[i]);
      fo["weights"] = what_if_counts(row.weights[i]);
      ro[std::string(format_name(kWhatIfFormats[i]))] = std::move(fo);
    }
    rows.push_back(std::move(ro));
  }
  o["layers"] = std::move(rows);
  return o;
}

ojson report_to_ojson(const Report& r) {
  ojson o = ojson::object();
  o["schema"] = kReportSchema;
  o["run"] = run_to_ojson(r.run);
  ojson layers = ojson::array();
  for (const Layer& l : r.layers) {
    ojson lo = ojson::object();
    lo["name"] = l.name;
    lo["type"] = l.type;
    ojson ops = ojson::array();
    for (const OpRecord& op : l.ops) ops.push_back(op_to_ojson(op));
    lo["ops"] = std::move(ops);
    ojson params = ojson::array();
    for (const ParamRecord& p : l.params) params.push_back(param_to_ojson(p));
    lo["params"] = std::move(params);
    layers.push_back(std::move(lo));
  }
  o["layers"] = std::move(layers);
  o["first_nonfinite"] = r.first_nonfinite ? nonfinite_to_ojson(*r.first_nonfinite) : ojson(nullptr);
  if (r.scaler_caught) {
    ojson sc = ojson::object();
    sc["steps"] = r.scaler_caught->steps;
    sc["first"] = nonfinite_to_ojson(r.scaler_caught->first);
    o["nonfinite_caught_by_scaler"] = std::move(sc);
  }
  if (!r.first_nonfinite_by_rank.empty()) {
    ojson by_rank = ojson::array();
    for (const NonFiniteEvent& e : r.first_nonfinite_by_rank) by_rank.push_back(nonfinite_to_ojson(e));
    o["first_nonfinite_by_rank"] = std::move(by_rank);
  }
  ojson ls = ojson::array();
  for (const LossScalePoint& p : r.loss_scale) {
    ojson po = ojson::object();
    po["step"] = p.step;
    po["scale"] = num(p.scale);
    po["found_inf"] = p.found_inf;
    ls.push_back(std::move(po));
  }
  o["loss_scale"] = std::move(ls);
  ojson recs = ojson::array();
  for (const Recommendation& rec : r.recommendations) {
    ojson ro = ojson::object();
    ro["layer"] = rec.layer;
    ro["action"] = rec.action;
    ro["severity"] = rec.severity;
    ro["reasons"] = rec.reasons;
    ro["evidence"] = ojson(rec.evidence);
    recs.push_back(std::move(ro));
  }
  o["recommendations"] = std::move(recs);
  o["what_if"] = what_if_to_ojson(r);
  return o;
}

}  // namespace

json stats_to_json(const Stats& s) { return json(stats_to_ojson(s)); }

json fp32_check_to_json(const Fp32Check& c) { return json(fp32_check_to_ojson(c)); }

json report_to_json(const Report& r) { return json(report_to_ojson(r)); }

// ---------------------------------------------------------------------------------------------
// Reading

namespace {

/// "integer", "number", "string", ... as a reader would say it.
std::string kind_of(const json& j) {
  if (j.is_number_integer()) return "integer";  // also true for unsigned
  if (j.is_number_float()) return "number";
  return j.type_name();
}

[[noreturn]] void type_error(const std::string& where, const std::string& expected, const json& got) {
  throw ReportError("report.type", where + ": expected " + expected + ", got " + kind_of(got));
}

[[noreturn]] void value_error(const std::string& where, const std::string& what) {
  throw ReportError("report.value", where + ": " + what);
}

std::string child(const std::string& where, const std::string& key) {
  return where.empty() ? key : where + "." + key;
}

std::string index(const std::string& where, std::size_t i) {
  return where + "[" + std::to_string(i) + "]";
}

/// An object-typed value's fields, looked up with presence checks.
class Obj {
 public:
  Obj(const json& j, std::string where) : j_(j), where_(std::move(where)) {
    if (!j_.is_object()) type_error(where_.empty() ? "(top level)" : where_, "object", j_);
  }
  const std::string& where() const { return where_; }
  std::string path(const std::string& key) const { return child(where_, key); }
  /// The field, or nullptr when absent.
  const json* find(const std::string& key) const {
    auto it = j_.find(key);
    return it == j_.end() ? nullptr : &*it;
  }
  const json& need(const std::string& key) const {
    const json* v = find(key);
    if (!v)
      throw ReportError("report.type", (where_.empty() ? std::string("(top level)") : where_) +
                                           ": missing required field \"" + key + "\"");
    return *v;
  }

  std::int64_t int64(const std::string& key) const { return as_int64(need(key), path(key)); }
  std::int64_t int64_or(const std::string& key, std::int64_t def) const {
    const json* v = find(key);
    return v && !v->is_null() ? as_int64(*v, path(key)) : def;
  }
  int int32(const std::string& key) const { return narrow(int64(key), path(key)); }
  int int32_or(const std::string& key, int def) const { return narrow(int64_or(key, def), path(key)); }
  /// A number; null reads as `if_null` (writers put null for NaN/inf).
  double number(const std::string& key, double if_null) const {
    return as_number(need(key), path(key), if_null);
  }
  double number_or(const std::string& key, double def, double if_null) const {
    const json* v = find(key);
    return v ? as_number(*v, path(key), if_null) : def;
  }
  std::string str(const std::string& key) const { return as_string(need(key), path(key)); }
  std::string str_or(const std::string& key, const std::string& def) const {
    const json* v = find(key);
    return v && !v->is_null() ? as_string(*v, path(key)) : def;
  }
  bool boolean(const std::string& key) const {
    const json& v = need(key);
    if (!v.is_boolean()) type_error(path(key), "boolean", v);
    return v.get<bool>();
  }
  bool boolean_or(const std::string& key, bool def) const {
    const json* v = find(key);
    if (!v || v->is_null()) return def;
    if (!v->is_boolean()) type_error(path(key), "boolean", *v);
    return v->get<bool>();
  }
  const json& array(const std::string& key) const {
    const json& v = need(key);
    if (!v.is_array()) type_error(path(key), "array", v);
    return v;
  }
  /// The array, or nullptr when absent or null.
  const json* array_or_null(const std::string& key) const {
    const json* v = find(key);
    if (!v || v->is_null()) return nullptr;
    if (!v->is_array()) type_error(path(key), "array", *v);
    return v;
  }

  static std::int64_t as_int64(const json& v, const std::string& where) {
    if (v.is_number_unsigned()) {
      if (v.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        value_error(where, "integer out of range");
      return static_cast<std::int64_t>(v.get<std::uint64_t>());
    }
    if (!v.is_number_integer()) type_error(where, "integer", v);
    return v.get<std::int64_t>();
  }
  static double as_number(const json& v, const std::string& where, double if_null) {
    if (v.is_null()) return if_null;
    if (!v.is_number()) type_error(where, "number", v);
    return v.get<double>();
  }
  static std::string as_string(const json& v, const std::string& where) {
    if (!v.is_string()) type_error(where, "string", v);
    return v.get<std::string>();
  }

 private:
  static int narrow(std::int64_t v, const std::string& where) {
    if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
      value_error(where, "integer out of range");
    return static_cast<int>(v);
  }

  const json& j_;
  std::string where_;
};

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

void check_one_of(const std::string& value, std::initializer_list<const char*> allowed,
                  const std::string& where) {
  for (const char* a : allowed)
    if (value == a) return;
  std::string list;
  for (const char* a : allowed) list += (list.empty() ? "" : "|") + std::string(a);
  value_error(where, "expected one of " + list + ", got \"" + printable(value, 60) + "\"");
}

void read_format_counts(const Obj& parent, const std::string& key,
                        std::array<std::int64_t, kNumFormats>& out) {
  Obj o(parent.need(key), parent.path(key));
  out.fill(0);
  // Formats this version does not know are ignored; formats missing from the file count 0.
  for (int i = 0; i < kNumFormats; ++i) {
    const std::string name(format_name(static_cast<Format>(i)));
    out[static_cast<std::size_t>(i)] = o.int64_or(name, 0);
    if (out[static_cast<std::size_t>(i)] < 0) value_error(o.path(name), "negative count");
  }
}

std::vector<std::string> string_list(const json& arr, const std::string& where) {
  std::vector<std::string> out;
  out.reserve(arr.size());
  for (std::size_t i = 0; i < arr.size(); ++i) out.push_back(Obj::as_string(arr[i], index(where, i)));
  return out;
}

KernelSummary kernels_from_json(const json& j, const std::string& where) {
  Obj o(j, where);
  KernelSummary k;
  k.launches = o.int64_or("launches", 0);
  k.time_ns = o.int64_or("time_ns", 0);
  k.matrix_launches = o.int64_or("matrix_launches", 0);
  k.tensor_core_launches = o.int64_or("tensor_core_launches", 0);
  k.memcpys = o.int64_or("memcpys", 0);
  k.memcpy_bytes = o.int64_or("memcpy_bytes", 0);
  k.memcpy_time_ns = o.int64_or("memcpy_time_ns", 0);
  if (const json* top = o.array_or_null("top")) {
    for (std::size_t i = 0; i < top->size(); ++i) {
      Obj t((*top)[i], index(o.path("top"), i));
      k.top.push_back({t.str("name"), t.int64_or("launches", 0), t.int64_or("time_ns", 0)});
    }
  }
  if (k.launches < 0 || k.memcpys < 0) value_error(where, "negative count");
  return k;
}

void check_counts(std::initializer_list<std::int64_t> counts, const std::string& where) {
  for (std::int64_t c : counts)
    if (c < 0) value_error(where, "negative count");
}

CastLossRecord cast_loss_from_json(const json& j, const std::string& where) {
  Obj o(j, where);
  CastLossRecord c;
  c.argument = o.str("argument");
  c.arg_index = o.int32_or("arg_index", -1);
  c.parameter = o.boolean_or("parameter", false);
  c.source_dtype = o.str("source_dtype");
  c.target_dtype = o.str("target_dtype");
  c.casts = o.int64_or("casts", 0);
  c.values = o.int64("values");
  c.nonzero = o.int64("nonzero");
  c.underflow = o.int64("underflow");
  c.overflow = o.int64("overflow");
  c.subnormal = o.int64_or("subnormal", 0);
  c.source_sq = o.number_or("source_sq", 0.0, 0.0);
  c.lost_sq = o.number_or("lost_sq", 0.0, 0.0);
  c.first_step = o.int64_or("first_step", -1);
  c.worst_step = o.int64_or("worst_step", -1);
  c.worst_rel_l2 = o.number_or("worst_rel_l2", 0.0, 0.0);
  check_counts({c.casts, c.values, c.nonzero, c.underflow, c.overflow, c.subnormal}, where);
  return c;
}

DegenerateRecord degenerate_from_json(const json& j, const std::string& where) {
  Obj o(j, where);
  DegenerateRecord d;
  d.zero_outputs = o.int64("zero_outputs");
  d.checked = o.int64_or("checked", 0);
  d.degenerate = o.int64("degenerate");
  d.first_step = o.int64_or("first_step", -1);
  d.min_nonzero_share = o.number_or("min_nonzero_share", 1.0, 1.0);
  d.max_rel_err = o.number_or("max_rel_err", 0.0, kNaN);
  d.fp32_absmax = o.number_or("fp32_absmax", 0.0, kNaN);
  check_counts({d.zero_outputs, d.checked, d.degenerate}, where);
  return d;
}

StaleUpdateRecord stale_from_json(const json& j, const std::string& where) {
  Obj o(j, where);
  StaleUpdateRecord s;
  s.tensor = o.str_or("tensor", "value");
  s.dtype = o.str("dtype");
  s.steps = o.int64("steps");
  s.updated = o.int64("updated");
  s.stale = o.int64("stale");
  s.worst_step = o.int64_or("worst_step", -1);
  s.worst_share = o.number_or("worst_share", 0.0, 0.0);
  check_counts({s.steps, s.updated, s.stale}, where);
  if (s.stale > s.updated) value_error(o.path("stale"), "more stale than updated elements");
  return s;
}

OpRecord op_from_json(const json& j, const std::string& where) {
  Obj o(j, where);
  OpRecord op;
  op.op = o.str("op");
  op.phase = o.str("phase");
  check_one_of(op.phase, {"forward", "backward", "optimizer", "setup", "between"}, o.path("phase"));
  op.calls = o.int64("calls");
  op.input_dtype = o.str("input_dtype");
  op.compute_dtype = o.str("compute_dtype");
  op.output_dtype = o.str("output_dtype");
  op.autocast = o.str("autocast");
  op.casts = o.int64("casts");
  op.stats = stats_from_json(o.need("stats"), o.path("stats"));
  if (const json* in = o.find("input_stats"); in && !in->is_null()) {
    op.input_stats = stats_from_json(*in, o.path("input_stats"));
  }
  op.first_step = o.int64_or("first_step", 0);
  op.last_step = o.int64_or("last_step", op.first_step);
  op.nonfinite_from_finite = o.int64_or("nonfinite_from_finite", 0);
  op.first_nonfinite_step = o.int64_or("first_nonfinite_step", -1);
  op.benign_nonfinite = o.int64_or("benign_nonfinite", 0);
  op.harmful_nonfinite = o.int64_or("harmful_nonfinite", op.nonfinite_from_finite);
  op.fp32_finite = o.int64_or("fp32_finite", 0);
  op.fp32_nonfinite = o.int64_or("fp32_nonfinite", 0);
  if (const json* sh = o.find("shadow"); sh && !sh->is_null()) {
    Obj so(*sh, o.path("shadow"));
    op.shadow.checks = so.int64("checks");
    op.shadow.max_rel_err = so.number("max_rel_err", kNaN);
    op.shadow.max_ulp = so.number("max_ulp", kNaN);
    op.shadow.min_cosine = so.number("min_cosine", kNaN);
    op.shadow.worst_step = so.int64_or("worst_step", -1);
    if (op.shadow.checks < 0) value_error(so.path("checks"), "negative count");
  }
  if (const json* k = o.find("kernels"); k && !k->is_null()) op.kernels = kernels_from_json(*k, o.path("kernels"));
  if (const json* cl = o.array_or_null("cast_loss")) {
    for (std::size_t i = 0; i < cl->size(); ++i)
      op.cast_loss.push_back(cast_loss_from_json((*cl)[i], index(o.path("cast_loss"), i)));
  }
  if (const json* d = o.find("degenerate_output"); d && !d->is_null())
    op.degenerate = degenerate_from_json(*d, o.path("degenerate_output"));
  if (const json* series = o.array_or_null("absmax_by_step")) {
    const std::string sw = o.path("absmax_by_step");
    for (std::size_t i = 0; i < series->size(); ++i) {
      const json& pt = (*series)[i];
      const std::string pw = index(sw, i);
      if (!pt.is_array() || pt.size() != 2) type_error(pw, "[step, absmax] pair", pt);
      op.absmax_by_step.emplace_back(Obj::as_int64(pt[0], pw + "[0]"),
                                     Obj::as_number(pt[1], pw + "[1]", kNaN));
    }
  }
  return op;
}

ParamRecord param_from_json(const json& j, const std::string& where) {
  Obj o(j, where);
  ParamRecord p;
  p.name = o.str("name");
  p.dtype = o.str("dtype");
  p.grad = stats_from_json(o.need("grad"), o.path("grad"));
  p.updates = o.int64_or("updates", 0);
  if (const json* al = o.array_or_null("aliases")) {
    for (std::size_t i = 0; i < al->size(); ++i)
      p.aliases.push_back(Obj::as_string((*al)[i], index(o.path("aliases"), i)));
  }
  if (const json* v = o.find("values"); v && !v->is_null()) p.values = stats_from_json(*v, o.path("values"));
  if (const json* st = o.array_or_null("stale_updates")) {
    for (std::size_t i = 0; i < st->size(); ++i)
      p.stale_updates.push_back(stale_from_json((*st)[i], index(o.path("stale_updates"), i)));
  }
  return p;
}

Sampling sampling_from_json(const json& j, const std::string& where) {
  Obj o(j, where);
  Sampling s;
  s.every = o.int32_or("every", 1);
  s.stats_on = o.str_or("stats_on", "outputs");
  check_one_of(s.stats_on, {"outputs", "inputs_and_outputs"}, o.path("stats_on"));
  auto list = [&](const char* key) {
    const json* a = o.array_or_null(key);
    return a ? string_list(*a, o.path(key)) : std::vector<std::string>{};
  };
  s.include_layers = list("include_layers");
  s.exclude_layers = list("exclude_layers");
  s.include_ops = list("include_ops");
  s.exclude_ops = list("exclude_ops");
  s.loss_scale_updates = o.int64_or("loss_scale_updates", 0);
  return s;
}

RunInfo run_from_json(const json& j, const std::string& where) {
  Obj o(j, where);
  RunInfo r;
  r.torch_version = o.str("torch_version");
  r.device = o.str("device");
  r.autocast_dtype = o.str("autocast_dtype");
  r.steps = o.int64("steps");
  r.started = o.str("started");
  r.duration_s = o.number("duration_s", kNaN);
  r.command = o.str("command");
  r.rank = o.int32("rank");
  r.world_size = o.int32("world_size");
  r.every = o.int32_or("every", 1);
  if (const json* sh = o.find("shadow"); sh && !sh->is_null()) {
    if (!sh->is_boolean()) type_error(o.path("shadow"), "boolean", *sh);
    r.shadow = sh->get<bool>();
  }
  r.stopped = o.str_or("stopped", "");
  if (const json* notes = o.array_or_null("notes")) r.notes = string_list(*notes, o.path("notes"));
  r.host_syncs = o.int64_or("host_syncs", -1);
  r.sampling.every = r.every;
  if (const json* sm = o.find("sampling"); sm && !sm->is_null()) r.sampling = sampling_from_json(*sm, o.path("sampling"));
  return r;
}

NonFiniteEvent nonfinite_from_json(const json& j, const std::string& where) {
  Obj o(j, where);
  NonFiniteEvent e;
  e.step = o.int64("step");
  e.phase = o.str("phase");
  e.layer = o.str("layer");
  e.op = o.str("op");
  e.kind = o.str("kind");
  check_one_of(e.kind, {"nan", "inf"}, o.path("kind"));
  e.inputs_finite = o.boolean("inputs_finite");
  const json& fp32 = o.need("fp32_also_nonfinite");
  if (fp32.is_boolean()) {
    e.fp32_also_nonfinite = fp32.get<bool>();
  } else if (!fp32.is_null()) {
    type_error(o.path("fp32_also_nonfinite"), "boolean or null", fp32);
  }
  if (const json* fc = o.find("fp32_check"); fc && !fc->is_null()) {
    Obj co(*fc, o.path("fp32_check"));
    Fp32Check c;
    c.also_nonfinite = co.boolean("also_nonfinite");
    c.compared = co.int64_or("compared", 0);
    c.lowp_only_nonfinite = co.int64_or("lowp_only_nonfinite", 0);
    c.rel_err = co.number("rel_err", kNaN);
    c.max_ulp = co.number("max_ulp", kNaN);
    c.cosine = co.number("cosine", kNaN);
    c.fp32_absmax = co.number("fp32_absmax", kNaN);
    e.fp32_check = c;
  }
  e.nonfinite_scalar = o.boolean_or("nonfinite_scalar", false);
  e.reached = o.str_or("reached", "");
  e.reached_step = o.int64_or("reached_step", -1);
  e.compute_dtype = o.str_or("compute_dtype", "");
  if (const json* st = o.find("output_stats"); st && !st->is_null())
    e.output_stats = stats_from_json(*st, o.path("output_stats"));
  e.rank = o.int32_or("rank", 0);
  return e;
}

Recommendation recommendation_from_json(const json& j, const std::string& where) {
  Obj o(j, where);
  Recommendation r;
  r.layer = o.str("layer");
  r.action = o.str("action");
  r.severity = o.str("severity");
  check_one_of(r.severity, {"critical", "high", "medium", "low"}, o.path("severity"));
  r.reasons = string_list(o.array("reasons"), o.path("reasons"));
  if (const json* ev = o.find("evidence"); ev && !ev->is_null()) {
    if (!ev->is_object()) type_error(o.path("evidence"), "object", *ev);
    r.evidence = *ev;
  }
  return r;
}

}  // namespace

Stats stats_from_json(const json& j, const std::string& where) {
  Obj o(j, where);
  Stats s;
  s.count = o.int64("count");
  s.nan = o.int64("nan");
  s.posinf = o.int64("posinf");
  s.neginf = o.int64("neginf");
  s.zeros = o.int64("zeros");
  for (const char* k : {"count", "nan", "posinf", "neginf", "zeros"})
    if (o.int64(k) < 0) value_error(o.path(k), "negative count");
  if (s.nan + s.posinf + s.neginf > s.count)
    value_error(where, "nan + posinf + neginf exceeds count");
  s.absmax = o.number("absmax", kNaN);
  s.absmin_nonzero = o.number("absmin_nonzero", kInf);  // null: no finite nonzero value
  const double mean = o.number("mean", kNaN);
  const double rms = o.number("rms", kInf);  // rms only goes non-finite by overflowing
  const auto finite = static_cast<double>(s.finite());
  s.sum = mean * finite;
  s.sum_sq = rms * rms * finite;
  if (s.finite() == 0) s.sum = s.sum_sq = 0.0;
  {
    const std::string hw = o.path("exp_hist");
    Obj h(o.need("exp_hist"), hw);
    for (const auto& [key, value] : o.need("exp_hist").items()) {
      const std::string kw = hw + "." + printable(key, 40);
      char* end = nullptr;
      errno = 0;
      const long e = std::strtol(key.c_str(), &end, 10);
      // Canonical integers only ("-3", "12"): "+3", "03" or " 3" are not what a writer makes.
      if (key.empty() || *end != '\0' || errno != 0 || e < -100000 || e > 100000 ||
          std::to_string(e) != key)
        value_error(hw, "key \"" + printable(key, 40) + "\" is not an integer exponent");
      const std::int64_t n = Obj::as_int64(value, kw);
      if (n < 0) value_error(kw, "negative count");
      if (n > 0) s.exp_hist.add(static_cast<int>(e), n);
    }
  }
  read_format_counts(o, "overflow", s.overflow);
  read_format_counts(o, "underflow", s.underflow);
  read_format_counts(o, "subnormal", s.subnormal);
  return s;
}

Report report_from_json(const json& j) {
  if (!j.is_object())
    throw ReportError("report.schema", std::string("expected a JSON object with \"schema\": \"") +
                                           kReportSchema + "\", got " + kind_of(j));
  auto sit = j.find("schema");
  if (sit == j.end())
    throw ReportError("report.schema",
                      std::string("missing \"schema\" (expected \"") + kReportSchema + "\")");
  if (!sit->is_string() || sit->get<std::string>() != kReportSchema)
    throw ReportError("report.schema",
                      "schema is " + printable(sit->dump(-1, ' ', true, json::error_handler_t::replace), 80) +
                          ", expected \"" + kReportSchema + "\"");
  Obj o(j, "");
  Report r;
  r.run = run_from_json(o.need("run"), "run");
  const json& layers = o.array("layers");
  r.layers.reserve(layers.size());
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const std::string lw = index("layers", i);
    Obj lo(layers[i], lw);
    Layer l;
    l.name = lo.str("name");
    l.type = lo.str("type");
    const json& ops = lo.array("ops");
    for (std::size_t k = 0; k < ops.size(); ++k) l.ops.push_back(op_from_json(ops[k], index(lo.path("ops"), k)));
    const json& params = lo.array("params");
    for (std::size_t k = 0; k < params.size(); ++k)
      l.params.push_back(param_from_json(params[k], index(lo.path("params"), k)));
    r.layers.push_back(std::move(l));
  }
  const json& fnf = o.need("first_nonfinite");
  if (!fnf.is_null()) r.first_nonfinite = nonfinite_from_json(fnf, "first_nonfinite");
  if (const json* sc = o.find("nonfinite_caught_by_scaler"); sc && !sc->is_null()) {
    Obj so(*sc, "nonfinite_caught_by_scaler");
    ScalerCaught c;
    c.steps = so.int64("steps");
    c.first = nonfinite_from_json(so.need("first"), so.path("first"));
    r.scaler_caught = c;
  }
  if (const json* by_rank = o.array_or_null("first_nonfinite_by_rank")) {
    for (std::size_t i = 0; i < by_rank->size(); ++i)
      r.first_nonfinite_by_rank.push_back(
          nonfinite_from_json((*by_rank)[i], index("first_nonfinite_by_rank", i)));
  }
  const json& ls = o.array("loss_scale");
  for (std::size_t i = 0; i < ls.size(); ++i) {
    Obj po(ls[i], index("loss_scale", i));
    LossScalePoint p;
    p.step = po.int64("step");
    p.scale = po.number("scale", kNaN);
    p.found_inf = po.boolean("found_inf");
    r.loss_scale.push_back(p);
  }
  const json& recs = o.array("recommendations");
  for (std::size_t i = 0; i < recs.size(); ++i)
    r.recommendations.push_back(recommendation_from_json(recs[i], index("recommendations", i)));
  validate_report(r);  // values, not just types (report_validate.cpp)
  return r;
}

// ---------------------------------------------------------------------------------------------
// Files

Report read_report(const std::string& path) {
  const json j = read_json_file(path, "report");
  try {
    return report_from_json(j);
  } catch (const ReportError& e) {
    throw ReportError(e.id(), path + ": " + e.what());
  }
}

std::string report_text(const Report& r) {
  return report_to_ojson(r).dump(-1, ' ', false, ojson::error_handler_t::replace) + "\n";
}

void write_report(const Report& r, const std::string& path) { write_file_atomic(path, report_text(r)); }

void write_file_atomic(const std::string& path, const std::string& content) {
  const std::string dir = parent_dir(path);
  try {
    make_directories(dir);
  } catch (const std::runtime_error& e) {
    throw std::runtime_error("cannot write " + path + ": " + e.what());
  }
  static std::atomic<unsigned> counter{0};
  const std::string tmp = join_path(dir, "." + base_name(path) + ".tmp." +
                                             std::to_string(::getpid()) + "." +
                                             std::to_string(counter++));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error("cannot write " + path + ": cannot create " + tmp + ": " +
                                       std::strerror(errno));
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    out.close();
    if (!out) {
      const std::string err = std::strerror(errno);
      std::remove(tmp.c_str());
      throw std::runtime_error("cannot write " + path + ": write to " + tmp + " failed: " + err);
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string err = std::strerror(errno);
    std::remove(tmp.c_str());
    throw std::runtime_error("cannot write " + path + ": rename failed: " + err);
  }
}

}  // namespace ampscope::reports
