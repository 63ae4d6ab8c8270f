// The recommendation engine. Each rule is a small function that looks at the report model and
// proposes findings; the engine merges them into one recommendation per (layer, action) and
// orders them most severe first. Rules never read files or torch state, so every rule is
// testable on a hand-made Report.
//
// Rules so far:
//   origin_rule     first_nonfinite came from finite inputs -> pin_fp32 (critical,
//                   nonfinite_origin), or fix_model (critical, nonfinite_in_fp32) when the FP32
//                   re-check was also non-finite or the op already computed in float32/64.
//   lowp_op_rule    an op computing in the run's low-precision dtype produced NaN/Inf from
//                   finite inputs -> pin_fp32 (high, overflow_<format> | nonfinite_lowp).
// NaN/Inf that merely propagated (nonfinite_from_finite == 0) never yields a recommendation.

#include <ampscope/reports/recommend.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace ampscope::reports {

using json = nlohmann::json;

int severity_rank(const std::string& severity) {
  if (severity == "critical") return 3;
  if (severity == "high") return 2;
  if (severity == "medium") return 1;
  if (severity == "low") return 0;
  return -1;
}

namespace {

/// "torch.float16" and "float16" name the same dtype.
std::string dtype_name(const std::string& d) {
  constexpr const char* kPrefix = "torch.";
  return d.rfind(kPrefix, 0) == 0 ? d.substr(6) : d;
}

/// A double for evidence: null when not finite.
json num(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

/// The largest finite value of a named low-precision format, or null when it is none of them.
json format_max_of(const std::string& dtype) {
  Format f;
  if (!format_from_name(dtype_name(dtype), &f)) return nullptr;
  return format_max(f);
}

std::string fp32_recheck_word(const std::optional<bool>& v) {
  if (!v) return "not_run";
  return *v ? "also_nonfinite" : "finite";
}

/// What one rule proposes; the engine merges findings that share (layer, action).
struct Finding {
  std::string layer;
  std::string action;
  std::string severity;
  std::vector<std::string> reasons;
  json evidence = json::object();
};

using Findings = std::vector<Finding>;

/// True when the report's first non-finite origin was shown to be non-finite in FP32 too, for
/// this (layer, op): pinning that op to FP32 cannot help.
bool fails_in_fp32_too(const Report& r, const std::string& layer, const std::string& op) {
  const auto& e = r.first_nonfinite;
  return e && e->inputs_finite && e->fp32_also_nonfinite.value_or(false) && e->layer == layer &&
         e->op == op;
}

// (a) The op that produced the run's first NaN/Inf out of finite inputs.
void origin_rule(const Report& r, Findings& out) {
  if (!r.first_nonfinite || !r.first_nonfinite->inputs_finite) return;
  const NonFiniteEvent& e = *r.first_nonfinite;
  json origin = json::object();
  origin["step"] = e.step;
  origin["phase"] = e.phase;
  origin["op"] = e.op;
  origin["kind"] = e.kind;
  origin["inputs_finite"] = e.inputs_finite;
  if (!e.compute_dtype.empty()) origin["compute_dtype"] = e.compute_dtype;
  origin["fp32_recheck"] = fp32_recheck_word(e.fp32_also_nonfinite);
  if (e.output_stats) {
    origin["count"] = e.output_stats->count;
    origin["nan"] = e.output_stats->nan;
    origin["posinf"] = e.output_stats->posinf;
    origin["neginf"] = e.output_stats->neginf;
    origin["absmax"] = num(e.output_stats->absmax);  // of the finite outputs
  }
  if (json fm = format_max_of(e.compute_dtype); !fm.is_null()) origin["format_max"] = fm;

  Finding f;
  f.layer = e.layer;
  f.severity = "critical";
  // Already computed in float32 or wider: pinning to float32 changes nothing, so it is a
  // model bug even when the re-check could not run.
  const std::string cd = dtype_name(e.compute_dtype);
  const bool ran_wide = cd == "float32" || cd == "float64";
  if (e.fp32_also_nonfinite.value_or(false) || ran_wide) {
    f.action = "fix_model";
    f.reasons = {"nonfinite_in_fp32"};
  } else {
    f.action = "pin_fp32";
    f.reasons = {"nonfinite_origin"};
  }
  f.evidence["first_nonfinite"] = std::move(origin);
  out.push_back(std::move(f));
}

// (b) Ops computing in the run's low-precision dtype that made NaN/Inf from finite inputs.
void lowp_op_rule(const Report& r, Findings& out) {
  const std::string lowp = dtype_name(r.run.autocast_dtype);
  if (lowp.empty() || lowp == "float32" || lowp == "float64") return;
  for (const Layer& layer : r.layers) {
    for (const OpRecord& op : layer.ops) {
      if (dtype_name(op.compute_dtype) != lowp || op.nonfinite_from_finite <= 0) continue;
      if (fails_in_fp32_too(r, layer.name, op.op)) continue;  // origin_rule says fix_model
      const bool infs = op.stats.posinf + op.stats.neginf > 0;
      json ev = json::object();
      ev["op"] = op.op;
      ev["phase"] = op.phase;
      ev["calls"] = op.calls;
      ev["compute_dtype"] = op.compute_dtype;
      ev["nonfinite_from_finite"] = op.nonfinite_from_finite;
      ev["first_step"] = op.first_nonfinite_step;
      ev["nan"] = op.stats.nan;
      ev["posinf"] = op.stats.posinf;
      ev["neginf"] = op.stats.neginf;
      ev["absmax"] = num(op.stats.absmax);  // of the finite outputs
      if (json fm = format_max_of(lowp); !fm.is_null()) ev["format_max"] = fm;
      const auto& e = r.first_nonfinite;
      if (e && e->layer == layer.name && e->op == op.op && e->fp32_also_nonfinite)
        ev["fp32_recheck"] = fp32_recheck_word(e->fp32_also_nonfinite);

      Finding f;
      f.layer = layer.name;
      f.action = "pin_fp32";
      f.severity = "high";
      f.reasons = {infs ? "overflow_" + lowp : "nonfinite_lowp"};
      f.evidence["ops"] = json::array({std::move(ev)});
      out.push_back(std::move(f));
    }
  }
}

/// Merges `add` into `into`: arrays concatenate, objects merge key by key, other values keep
/// the first one seen.
void merge_evidence(json& into, const json& add) {
  for (auto it = add.begin(); it != add.end(); ++it) {
    auto found = into.find(it.key());
    if (found == into.end()) {
      into[it.key()] = it.value();
    } else if (found->is_array() && it.value().is_array()) {
      for (const json& v : it.value()) found->push_back(v);
    } else if (found->is_object() && it.value().is_object()) {
      merge_evidence(*found, it.value());
    }
  }
}

std::vector<Recommendation> merge(Findings findings) {
  std::vector<Recommendation> recs;
  for (Finding& f : findings) {
    auto it = std::find_if(recs.begin(), recs.end(), [&](const Recommendation& r) {
      return r.layer == f.layer && r.action == f.action;
    });
    if (it == recs.end()) {
      Recommendation r;
      r.layer = std::move(f.layer);
      r.action = std::move(f.action);
      r.severity = std::move(f.severity);
      r.reasons = std::move(f.reasons);
      r.evidence = std::move(f.evidence);
      recs.push_back(std::move(r));
      continue;
    }
    if (severity_rank(f.severity) > severity_rank(it->severity)) it->severity = f.severity;
    for (std::string& reason : f.reasons)
      if (std::find(it->reasons.begin(), it->reasons.end(), reason) == it->reasons.end())
        it->reasons.push_back(std::move(reason));
    merge_evidence(it->evidence, f.evidence);
  }
  std::stable_sort(recs.begin(), recs.end(), [](const Recommendation& a, const Recommendation& b) {
    const int ra = severity_rank(a.severity), rb = severity_rank(b.severity);
    if (ra != rb) return ra > rb;
    if (a.layer != b.layer) return a.layer < b.layer;
    return a.action < b.action;
  });
  return recs;
}

}  // namespace

std::vector<Recommendation> recommend(const Report& report) {
  Findings findings;
  origin_rule(report, findings);
  lowp_op_rule(report, findings);
  return merge(std::move(findings));
}

}  // namespace ampscope::reports
