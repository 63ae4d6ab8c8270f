// ampscope summary | map | html: read a report.json, write another view of it.
#include <ampscope/reports/writers.h>
#include <ampscope/reports/precision_map.h>
#include <ampscope/reports/recommend.h>
#include <ampscope/reports/report_json.h>
#include <ampscope/reports/summary.h>
#include <fmt/core.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

#include "args.h"
#include "commands.h"

namespace ampscope::cli {
namespace {

constexpr const char* kSummaryHelp = R"(usage: ampscope summary REPORT [--fail-on-nonfinite]

Prints a report's terminal summary: the verdict (clean, or where the first non-finite value
came from), the top risks with their evidence, what autocast did per layer (written ->
computed -> returned dtype), float16 headroom and gradient ranges.

  REPORT                 a report.json written by ampscope
  --fail-on-nonfinite    exit with code 3 when the report shows a non-finite value
)";

constexpr const char* kMapHelp = R"(usage: ampscope map REPORT -o FILE [--min-severity S]

Writes the precision map (schema ampscope.precision_map/1) from a report's recommendations:
the layers to pin to float32 and the reason codes for each.

  REPORT              a report.json written by ampscope
  -o, --out FILE      where to write the map
  --min-severity S    keep pins of severity S or above: low (default), medium, high, critical
)";

constexpr const char* kHtmlHelp = R"(usage: ampscope html REPORT -o FILE

(Re)renders the self-contained HTML report from a report.json.

  REPORT           a report.json written by ampscope
  -o, --out FILE   where to write the HTML file
)";

/// The -o FILE of `map` and `html`: never the report it is made from (writing it would destroy
/// the report).
std::string out_path(const Args& a, const std::string& report) {
  std::string out = a.has("-o") ? a.value("-o") : a.value("--out");
  if (out.empty()) throw UsageError("missing -o FILE");
  struct stat o {}, r {};
  if (::stat(out.c_str(), &o) == 0 && ::stat(report.c_str(), &r) == 0 && o.st_dev == r.st_dev &&
      o.st_ino == r.st_ino)
    throw UsageError("-o " + out + " is the report itself: name another file");
  return out;
}

bool shows_nonfinite(const reports::Report& r) {
  if (r.first_nonfinite) return true;
  for (const auto& layer : r.layers) {
    for (const auto& op : layer.ops) {
      if (op.stats.nonfinite() > 0) return true;
    }
  }
  return false;
}

}  // namespace

int cmd_summary(const Argv& argv) {
  Args a(argv, {}, {"--fail-on-nonfinite"}, "summary");
  if (a.help()) return fmt::print("{}", kSummaryHelp), 0;
  a.expect_positional(1, "one REPORT argument (see ampscope summary --help)");
  reports::Report r = reports::read_report(a.positional()[0]);
  reports::SummaryOptions options;
  options.color = isatty(fileno(stdout)) != 0;
  fmt::print("{}", reports::render_summary(r, options));
  return a.flag("--fail-on-nonfinite") && shows_nonfinite(r) ? kExitNonFinite : 0;
}

int cmd_map(const Argv& argv) {
  Args a(argv, {"-o", "--out", "--min-severity"}, {}, "map");
  if (a.help()) return fmt::print("{}", kMapHelp), 0;
  a.expect_positional(1, "one REPORT argument (see ampscope map --help)");
  std::string severity = a.value("--min-severity", "low");
  if (reports::severity_rank(severity) < 0) {
    throw UsageError("--min-severity must be low, medium, high or critical, got '" + severity +
                     "'");
  }
  std::string out = out_path(a, a.positional()[0]);
  reports::Report r = reports::read_report(a.positional()[0]);
  auto map = reports::precision_map_from(r.recommendations, severity);
  reports::write_precision_map(map, out);
  fmt::print("wrote {} ({} layer{} pinned to float32)\n", out, map.pin_fp32.size(),
             map.pin_fp32.size() == 1 ? "" : "s");
  return 0;
}

int cmd_html(const Argv& argv) {
  Args a(argv, {"-o", "--out"}, {}, "html");
  if (a.help()) return fmt::print("{}", kHtmlHelp), 0;
  a.expect_positional(1, "one REPORT argument (see ampscope html --help)");
  std::string out = out_path(a, a.positional()[0]);
  reports::Report r = reports::read_report(a.positional()[0]);
  reports::write_file_atomic(out, reports::find_writer("html")->write(r));
  fmt::print("wrote {}\n", out);
  return 0;
}

}  // namespace ampscope::cli
