// ampscope diff: what changed between two runs (e.g. before and after applying a map).
#include <ampscope/reports/diff.h>
#include <ampscope/reports/report_json.h>
#include <fmt/core.h>

#include "args.h"
#include "commands.h"

namespace ampscope::cli {
namespace {

constexpr const char* kHelp = R"(usage: ampscope diff BEFORE AFTER

Compares two reports of the same model, e.g. a run and its re-run with the precision map
applied: whether the first non-finite value is gone, how many op calls still made NaN/inf from
finite inputs, which recommended pins are no longer needed or new, which ops changed the dtype
they computed in, and the time per step.

  BEFORE, AFTER   report.json files written by ampscope
)";

}  // namespace

int cmd_diff(const Argv& argv) {
  Args a(argv, {}, {}, "diff");
  if (a.help()) return fmt::print("{}", kHelp), 0;
  a.expect_positional(2, "two reports, BEFORE and AFTER (see ampscope diff --help)");
  reports::Report before = reports::read_report(a.positional()[0]);
  reports::Report after = reports::read_report(a.positional()[1]);
  fmt::print("{}", reports::render_diff(reports::diff_reports(before, after), before, after));
  return 0;
}

}  // namespace ampscope::cli
