// The recommendation engine. Each rule is a small function that looks at the report model and
// proposes findings; the engine merges them into one recommendation per (layer, action) and
// orders them most severe first. Rules never read files or torch state, so every rule is
// testable on a hand-made Report. The reason codes are documented in the README.
//
//   origin_rule, lowp_op_rule: NaN/Inf and where they came from, see recommend_nonfinite.cpp.
//   precision_loss_rule  --shadow re-checks of an op erred beyond kPrecisionLossRelErr or below
//                      kPrecisionLossCosine -> pin_fp32 (medium, precision_loss; high when the
//                      re-run differs completely: kShadowLostRelErr / kShadowLostCosine).
//   headroom_rule      a low-precision op's output absmax (below the format's max itself: a fill
//                      or saturation) is within kHeadroomWarnBinades of the
//                      format's max, or grows toward it fast enough to get there within as many
//                      steps again -> watch (medium | low, headroom_<format>).
//   grad_underflow_rule  gradients lose at least kGradUnderflowShare of their nonzero values to
//                      underflow or subnormals in the run's format -> loss_scaling (high,
//                      grad_underflow_<format>) with a suggested power-of-two scale: the
//                      largest that keeps the largest gradient a binade below the max.
//   cast_loss_rule, degenerate_output_rule, stale_updates_rule: silent precision loss, see
//                      recommend_silent.cpp.
//   loss_scale_rule    the GradScaler's scale fell below 1, or its last kCollapseRun or more
//                      updates all found inf after a clean one, or its first kNeverCleanRun
//                      or more all did -> loss_scaling (high, loss_scale_collapse).
// NaN/Inf that merely propagated (nonfinite_from_finite == 0) or was consumed harmlessly
// (benign_nonfinite) never yields a recommendation; a layer with a fix_model gets no pin, and a
// layer with a pin or fix gets no `watch` on top.

#include <ampscope/reports/recommend.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "dtypes.h"
#include "recommend_rules.h"
#include "text_util.h"

