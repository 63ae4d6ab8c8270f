// Observation points of compiled graphs (Observer::record_compiled) as python/ampscope/_compile.py
// inserts them: recorded like dispatcher ops in their layer with the graph's dtypes; the
// compiled region's own ATen calls folded in; NaN/Inf origins carried through their deps.
#include <ATen/record_function.h>
#include <ampscope/hooks/layers.h>
#include <ampscope/hooks/session.h>
#include <ampscope/profiler/observer.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

namespace {

using ampscope::CompiledPoint;
using ampscope::Observer;
using ampscope::Session;
using ampscope::reports::Report;

/// What AOTAutograd's autograd.Function records around a compiled forward.
struct CompiledRegion {
  at::RecordFunction rf{at::RecordScope::FUNCTION};
  CompiledRegion() {
    rf.before(std::string_view("CompiledFunction"), c10::ArrayRef<const c10::IValue>{});
  }
};

CompiledPoint point(const std::string& layer, const std::string& op, bool module_output = false) {
  CompiledPoint p;
  p.layer = ampscope::layer_for_name(layer, "Linear");
  p.op = op;
  p.input_dtype = static_cast<std::int8_t>(torch::kFloat);
  p.autocast = ampscope::AutocastClass::kLowerPrecision;
  p.module_output = module_output;
  return p;
}

class ObserverCompiledTest : public ::testing::Test {
 protected:
  void TearDown() override { ampscope::detach_all_modules(); }
};

TEST_F(ObserverCompiledTest, PointIsAnEntryOfItsLayerAndTheRegionsOwnCallsAreFolded) {
  Session session;
  session.start();
  auto a = torch::randn({64, 32}).to(torch::kBFloat16) * 3000;
  auto b = torch::randn({32, 16}).to(torch::kBFloat16) * 30;
  torch::Tensor y;
  {
    CompiledRegion region;
    y = torch::mm(a, b);  // inductor's extern kernel: part of the region, not an entry
    Observer::record_compiled(point("blk.fc", "aten::addmm"), y, {});
  }
  session.stop();
  Report r = session.report();
  const auto* fc = r.find_layer("blk.fc");
  ASSERT_NE(fc, nullptr);
  ASSERT_EQ(fc->ops.size(), 1u);
  const auto& op = fc->ops[0];
  EXPECT_EQ(op.op, "aten::addmm");
  EXPECT_EQ(op.input_dtype, "float32");
  EXPECT_EQ(op.compute_dtype, "bfloat16");
  EXPECT_EQ(op.output_dtype, "bfloat16");
  EXPECT_EQ(op.autocast, ampscope::AutocastClass::kLowerPrecision);
  EXPECT_EQ(op.calls, 1);
  EXPECT_EQ(op.stats.count, y.numel());
  EXPECT_DOUBLE_EQ(op.stats.absmax, y.abs().max().item<double>());  // oracle: torch
  auto ov = (y.to(torch::kHalf).isinf() & y.isfinite()).sum().item<int64_t>();
  EXPECT_EQ(op.stats.overflow_in(ampscope::Format::kFloat16), ov);
  for (const auto& l : r.layers)
    for (const auto& o : l.ops) EXPECT_NE(o.op, "aten::mm") << l.name;
}

TEST_F(ObserverCompiledTest, OriginIsTheFirstPointAndAModuleOutputMakesItHarmful) {
  Session session;
  session.start();
  auto x = torch::full({8, 8}, 60000.0, torch::kHalf);
  {
    CompiledRegion region;
    auto big = x * 4;  // overflows float16: the origin
    Observer::record_compiled(point("blk.wo", "aten::addmm"), big, {x});
    auto out = big + 1;  // carries it on, out of the block
    Observer::record_compiled(point("blk", "aten::add", /*module_output=*/true), out, {big});
  }
  session.stop();
  Report r = session.report();
  ASSERT_TRUE(r.first_nonfinite.has_value());
  EXPECT_EQ(r.first_nonfinite->layer, "blk.wo");
  EXPECT_EQ(r.first_nonfinite->op, "aten::addmm");
  EXPECT_TRUE(r.first_nonfinite->inputs_finite);
  EXPECT_EQ(r.first_nonfinite->kind, "inf");
}

}  // namespace
