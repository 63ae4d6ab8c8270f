// Server-side charts and tables of the HTML report (static, printable): gradient-range span bars
// per layer (forward vs backward, against the float16 range), the loss-scale curve with its
// skipped steps, and the what-if table.

#include <ampscope/reports/html.h>
#include <ampscope/reports/what_if.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "dtypes.h"
#include "html_detail.h"
#include "text_util.h"

namespace ampscope::reports::detail {

std::string pow2_label(int e) {
  static const char* const kSup[] = {"⁰", "¹", "²", "³", "⁴", "⁵", "⁶", "⁷", "⁸", "⁹"};
  std::string out = "2";
  if (e < 0) out += "⁻";
  for (char c : std::to_string(e < 0 ? -static_cast<long>(e) : e)) out += kSup[c - '0'];
  return out;
}

namespace {

std::string esc(const std::string& s) { return html_escape(s); }

/// Exponent span of one histogram: full extent and the 1st..99th percentile bins.
struct Span {
  bool any = false;
  int lo = 0, hi = 0;   ///< lowest and highest exponent seen
  int p1 = 0, p99 = 0;  ///< exponents holding the 1st and 99th percentile value
};

Span span_of(const ExpHist& h) {
  Span s;
  if (h.empty() || h.total() == 0) return s;
  s.any = true;
  const double total = static_cast<double>(h.total());
  double seen = 0;
  bool p1 = false;
  s.lo = h.hi();
  for (int e = h.lo(); e < h.hi(); ++e) {
    const std::int64_t n = h.at(e);
    if (n == 0) continue;
    s.lo = std::min(s.lo, e);
    s.hi = e;
    seen += static_cast<double>(n);
    if (!p1 && seen >= 0.01 * total) s.p1 = e, p1 = true;
    if (seen - static_cast<double>(n) < 0.99 * total) s.p99 = e;
  }
  return s;
}

struct RangeRow {
  std::string layer;
  Span fwd, bwd;
  int score = 0;  ///< how far the spans reach past float16's range (for picking rows)
};

std::vector<RangeRow> range_rows(const Report& r) {
  std::vector<RangeRow> rows;
  for (const Layer& l : r.layers) {
    ExpHist fwd, bwd;
    for (const OpRecord& op : l.ops) (op.phase == Phase::kBackward ? bwd : fwd).merge(op.stats.exp_hist);
    for (const ParamRecord& p : l.params) bwd.merge(p.grad.exp_hist);
    RangeRow row{l.name, span_of(fwd), span_of(bwd)};
    if (!row.fwd.any && !row.bwd.any) continue;
    for (const Span* s : {&row.fwd, &row.bwd})
      if (s->any) row.score = std::max({row.score, s->hi - 15, -24 - s->lo});
    rows.push_back(std::move(row));
  }
  return rows;
}

/// Keeps at most `cap` rows (the ones reaching furthest past float16's range), in report order.
std::size_t cap_rows(std::vector<RangeRow>& rows, std::size_t cap) {
  const std::size_t all = rows.size();
  if (all <= cap) return all;
  std::vector<std::size_t> idx(all);
  for (std::size_t i = 0; i < all; ++i) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(),
                   [&](std::size_t a, std::size_t b) { return rows[a].score > rows[b].score; });
  idx.resize(cap);
  std::sort(idx.begin(), idx.end());
  std::vector<RangeRow> kept;
  for (std::size_t i : idx) kept.push_back(std::move(rows[i]));
  rows = std::move(kept);
  return all;
}

/// Maps exponents to x pixels on a shared axis.
struct Axis {
  int lo = -24, hi = 16;  ///< exponent range drawn: [lo, hi)
  double x0 = 0, x1 = 0;
  double x(double e) const { return x0 + (e - lo) * (x1 - x0) / (hi - lo); }
};

Axis axis_for(const std::vector<RangeRow>& rows, double x0, double x1) {
  Axis a;
  a.lo = -26;  // float16's subnormal floor (2^-24) and max binade (2^15) always in view
  a.hi = 18;
  for (const RangeRow& row : rows)
    for (const Span* s : {&row.fwd, &row.bwd})
      if (s->any) a.lo = std::min(a.lo, s->lo - 2), a.hi = std::max(a.hi, s->hi + 3);
  a.x0 = x0;
  a.x1 = x1;
  return a;
}

void axis_ticks(const Axis& a, double y, double y_end, std::string& out) {
  const int span = a.hi - a.lo;
  const int step = span <= 48 ? 4 : span <= 96 ? 8 : 16;
  for (int e = (a.lo / step) * step; e <= a.hi; e += step) {
    if (e < a.lo) continue;
    out += fmt::format(
        "<line class=\"tick\" x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\"/>"
        "<text class=\"axis\" x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\">{4}</text>",
        a.x(e), y, y_end, y - 4, pow2_label(e));
  }
}

void fp16_bands(const Axis& a, double y0, double y1, std::string& out) {
  struct Band {
    const char* cls;
    double lo, hi;
    const char* what;
  };
  for (const Band& b :
       {Band{"band-under", static_cast<double>(a.lo), -24, "becomes 0 in float16 (below 2⁻²⁴)"},
        Band{"band-sub", -24, -14, "float16 subnormal: 2⁻²⁴ … 2⁻¹⁴"},
        Band{"band-normal", -14, 16, "float16 normal: 2⁻¹⁴ … 65504"},
        Band{"band-over", 16, static_cast<double>(a.hi), "becomes inf in float16 (above 65504)"}}) {
    if (b.hi <= b.lo) continue;
    out += fmt::format(
        "<rect class=\"{}\" x=\"{:.1f}\" y=\"{}\" width=\"{:.1f}\" "
        "height=\"{}\"><title>{}</title></rect>",
        b.cls, a.x(b.lo), y0, a.x(b.hi) - a.x(b.lo), y1 - y0, b.what);
  }
}

void span_bar(const Axis& a, const Span& s, double y, const char* cls, const char* what,
              std::string& out) {
  if (!s.any) return;
  out += fmt::format(
      "<g class=\"{}\"><title>{}: {} … {} (98% within {} … {})</title>"
      "<line x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{}\" y2=\"{}\"/>"
      "<rect x=\"{:.1f}\" y=\"{}\" width=\"{:.1f}\" height=\"6\"/></g>",
      cls, what, pow2_label(s.lo), pow2_label(s.hi + 1), pow2_label(s.p1), pow2_label(s.p99 + 1),
      a.x(s.lo), a.x(s.hi + 1), y + 3, y + 3, a.x(s.p1), y,
      std::max(1.0, a.x(s.p99 + 1) - a.x(s.p1)));
}

constexpr std::size_t kMaxRangeRows = 150;

}  // namespace

