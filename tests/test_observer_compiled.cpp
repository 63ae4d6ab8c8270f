// Observation points of compiled graphs (Observer::record_compiled) as python/ampscope/_compile.py
// inserts them: recorded like dispatcher ops in their layer with the graph's dtypes; the
// compiled region's own ATen calls folded in; NaN/Inf origins carried through their deps; the
// float32 re-check of a point's fused region (its program of ATen calls) against torch's own
// float32 result.
#include <ATen/record_function.h>
#include <ampscope/hooks/layers.h>
#include <ampscope/hooks/session.h>
#include <ampscope/profiler/observer.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "recheck.h"

namespace {

using ampscope::detail::rerun_region_fp32;

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

/// torch's own answer: does `t` hold NaN/Inf?
bool torch_nonfinite(const at::Tensor& t) { return !torch::isfinite(t).all().item<bool>(); }

TEST(CompiledRegionRerun, RunsTheProgramInFloat32AsTorchDoes) {
  // log(relu(h)): -inf at h <= 0 in float32 as well (a model bug, not precision)
  auto h = torch::tensor({-1.0, 0.5, 2.0}).to(torch::kBFloat16);
  auto got = rerun_region_fp32("aten::relu.default t0\naten::log.default t1\nout t2", {h});
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, torch_nonfinite(torch::log(torch::relu(h.to(torch::kFloat)))));
  EXPECT_TRUE(*got);
  // exp(12) overflows float16 (65504) but not float32
  auto x = torch::full({4}, 12.0, torch::kHalf);
  ASSERT_TRUE(torch_nonfinite(torch::exp(x)));
  got = rerun_region_fp32("aten::exp.default t0\nout t1", {x});
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, torch_nonfinite(torch::exp(x.to(torch::kFloat))));
  EXPECT_FALSE(*got);
  EXPECT_EQ(x[0].item<float>(), 12.0f);  // the inputs are copies
}

TEST(CompiledRegionRerun, ALowPrecisionDtypeArgumentIsReadAsFloat32) {
  // the graph's own cast to float16 (5) before exp: in the re-run it stays float32 (graphs
  // cast with prims::convert_element_type, which Python registers; _to_copy is the same here)
  auto x = torch::full({4}, 12.0, torch::kFloat);
  const char* program = "aten::_to_copy.default t0 d5 n n n b0 n\naten::exp.default t1\nout t2";
  ASSERT_TRUE(torch_nonfinite(torch::exp(x.to(torch::kHalf))));
  auto got = rerun_region_fp32(program, {x});
  ASSERT_TRUE(got.has_value());
  EXPECT_FALSE(*got);
}

TEST(CompiledRegionRerun, ListsOptionalsScalarsAndTupleElements) {
  auto x = torch::tensor({{1.0, 2.0}, {3.0, 1e30}}).to(torch::kBFloat16);
  // sum over dim 1 with keepdim and no dtype; then var_mean's mean (element 1)
  auto got = rerun_region_fp32(
      "aten::sum.dim_IntList t0 [i1] b1 n\naten::var_mean.correction t1 [i0] n b0\n"
      "aten::mul.Scalar t2.1 finf\nout t3", {x});
  ASSERT_TRUE(got.has_value());
  auto f = x.to(torch::kFloat).sum({1}, true);
  EXPECT_EQ(*got, torch_nonfinite(std::get<1>(torch::var_mean(f, {0}, {}, false)) * INFINITY));
  got = rerun_region_fp32("aten::sum.dim_IntList t0 [i1] b1 n\nout t1", {x});
  ASSERT_TRUE(got.has_value());
  EXPECT_FALSE(*got);
  // a number where the schema has a Tensor (mul.Tensor(h, 8) in a graph): a wrapped number
  auto h = torch::full({4}, 2.0, torch::kHalf);
  ASSERT_TRUE(torch_nonfinite(torch::exp(h * 8)));
  got = rerun_region_fp32("aten::mul.Tensor t0 i8\naten::exp.default t1\nout t2", {h});
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, torch_nonfinite(torch::exp(h.to(torch::kFloat) * 8)));
}

TEST(CompiledRegionRerun, WhatItCannotRunIsNoAnswer) {
  auto x = torch::ones({4}, torch::kHalf);
  EXPECT_FALSE(rerun_region_fp32("", {x}).has_value());
  EXPECT_FALSE(rerun_region_fp32("aten::no_such_op.default t0\nout t1", {x}).has_value());
  EXPECT_FALSE(rerun_region_fp32("aten::exp.default t0 t0\nout t1", {x}).has_value());  // arity
  EXPECT_FALSE(rerun_region_fp32("aten::exp.default t7\nout t1", {x}).has_value());     // ref
  EXPECT_FALSE(rerun_region_fp32("aten::exp.default t0", {x}).has_value());              // no out
  // a random draw is another draw: no answer, and the generator is as it was
  auto before = at::globalContext().defaultGenerator(c10::DeviceType::CPU).get_state();
  EXPECT_FALSE(rerun_region_fp32("aten::rand_like.default t0 n n n n n\nout t1", {x}).has_value());
  auto after = at::globalContext().defaultGenerator(c10::DeviceType::CPU).get_state();
  EXPECT_TRUE(torch::equal(before, after));
}

TEST_F(ObserverCompiledTest, AnOriginWithARegionGetsItsFloat32Recheck) {
  Session session;
  session.start();
  auto x = torch::full({8, 8}, 12.0, torch::kHalf);
  {
    CompiledRegion region;
    auto y = torch::exp(x);  // inf in float16, finite in float32: a precision problem
    CompiledPoint p = point("blk.act", "aten::exp", /*module_output=*/true);
    p.region = "aten::exp.default t0\nout t1";
    Observer::record_compiled(p, y, {x});
  }
  session.stop();
  Report r = session.report();
  ASSERT_TRUE(r.first_nonfinite.has_value());
  EXPECT_EQ(r.first_nonfinite->layer, "blk.act");
  ASSERT_TRUE(r.first_nonfinite->fp32_also_nonfinite.has_value());
  EXPECT_FALSE(*r.first_nonfinite->fp32_also_nonfinite);

  Session bug;
  bug.start();
  auto h = torch::tensor({-1.0, 0.5}).to(torch::kHalf);
  {
    CompiledRegion region;
    auto y = torch::log(torch::relu(h));  // -inf in float32 too: the model's bug
    CompiledPoint p = point("blk.act", "aten::log", /*module_output=*/true);
    p.region = "aten::relu.default t0\naten::log.default t1\nout t2";
    Observer::record_compiled(p, y, {h});
  }
  bug.stop();
  r = bug.report();
  ASSERT_TRUE(r.first_nonfinite.has_value());
  ASSERT_TRUE(r.first_nonfinite->fp32_also_nonfinite.has_value());
  EXPECT_TRUE(*r.first_nonfinite->fp32_also_nonfinite);
}

}  // namespace
