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

/// What a harmful NaN/Inf reached, with its article: "a module output", "the optimizer state".
inline std::string what_reached(const std::string& reached) {
  if (reached == "optimizer") return "the optimizer state";
  return "a " + replace_all(reached, "_", " ");
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
  if (e.forward_nonfinite) return "from finite gradients, meeting the NaN/Inf its forward call made";
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
  std::string reached = e.reached.empty() ? "" : fmt::format("; reached {} at step {}",
                                                           what_reached(e.reached),
                                                           e.reached_step);
  return fmt::format("first non-finite: step {}, phase {}, layer {}, op {} ({}) — {}{}; FP32 re-check: {}",
                     e.step, name_of(e.phase), layer_label(e.layer), e.op, e.kind, origin_words(e), reached,
                     recheck);
}

}  // namespace ampscope::reports::text
