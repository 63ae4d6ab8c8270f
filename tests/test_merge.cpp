// merge_reports on hand-made rank reports: sums, merged stats, per-rank first non-finite.
#include <ampscope/reports/merge.h>
#include <ampscope/reports/report_json.h>
#include <gtest/gtest.h>

namespace {

using namespace ampscope;
using namespace ampscope::reports;

Report rank_report(int rank, std::int64_t calls, double absmax, std::optional<std::int64_t> nan_step) {
  Report r;
  r.run.rank = rank;
  r.run.world_size = 2;
  r.run.steps = 5 + rank;
  r.run.autocast_dtype = "float16";
  Layer l;
  l.name = "fc";
  l.type = "Linear";
  OpRecord op;
  op.op = "aten::linear";
  op.phase = "forward";
  op.calls = calls;
  op.input_dtype = "float32";
  op.compute_dtype = op.output_dtype = "float16";
  op.autocast = "lower_precision";
  op.stats.count = 10 * calls;
  op.stats.absmax = absmax;
  op.stats.exp_hist.add(3, 10 * calls);
  op.absmax_by_step = {{0, absmax}, {1, absmax / 2}};
  l.ops.push_back(op);
  ParamRecord p;
  p.name = "fc.weight";
  p.dtype = "float32";
  p.updates = 5;
  p.grad.count = 16;
  l.params.push_back(p);
  r.layers.push_back(l);
  if (nan_step) {
    NonFiniteEvent e;
    e.step = *nan_step;
    e.phase = "forward";
    e.layer = "fc";
    e.op = "aten::linear";
    e.kind = "inf";
    r.first_nonfinite = e;
  }
  return r;
}

TEST(Merge, SumsCountsAndMergesStats) {
  Report m = merge_reports({rank_report(1, 3, 8.0, std::nullopt), rank_report(0, 2, 4.0, std::nullopt)});
  ASSERT_EQ(m.layers.size(), 1u);
  const OpRecord& op = m.layers[0].ops.at(0);
  EXPECT_EQ(op.calls, 5);
  EXPECT_EQ(op.stats.count, 50);
  EXPECT_EQ(op.stats.exp_hist.at(3), 50);
  EXPECT_DOUBLE_EQ(op.stats.absmax, 8.0);
  EXPECT_DOUBLE_EQ(op.absmax_by_step.at(0).second, 8.0);
  EXPECT_EQ(m.layers[0].params.at(0).updates, 10);
  EXPECT_EQ(m.layers[0].params.at(0).grad.count, 32);
  EXPECT_EQ(m.run.steps, 6);
  EXPECT_EQ(m.run.world_size, 2);
  EXPECT_FALSE(m.first_nonfinite.has_value());
  EXPECT_TRUE(m.recommendations.empty());
}

TEST(Merge, KeepsEveryRanksFirstNonFiniteAndTheEarliest) {
  Report m = merge_reports({rank_report(0, 1, 1.0, 7), rank_report(1, 1, 1.0, 4)});
  ASSERT_EQ(m.first_nonfinite_by_rank.size(), 2u);
  EXPECT_EQ(m.first_nonfinite_by_rank[0].rank, 0);
  EXPECT_EQ(m.first_nonfinite_by_rank[1].rank, 1);
  ASSERT_TRUE(m.first_nonfinite.has_value());
  EXPECT_EQ(m.first_nonfinite->step, 4);
  EXPECT_EQ(m.first_nonfinite->rank, 1);
  // The merged report survives its own JSON round trip.
  Report back = report_from_json(report_to_json(m));
  EXPECT_EQ(back.first_nonfinite_by_rank.size(), 2u);
  EXPECT_EQ(back.first_nonfinite->rank, 1);
}

TEST(Merge, RejectsDuplicateRanksAndNothing) {
  EXPECT_THROW(merge_reports({}), std::invalid_argument);
  EXPECT_THROW(merge_reports({rank_report(0, 1, 1, std::nullopt), rank_report(0, 1, 1, std::nullopt)}),
               std::invalid_argument);
}

}  // namespace
