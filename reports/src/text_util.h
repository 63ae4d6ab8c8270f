// Private helpers shared by the summary and HTML writers: number and dtype formatting, UTF-8
// aware width and truncation.
#pragma once

#include <ampscope/reports/report.h>

#include <cmath>
#include <cstdint>
#include <string>

#include <fmt/format.h>

namespace ampscope::reports::text {

/// Columns a UTF-8 string takes (one per code point; continuation bytes do not count).
inline std::size_t width(const std::string& s) {
  std::size_t n = 0;
  for (unsigned char c : s)
    if ((c & 0xC0) != 0x80) ++n;
  return n;
}

/// Byte offset of code point `cp` in `s` (s.size() when past the end).
inline std::size_t cp_offset(const std::string& s, std::size_t cp) {
  std::size_t seen = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) {
      if (seen == cp) return i;
      ++seen;
    }
  }
  return s.size();
}

/// `s` cut to at most `max` columns by replacing its middle with "…".
inline std::string truncate_middle(const std::string& s, std::size_t max) {
  const std::size_t w = width(s);
  if (w <= max) return s;
  if (max == 0) return "";
  if (max == 1) return "…";
  const std::size_t keep = max - 1;
  const std::size_t head = (keep + 1) / 2, tail = keep - head;
  return s.substr(0, cp_offset(s, head)) + "…" + s.substr(cp_offset(s, w - tail));
}

/// `s` cut to at most `max` columns, ending in "…" when cut.
inline std::string truncate_end(const std::string& s, std::size_t max) {
  if (width(s) <= max) return s;
  if (max == 0) return "";
  return s.substr(0, cp_offset(s, max - 1)) + "…";
}

/// `s` padded with spaces on the right to `w` columns.
inline std::string pad(const std::string& s, std::size_t w) {
  const std::size_t have = width(s);
  return have >= w ? s : s + std::string(w - have, ' ');
}

/// A compact number: integers plainly, others in 4 significant digits; "nan"/"inf" spelled out.
inline std::string number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == std::floor(v) && std::fabs(v) < 1e7) return fmt::format("{:.0f}", v);
  return fmt::format("{:.4g}", v);
}

/// A layer name as shown to people: the root module is "(root)".
inline std::string layer_label(const std::string& name) { return name.empty() ? "(root)" : name; }

/// Short dtype names for tables: float32 -> fp32, bfloat16 -> bf16; "" -> "-".
inline std::string short_dtype(const std::string& d) {
  std::string s = d.rfind("torch.", 0) == 0 ? d.substr(6) : d;
  if (s.empty()) return "-";
  if (s == "float32") return "fp32";
  if (s == "float64") return "fp64";
  Format f;
  if (format_from_name(s, &f)) return std::string(traits(f).short_name);
  return s;
}

/// "written→computed→returned" with short dtype names.
inline std::string dtype_chain(const OpRecord& op) {
  return short_dtype(op.input_dtype) + "→" + short_dtype(op.compute_dtype) + "→" +
         short_dtype(op.output_dtype);
}

/// The verdict sentence on the run's first non-finite value (or that it was clean).
/// `s` with every `from` replaced by `to`.
inline std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (std::size_t i = s.find(from); i != std::string::npos; i = s.find(from, i + to.size()))
    s.replace(i, from.size(), to);
  return s;
}

/// Calls that made NaN/Inf which were consumed harmlessly (never reached anything).
inline std::int64_t benign_total(const Report& r) {
  std::int64_t n = 0;
  for (const Layer& l : r.layers)
    for (const OpRecord& op : l.ops) n += op.benign_nonfinite;
  return n;
}

/// "GradScaler caught non-finite gradients in N step(s), first from layer L, op O at step S".
inline std::string scaler_caught_line(const Report& r) {
  if (!r.scaler_caught) return "";
  const NonFiniteEvent& e = r.scaler_caught->first;
  return fmt::format("GradScaler skipped {} step(s) on non-finite gradients (first at step {}: "
                     "layer {}, op {}) — its job, not a failure",
                     r.scaler_caught->steps, e.step, layer_label(e.layer), e.op);
}

/// Where the first harmful values came from, in words.
inline std::string origin_words(const NonFiniteEvent& e) {
  if (e.inputs_finite) return "from finite inputs";
  return e.nonfinite_scalar ? "from a NaN/inf constant" : "handed non-finite inputs";
}

inline std::string verdict(const Report& r) {
  if (!r.first_nonfinite) {
    std::string s = "clean: no harmful NaN/Inf";
    if (const std::int64_t benign = benign_total(r); benign > 0)
      s += fmt::format(" ({} op call(s) made NaN/Inf that were consumed harmlessly)", benign);
    if (r.scaler_caught) s += "; " + scaler_caught_line(r);
    return s;
  }
  const NonFiniteEvent& e = *r.first_nonfinite;
  std::string recheck = !e.fp32_also_nonfinite ? "not run"
                        : *e.fp32_also_nonfinite ? "also non-finite"
                                                 : "finite";
  std::string reached = e.reached.empty() ? "" : fmt::format("; reached a {} at step {}",
                                                           replace_all(e.reached, "_", " "),
                                                           e.reached_step);
  return fmt::format("first non-finite: step {}, phase {}, layer {}, op {} ({}) — {}{}; FP32 re-check: {}",
                     e.step, e.phase, layer_label(e.layer), e.op, e.kind, origin_words(e), reached,
                     recheck);
}