namespace {

/// The span chart: one row per layer, forward bar above, gradient bar below.
void spans_svg(const std::vector<RangeRow>& rows, std::string& out) {
  const double label_w = 300, width = 1240, row_h = 22, top = 24;
  const Axis a = axis_for(rows, label_w, width - 10);
  const double height = top + row_h * static_cast<double>(rows.size()) + 10;
  out += fmt::format(
      "<svg class=\"chart spans\" viewBox=\"0 0 {0} {1}\" width=\"{0}\" height=\"{1}\" "
      "role=\"img\" aria-label=\"gradient ranges per layer\">",
      width, height);
  fp16_bands(a, top, height - 10, out);
  for (std::size_t i = 1; i < rows.size(); i += 2)
    out += fmt::format("<rect class=\"stripe\" x=\"0\" y=\"{}\" width=\"{}\" height=\"{}\"/>",
                       top + row_h * static_cast<double>(i), width, row_h);
  axis_ticks(a, top, height - 10, out);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const double y = top + row_h * static_cast<double>(i);
    const std::string label = text::layer_label(rows[i].layer);
    out += fmt::format(
        "<text class=\"label\" x=\"{}\" y=\"{}\" text-anchor=\"end\"><title>{}</title>{}</text>",
        label_w - 8, y + 15, esc(label), esc(text::truncate_middle(label, 40)));
    span_bar(a, rows[i].fwd, y + 3, "fwd", "forward outputs", out);
    span_bar(a, rows[i].bwd, y + 12, "bwd", "gradients", out);
  }
  out += "</svg>\n";
}

}  // namespace

