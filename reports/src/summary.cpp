// The terminal summary: run line, verdict, top risks, autocast choices per layer, float16
// headroom and gradient ranges, as aligned plain-text tables.

#include <ampscope/reports/summary.h>
#include <ampscope/reports/terminal.h>
#include <ampscope/reports/what_if.h>

#include <ampscope/reports/recommend.h>

#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "dtypes.h"
#include "recommend_rules.h"
#include "text_util.h"

namespace ampscope::reports {

namespace {

using text::number;
using text::pad;
using text::truncate_middle;
using text::width;

constexpr std::size_t kNameWidth = 40;  // longest layer/param name shown before "…"

struct Style {
  bool on = false;
  std::string wrap(const std::string& s, const char* code) const {
    return on ? fmt::format("\x1b[{}m{}\x1b[0m", code, s) : s;
  }
  std::string bold(const std::string& s) const { return wrap(s, "1"); }
  std::string severity(const std::string& padded, Severity sev) const {
    if (sev == Severity::kCritical) return wrap(padded, "1;31");
    if (sev == Severity::kHigh) return wrap(padded, "31");
    if (sev == Severity::kMedium) return wrap(padded, "33");
    return padded;
  }
};

/// An aligned table: each column as wide as its widest cell (cells already truncated).
class Table {
 public:
  explicit Table(std::vector<std::string> headers) : headers_(std::move(headers)) {}
  void row(std::vector<std::string> cells) {
    cells.resize(headers_.size());
    rows_.push_back(std::move(cells));
  }
  bool empty() const { return rows_.empty(); }
  /// `decorate(row, col, padded)` may colour a padded cell (row -1 is the header).
  template <typename Decorate>
  std::string render(const std::string& indent, Decorate decorate) const {
    std::vector<std::size_t> w(headers_.size());
    for (std::size_t c = 0; c < headers_.size(); ++c) {
      w[c] = width(headers_[c]);
      for (const auto& r : rows_) w[c] = std::max(w[c], width(r[c]));
    }
    std::string out;
    auto line = [&](const std::vector<std::string>& cells, int row) {
      std::string l = indent;
      for (std::size_t c = 0; c < cells.size(); ++c) {
        const bool last = c + 1 == cells.size();
        l += decorate(row, c, last ? cells[c] : pad(cells[c], w[c]));
        if (!last) l += "  ";
      }
      while (!l.empty() && l.back() == ' ') l.pop_back();
      out += l + "\n";
    };
    line(headers_, -1);
    for (std::size_t i = 0; i < rows_.size(); ++i) line(rows_[i], static_cast<int>(i));
    return out;
  }
  std::string render(const std::string& indent) const {
    return render(indent, [](int, std::size_t, const std::string& s) { return s; });
  }

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

std::string run_line(const RunInfo& r) {
  std::string autocast = r.autocast_dtype.empty() ? "autocast off" : "autocast " + r.autocast_dtype;
  std::string line = fmt::format("{}, {}, {} step{}, {} s, torch {}", r.device.empty() ? "?" : r.device,
                                 autocast, r.steps, r.steps == 1 ? "" : "s", number(r.duration_s),
                                 r.torch_version.empty() ? "?" : r.torch_version);
  if (r.world_size > 1) line += fmt::format(", rank {}/{}", r.rank, r.world_size);
  if (r.every > 1) line += fmt::format(", stats every {} steps", r.every);
  return line;
}

void top_risks(const Report& report, const Style& st, std::string& out) {
  out += st.bold("Top risks") + "\n";
  const std::vector<Recommendation>& recs = report.recommendations;
  if (recs.empty()) {
    out += "  none\n";
    return;
  }
  Table t({"SEVERITY", "ACTION", "LAYER", "REASONS", "EVIDENCE"});
  for (const Recommendation& r : recs)
    t.row({std::string(name_of(r.severity)), std::string(name_of(r.action)), truncate_middle(text::layer_label(r.layer), kNameWidth),
           join(r.reasons, ","), text::truncate_end(key_evidence(r), 100)});  // codes: never cut
  out += t.render("  ", [&](int row, std::size_t col, const std::string& s) {
    if (row < 0 || col != 0) return s;
    return st.severity(s, recs[static_cast<std::size_t>(row)].severity);
  });
  if (std::any_of(recs.begin(), recs.end(), [](const Recommendation& r) {
        return r.action == Action::kPinFp32 && r.layer == kOutsideLayer;
      }))
    out += "  (<outside>: ops that ran outside every layer; no precision map can pin them. Run "
           "that code inside a module (Python) or a LayerScope / ampscope::forward (C++) to "
           "name and pin it.)\n";
}

/// Forward ops with a floating input or output: the ones autocast can touch.
bool floating_forward(const OpRecord& o) {
  auto floating = [](const std::string& d) { return d.find("float") != std::string::npos; };
  return o.phase == Phase::kForward && (floating(o.input_dtype) || floating(o.output_dtype));
}

void autocast_table(const Report& report, const SummaryOptions& opt, std::string& out) {
  out += "Autocast choices per layer (forward ops on floating tensors)\n";
  Table t({"LAYER", "TYPE", "OP", "CALLS", "WRITTEN→COMPUTED→RETURNED", "AUTOCAST", "CASTS"});
  std::size_t shown = 0, more = 0;
  for (const Layer& l : report.layers) {
    const bool has_forward = std::any_of(l.ops.begin(), l.ops.end(), floating_forward);
    if (!has_forward) continue;
    if (shown >= opt.max_layers) {
      ++more;
      continue;
    }
    ++shown;
    bool first = true;
    for (const OpRecord& op : l.ops) {
      if (!floating_forward(op)) continue;
      t.row({first ? truncate_middle(text::layer_label(l.name), kNameWidth) : "",
             first ? truncate_middle(l.type, 20) : "", truncate_middle(op.op, 32),
             std::to_string(op.calls), text::dtype_chain(op), std::string(name_of(op.autocast)), std::to_string(op.casts)});
      first = false;
    }
  }
  if (t.empty()) {
    out += "  no forward ops recorded\n";
    return;
  }
  out += t.render("  ");
  if (more > 0) out += fmt::format("  ... {} more layer{}\n", more, more == 1 ? "" : "s");
}

/// "overflow 12 (absmax 9.9e4)" / "underflow 3.1%" / "safe" for one format of a row.
std::string what_if_cell(const WhatIfRow& row, std::size_t i) {
  const std::string v = what_if_verdict(row, i);
  if (v.empty()) return "-";
  const WhatIfCounts& a = row.activations[i];
  const WhatIfCounts& g = row.gradients[i];
  const WhatIfCounts& w = row.weights[i];
  if (v == "overflow")
    return fmt::format("overflow {} (absmax {})", a.overflow + g.overflow + w.overflow,
                       number(std::max({a.absmax, g.absmax, w.absmax})));
  if (v == "underflow") {
    const double n = static_cast<double>(a.values + g.values + w.values);
    return fmt::format("underflow {:.2g}%",
                       100.0 * static_cast<double>(a.underflow + g.underflow + w.underflow) / n);
  }
  return v;
}

void what_if_table(const Report& report, const SummaryOptions& opt, std::string& out) {
  if (dtypes::bare(report.run.autocast_dtype) == "float16") return;  // the run shows it itself
  const std::vector<WhatIfRow> rows = what_if(report);
  std::vector<std::string> head{"LAYER"};
  for (Format f : kWhatIfFormats) head.push_back(text::short_dtype(std::string(format_name(f))));
  Table t(head);
  std::size_t safe = 0, shown = 0, more = 0;
  for (const WhatIfRow& row : rows) {
    if (what_if_verdict(row, 0) == "safe") {
      ++safe;
      continue;
    }
    if (shown >= opt.max_layers) {
      ++more;
      continue;
    }
    ++shown;
    std::vector<std::string> cells{truncate_middle(text::layer_label(row.layer), kNameWidth)};
    for (std::size_t i = 0; i < kWhatIfFormats.size(); ++i) cells.push_back(what_if_cell(row, i));
    t.row(cells);
  }
  if (rows.empty()) return;
  out += "\nWhat if (values of this run cast to float16 / float8; exact counts)\n";
  if (!t.empty()) out += t.render("  ");
  if (more > 0) out += fmt::format("  ... {} more layer{}\n", more, more == 1 ? "" : "s");
  out += fmt::format("  {} of {} layer{} safe in float16\n", safe, rows.size(), rows.size() == 1 ? "" : "s");
}

/// Share of a parameter's nonzero values that become 0 in `f` ("-" when its values were not read).
std::string value_underflow(const ParamRecord& p, Format f) {
  if (!p.values) return "-";
  const std::int64_t nonzero = p.values->finite() - p.values->zeros;
  if (nonzero <= 0) return "-";
  return fmt::format("{:.2g}%", 100.0 * static_cast<double>(p.values->underflow_in(f)) /
                                    static_cast<double>(nonzero));
}

/// Share of due updates rounding swallowed ("-" for float32 parameters).
std::string stale_share(const ParamRecord& p) {
  std::int64_t updated = 0, stale = 0;
  for (const auto& s : p.stale_updates)
    if (s.tensor == "value") updated += s.updated, stale += s.stale;
  if (updated == 0) return "-";
  return fmt::format("{:.2g}%", 100.0 * static_cast<double>(stale) / static_cast<double>(updated));
}

void gradient_ranges(const Report& report, const SummaryOptions& opt, std::string& out) {
  Table t({"PARAM", "DTYPE", "GRAD ABSMAX", "MIN EXP", "UNDERFLOW FP16", "NON-FINITE",
           "VALUES->0 FP16", "VALUES->0 E4M3", "STALE UPDATES"});
  std::size_t shown = 0, more = 0;
  for (const Layer& l : report.layers) {
    for (const ParamRecord& p : l.params) {
      if (shown >= opt.max_layers) {
        ++more;
        continue;
      }
      ++shown;
      const Stats& g = p.grad;
      t.row({truncate_middle(p.name, kNameWidth), text::short_dtype(p.dtype),
             g.finite() > 0 ? number(g.absmax) : "-",
             g.exp_hist.empty() ? "-" : std::to_string(g.exp_hist.lo()),
             std::to_string(g.underflow_in(Format::kFloat16)), std::to_string(g.nonfinite()),
             value_underflow(p, Format::kFloat16), value_underflow(p, Format::kFloat8E4M3FN),
             stale_share(p)});
    }
  }
  out += "Gradient ranges\n";
  if (t.empty()) {
    out += "  no parameter gradients recorded\n";
    return;
  }
  out += t.render("  ");
  if (more > 0) out += fmt::format("  ... {} more param{}\n", more, more == 1 ? "" : "s");
}

/// CUPTI kernels per layer and op (only when kernels were traced): launches, GPU time, whether
/// the matrix kernels used tensor cores, and the kernel that took the most time.
void gpu_kernels(const Report& report, const SummaryOptions& opt, std::string& out) {
  Table t({"LAYER", "OP", "PHASE", "LAUNCHES", "GPU MS", "TENSOR CORES", "TOP KERNEL"});
  std::size_t shown = 0, more = 0;
  for (const Layer& l : report.layers) {
    bool first = true;
    for (const OpRecord& op : l.ops) {
      const KernelSummary& k = op.kernels;
      if (k.launches == 0) continue;
      if (first && shown >= opt.max_layers) {
        ++more;
        break;
      }
      if (first) ++shown;
      const std::string tc = k.matrix_launches == 0 ? "-"
                             : k.tensor_core_launches == k.matrix_launches
                                 ? "yes"
                                 : fmt::format("{}/{} matrix", k.tensor_core_launches, k.matrix_launches);
      t.row({first ? truncate_middle(text::layer_label(l.name), kNameWidth) : "",
             truncate_middle(op.op, 32), std::string(name_of(op.phase)), std::to_string(k.launches),
             fmt::format("{:.3f}", static_cast<double>(k.time_ns) * 1e-6), tc,
             k.top.empty() ? "" : truncate_middle(k.top.front().name, 48)});
      first = false;
    }
  }
  if (t.empty()) return;
  out += "\nGPU kernels per layer (CUPTI)\n";
  out += t.render("  ");
  if (more > 0) out += fmt::format("  ... {} more layer{}\n", more, more == 1 ? "" : "s");
}

}  // namespace

std::string render_summary(const Report& unsafe, const SummaryOptions& options) {
  const Report report = terminal_safe(unsafe);  // names from the model are printed escaped
  Style st{options.color};
  std::string out;
  out += st.bold("ampscope") + ": " + run_line(report.run) + "\n";
  if (!report.run.command.empty()) out += "  command: " + truncate_middle(report.run.command, 120) + "\n";
  for (const std::string& note : report.run.notes) out += "  note: " + note + "\n";
  const std::string verdict = text::verdict(report);
  out += "Verdict: " + (report.first_nonfinite ? st.wrap(verdict, "1;31") : st.wrap(verdict, "32")) + "\n";
  out += "\n";
  top_risks(report, st, out);
  out += "\n";
  autocast_table(report, options, out);
  std::string what;
  what_if_table(report, options, what);
  out += what;
  out += "\n";
  gradient_ranges(report, options, out);
  gpu_kernels(report, options, out);
  return out;
}

}  // namespace ampscope::reports
