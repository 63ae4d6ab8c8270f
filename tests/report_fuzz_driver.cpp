// For tests/python/test_fuzz.py: reads each report file given and runs everything a user can
// run on it (summary, HTML, map, diff, merge), printing one line per file: "ok" or
// "error <id> <message>". Anything other than a ReportError is a bug: printed as "BUG ..." and
// the exit code is 1. A crash or hang shows as the process dying or timing out.
#include <ampscope/reports/diff.h>
#include <ampscope/reports/html.h>
#include <ampscope/reports/merge.h>
#include <ampscope/reports/precision_map.h>
#include <ampscope/reports/recommend.h>
#include <ampscope/reports/report_json.h>
#include <ampscope/reports/summary.h>

#include <cstdio>
#include <string>

namespace {

using namespace ampscope::reports;

void exercise(const std::string& path) {
  const Report r = read_report(path);
  (void)render_summary(r);
  (void)render_html(r);
  (void)precision_map_to_json(precision_map_from(r.recommendations));
  (void)render_diff(diff_reports(r, r), r, r);
  (void)recommend(r);
  (void)merge_reports({r});
}

}  // namespace

int main(int argc, char** argv) {
  int bugs = 0;
  for (int i = 1; i < argc; ++i) {
    try {
      exercise(argv[i]);
      std::printf("ok\n");
    } catch (const ReportError& e) {
      std::printf("error %s %s\n", e.id().c_str(), e.what());
    } catch (const std::exception& e) {
      ++bugs;
      std::printf("BUG %s: %s\n", argv[i], e.what());
    }
    std::fflush(stdout);
  }
  return bugs == 0 ? 0 : 1;
}
