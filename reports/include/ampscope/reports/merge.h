// Merging the per-rank reports of one distributed run into one report.
#pragma once

#include <ampscope/reports/report.h>

#include <vector>

namespace ampscope::reports {

/// One report for all ranks: layers and ops matched by name and key (op, phase, dtypes) with
/// counts summed and stats, histograms and parameter gradients merged; every rank's first
/// non-finite event kept in first_nonfinite_by_rank and the earliest (step, then rank) as
/// first_nonfinite; loss scale from the lowest rank; recommendations recomputed.
/// Throws std::invalid_argument for an empty list or two reports of the same rank.
Report merge_reports(const std::vector<Report>& reports);

}  // namespace ampscope::reports
