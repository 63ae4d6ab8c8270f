// Merging the per-rank reports of one distributed run into one report.
#pragma once

#include <ampscope/reports/report.h>

#include <string>
#include <vector>

namespace ampscope::reports {

struct MergeOptions {
  /// Merge reports that are not of one run (different autocast dtype, world size or model
  /// layers); each difference becomes a note in run.notes.
  bool force = false;
};

/// Why two reports are not ranks of one run ("" when they may be): autocast dtype, world size,
/// the set of model layer names ("<outside>" aside).
std::string run_mismatch(const Report& a, const Report& b);

/// One report for all ranks: layers by name, ops by the observer's key (op, phase, input,
/// compute and output dtype, autocast class) with every count summed (std::overflow_error past
/// int64) and stats, input stats, histograms and parameter gradients merged; every rank's first
/// non-finite event kept in first_nonfinite_by_rank and the earliest (step, then rank) as
/// first_nonfinite; loss scale from the lowest rank; recommendations recomputed.
/// Throws std::invalid_argument for an empty list, two reports of the same rank, or reports of
/// different runs (unless options.force).
Report merge_reports(const std::vector<Report>& reports, const MergeOptions& options = {});

/// The note a merged report opens with ("merged from N rank reports").
inline constexpr const char* kMergedNote = "merged from ";
/// True for a report merge_reports made (it speaks for every rank; a rank's own report for
/// itself only).
bool is_merged(const Report& r);

}  // namespace ampscope::reports
