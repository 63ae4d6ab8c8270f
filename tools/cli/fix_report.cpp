// Rendering of `ampscope fix` results. Reads only the outcome of the search and its runs'
// reports.
#include "fix_report.h"

#include <ampscope/reports/diff.h>
#include <ampscope/reports/evidence.h>
#include <ampscope/reports/files.h>
#include <ampscope/reports/recommend.h>
#include <fmt/core.h>

#include <algorithm>
#include <cmath>

#include "profiled_run.h"

namespace ampscope::cli::fix {

using ojson = nlohmann::ordered_json;

namespace {

std::string label(const std::string& layer) { return layer.empty() ? "(root)" : layer; }

std::string joined(const std::vector<std::string>& v, const char* sep = ", ") {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + label(x);
  return s;
}

std::string nonfinite_text(const reports::NonFiniteEvent& e) {
  return fmt::format("non-finite at step {} in {} ({}, {}, {})", e.step, label(e.layer), e.op,
                     e.kind, name_of(e.phase));
}

/// "aten::linear at step 2 (inf, float32 absmax 65536)" from a recommendation's evidence.
std::string evidence_text(const reports::Recommendation& rec) {
  if (const auto origin = reports::evidence_of<reports::OriginEvidence>(rec.evidence); !origin.empty()) {
    const reports::OriginEvidence& f = origin[0];
    std::string s = fmt::format("{} at step {} ({}", f.op, f.step, f.kind);
    if (f.fp32_check && std::isfinite(f.fp32_check->fp32_absmax))
      s += fmt::format(", float32 absmax {:g}", f.fp32_check->fp32_absmax);
    return s + ")";
  }
  if (const auto ops = reports::evidence_of<reports::NonfiniteOpEvidence>(rec.evidence); !ops.empty())
    return fmt::format("{} from step {}", ops[0].op, ops[0].first_step);
  return reports::key_evidence(rec);
}

}  // namespace

std::string run_result(const RunRecord& r) {
  const reports::Report& rep = r.report;
  std::string s =
      rep.first_nonfinite ? nonfinite_text(*rep.first_nonfinite) : "no non-finite value";
  const auto pins = pin_findings(rep);
  if (!pins.empty()) s += "; recommends pinning " + joined(pins);
  if (is_clean(r)) s = "clean";
  if (failed(r)) s += fmt::format("; FAILED: exit code {}", r.exit_code);
  if (rep.run.stopped == "nonfinite")
    s += " (stopped there)";
  else if (!rep.run.stopped.empty())
    s += " (stopped: " + rep.run.stopped + ")";
  return s;
}

namespace {

/// `dir` relative to `out` (the folder of the map).
std::string relative(const std::string& dir, const std::string& out) {
  const std::string prefix = out.empty() || out.back() == '/' ? out : out + "/";
  return dir.rfind(prefix, 0) == 0 ? dir.substr(prefix.size()) : dir;
}

ojson needed_json(const RunRecord& r, const std::string& out) {
  ojson j = ojson::object();
  j["run"] = relative(r.dir, out);
  j["pins"] = r.pins;
  if (const auto& e = r.report.first_nonfinite) {
    j["first_nonfinite"] = {{"step", e->step},
                            {"phase", e->phase},
                            {"layer", e->layer},
                            {"op", e->op},
                            {"kind", e->kind}};
  } else {
    j["first_nonfinite"] = nullptr;
  }
  j["recommends_pinning"] = pin_findings(r.report);
  return j;
}

ojson pin_evidence(const FixOutcome& o, const PinHistory& h, const std::string& out) {
  ojson j = ojson::object();
  if (h.added_by == 0) {
    j["added"] = "starting map";
  } else {
    j["added"] = fmt::format("round {}", h.round);
    j["added_by"] = {{"run", relative(o.run(h.added_by).dir, out)},
                     {"severity", std::string(ampscope::name_of(h.rec.severity))},
                     {"reasons", h.rec.reasons},
                     {"evidence", ojson::parse(h.rec.evidence.dump())}};
  }
  // Without this pin the run was not clean: the evidence that the pin is needed.
  if (h.needed_by) j["needed"] = needed_json(o.run(h.needed_by), out);
  return j;
}

}  // namespace

ojson fix_map_json(const FixOutcome& o, const reports::PrecisionMap& start,
                   const std::string& out_dir) {
  ojson j = ojson::object();
  j["schema"] = reports::kPrecisionMapSchema;
  j["pin_fp32"] = o.final_pins;
  ojson why = ojson::object(), evidence = ojson::object();
  for (const auto& h : o.pins) {
    if (std::find(o.final_pins.begin(), o.final_pins.end(), h.layer) == o.final_pins.end())
      continue;
    auto it = start.why.find(h.layer);
    why[h.layer] = h.added_by              ? h.rec.reasons
                   : it != start.why.end() ? it->second
                                           : std::vector<std::string>{};
    evidence[h.layer] = pin_evidence(o, h, out_dir);
  }
  j["why"] = std::move(why);
  j["evidence"] = std::move(evidence);
  return j;
}

}  // namespace ampscope::cli::fix