void gradients_section(const Report& r, std::string& out) {
  out += "<section id=\"gradients\"><h2>Gradient ranges per layer</h2>\n";
  std::vector<RangeRow> rows = range_rows(r);
  if (rows.empty()) {
    out += "<p class=\"muted\">No activation or gradient values recorded.</p></section>\n";
    return;
  }
  const std::size_t all = cap_rows(rows, kMaxRangeRows);
  out +=
      "<p class=\"hint\">Exponent span of each layer's forward outputs (blue) and gradients "
      "(orange: incoming activation gradients and parameter gradients): thin line = every "
      "nonzero finite value, bar = the middle 98%. Shaded: float16's normal range (dark) and "
      "subnormal range (light); anything left of 2⁻²⁴ becomes 0 in float16 (violet), anything "
      "right of 65504 becomes inf (red).";
  if (all > rows.size())
    out += fmt::format(
        " Showing the {} of {} layers reaching furthest past float16's range; every "
        "layer's span is in the layer table.",
        rows.size(), all);
  out += "</p>\n";
  spans_svg(rows, out);
  out +=
      "<p class=\"legend\"><span class=\"sw fwd\"></span> forward outputs <span class=\"sw bwd\">"
      "</span> gradients <span class=\"sw band-normal\"></span> float16 normal <span class=\"sw "
      "band-sub\"></span> float16 subnormal <span class=\"sw band-under\"></span> 0 in float16 "
      "<span class=\"sw band-over\"></span> inf in float16</p>\n</section>\n";
}