namespace ampscope::reports {

using json = nlohmann::json;

std::optional<double> format_max_of(const std::string& dtype) {
  Format f;
  if (!format_from_name(dtypes::bare(dtype), &f)) return std::nullopt;
  return format_max(f);
}

int severity_rank(const std::string& severity) {
  Severity s;
  return from_name(severity, &s) ? severity_rank(s) : -1;
}

namespace {

std::string dtype_name(const std::string& d) { return dtypes::bare(d); }

// (c) --shadow: ops whose float32 re-runs disagree with the low-precision result.
void precision_loss_rule(const Report& r, Findings& out) {
  for (const Layer& layer : r.layers) {
    for (const OpRecord& op : layer.ops) {
      const ShadowSummary& sh = op.shadow;
      if (sh.checks == 0) continue;
      if (!(sh.max_rel_err > kPrecisionLossRelErr) && !(sh.min_cosine < kPrecisionLossCosine)) continue;
      ShadowEvidence ev;
      ev.op = op.op;
      ev.compute_dtype = op.compute_dtype;
      ev.checks = sh.checks;
      ev.max_rel_err = sh.max_rel_err;
      ev.max_ulp = sh.max_ulp;
      ev.min_cosine = sh.min_cosine;
      ev.worst_step = sh.worst_step;
      Finding f;
      f.layer = layer.name;
      f.action = Action::kPinFp32;
      // A re-run that differs completely is not a rounding nuance: the layer's result is lost.
      const bool lost = sh.max_rel_err >= kShadowLostRelErr || sh.min_cosine <= kShadowLostCosine;
      f.severity = lost ? Severity::kHigh : Severity::kMedium;
      f.reasons = {"precision_loss"};
      add_evidence(f.evidence, ev);
      out.push_back(std::move(f));
    }
  }
}

/// Least-squares slope of log2(absmax) per step over the last `n` points of a series.
double log2_growth(const std::vector<std::pair<std::int64_t, double>>& series, std::size_t n) {
  std::vector<std::pair<double, double>> pts;
  for (std::size_t i = series.size() > n ? series.size() - n : 0; i < series.size(); ++i)
    if (series[i].second > 0 && std::isfinite(series[i].second))
      pts.emplace_back(static_cast<double>(series[i].first), std::log2(series[i].second));
  if (pts.size() < kHeadroomMinPoints) return 0.0;
  double mx = 0, my = 0;
  for (const auto& [x, y] : pts) mx += x, my += y;
  mx /= static_cast<double>(pts.size());
  my /= static_cast<double>(pts.size());
  double sxy = 0, sxx = 0;
  for (const auto& [x, y] : pts) sxy += (x - mx) * (y - my), sxx += (x - mx) * (x - mx);
  return sxx > 0 ? sxy / sxx : 0.0;
}

// (d) Low-precision outputs close to the format's max, or heading there.
void headroom_rule(const Report& r, Findings& out) {
  Format fmt;
  if (!dtypes::as_format(r.run.autocast_dtype, &fmt) || fmt == Format::kBFloat16) return;
  const double fmax = format_max(fmt);
  const std::string lowp = dtype_name(r.run.autocast_dtype);
  const double horizon = static_cast<double>(std::max<std::int64_t>(r.run.steps, kHeadroomMinHorizon));
  for (const Layer& layer : r.layers) {
    for (const OpRecord& op : layer.ops) {
      if (op.phase != Phase::kForward || dtype_name(op.compute_dtype) != lowp) continue;
      if (op.nonfinite_from_finite > 0 || op.absmax_by_step.empty()) continue;
      double peak = 0;
      for (const auto& pt : op.absmax_by_step)
        if (std::isfinite(pt.second)) peak = std::max(peak, pt.second);
      // Exactly the format's largest value is a fill or a saturation, not an activation one
      // tick from overflow: a mask of finfo(float16).min that a compiled graph casts (T5's).
      if (peak <= 0 || peak >= fmax) continue;
      const double last = op.absmax_by_step.back().second;
      const double headroom = std::log2(fmax / peak);
      const double growth = log2_growth(op.absmax_by_step, kHeadroomFitPoints);
      const double to_go = std::isfinite(last) && last > 0 ? std::log2(fmax / last) : headroom;
      const double steps_left = growth > 0 ? to_go / growth : INFINITY;
      const bool close = headroom < kHeadroomWarnBinades;
      const bool heading = growth >= kHeadroomMinGrowth && steps_left <= horizon;
      if (!close && !heading) continue;
      HeadroomEvidence ev;
      ev.op = op.op;
      ev.compute_dtype = op.compute_dtype;
      ev.absmax = peak;
      ev.format_max = fmax;
      ev.headroom_binades = headroom;
      ev.growth_binades_per_step = growth;
      if (std::isfinite(steps_left))
        ev.projected_overflow_step = op.absmax_by_step.back().first + static_cast<std::int64_t>(std::ceil(steps_left));
      Finding f;
      f.layer = layer.name;
      f.action = Action::kWatch;
      f.severity = close ? Severity::kMedium : Severity::kLow;
      f.reasons = {"headroom_" + lowp};
      add_evidence(f.evidence, ev);
      out.push_back(std::move(f));
    }
  }
}

/// Gradient value counts against the run's format, summed over some gradient tensors.
struct GradCounts {
  std::int64_t nonzero = 0;    ///< nonzero finite values
  std::int64_t underflow = 0;  ///< become 0 in the format (exact; wider-dtype tensors only)
  std::int64_t subnormal = 0;  ///< subnormal in the format (or already subnormal in it)
  std::int64_t zeros = 0;      ///< zeros of gradients already stored in the format
  std::int64_t stored_values = 0;  ///< values of gradients already stored in the format
  ExpHist hist;
  double absmax = 0;
  double stored_absmax = 0;  ///< of the gradients stored in the format: what scaling can overflow

