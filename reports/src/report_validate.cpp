// Value validation of a parsed report (see report_validate.h). Each check names the JSON path.
#include <ampscope/reports/report_json.h>
#include <ampscope/reports/report_validate.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>
#include <string>

namespace ampscope::reports {
namespace {

[[noreturn]] void bad(const std::string& where, const std::string& what) {
  throw ReportError("report.value", where + ": " + what);
}

std::string at(const std::string& where, std::size_t i) { return where + "[" + std::to_string(i) + "]"; }

/// A quoted value for a message, printable ASCII, short.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s.substr(0, 60)) out.push_back(c >= 0x20 && c < 0x7f ? static_cast<char>(c) : '?');
  return out + (s.size() > 60 ? "...\"" : "\"");
}

void one_of(const std::string& v, std::initializer_list<const char*> allowed, const std::string& where) {
  for (const char* a : allowed)
    if (v == a) return;
  std::string list;
  for (const char* a : allowed) list += (list.empty() ? "" : "|") + std::string(*a ? a : "\"\"");
  bad(where, "expected one of " + list + ", got " + quoted(v));
}

void non_negative(std::int64_t v, const std::string& where) {
  if (v < 0) bad(where, "negative value " + std::to_string(v));
}

void dtype(const std::string& d, const std::string& where) {
  if (!known_dtype_name(d)) bad(where, "unknown dtype " + quoted(d));
}

void stats(const Stats& s, const std::string& where) {
  if (s.zeros > s.finite()) bad(where + ".zeros", "more zeros than finite values");
  if (!(s.absmax >= 0) && !std::isnan(s.absmax)) bad(where + ".absmax", "negative");
  if (!(s.absmin_nonzero > 0)) bad(where + ".absmin_nonzero", "not positive");
  if (std::isfinite(s.absmin_nonzero) && s.absmin_nonzero > s.absmax)
    bad(where, "absmin_nonzero " + std::to_string(s.absmin_nonzero) + " > absmax " + std::to_string(s.absmax));
  std::int64_t hist = 0;
  if (!s.exp_hist.empty())
    for (int e = s.exp_hist.lo(); e < s.exp_hist.hi(); ++e) hist += s.exp_hist.at(e);
  if (hist > s.finite() - s.zeros) bad(where + ".exp_hist", "counts more values than the nonzero finite ones");
  for (int f = 0; f < kNumFormats; ++f) {
    const std::string name(format_name(static_cast<Format>(f)));
    const auto i = static_cast<std::size_t>(f);
    if (s.overflow[i] > s.finite()) bad(where + ".overflow." + name, "exceeds the finite values");
    if (s.underflow[i] + s.subnormal[i] > s.finite() - s.zeros)
      bad(where + ".underflow." + name, "underflow + subnormal exceed the nonzero finite values");
  }
}

void op(const OpRecord& o, const std::string& w) {
  dtype(o.input_dtype, w + ".input_dtype");
  dtype(o.compute_dtype, w + ".compute_dtype");
  dtype(o.output_dtype, w + ".output_dtype");
  non_negative(o.calls, w + ".calls");
  non_negative(o.casts, w + ".casts");
  non_negative(o.first_step, w + ".first_step");
  if (o.last_step < o.first_step) bad(w + ".last_step", "before first_step");
  for (auto [v, k] : {std::pair{o.nonfinite_from_finite, "nonfinite_from_finite"}, {o.benign_nonfinite, "benign_nonfinite"},
                      {o.harmful_nonfinite, "harmful_nonfinite"}, {o.fp32_finite, "fp32_finite"}, {o.fp32_nonfinite, "fp32_nonfinite"}})
    non_negative(v, w + "." + k);
  if (o.first_nonfinite_step < -1) bad(w + ".first_nonfinite_step", "below -1");
  stats(o.stats, w + ".stats");
  if (o.input_stats) stats(*o.input_stats, w + ".input_stats");
}

void layer(const Layer& l, const std::string& w) {
  for (std::size_t k = 0; k < l.ops.size(); ++k) op(l.ops[k], at(w + ".ops", k));
  std::set<std::string> params;
  for (std::size_t k = 0; k < l.params.size(); ++k) {
    const std::string pw = at(w + ".params", k);
    if (!params.insert(l.params[k].name).second) bad(pw + ".name", "duplicate parameter " + quoted(l.params[k].name));
    dtype(l.params[k].dtype, pw + ".dtype");
    non_negative(l.params[k].updates, pw + ".updates");
    stats(l.params[k].grad, pw + ".grad");
  }
}

void run(const RunInfo& r) {
  non_negative(r.steps, "run.steps");
  if (r.duration_s < 0) bad("run.duration_s", "negative");
  if (r.world_size < 1) bad("run.world_size", "must be >= 1");
  if (r.rank < 0 || r.rank >= r.world_size)
    bad("run.rank", "rank " + std::to_string(r.rank) + " outside world_size " + std::to_string(r.world_size));
  if (r.every < 1) bad("run.every", "must be >= 1");
  if (r.sampling.every < 1) bad("run.sampling.every", "must be >= 1");
  non_negative(r.sampling.loss_scale_updates, "run.sampling.loss_scale_updates");
  dtype(r.autocast_dtype, "run.autocast_dtype");
  one_of(r.stopped, {"", "nonfinite", "signal"}, "run.stopped");
  if (r.host_syncs < -1) bad("run.host_syncs", "below -1");
}

void event(const NonFiniteEvent& e, const RunInfo& r, const std::string& w) {
  non_negative(e.step, w + ".step");
  dtype(e.compute_dtype, w + ".compute_dtype");
  if (e.rank < 0 || e.rank >= std::max(r.world_size, 1)) bad(w + ".rank", "outside world_size");
  if (e.output_stats) stats(*e.output_stats, w + ".output_stats");
}


}  // namespace

bool known_dtype_name(const std::string& raw) {
  const std::string d = raw.rfind("torch.", 0) == 0 ? raw.substr(6) : raw;
  static const std::set<std::string> kNames = {
      "", "float32", "float64", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "int64", "int32",
      "int16", "int8", "uint8", "bool", "complex64", "complex128", "float", "double", "half", "long", "int"};
  if (kNames.count(d)) return true;
  // c10::toString names of the scalar types the observer does not spell itself.
  if (d.size() > 24 || d.empty() || d[0] < 'A' || d[0] > 'Z') return false;
  for (char c : d)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  return true;
}

void validate_report(const Report& r) {
  run(r.run);
  std::set<std::string> names;
  for (std::size_t i = 0; i < r.layers.size(); ++i) {
    if (!names.insert(r.layers[i].name).second)
      bad(at("layers", i) + ".name", "duplicate layer name " + quoted(r.layers[i].name));
    layer(r.layers[i], at("layers", i));
  }
  if (r.first_nonfinite) event(*r.first_nonfinite, r.run, "first_nonfinite");
  for (std::size_t i = 0; i < r.first_nonfinite_by_rank.size(); ++i)
    event(r.first_nonfinite_by_rank[i], r.run, at("first_nonfinite_by_rank", i));
  for (std::size_t i = 0; i < r.loss_scale.size(); ++i) {
    non_negative(r.loss_scale[i].step, at("loss_scale", i) + ".step");
    if (!(r.loss_scale[i].scale > 0) && !std::isnan(r.loss_scale[i].scale))
      bad(at("loss_scale", i) + ".scale", "not positive");
  }
  // (phases, autocast classes, actions and severities are enums: the reader took only known names)
}

}  // namespace ampscope::reports