namespace {

struct ScaleAxis {
  std::int64_t s0 = 0, s1 = 1;
  double l0 = 0, l1 = 1;  ///< log2(scale) range
  double x0 = 70, x1 = 1220, y0 = 20, y1 = 210;
  double x(std::int64_t step) const {
    return x0 + static_cast<double>(step - s0) * (x1 - x0) / static_cast<double>(s1 - s0);
  }
  double y(double scale) const { return y1 - (std::log2(scale) - l0) * (y1 - y0) / (l1 - l0); }
};

ScaleAxis scale_axis(const std::vector<LossScalePoint>& pts) {
  ScaleAxis a;
  a.s0 = pts.front().step, a.s1 = pts.front().step;
  double lmin = 1e300, lmax = -1e300;
  for (const LossScalePoint& p : pts) {
    a.s0 = std::min(a.s0, p.step), a.s1 = std::max(a.s1, p.step);
    if (p.scale > 0 && std::isfinite(p.scale))
      lmin = std::min(lmin, std::log2(p.scale)), lmax = std::max(lmax, std::log2(p.scale));
  }
  if (a.s1 == a.s0) a.s1 = a.s0 + 1;
  if (lmin > lmax) lmin = lmax = 0;
  a.l0 = std::floor(lmin) - 1, a.l1 = std::ceil(lmax) + 1;
  return a;
}

void scale_grid(const ScaleAxis& a, std::string& out) {
  const int span = static_cast<int>(a.l1 - a.l0);
  const int step = std::max(1, span / 8);
  for (int l = static_cast<int>(a.l0); l <= static_cast<int>(a.l1); l += step)
    out += fmt::format(
        "<line class=\"tick\" x1=\"{0}\" x2=\"{1}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\"/><text "
        "class=\"axis\" "
        "x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>",
        a.x0, a.x1, a.y(std::exp2(l)), a.x0 - 6, a.y(std::exp2(l)) + 4, pow2_label(l));
  const std::int64_t every = std::max<std::int64_t>(1, (a.s1 - a.s0 + 9) / 10);
  for (std::int64_t s = a.s0; s <= a.s1; s += every) {
    out +=
        fmt::format("<text class=\"axis\" x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
                    a.x(s), a.y1 + 16, s);
  }
  out += fmt::format("<text class=\"axis\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">step</text>",
                     (a.x0 + a.x1) / 2, a.y1 + 32);
}

void scale_path(const ScaleAxis& a, const std::vector<LossScalePoint>& pts, std::string& out) {
  std::string d;
  double last_y = -1;
  for (const LossScalePoint& p : pts) {
    if (!(p.scale > 0) || !std::isfinite(p.scale)) continue;
    const double x = a.x(p.step), y = a.y(p.scale);
    d += d.empty() ? fmt::format("M{:.1f},{:.1f}", x, y) : fmt::format("H{:.1f}V{:.1f}", x, y);
    last_y = y;
  }
  if (!d.empty())
    out += fmt::format("<path class=\"scale\" d=\"{}H{:.1f}\"/>", d, a.x1), (void)last_y;
  std::size_t marks = 0;
  for (const LossScalePoint& p : pts) {
    if (!p.found_inf || !(p.scale > 0) || ++marks > 500) continue;
    out += fmt::format(
        "<g class=\"skip\"><title>step {}: found inf/NaN, optimizer step skipped; scale → "
        "{}</title>"
        "<line x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{}\" y2=\"{}\"/><circle cx=\"{:.1f}\" "
        "cy=\"{:.1f}\" r=\"4\"/></g>",
        p.step, text::number(p.scale), a.x(p.step), a.x(p.step), a.y0, a.y1, a.x(p.step),
        a.y(p.scale));
  }
}

}  // namespace

void loss_scale_section(const Report& r, std::string& out) {
  out += "<section id=\"loss-scale\"><h2>Loss scale</h2>\n";
  const auto& pts = r.loss_scale;
  if (pts.empty()) {
    out +=
        "<p class=\"muted\">No loss scaler seen (no GradScaler update in this "
        "run).</p></section>\n";
    return;
  }
  std::vector<std::int64_t> skipped;
  double lo = pts.front().scale, hi = pts.front().scale;
  for (const LossScalePoint& p : pts) {
    if (p.found_inf) skipped.push_back(p.step);
    lo = std::min(lo, p.scale), hi = std::max(hi, p.scale);
  }
  out += fmt::format(
      "<p>{} update(s), <b>{} skipped step(s)</b> (found inf/NaN); scale {} → {} (min {}, max {}).",
      pts.size(), skipped.size(), text::number(pts.front().scale), text::number(pts.back().scale),
      text::number(lo), text::number(hi));
  if (!skipped.empty()) {
    out += " Skipped at step ";
    for (std::size_t i = 0; i < skipped.size() && i < 20; ++i)
      out += (i ? ", " : "") + std::to_string(skipped[i]);
    out += skipped.size() > 20 ? ", …" : "";
    out += ".";
  }
  out += "</p>\n";
  const ScaleAxis a = scale_axis(pts);
  out +=
      "<svg class=\"chart lossscale\" viewBox=\"0 0 1240 250\" width=\"1240\" height=\"250\" "
      "role=\"img\" "
      "aria-label=\"loss scale by step\">";
  scale_grid(a, out);
  scale_path(a, pts, out);
  out +=
      "</svg>\n<p class=\"legend\"><span class=\"sw scale\"></span> scale (log2 axis) "
      "<span class=\"sw skip\"></span> skipped step (found inf/NaN, scale backed "
      "off)</p>\n</section>\n";
}