  void add(const Stats& s, const std::string& dtype, Format f) {
    if (s.count == 0) return;
    nonzero += s.finite() - s.zeros;
    absmax = std::max(absmax, s.absmax);
    hist.merge(s.exp_hist);
    if (dtypes::wider_than(dtype, f)) {
      underflow += s.underflow_in(f);
      subnormal += s.subnormal_in(f);
    } else if (dtype_name(dtype) == format_name(f)) {
      // Stored in the format: what underflowed is already 0 (indistinguishable from true
      // zeros), what is tiny shows as subnormal mass below the smallest normal exponent.
      for (int e = s.exp_hist.lo(); !s.exp_hist.empty() && e < std::min(s.exp_hist.hi(), traits(f).min_normal_exp); ++e)
        subnormal += s.exp_hist.at(e);
      zeros += s.zeros;
      stored_values += s.finite();
      stored_absmax = std::max(stored_absmax, s.absmax);
    }
  }
  void merge(const GradCounts& o) {
    nonzero += o.nonzero;
    underflow += o.underflow;
    subnormal += o.subnormal;
    zeros += o.zeros;
    stored_values += o.stored_values;
    absmax = std::max(absmax, o.absmax);
    stored_absmax = std::max(stored_absmax, o.stored_absmax);
    hist.merge(o.hist);
  }
  double lost_share() const {
    return nonzero > 0 ? static_cast<double>(underflow + subnormal) / static_cast<double>(nonzero) : 0.0;
  }
};

/// Exponent at quantile q (from below) of a histogram.
int hist_quantile(const ExpHist& h, double q) {
  const auto target = static_cast<std::int64_t>(std::ceil(q * static_cast<double>(h.total())));
  std::int64_t seen = 0;
  for (int e = h.lo(); e < h.hi(); ++e) {
    seen += h.at(e);
    if (seen >= std::max<std::int64_t>(target, 1)) return e;
  }
  return h.hi() - 1;
}

// (e) Gradients underflowing the run's format: loss scaling, never pins.
void grad_underflow_rule(const Report& r, Findings& out) {
  Format fmt;
  if (!dtypes::as_format(r.run.autocast_dtype, &fmt)) return;
  GradCounts total;
  std::vector<LayerGradLoss> worst;
  for (const Layer& layer : r.layers) {
    GradCounts mine;
    for (const OpRecord& op : layer.ops)
      if (op.phase == Phase::kBackward) mine.add(op.stats, op.input_dtype, fmt);
    for (const ParamRecord& p : layer.params) mine.add(p.grad, p.dtype, fmt);
    if (mine.nonzero == 0) continue;
    total.merge(mine);
    worst.push_back({layer.name, mine.lost_share(), mine.underflow, mine.subnormal, mine.nonzero});
  }
  const double share = total.lost_share();
  if (total.nonzero == 0 || share < kGradUnderflowShare || total.hist.empty()) return;

  const std::string name(format_name(fmt));
  // The suggested scale is the largest power of two that keeps the largest gradient one binade
  // below the format's max: the largest gradient is always visible, while the low tail of
  // gradients already stored in the format has partly become 0 and cannot be seen. The cap
  // looks at the gradients stored in the format when there are any: wider ones (the loss's own
  // gradient of 1, float32 master gradients) are not cast, so scaling cannot overflow them.
  // `tail_scale` is what lifting the visible low tail (kScaleQuantile) to the smallest normal
  // would take; above the suggestion, the gradient range is wider than the format's.
  const int e_low = hist_quantile(total.hist, kScaleQuantile);
  const double cap_absmax = total.stored_values > 0 ? total.stored_absmax : total.absmax;
  const int e_high = static_cast<int>(std::floor(std::log2(std::max(cap_absmax, 1e-300))));
  const int k_need = traits(fmt).min_normal_exp - e_low;
  const int k = std::max(0, traits(fmt).max_exp - 1 - e_high);
  double current = 1.0;
  if (!r.loss_scale.empty() && r.loss_scale.back().scale > 0) current = r.loss_scale.back().scale;

  GradUnderflowEvidence ev;
  ev.format = name;
  ev.share_lost = share;
  ev.nonzero_values = total.nonzero;
  ev.underflow = total.underflow;
  ev.subnormal = total.subnormal;
  if (total.stored_values > 0) {
    ev.zeros_in_format = total.zeros;
    ev.values_in_format = total.stored_values;
  }
  ev.grad_absmax = total.absmax;
  ev.grad_exp_low = e_low;
  ev.grad_exp_high = e_high;
  if (!r.loss_scale.empty()) ev.loss_scale_in_use = current;
  ev.suggested_scale = std::ldexp(current, k);
  ev.tail_scale = std::ldexp(current, k_need);
  ev.range_too_wide = k < k_need;  // even the largest safe scale leaves some underflow
  std::stable_sort(worst.begin(), worst.end(), [](const auto& a, const auto& b) { return a.share > b.share; });
  if (worst.size() > 5) worst.resize(5);
  ev.worst_layers = std::move(worst);

  Finding f;
  f.layer = "";  // loss scaling acts on the whole model
  f.action = Action::kLossScaling;
  // A GradScaler already at the largest safe scale leaves nothing to do by scaling: what still
  // underflows is beyond the format's range (stock float16 BERT under a GradScaler: 0.07% of
  // the gradient's norm). Information, not a task.
  const bool scaler_at_best = !r.loss_scale.empty() && k == 0;
  // Gradients in a wider dtype are counted exactly: when none would become 0, the share is
  // subnormal values alone, which keep fewer bits (an audit's float32 oracle: no measurable
  // change in the gradient from scaling them). Gradients stored in the format have lost theirs
  // to 0 already, where the subnormal mass stands for them.
  const bool only_subnormal =
      total.stored_values == 0 &&
      static_cast<double>(total.underflow) < kGradUnderflowShare * static_cast<double>(total.nonzero);
  f.severity = scaler_at_best   ? Severity::kLow
               : only_subnormal ? Severity::kMedium
                                : Severity::kHigh;
  f.reasons = {"grad_underflow_" + name};
  add_evidence(f.evidence, ev);
  out.push_back(std::move(f));
}

// (f) A GradScaler whose scale collapsed: every step keeps finding inf/NaN.
void loss_scale_rule(const Report& r, Findings& out) {
  if (r.loss_scale.empty()) return;
  std::int64_t skipped = 0, tail = 0;
  double lo = INFINITY, hi = 0;
  std::int64_t first_inf = -1;
  for (const LossScalePoint& p : r.loss_scale) {
    if (p.found_inf) {
      ++skipped;
      if (first_inf < 0) first_inf = p.step;
    }
    lo = std::min(lo, p.scale);
    hi = std::max(hi, p.scale);
    tail = p.found_inf ? tail + 1 : 0;
  }
  const double last = r.loss_scale.back().scale;
  // A run of skips from the very first update is the scaler backing off from its initial
  // scale, not a collapse (unless it ends below 1, or lasts so long the model never trained).
  const auto updates = static_cast<std::int64_t>(r.loss_scale.size());
  if (!(last < 1.0) && (tail < kCollapseRun || (tail == updates && updates < kNeverCleanRun)))
    return;
  LossScaleEvidence ev;
  ev.updates = static_cast<std::int64_t>(r.loss_scale.size());
  ev.skipped_steps = skipped;
  ev.first_found_inf_step = first_inf;
  ev.trailing_found_inf = tail;
  ev.min_scale = lo;
  ev.max_scale = hi;
  ev.final_scale = last;
  Finding f;
  f.layer = "";
  f.action = Action::kLossScaling;
  f.severity = Severity::kHigh;
  f.reasons = {"loss_scale_collapse"};
  add_evidence(f.evidence, ev);
  out.push_back(std::move(f));
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
  // A layer whose problem is a model bug gets no pin: a pin cannot fix it.
  recs.erase(std::remove_if(recs.begin(), recs.end(),
                            [&](const Recommendation& p) {
                              return p.action == Action::kPinFp32 &&
                                     std::any_of(recs.begin(), recs.end(), [&](const Recommendation& o) {
                                       return o.layer == p.layer && o.action == Action::kFixModel;
                                     });
                            }),
             recs.end());
  // A layer that is pinned or must be fixed needs no watch on top.
  recs.erase(std::remove_if(recs.begin(), recs.end(),
                            [&](const Recommendation& w) {
                              return w.action == Action::kWatch &&
                                     std::any_of(recs.begin(), recs.end(), [&](const Recommendation& o) {
                                       return o.layer == w.layer &&
                                              (o.action == Action::kPinFp32 || o.action == Action::kFixModel);
                                     });
                            }),
             recs.end());
  std::stable_sort(recs.begin(), recs.end(), [](const Recommendation& a, const Recommendation& b) {
    const int ra = severity_rank(a.severity), rb = severity_rank(b.severity);
    if (ra != rb) return ra > rb;
    if (a.layer != b.layer) return a.layer < b.layer;
    return name_of(a.action) < name_of(b.action);  // (the order of the names, as before)
  });
  return recs;
}

// ---- each rule's one line of evidence (the summary's and the HTML's "key evidence") ----------

void shadow_line(const ShadowEvidence& e, std::vector<std::string>& lines) {
  std::string s = e.op;
  if (std::isfinite(e.max_rel_err)) s += fmt::format(", rel err {:.3g}", e.max_rel_err);
  if (std::isfinite(e.min_cosine)) s += fmt::format(", cosine {:.6g}", e.min_cosine);
  lines.push_back(std::move(s));
}

void headroom_line(const HeadroomEvidence& e, std::vector<std::string>& lines) {
  std::string s = e.op;
  if (std::isfinite(e.absmax) && std::isfinite(e.format_max))
    s += ", absmax " + text::number(e.absmax) + " (max " + text::number(e.format_max) + ")";
  if (e.growth_binades_per_step > 0) s += fmt::format(", x{:.3g}/step", std::exp2(e.growth_binades_per_step));
  if (e.projected_overflow_step)
    s += ", overflow ~step " + text::number(static_cast<double>(*e.projected_overflow_step));
  lines.push_back(std::move(s));
}

void grad_underflow_line(const GradUnderflowEvidence& e, std::vector<std::string>& lines) {
  std::string s;
  if (std::isfinite(e.share_lost))
    s = fmt::format("{:.3g}% of gradient values underflow/subnormal in {}", 100 * e.share_lost, e.format);
  if (std::isfinite(e.suggested_scale) && e.loss_scale_in_use == e.suggested_scale)
    s += ", the GradScaler's scale " + text::number(e.suggested_scale) + " is already the largest safe one";
  else if (std::isfinite(e.suggested_scale))
    s += ", suggested loss scale " + text::number(e.suggested_scale);
  lines.push_back(std::move(s));
}

void loss_scale_line(const LossScaleEvidence& e, std::vector<std::string>& lines) {
  lines.push_back(fmt::format("{} of {} steps skipped, final scale {}", text::number(static_cast<double>(e.skipped_steps)),
                              text::number(static_cast<double>(e.updates)), text::number(e.final_scale)));
}

}  // namespace

const std::vector<Rule>& rules() {
  static const std::vector<Rule> all{
      {"origin", origin_rule, lines_of<OriginEvidence, origin_line>},
      {"lowp_op", lowp_op_rule, lines_of<NonfiniteOpEvidence, nonfinite_op_line>},
      {"precision_loss", precision_loss_rule, lines_of<ShadowEvidence, shadow_line>},
      {"headroom", headroom_rule, lines_of<HeadroomEvidence, headroom_line>},
      {"grad_underflow", grad_underflow_rule, lines_of<GradUnderflowEvidence, grad_underflow_line>},
      {"loss_scale", loss_scale_rule, lines_of<LossScaleEvidence, loss_scale_line>},
      {"cast_loss", cast_loss_rule, lines_of<CastLossEvidence, cast_loss_line>},
      {"degenerate_output", degenerate_output_rule, lines_of<DegenerateEvidence, degenerate_output_line>},
      {"stale_updates", stale_updates_rule, lines_of<StaleUpdateEvidence, stale_updates_line>},
  };
  return all;
}

bool has_reason(const Report& r, const std::string& prefix) {
  for (const Recommendation& rec : r.recommendations)
    for (const std::string& code : rec.reasons)
      if (code.rfind(prefix, 0) == 0) return true;
  return false;
}

std::string key_evidence(const Recommendation& rec) {
  std::vector<std::string> lines;
  for (const Rule& rule : rules()) rule.one_line(rec.evidence, lines);
  std::string out;
  for (const std::string& l : lines) out += (out.empty() ? "" : "; ") + l;
  return out;
}

std::vector<Recommendation> recommend(const Report& report) {
  Findings findings;
  for (const Rule& rule : rules()) rule.run(report, findings);
  return merge(std::move(findings));
}

}  // namespace ampscope::reports
