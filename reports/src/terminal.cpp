// terminal_safe: the one place that decides how model-derived text reaches a terminal.
#include <ampscope/reports/terminal.h>

#include <fmt/format.h>

namespace ampscope::reports {
namespace {

/// Length of the UTF-8 sequence starting at s[i] and its code point; 0 when malformed.
std::size_t decode(const std::string& s, std::size_t i, char32_t* cp) {
  const auto b = static_cast<unsigned char>(s[i]);
  std::size_t n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  char32_t v = n == 1 ? b : b & (0x7F >> n);
  for (std::size_t k = 1; k < n; ++k) {
    const auto c = static_cast<unsigned char>(s[i + k]);
    if ((c & 0xC0) != 0x80) return 0;
    v = (v << 6) | (c & 0x3F);
  }
  static constexpr char32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (v < kMin[n] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;  // overlong, surrogate
  *cp = v;
  return n;
}

bool is_bidi_control(char32_t c) {
  return c == 0x061C || c == 0x200E || c == 0x200F || (c >= 0x202A && c <= 0x202E) ||
         (c >= 0x2066 && c <= 0x2069);
}

void strings_safe(std::vector<std::string>& v) {
  for (auto& s : v) s = terminal_safe(s);
}

void json_safe(nlohmann::json& j) {
  if (j.is_string()) {
    j = terminal_safe(j.get<std::string>());
  } else if (j.is_array()) {
    for (auto& v : j) json_safe(v);
  } else if (j.is_object()) {
    nlohmann::json out = nlohmann::json::object();
    for (auto it = j.begin(); it != j.end(); ++it) {
      out[terminal_safe(it.key())] = it.value();
      json_safe(out[terminal_safe(it.key())]);
    }
    j = std::move(out);
  }
}

void event_safe(NonFiniteEvent& e) {
  for (std::string* s : {&e.layer, &e.op, &e.kind, &e.compute_dtype, &e.reached}) *s = terminal_safe(*s);
}

void layer_safe(Layer& l) {
  l.name = terminal_safe(l.name);
  l.type = terminal_safe(l.type);
  for (OpRecord& op : l.ops)
    for (std::string* s : {&op.op, &op.input_dtype, &op.compute_dtype, &op.output_dtype})
      *s = terminal_safe(*s);
  for (ParamRecord& p : l.params) {
    p.name = terminal_safe(p.name);
    p.dtype = terminal_safe(p.dtype);
    strings_safe(p.aliases);
  }
}

}  // namespace

std::string terminal_safe(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    char32_t cp = 0;
    const std::size_t n = decode(s, i, &cp);
    if (n == 0) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(s[i]));
      i += 1;
      continue;
    }
    if (cp < 0x20 || cp == 0x7F) out += fmt::format("\\x{:02x}", static_cast<unsigned>(cp));
    else if ((cp >= 0x80 && cp < 0xA0) || is_bidi_control(cp)) out += fmt::format("\\u{:04x}", static_cast<unsigned>(cp));
    else out.append(s, i, n);
    i += n;
  }
  return out;
}

Report terminal_safe(const Report& in) {
  Report r = in;
  RunInfo& run = r.run;
  for (std::string* s : {&run.torch_version, &run.device, &run.autocast_dtype, &run.started, &run.command, &run.stopped})
    *s = terminal_safe(*s);
  strings_safe(run.notes);
  for (Layer& l : r.layers) layer_safe(l);
  if (r.first_nonfinite) event_safe(*r.first_nonfinite);
  for (NonFiniteEvent& e : r.first_nonfinite_by_rank) event_safe(e);
  if (r.scaler_caught) event_safe(r.scaler_caught->first);
  for (Recommendation& rec : r.recommendations) {
    rec.layer = terminal_safe(rec.layer);  // (action and severity are enums)
    strings_safe(rec.reasons);
    json_safe(rec.evidence);
  }
  return r;
}

}  // namespace ampscope::reports
