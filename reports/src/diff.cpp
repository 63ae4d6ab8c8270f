#include <ampscope/reports/diff.h>
#include <ampscope/reports/terminal.h>
#include <fmt/core.h>

#include <algorithm>
#include <map>
#include <set>

namespace ampscope::reports {
namespace {

std::int64_t origins(const Report& r) {
  std::int64_t n = 0;
  for (const Layer& l : r.layers) {
    for (const OpRecord& op : l.ops) n += op.nonfinite_from_finite;
  }
  return n;
}

std::set<std::string> pins(const Report& r) {
  std::set<std::string> out;
  for (const Recommendation& rec : r.recommendations) {
    if (rec.action == Action::kPinFp32) out.insert(rec.layer);
  }
  return out;
}

/// (layer, op) -> compute dtypes of its forward entries, joined ("float16" or "float16+float32").
std::map<std::pair<std::string, std::string>, std::string> compute_dtypes(const Report& r) {
  std::map<std::pair<std::string, std::string>, std::set<std::string>> sets;
  for (const Layer& l : r.layers) {
    for (const OpRecord& op : l.ops) {
      if (op.phase == Phase::kForward && !op.compute_dtype.empty()) sets[{l.name, op.op}].insert(op.compute_dtype);
    }
  }
  std::map<std::pair<std::string, std::string>, std::string> out;
  for (const auto& [key, dtypes] : sets) {
    std::string joined;
    for (const auto& d : dtypes) joined += (joined.empty() ? "" : "+") + d;
    out[key] = joined;
  }
  return out;
}

double step_seconds(const Report& r) { return r.run.steps > 0 ? r.run.duration_s / r.run.steps : 0; }

std::string first_text(const Report& r) {
  if (!r.first_nonfinite) return "none";
  const NonFiniteEvent& e = *r.first_nonfinite;
  return fmt::format("step {}, {} {} ({})", e.step, e.layer.empty() ? "(root)" : e.layer, e.op, e.kind);
}

std::string layer_label(const std::string& name) { return name.empty() ? "(root)" : name; }

}  // namespace

ReportDiff diff_reports(const Report& before, const Report& after) {
  ReportDiff d;
  d.nonfinite_before = before.first_nonfinite.has_value();
  d.nonfinite_after = after.first_nonfinite.has_value();
  d.origins_before = origins(before);
  d.origins_after = origins(after);
  auto pa = pins(before), pb = pins(after);
  std::set_difference(pa.begin(), pa.end(), pb.begin(), pb.end(), std::back_inserter(d.pins_gone));
  std::set_difference(pb.begin(), pb.end(), pa.begin(), pa.end(), std::back_inserter(d.pins_new));
  auto da = compute_dtypes(before), db = compute_dtypes(after);
  for (const auto& [key, dtype] : da) {
    auto it = db.find(key);
    if (it != db.end() && it->second != dtype) d.dtype_changes.push_back({key.first, key.second, dtype, it->second});
  }
  d.step_s_before = step_seconds(before);
  d.step_s_after = step_seconds(after);
  return d;
}

std::string render_diff(const ReportDiff& d, const Report& unsafe_before, const Report& unsafe_after) {
  // Names from the model are printed escaped (terminal_safe), as in the summary.
  const Report before = terminal_safe(unsafe_before), after = terminal_safe(unsafe_after);
  auto safe = [](const std::string& s) { return terminal_safe(s); };
  std::string out;
  const char* verdict = d.nonfinite_before && !d.nonfinite_after   ? "gone"
                        : !d.nonfinite_before && d.nonfinite_after ? "NEW"
                        : d.nonfinite_before                       ? "still there"
                                                                   : "none in either run";
  out += fmt::format("non-finite: {}\n  before: {}\n  after:  {}\n", verdict, first_text(before),
                     first_text(after));
  out += fmt::format("op calls that made NaN/inf from finite inputs: {} -> {}\n", d.origins_before,
                     d.origins_after);
  out += "pins recommended:";
  if (d.pins_gone.empty() && d.pins_new.empty()) out += " unchanged";
  out += "\n";
  for (const auto& p : d.pins_gone) out += fmt::format("  no longer needed: {}\n", layer_label(safe(p)));
  for (const auto& p : d.pins_new) out += fmt::format("  new: {}\n", layer_label(safe(p)));
  out += fmt::format("compute dtype changes (forward): {}\n", d.dtype_changes.size());
  for (const auto& c : d.dtype_changes) {
    out += fmt::format("  {}  {}: {} -> {}\n", layer_label(safe(c.layer)), safe(c.op), safe(c.before), safe(c.after));
  }
  if (before.run.steps != after.run.steps && before.run.steps > 0 && after.run.steps > 0) {
    // A loop that skips its optimizer step on a NaN loss runs as many iterations in fewer
    // steps (steps end at optimizer steps), and a run may stop early: per step, they differ.
    out += fmt::format(
        "time per step: not compared (the runs counted {} and {} steps: an optimizer step skipped "
        "on NaN/Inf, or a run that stopped early); the whole runs took {:.4g} s and {:.4g} s\n",
        before.run.steps, after.run.steps, before.run.duration_s, after.run.duration_s);
  } else if (d.step_s_before > 0 && d.step_s_after > 0) {
    out += fmt::format("time per step: {:.4g} s -> {:.4g} s ({:+.1f}%)\n", d.step_s_before,
                       d.step_s_after, 100.0 * (d.step_s_after / d.step_s_before - 1.0));
  }
  return out;
}

}  // namespace ampscope::reports
