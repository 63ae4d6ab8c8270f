// ampscope merge: one report from the per-rank reports of a distributed run.
#include <ampscope/reports/merge.h>
#include <ampscope/reports/report_json.h>
#include <fmt/core.h>

#include "args.h"
#include "commands.h"

namespace ampscope::cli {
namespace {

constexpr const char* kHelp = R"(usage: ampscope merge R1 R2 ... -o FILE [--force]

Merges the per-rank reports of one distributed run (report.rank<R>.json, as written under
torchrun) into one report: counts summed, stats and exponent histograms merged, every rank's
first non-finite event kept (first_nonfinite_by_rank) and the earliest one as first_nonfinite,
recommendations recomputed. Op entries are matched on op, phase, the three dtypes and the
autocast class; input_stats of every rank are kept; a count past int64 is an error.
Reports of different runs (autocast dtype, world size or model layers differ) are refused.

  R1 R2 ...        rank reports (each rank at most once)
  -o, --out FILE   where to write the merged report.json
  --force          merge reports of different runs anyway (noted in run.notes)
)";

}  // namespace

int cmd_merge(const Argv& argv) {
  Args a(argv, {"-o", "--out"}, {"--force"}, "merge");
  if (a.help()) return fmt::print("{}", kHelp), 0;
  if (a.positional().empty()) throw UsageError("merge needs at least one report (see ampscope merge --help)");
  std::string out = a.has("-o") ? a.value("-o") : a.value("--out");
  if (out.empty()) throw UsageError("missing -o FILE");
  std::vector<reports::Report> inputs;
  for (const auto& path : a.positional()) inputs.push_back(reports::read_report(path));
  reports::Report merged = reports::merge_reports(inputs, {a.flag("--force")});
  reports::write_report(merged, out);
  fmt::print("wrote {} (merged {} rank report{})\n", out, inputs.size(), inputs.size() == 1 ? "" : "s");
  return 0;
}

}  // namespace ampscope::cli