namespace {

/// A count as people read it in a table cell: 1234, 12.3k, 4.5M.
std::string compact(std::int64_t n) {
  if (n < 10000) return std::to_string(n);
  if (n < 1000000) return fmt::format("{:.3g}k", static_cast<double>(n) / 1e3);
  if (n < 1000000000) return fmt::format("{:.3g}M", static_cast<double>(n) / 1e6);
  return fmt::format("{:.3g}G", static_cast<double>(n) / 1e9);
}

/// "act ↓120 ~1513 /197k": the nonzero counts of one kind of values against one format.
std::string counts_line(const char* what, const WhatIfCounts& c) {
  if (c.values == 0) return "";
  std::string s = std::string("<div class=\"wi\">") + what;
  if (c.overflow) s += " ↑" + compact(c.overflow);
  if (c.underflow) s += " ↓" + compact(c.underflow);
  if (c.subnormal) s += " ~" + compact(c.subnormal);
  return s + " <span class=\"muted\">/" + compact(c.values) + "</span></div>";
}

std::string what_if_row(const WhatIfRow& row) {
  std::string s = "<tr><td><a class=\"goto\" href=\"#layers\" data-layer=\"" + esc(row.layer) +
                  "\"><code>" + esc(text::layer_label(row.layer)) + "</code></a></td>";
  for (std::size_t i = 0; i < kWhatIfFormats.size(); ++i) {
    const std::string v = what_if_verdict(row, i);
    s += "<td>" + (v.empty() ? std::string("–") : "<b class=\"wv wv-" + v + "\">" + v + "</b>") +
         counts_line("act", row.activations[i]) + counts_line("grad", row.gradients[i]) +
         (row.weights[i].values ? counts_line("wt", row.weights[i]) : std::string()) + "</td>";
  }
  return s + "</tr>\n";
}

bool all_safe(const WhatIfRow& row) {
  for (std::size_t i = 0; i < kWhatIfFormats.size(); ++i) {
    const std::string v = what_if_verdict(row, i);
    if (!v.empty() && v != "safe") return false;
  }
  return true;
}

std::string what_if_table(const std::vector<const WhatIfRow*>& rows) {
  std::string s = "<table class=\"grid whatif\"><thead><tr><th>Layer</th>";
  for (Format f : kWhatIfFormats) s += "<th>in " + std::string(format_name(f)) + "</th>";
  s += "</tr></thead><tbody>\n";
  for (const WhatIfRow* row : rows) s += what_if_row(*row);
  return s + "</tbody></table>\n";
}

}  // namespace

void what_if_section(const Report& r, std::string& out) {
  out +=
      "<section id=\"what-if\"><h2>What if: other formats</h2>\n<p class=\"hint\">Per layer, what "
      "its "
      "recorded forward outputs (act), gradients (grad) and parameter values (wt, at the last "
      "recorded optimizer step) would do if stored in each format: "
      "↑ overflow, ↓ underflow to zero, ~ subnormal, / nonzero values checked (exact casts; only "
      "tensors wider than the format count; zero counts left out). <b>underflow</b> means more "
      "than 0.1% become zero.</p>\n";
  const std::vector<WhatIfRow> rows = what_if(r);
  if (rows.empty()) {
    out +=
        "<p class=\"muted\">No values recorded in a dtype wider than these "
        "formats.</p></section>\n";
    return;
  }
  std::vector<const WhatIfRow*> risky, safe;
  for (const WhatIfRow& row : rows) (all_safe(row) ? safe : risky).push_back(&row);
  if (!risky.empty())
    out += what_if_table(risky);
  else
    out += "<p>Every layer is safe in every format listed.</p>\n";
  if (!safe.empty()) {
    out += fmt::format(
        "<details class=\"more\"><summary>{} layer(s) safe in every format</summary>", safe.size());
    out += what_if_table(safe) + "</details>\n";
  }
  out += "</section>\n";
}

}  // namespace ampscope::reports::detail