namespace ampscope::cli::fix {
namespace {

std::string plural(std::size_t n, const char* word) {
  return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s");
}

std::string headline(const FixOutcome& o) {
  const std::string done =
      fmt::format("after {} and {}", plural(static_cast<std::size_t>(o.rounds), "round"),
                  plural(o.runs.size(), "run"));
  if (o.ended == "clean" && o.final_pins.empty()) return "clean without pins " + done;
  if (o.ended == "clean")
    return fmt::format("clean with {} {}{}", plural(o.final_pins.size(), "pin"), done,
                       o.minimised ? " (minimised: each pin is needed)" : "");
  if (o.ended == "interrupted")
    return fmt::format("INTERRUPTED {}: the map is {}", done,
                       is_clean(o.final()) ? "the smallest clean one run so far (not minimal)"
                                           : "the last run's (no run was clean)");
  if (o.ended == "failed") {
    const RunRecord& f = o.final();
    const std::string log = reports::join_path(f.dir, "log.txt");
    return fmt::format("NOT clean {}: the command failed {} (exit code {}: \"{}\"; see {})", done,
                       f.pins.empty() ? "without pins" : "with the map", f.exit_code,
                       last_line(log), log);
  }
  const std::string why = o.ended == "max_rounds"
                              ? "--max-rounds reached"
                              : "the last run recommends no new pin (see what remains)";
  return fmt::format("NOT clean {}: {}", done, why);
}

std::string runs_section(const FixOutcome& o) {
  std::string s = "runs:\n";
  std::size_t width = 24;  // "without <a long layer name>" widens the column
  for (const auto& r : o.runs) width = std::max(width, r.purpose.size());
  for (const auto& r : o.runs) {
    s += fmt::format("  {:>2}  {:<{}} {:<8} {:>6.1f} s  {}\n      {}\n", r.index, r.purpose, width,
                     plural(r.pins.size(), "pin"), r.seconds, r.dir, run_result(r));
  }
  return s;
}

std::string pins_section(const FixOutcome& o) {
  std::string s =
      fmt::format("pins ({}):\n", o.final_pins.empty() ? "none" : "in precision_map.json");
  for (const auto& h : o.pins) {
    if (std::find(o.final_pins.begin(), o.final_pins.end(), h.layer) == o.final_pins.end())
      continue;
    s += fmt::format("  {}\n", label(h.layer));
    if (h.added_by)
      s += fmt::format("      added in round {} (run {}): {} {}\n", h.round, h.added_by,
                       joined(h.rec.reasons, ","), evidence_text(h.rec));
    else
      s += "      from the starting map\n";
    if (h.needed_by)
      s += fmt::format("      fixes: without it run {} got {}\n", h.needed_by,
                       run_result(o.run(h.needed_by)));
  }
  std::string dropped;
  const auto& layers = o.baseline().report.layers;
  for (const auto& h : o.pins) {
    if (!h.dropped_by) continue;
    const bool known = h.layer.empty() ||  // it or a module inside it ran
                       std::any_of(layers.begin(), layers.end(), [&](const reports::Layer& l) {
                         return l.name == h.layer || l.name.rfind(h.layer + ".", 0) == 0;
                       });
    dropped += fmt::format(
        "  {}  ({}; run {} without it was clean){}\n", label(h.layer),
        h.added_by ? fmt::format("added in round {}", h.round) : "from the starting map",
        h.dropped_by, known ? "" : " -- no layer of that name ran in the baseline");
  }
  return dropped.empty() ? s : s + "dropped (not needed):\n" + dropped;
}

/// Findings of the final run a pin cannot fix, and pins recommended for layers already pinned.
std::string remains_section(const FixOutcome& o) {
  const reports::Report& r = o.final().report;
  std::string s;
  if (failed(o.final()))  // its report stops where the command did
    s += fmt::format("  the run failed (exit code {}): it shows only what ran before that\n",
                     o.final().exit_code);
  if (r.first_nonfinite) s += "  " + nonfinite_text(*r.first_nonfinite) + "\n";
  for (const auto& rec : r.recommendations) {
    s += fmt::format("  {:<9} {:<20} {:<16} {}\n", ampscope::name_of(rec.severity), ampscope::name_of(rec.action), label(rec.layer),
                     joined(rec.reasons, ","));
  }
  return "what remains (final run " + std::to_string(o.final_run) + "):\n" +
         (s.empty() ? "  nothing: no recommendation\n" : s);
}

std::string cost_section(const FixOutcome& o) {
  const RunRecord& before = o.baseline();
  const RunRecord& after = o.final();
  std::string s = fmt::format("cost of the map (run {} without pins -> run {} with the map):\n",
                              before.index, after.index);
  if (before.index == after.index) return s + "  none: no pins\n";
  if (failed(after))
    s += fmt::format("  (run {} failed, exit code {}: it is compared as far as it ran)\n",
                     after.index, after.exit_code);
  return s + reports::render_diff(reports::diff_reports(before.report, after.report), before.report,
                                  after.report);
}

/// What the baseline could not show: a clean verdict on a run that trained nothing, or in
/// float32 throughout, says nothing about mixed precision.
std::string baseline_notes(const reports::Report& r) {
  std::string s;
  if (r.run.steps == 0)
    s += "note: the baseline run completed no training step (no optimizer step or "
         "ampscope.step() was seen): it checked little or nothing\n";
  bool low = false;
  for (const auto& layer : r.layers)
    for (const auto& op : layer.ops) low = low || format_from_name(op.compute_dtype, nullptr);
  if (!low)
    s += "note: no op of the baseline computed in a low-precision dtype (autocast off, or no "
         "float16/bfloat16 tensors): no precision problem could show; is mixed precision on in "
         "this command?\n";
  return s;
}

}  // namespace

std::string render_fix(const FixOutcome& o, const std::string& command) {
  std::string s = "ampscope fix: " + headline(o) + "\n";
  s += "command: " + command + "\n" + baseline_notes(o.baseline().report) + "\n";
  s +=
      runs_section(o) + "\n" + pins_section(o) + "\n" + remains_section(o) + "\n" + cost_section(o);
  return s;
}

}  // namespace ampscope::cli::fix
