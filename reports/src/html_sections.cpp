// Static sections of the HTML report: run summary, verdict banner, per-rank events,
// recommendations, the layer table's controls and the histogram containers. Every model string
// is escaped here; the interactive parts are filled in by the page's script.

#include <ampscope/reports/html.h>
#include <ampscope/reports/merge.h>
#include <ampscope/reports/recommend.h>
#include <fmt/format.h>

#include <cmath>
#include <set>
#include <string>

#include "dtypes.h"
#include "html_detail.h"
#include "recommend_rules.h"
#include "text_util.h"

namespace ampscope::reports::detail {
namespace {

using text::number;

std::string esc(const std::string& s) { return html_escape(s); }

/// Magnitudes people compare with a format's max: 124360, not 1.244e+05.
std::string magnitude(double v) {
  return std::isfinite(v) && std::fabs(v) >= 1000 && std::fabs(v) < 1e15 ? fmt::format("{:.0f}", v)
                                                                         : number(v);
}

/// "2026-12-03T07:58:28Z" -> "2026-12-03 07:58:28 UTC" (anything else as it is).
std::string readable_time(std::string t) {
  if (t.size() == 20 && t[10] == 'T' && t[19] == 'Z')
    t = t.substr(0, 10) + " " + t.substr(11, 8) + " UTC";
  return t;
}

/// A link that the script turns into "reveal this layer in the table".
std::string layer_link(const std::string& layer) {
  return "<a class=\"goto\" href=\"#layers\" data-layer=\"" + esc(layer) + "\"><code>" +
         esc(text::layer_label(layer)) + "</code></a>";
}

void kv(std::string& out, const std::string& k, const std::string& v_html) {
  out += "<div><span class=\"k\">" + k + "</span><span class=\"v\">" + v_html + "</span></div>";
}

struct Totals {
  std::int64_t entries = 0, calls = 0, nonfinite = 0, origins = 0;
};

Totals totals(const Report& r) {
  Totals t;
  for (const Layer& l : r.layers) {
    for (const OpRecord& op : l.ops) {
      ++t.entries;
      t.calls += op.calls;
      t.nonfinite += op.stats.nonfinite();
      t.origins += op.nonfinite_from_finite;
    }
  }
  return t;
}

const Recommendation* rec_for(const Report& r, const std::string& layer) {
  for (const Recommendation& rec : r.recommendations)
    if (rec.layer == layer) return &rec;
  return nullptr;
}

}  // namespace

void summary_section(const Report& r, std::string& out) {
  const RunInfo& run = r.run;
  const Totals t = totals(r);
  out += "<section id=\"summary\"><h1>Precision report</h1>\n";
  if (!run.command.empty()) out += "<p class=\"cmd\"><code>" + esc(run.command) + "</code></p>\n";
  out += "<div class=\"kv\">";
  kv(out, "Autocast", esc(run.autocast_dtype.empty() ? "off" : dtypes::bare(run.autocast_dtype)));
  kv(out, "Device", esc(run.device));
  kv(out, "Steps",
     esc(std::to_string(run.steps)) +
         (run.every > 1 ? fmt::format(" (stats every {})", run.every) : ""));
  kv(out, "Layers", std::to_string(r.layers.size()));
  kv(out, "Op entries", fmt::format("{} ({} calls)", t.entries, t.calls));
  kv(out, "NaN/Inf values", std::to_string(t.nonfinite));
  kv(out, "Ranks", run.world_size > 1 ? std::to_string(run.world_size) : std::string("1"));
  kv(out, "Duration", esc(number(run.duration_s)) + " s");
  kv(out, "torch", esc(run.torch_version));
  kv(out, "Started", esc(readable_time(run.started)));
  kv(out, "FP32 shadow", run.shadow ? "on" : "off");
  if (!run.stopped.empty()) kv(out, "Stopped early", esc(run.stopped));
  out += "</div>\n";
  if (!run.notes.empty()) {
    out += "<ul class=\"notes\">";
    for (const std::string& n : run.notes) out += "<li>" + esc(n) + "</li>";
    out += "</ul>\n";
  }
  out += "</section>\n";
}

namespace {

/// The one-line diagnosis under the verdict: precision problem, model bug, gradient scale, ...
std::string diagnosis(const Report& r, const NonFiniteEvent& e) {
  std::string low = e.compute_dtype.empty() ? "low precision" : dtypes::bare(e.compute_dtype);
  if (!e.inputs_finite && e.nonfinite_scalar)
    return "<b>Model bug, not a precision problem.</b> The op was given a NaN/inf constant (e.g. "
           "masked_fill with -inf over a fully masked row) and its values reached the model's "
           "outputs: fix the model, pinning will not help.";
  if (has_reason(r, "nonfinite_origin_unobserved"))
    return "<b>Origin not observed.</b> The first NaN/Inf was seen here, but what made it was "
           "not recorded (an unsampled step, or ops and layers the run's filters left out): "
           "re-run with every op recorded at that step (<code>every=1</code>, or "
           "<code>sentinel=\"ops\"</code>, no filters) to name it.";
  if (!e.inputs_finite)
    return "<b>Non-finite input.</b> The op was handed NaN/Inf whose origin was not seen (the "
           "data, or a tensor made outside the profiled region): fix the input.";
  if (e.phase == Phase::kBackward && has_reason(r, "backward_of_forward_nonfinite"))
    return "<b>Precision problem in forward.</b> This layer's forward made NaN/Inf from finite "
           "inputs in " + esc(low) + " (consumed there, e.g. tanh(inf)), and its backward "
           "formula met them again: pin the layer to float32; a smaller loss scale will not help.";
  if (e.fp32_also_nonfinite && *e.fp32_also_nonfinite)
    return "<b>Fix the model.</b> Re-run in float32 on the same inputs the op is non-finite "
           "too (e.g. log(0), 0/0, exp of a huge value): no precision makes these inputs safe, "
           "so pinning will not help. The inputs may themselves be a low-precision result (a "
           "float16 softmax probability rounded to 0 before a log): compute it robustly "
           "(log_softmax / cross_entropy instead of log(softmax), a clamp or an eps).";
  if (e.phase == Phase::kBackward && has_reason(r, "grad_overflow_"))
    return "<b>Gradient overflow.</b> A backward node overflowed " + esc(low) +
           ": the loss scale is too large (or missing a GradScaler); pinning would only move it.";
  std::string s = "<b>Precision problem.</b> ";
  if (!e.fp32_also_nonfinite)
    return s + "The op computed in " + esc(low) + "; the float32 re-check did not run.";
  s += "The same call re-run in float32 was finite";
  if (e.fp32_check && std::isfinite(e.fp32_check->fp32_absmax)) {
    s += " (float32 absmax " + esc(magnitude(e.fp32_check->fp32_absmax));
    Format f;
    if (dtypes::as_format(e.compute_dtype, &f))
      s += ", " + esc(dtypes::bare(e.compute_dtype)) + " max " + esc(magnitude(format_max(f)));
    s += ")";
  }
  return s + ".";
}

void verdict_clean(const Report& r, std::string& out) {
  const bool advice = !r.recommendations.empty();
  out +=
      std::string("<section id=\"verdict\" class=\"banner ") + (advice ? "warn" : "clean") + "\">";
  out += "<div class=\"icon\">" + std::string(advice ? "!" : "✓") + "</div><div>";
  out += "<h2>Clean: no harmful NaN or Inf in " + std::to_string(r.run.steps) + " step(s)</h2>";
  out += advice ? fmt::format("<p>but {} recommendation(s) below: see why.</p>",
                              r.recommendations.size())
                : "<p>No layer needs a precision change.</p>";
  if (const std::int64_t benign = text::benign_total(r); benign > 0)
    out += fmt::format("<p class=\"muted\">{} op call(s) made NaN/Inf that later ops consumed "
                       "harmlessly (e.g. -inf masks through softmax, log(0) discarded by where): "
                       "counted as <code>benign_nonfinite</code>, never recommended.</p>",
                       benign);
  if (r.scaler_caught) out += "<p class=\"muted\">" + esc(text::scaler_caught_line(r)) + ".</p>";
  out += "</div></section>\n";
}

}  // namespace

void verdict_section(const Report& r, std::string& out) {
  if (!r.first_nonfinite) return verdict_clean(r, out);
  const NonFiniteEvent& e = *r.first_nonfinite;
  out += "<section id=\"verdict\" class=\"banner bad\"><div class=\"icon\">✕</div><div>";
  out += fmt::format("<h2>First harmful non-finite value ({}) at step {}</h2>", esc(e.kind), e.step);
  if (!e.reached.empty())
    out += "<p class=\"muted\">It reached " + esc(text::what_reached(e.reached)) +
           " at step " + std::to_string(e.reached_step) + ".</p>";
  out += "<p class=\"where\">layer " + layer_link(e.layer) + " · op <code>" + esc(e.op) +
         "</code> · " + std::string(name_of(e.phase)) + " pass";
  if (!e.compute_dtype.empty()) out += " · computed in " + esc(dtypes::bare(e.compute_dtype));
  if (r.run.world_size > 1) out += " · rank " + std::to_string(e.rank);
  out += "</p><p class=\"diag\">" + diagnosis(r, e) + "</p>";
  if (const Recommendation* rec = rec_for(r, e.layer))
    out += "<p class=\"action\">→ <code>" + std::string(name_of(rec->action)) + "</code> " + layer_link(rec->layer) +
           "</p>";
  if (e.output_stats) {
    const Stats& s = *e.output_stats;
    out += fmt::format(
        "<p class=\"muted\">Its output: {} values, {} NaN, {} +Inf, {} −Inf, finite absmax {}.</p>",
        s.count, s.nan, s.posinf, s.neginf, esc(magnitude(s.absmax)));
  }
  out += "</div></section>\n";
}

namespace {

std::string event_cells(const NonFiniteEvent& e) {
  const std::string recheck = !e.fp32_also_nonfinite   ? "not run"
                              : *e.fp32_also_nonfinite ? "also non-finite"
                                                       : "finite";
  return fmt::format(
      "<td class=\"n\">{}</td><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td>",
      e.step, name_of(e.phase), layer_link(e.layer), esc(e.op), esc(e.kind), recheck);
}

}  // namespace

void ranks_section(const Report& r, std::string& out) {
  if (r.run.world_size <= 1 && r.first_nonfinite_by_rank.empty()) return;
  out +=
      "<section id=\"ranks\"><h2>Ranks</h2>\n<div class=\"controls\"><label>Rank "
      "<select id=\"rank-select\"><option value=\"\">all (earliest)</option>";
  for (int k = 0; k < r.run.world_size; ++k)
    out += fmt::format("<option value=\"{0}\">{0}</option>", k);
  out += "</select></label> <span id=\"rank-detail\" class=\"rank-detail\"></span></div>\n";
  std::set<int> seen;
  if (!r.first_nonfinite_by_rank.empty()) {
    out +=
        "<table class=\"grid\" "
        "id=\"rank-table\"><thead><tr><th>Rank</th><th>Step</th><th>Phase</th>"
        "<th>Layer</th><th>Op</th><th>Kind</th><th>FP32 re-check</th></tr></thead><tbody>";
    for (const NonFiniteEvent& e : r.first_nonfinite_by_rank) {
      seen.insert(e.rank);
      out += fmt::format("<tr data-rank=\"{0}\"><td class=\"n\">{0}</td>", e.rank) +
             event_cells(e) + "</tr>";
    }
    out += "</tbody></table>\n";
  }
  const int clean = r.run.world_size - static_cast<int>(seen.size());
  if (!is_merged(r))  // one rank's own report: the others are not in it
    out += fmt::format(
        "<p class=\"muted\">This is the report of rank {} of {}: it saw {} non-finite value. "
        "<code>ampscope merge</code> the ranks' reports to see them all.</p>\n",
        r.run.rank, r.run.world_size, r.first_nonfinite ? "a" : "no");
  else if (clean > 0)
    out += fmt::format("<p class=\"muted\">{} of {} rank(s) saw no non-finite value.</p>\n", clean,
                       r.run.world_size);
  out += "</section>\n";
}

void recommendations_section(const Report& r, std::string& out) {
  out += "<section id=\"recommendations\"><h2>Recommendations</h2>\n";
  if (r.recommendations.empty()) {
    out += "<p class=\"muted\">None: nothing in this run needs a precision change.</p></section>\n";
    return;
  }
  out +=
      "<table class=\"grid "
      "recs\"><thead><tr><th>#</th><th>Severity</th><th>Action</th><th>Layer</th>"
      "<th>Why</th><th>Evidence</th></tr></thead><tbody>\n";
  int rank = 0;
  for (const Recommendation& rec : r.recommendations) {
    std::string reasons;
    for (const std::string& code : rec.reasons)
      reasons += "<code class=\"code\">" + esc(code) + "</code> ";
    out += fmt::format("<tr><td class=\"n\">{}</td><td><span class=\"sev sev-{}\">{}</span></td>",
                       ++rank, name_of(rec.severity), name_of(rec.severity));
    out += "<td><code class=\"act act-" + std::string(name_of(rec.action)) + "\">" + std::string(name_of(rec.action)) +
           "</code></td><td>" + layer_link(rec.layer) + "</td><td>" + reasons + "</td><td>" +
           esc(key_evidence(rec)) + "<details><summary>all evidence</summary><pre>" +
           esc(rec.evidence.dump(2, ' ', false, nlohmann::json::error_handler_t::replace)) +
           "</pre></details></td></tr>\n";
  }
  out += "</tbody></table>\n";
  for (const Recommendation& rec : r.recommendations) {
    if (rec.action != Action::kPinFp32) continue;
    out +=
        "<p class=\"hint\">Apply the pins: <code>ampscope map report.json -o "
        "precision_map.json</code>, "
        "then re-run with <code>--map precision_map.json</code> (or <code>ampscope "
        "verify</code>).</p>\n";
    break;
  }
  out += "</section>\n";
}

namespace {

std::string format_select() {
  std::string s = "<label>Ranges against <select class=\"fmt-select\">";
  for (int i = 0; i < kNumFormats; ++i)
    s += fmt::format("<option value=\"{}\">{}</option>", i, format_name(static_cast<Format>(i)));
  return s + "</select></label>";
}

}  // namespace

void layers_section(const Report& r, std::string& out) {
  out +=
      "<section id=\"layers\"><h2>Layers</h2>\n<p class=\"hint\">Module tree, collapsed: "
      "▸ opens a module's children, a name opens its ops (written → computed → returned dtype, "
      "autocast class, casts) and their exponent histograms. Click a column to sort, type to "
      "filter.</p>\n<div class=\"controls\"><input type=\"search\" id=\"layer-filter\" "
      "placeholder=\"Filter: layer, type or op\" aria-label=\"Filter layers\"> <label><input "
      "type=\"checkbox\" id=\"layer-findings\"> only layers with findings</label> <button "
      "type=\"button\" id=\"expand-all\">Expand all</button> <button type=\"button\" "
      "id=\"collapse-all\">Collapse all</button> " +
      format_select() + " <span id=\"layer-count\" class=\"muted\"></span></div>\n";
  out += "<div class=\"scroll\"><table class=\"grid layers\" id=\"layer-table\"><thead><tr>";
  struct Col {
    const char* key;
    const char* label;
    const char* tip;
  };
  for (const Col& c :
       {Col{"name", "Layer", "qualified module name"}, Col{"type", "Type", "module type"},
        Col{"entries", "Ops", "distinct op entries"}, Col{"calls", "Calls", "op calls"},
        Col{"comp", "Computes in", "compute dtypes of forward ops"},
        Col{"casts", "Casts", "casts autocast inserted"},
        Col{"closs", "Cast loss", "values autocast's or the model's narrowing casts turned into 0 or inf"},
        Col{"nonfinite", "NaN/Inf", "non-finite values in outputs and gradients"},
        Col{"origins", "Origins", "calls that made NaN/Inf from finite inputs"},
        Col{"absmax", "Act absmax", "largest finite forward output"},
        Col{"overflow", "Overflow", "values past the selected format's max"},
        Col{"grad", "Grad range", "exponent span of gradients (activation + parameter)"},
        Col{"gunder", "Grad underflow", "gradient values that become 0 in the selected format"},
        Col{"wunder", "Weight underflow", "parameter values (last recorded step) that become 0 in the selected format"},
        Col{"advice", "Advice", "recommendations for this layer"}}) {
    out += fmt::format("<th data-key=\"{}\" title=\"{}\" tabindex=\"0\">{}</th>", c.key, c.tip,
                       c.label);
  }
  out += "</tr></thead><tbody></tbody></table></div>\n";
  if (r.layers.empty()) out += "<p class=\"muted\">No layers recorded.</p>\n";
  out +=
      "<noscript><p>The layer table needs JavaScript; the data is in report.json.</p></noscript>\n";
  out += "</section>\n";
}

void histograms_section(const Report&, std::string& out) {
  out +=
      "<section id=\"histograms\"><h2>Exponent histograms</h2>\n<p class=\"hint\">Nonzero finite "
      "values by binade floor(log2|x|), counts on a log scale, against the representable "
      "ranges (normal: dark band, subnormal: light band). Red bins overflow the selected format, "
      "violet bins underflow to zero, amber bins are subnormal. Per-op histograms open from the "
      "layer table.</p>\n<div class=\"controls\">" +
      format_select() + "</div>\n";
  out += "<div class=\"hists\" id=\"agg-hists\"></div></section>\n";
}

}  // namespace ampscope::reports::detail
