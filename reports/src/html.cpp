// The self-contained HTML report: one document with inline CSS, inline SVG, one inline script and
// the trimmed report data as an inert JSON block. Nothing is loaded from outside the file; a
// Content-Security-Policy forbids it and lets only the page's own (nonce-carrying) script run.
// Every string that comes from the model goes through html_escape (static parts) or is put into
// the DOM by the script as text (never parsed as markup).

#include <ampscope/reports/html.h>

#include <string>

#include <fmt/format.h>

#include "html_detail.h"
#include "text_util.h"

namespace ampscope::reports {

namespace {

/// The bidirectional control at s[i] (U+061C, U+200E/F, U+202A-E, U+2066-9) as visible
/// "\uXXXX" text, or "" when s[i] starts none: an unclosed U+202E in a name must not reverse
/// the rest of the page.
std::string bidi_control_at(const std::string& s, std::size_t i) {
  auto b = [&](std::size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0u; };
  if (b(0) == 0xD8 && b(1) == 0x9C) return "\\u061C";
  if (b(0) != 0xE2) return "";
  if (b(1) == 0x80 && (b(2) == 0x8E || b(2) == 0x8F || (b(2) >= 0xAA && b(2) <= 0xAE)))
    return fmt::format("\\u{:04X}", 0x2000 + (b(2) - 0x80));
  if (b(1) == 0x81 && b(2) >= 0xA6 && b(2) <= 0xA9) return fmt::format("\\u{:04X}", 0x2040 + (b(2) - 0x80));
  return "";
}

}  // namespace

std::string html_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size() + s.size() / 8);
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (const std::string bidi = bidi_control_at(s, i); !bidi.empty()) {
      out += bidi;
      i += bidi == "\\u061C" ? 1 : 2;
      continue;
    }
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

namespace {

void head(const Report& r, const std::string& nonce, std::string& out) {
  out += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  out +=
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
      "style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'; "
      "script-src 'nonce-" +
      nonce + "'\">\n";
  out += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  out += "<link rel=\"icon\" href=\"data:,\">\n";
  std::string title = "ampscope report";
  if (!r.run.command.empty()) title += " — " + text::truncate_middle(r.run.command, 80);
  out += "<title>" + html_escape(title) + "</title>\n<style>" + detail::html_css() + "</style>\n";
  out += "</head>\n";
}

void nav(const Report& r, std::string& out) {
  out += "<header class=\"top\"><span class=\"brand\">ampscope</span><nav>";
  struct Link {
    const char* id;
    const char* label;
  };
  const bool ranks = r.run.world_size > 1 || !r.first_nonfinite_by_rank.empty();
  for (const Link& l : {Link{"summary", "Run"}, Link{"verdict", "Verdict"}, Link{"ranks", "Ranks"},
                        Link{"recommendations", "Recommendations"}, Link{"layers", "Layers"},
                        Link{"histograms", "Histograms"}, Link{"gradients", "Gradient ranges"},
                        Link{"loss-scale", "Loss scale"}, Link{"what-if", "What-if"}}) {
    if (std::string(l.id) == "ranks" && !ranks) continue;
    out += std::string("<a href=\"#") + l.id + "\">" + l.label + "</a>";
  }
  out += "</nav></header>\n";
}

}  // namespace

std::string render_html(const Report& report) {
  const std::string nonce = detail::make_nonce();
  std::string out;
  head(report, nonce, out);
  out += "<body>\n";
  nav(report, out);
  out += "<main>\n";
  detail::summary_section(report, out);
  detail::verdict_section(report, out);
  detail::ranks_section(report, out);
  detail::recommendations_section(report, out);
  detail::layers_section(report, out);
  detail::histograms_section(report, out);
  detail::gradients_section(report, out);
  detail::loss_scale_section(report, out);
  detail::what_if_section(report, out);
  out +=
      "</main>\n<footer>ampscope · schema ampscope.report/1 · this file is self-contained: "
      "it loads nothing and sends nothing.</footer>\n";
  out += "<script type=\"application/json\" id=\"ampscope-data\">" +
         detail::script_safe_json(detail::html_data(report)) + "</script>\n";
  out += "<script nonce=\"" + nonce + "\">" + detail::html_js() + "</script>\n";
  out += "</body>\n</html>\n";
  return out;
}

}  // namespace ampscope::reports