/// A short line of a recommendation's key evidence.
inline std::string key_evidence(const Recommendation& rec) {
  std::string out;
  auto add = [&out](const std::string& s) { out += (out.empty() ? "" : "; ") + s; };
  auto get_num = [](const nlohmann::json& o, const char* k, double* v) {
    auto it = o.find(k);
    if (it == o.end() || !it->is_number()) return false;
    *v = it->get<double>();
    return true;
  };
  auto get_str = [](const nlohmann::json& o, const char* k) {
    auto it = o.find(k);
    return it != o.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  const nlohmann::json& ev = rec.evidence;
  if (!ev.is_object()) return out;
  if (auto it = ev.find("first_nonfinite"); it != ev.end() && it->is_object()) {
    double step = 0;
    std::string s = get_str(*it, "op");
    if (get_num(*it, "step", &step)) s += " at step " + number(step);
    std::string kind = get_str(*it, "kind");
    if (!kind.empty()) s += " (" + kind + ")";
    std::string recheck = get_str(*it, "fp32_recheck");
    if (!recheck.empty()) s += ", fp32 re-check " + recheck;
    add(s);
  }
  if (auto it = ev.find("ops"); it != ev.end() && it->is_array()) {
    for (const auto& op : *it) {
      if (!op.is_object()) continue;
      std::string s = get_str(op, "op");
      double bad = 0, calls = 0;
      if (get_num(op, "nonfinite_from_finite", &bad)) {
        s += ": " + number(bad);
        if (get_num(op, "calls", &calls)) s += "/" + number(calls);
        s += " calls non-finite";
      }
      double absmax = 0, fmax = 0;
      if (get_num(op, "absmax", &absmax)) {
        s += ", absmax " + number(absmax);
        if (get_num(op, "format_max", &fmax)) s += " (max " + number(fmax) + ")";
      }
      add(s);
    }
  }
  if (auto it = ev.find("gradients"); it != ev.end() && it->is_object()) {
    double share = 0, scale = 0;
    std::string s;
    if (get_num(*it, "share_lost", &share))
      s = fmt::format("{:.3g}% of gradient values underflow/subnormal in {}", 100 * share, get_str(*it, "format"));
    if (get_num(*it, "suggested_scale", &scale)) s += ", suggested loss scale " + number(scale);
    add(s);
  }
  if (auto it = ev.find("loss_scale"); it != ev.end() && it->is_object()) {
    double skipped = 0, updates = 0, final_scale = 0;
    if (get_num(*it, "skipped_steps", &skipped) && get_num(*it, "updates", &updates) &&
        get_num(*it, "final_scale", &final_scale))
      add(fmt::format("{} of {} steps skipped, final scale {}", number(skipped), number(updates), number(final_scale)));
  }
  for (const auto& c : ev.value("cast_loss", nlohmann::json::array())) {
    double lost = 0, l2 = 0;
    std::string s = get_str(c, "op") + " " + get_str(c, "cast") + " cast of " + get_str(c, "argument") +
                    " to " + get_str(c, "target_dtype");
    if (get_num(c, "share_lost", &lost)) s += fmt::format(": {:.3g}% of nonzero values lost", 100 * lost);
    if (get_num(c, "lost_rel_l2", &l2)) s += fmt::format(" ({:.3g}% of its norm)", 100 * l2);
    add(s);
  }
  for (const auto& d : ev.value("degenerate", nlohmann::json::array())) {
    double n = 0, err = 0;
    std::string s = get_str(d, "op") + " in " + get_str(d, "compute_dtype") + ": output all zeros";
    if (get_num(d, "degenerate", &n)) s += " in " + number(n) + " re-checked calls";
    if (get_num(d, "max_rel_err", &err)) s += fmt::format(", float32 differs by {:.3g}", err);
    add(s);
  }
  for (const auto& u : ev.value("stale_updates", nlohmann::json::array())) {
    double sh = 0;
    std::string s = get_str(u, "param");
    if (get_num(u, "share_stale", &sh))
      s += fmt::format(": {:.3g}% of due updates rounded away in {}", 100 * sh, get_str(u, "dtype"));
    add(s);
  }
  for (const char* key : {"headroom", "shadow"}) {
    auto it = ev.find(key);
    if (it == ev.end() || !it->is_array()) continue;
    for (const auto& op : *it) {
      if (!op.is_object()) continue;
      std::string s = get_str(op, "op");
      double a = 0, b = 0;
      if (get_num(op, "absmax", &a) && get_num(op, "format_max", &b))
        s += ", absmax " + number(a) + " (max " + number(b) + ")";
      if (get_num(op, "growth_binades_per_step", &a) && a > 0) s += fmt::format(", x{:.3g}/step", std::exp2(a));
      if (get_num(op, "projected_overflow_step", &a)) s += ", overflow ~step " + number(a);
      if (get_num(op, "max_rel_err", &a)) s += fmt::format(", rel err {:.3g}", a);
      if (get_num(op, "min_cosine", &a)) s += fmt::format(", cosine {:.6g}", a);
      add(s);
    }
  }
  return out;
}

}  // namespace ampscope::reports::text
