// The self-contained HTML report: one document, inline CSS, no scripts, no external references.
// Every string that comes from the model (names, dtypes, notes, reasons, evidence) goes through
// html_escape.

#include <ampscope/reports/html.h>

#include <string>

#include <fmt/format.h>

#include "text_util.h"

namespace ampscope::reports {

std::string html_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size() + s.size() / 8);
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

namespace {

using text::number;

constexpr const char* kCss = R"css(
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:2em;color:#222;background:#fff}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd}
h3{font-size:1em;margin-bottom:.3em}
table{border-collapse:collapse;margin:.4em 0 1em 0;font-size:.9em}
th,td{border:1px solid #ccc;padding:.2em .5em;text-align:left;vertical-align:top}
th{background:#f3f3f3}td.n{text-align:right;font-variant-numeric:tabular-nums}
code,pre{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.9em}
pre{background:#f7f7f7;padding:.5em;overflow-x:auto;margin:0}
.verdict{padding:.6em;border-radius:4px}.clean{background:#e7f6e7}.bad{background:#fbe4e4}
.sev-critical{color:#fff;background:#b00020}.sev-high{background:#f4b4b4}
.sev-medium{background:#fde8b0}.sev-low{background:#eee}
.muted{color:#777}
)css";

std::string esc(const std::string& s) { return html_escape(s); }

std::string td(const std::string& s) { return "<td>" + esc(s) + "</td>"; }
std::string tdn(const std::string& s) { return "<td class=\"n\">" + esc(s) + "</td>"; }
std::string tdn(std::int64_t v) { return tdn(std::to_string(v)); }

void run_section(const RunInfo& r, std::string& out) {
  out += "<h2>Run</h2>\n<table>\n";
  auto row = [&](const char* k, const std::string& v) {
    out += std::string("<tr><th>") + k + "</th>" + td(v) + "</tr>\n";
  };
  row("torch", r.torch_version);
  row("device", r.device);
  row("autocast dtype", r.autocast_dtype.empty() ? "off" : r.autocast_dtype);
  row("steps", std::to_string(r.steps));
  row("stats every", std::to_string(r.every) + " step(s)");
  row("started", r.started);
  row("duration", number(r.duration_s) + " s");
  row("command", r.command);
  row("rank", fmt::format("{} of {}", r.rank, r.world_size));
  out += "</table>\n";
  if (!r.notes.empty()) {
    out += "<ul>\n";
    for (const auto& n : r.notes) out += "<li>" + esc(n) + "</li>\n";
    out += "</ul>\n";
  }
}

void verdict_section(const Report& r, std::string& out) {
  out += "<h2>Verdict</h2>\n";
  out += std::string("<p class=\"verdict ") + (r.first_nonfinite ? "bad" : "clean") + "\">" +
         esc(text::verdict(r)) + "</p>\n";
  if (r.first_nonfinite && r.first_nonfinite->output_stats) {
    const Stats& s = *r.first_nonfinite->output_stats;
    out += fmt::format("<p>Output of the first non-finite op: {} values, {} NaN, {} +Inf, {} −Inf, "
                       "finite absmax {}.</p>\n",
                       s.count, s.nan, s.posinf, s.neginf, esc(number(s.absmax)));
  }
}

void recommendations_section(const Report& r, std::string& out) {
  out += "<h2>Recommendations</h2>\n";
  if (r.recommendations.empty()) {
    out += "<p class=\"muted\">None: nothing in this run needs a precision change.</p>\n";
    return;
  }
  out += "<table>\n<tr><th>Severity</th><th>Action</th><th>Layer</th><th>Reasons</th>"
         "<th>Evidence</th></tr>\n";
  for (const Recommendation& rec : r.recommendations) {
    std::string reasons;
    for (const auto& code : rec.reasons) reasons += "<code>" + esc(code) + "</code> ";
    out += "<tr><td class=\"sev-" + esc(rec.severity) + "\">" + esc(rec.severity) + "</td>" +
           "<td><code>" + esc(rec.action) + "</code></td>" + "<td><code>" +
           esc(text::layer_label(rec.layer)) + "</code></td><td>" + reasons + "</td><td>" +
           esc(text::key_evidence(rec)) + "<pre>" +
           esc(rec.evidence.dump(2, ' ', false, nlohmann::json::error_handler_t::replace)) +
           "</pre></td></tr>\n";
  }
  out += "</table>\n";
}

void layers_section(const Report& r, std::string& out) {
  out += "<h2>Layers</h2>\n";
  if (r.layers.empty()) {
    out += "<p class=\"muted\">No layers recorded.</p>\n";
    return;
  }
  for (const Layer& l : r.layers) {
    out += "<h3><code>" + esc(text::layer_label(l.name)) + "</code> <span class=\"muted\">" +
           esc(l.type) + "</span></h3>\n";
    if (!l.ops.empty()) {
      out += "<table>\n<tr><th>Op</th><th>Phase</th><th>Calls</th><th>Written</th>"
             "<th>Computed</th><th>Returned</th><th>Autocast</th><th>Casts</th><th>NaN</th>"
             "<th>+Inf</th><th>−Inf</th><th>From finite</th><th>Absmax</th><th>Steps</th></tr>\n";
      for (const OpRecord& op : l.ops) {
        out += "<tr><td><code>" + esc(op.op) + "</code></td>" + td(op.phase) + tdn(op.calls) +
               td(op.input_dtype) + td(op.compute_dtype) + td(op.output_dtype) + td(op.autocast) +
               tdn(op.casts) + tdn(op.stats.nan) + tdn(op.stats.posinf) + tdn(op.stats.neginf) +
               tdn(op.nonfinite_from_finite) + tdn(number(op.stats.absmax)) +
               td(fmt::format("{}–{}", op.first_step, op.last_step)) + "</tr>\n";
      }
      out += "</table>\n";
    }
    if (!l.params.empty()) {
      out += "<table>\n<tr><th>Parameter</th><th>Dtype</th><th>Updates</th><th>Grad absmax</th>"
             "<th>Grad min exp</th><th>Grad rms</th><th>Underflow fp16</th><th>Non-finite</th>"
             "</tr>\n";
      for (const ParamRecord& p : l.params) {
        const Stats& g = p.grad;
        out += "<tr><td><code>" + esc(p.name) + "</code></td>" + td(p.dtype) + tdn(p.updates) +
               tdn(g.finite() > 0 ? number(g.absmax) : "-") +
               tdn(g.exp_hist.empty() ? "-" : std::to_string(g.exp_hist.lo())) +
               tdn(number(g.rms())) + tdn(g.underflow_in(Format::kFloat16)) + tdn(g.nonfinite()) +
               "</tr>\n";
      }
      out += "</table>\n";
    }
  }
}

void loss_scale_section(const Report& r, std::string& out) {
  out += "<h2>Loss scale</h2>\n";
  if (r.loss_scale.empty()) {
    out += "<p class=\"muted\">No loss scaler seen.</p>\n";
    return;
  }
  out += "<table>\n<tr><th>Step</th><th>Scale</th><th>Found inf</th></tr>\n";
  for (const LossScalePoint& p : r.loss_scale)
    out += "<tr>" + tdn(p.step) + tdn(number(p.scale)) + td(p.found_inf ? "yes" : "no") + "</tr>\n";
  out += "</table>\n";
}

}  // namespace

std::string render_html(const Report& report) {
  std::string out;
  out += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  out += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  std::string title = "ampscope report";
  if (!report.run.command.empty()) title += " — " + text::truncate_middle(report.run.command, 80);
  out += "<title>" + esc(title) + "</title>\n<style>" + kCss + "</style>\n</head>\n<body>\n";
  out += "<h1>ampscope report</h1>\n";
  run_section(report.run, out);
  verdict_section(report, out);
  recommendations_section(report, out);
  layers_section(report, out);
  loss_scale_section(report, out);
  out += "</body>\n</html>\n";
  return out;
}

}  // namespace ampscope::reports
