// diff_reports on hand-made reports: non-finite gone, pins gone/new, dtype changes, step time
// (not compared per step when the runs counted different steps).
#include <ampscope/reports/diff.h>
#include <gtest/gtest.h>

namespace {

using namespace ampscope::reports;

Report run(const std::string& compute, bool nonfinite, double duration) {
  Report r;
  r.run.steps = 10;
  r.run.duration_s = duration;
  Layer l;
  l.name = "ffn.wo";
  OpRecord op;
  op.op = "aten::matmul";
  op.phase = ampscope::Phase::kForward;
  op.compute_dtype = compute;
  op.nonfinite_from_finite = nonfinite ? 3 : 0;
  l.ops.push_back(op);
  r.layers.push_back(l);
  if (nonfinite) {
    NonFiniteEvent e;
    e.layer = "ffn.wo";
    e.op = "aten::matmul";
    e.kind = "inf";
    r.first_nonfinite = e;
    Recommendation rec;
    rec.layer = "ffn.wo";
    rec.action = Action::kPinFp32;
    r.recommendations.push_back(rec);
  }
  return r;
}

TEST(Diff, PinnedRerunRemovesTheProblem) {
  Report before = run("float16", true, 2.0), after = run("float32", false, 3.0);
  ReportDiff d = diff_reports(before, after);
  EXPECT_TRUE(d.nonfinite_before);
  EXPECT_FALSE(d.nonfinite_after);
  EXPECT_EQ(d.origins_before, 3);
  EXPECT_EQ(d.origins_after, 0);
  EXPECT_EQ(d.pins_gone, std::vector<std::string>{"ffn.wo"});
  EXPECT_TRUE(d.pins_new.empty());
  ASSERT_EQ(d.dtype_changes.size(), 1u);
  EXPECT_EQ(d.dtype_changes[0].before, "float16");
  EXPECT_EQ(d.dtype_changes[0].after, "float32");
  EXPECT_DOUBLE_EQ(d.step_s_after / d.step_s_before, 1.5);
  std::string text = render_diff(d, before, after);
  EXPECT_NE(text.find("non-finite: gone"), std::string::npos) << text;
  EXPECT_NE(text.find("+50.0%"), std::string::npos) << text;
}

TEST(Diff, SameRunChangesNothing) {
  Report r = run("bfloat16", false, 1.0);
  ReportDiff d = diff_reports(r, r);
  EXPECT_TRUE(d.dtype_changes.empty() && d.pins_gone.empty() && d.pins_new.empty());
  EXPECT_NE(render_diff(d, r, r).find("none in either run"), std::string::npos);
}

TEST(Diff, RunsOfDifferentStepCountsAreNotComparedPerStep) {
  // The loop skipped its optimizer step on the NaN losses: 6 iterations counted as 2 steps.
  // Per step the baseline would look 3x slower; the whole runs took about the same.
  Report before = run("float16", true, 3.9), after = run("float32", false, 3.4);
  before.run.steps = 2;
  after.run.steps = 6;
  const std::string text = render_diff(diff_reports(before, after), before, after);
  EXPECT_EQ(text.find("%)"), std::string::npos) << text;
  EXPECT_NE(text.find("not compared (the runs counted 2 and 6 steps"), std::string::npos) << text;
  EXPECT_NE(text.find("3.9 s and 3.4 s"), std::string::npos) << text;
}

}  // namespace
