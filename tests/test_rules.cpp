// The diagnosis rules beyond the first non-finite origin, on hand-made report models: shadow
// precision loss, float16 headroom, gradient underflow and loss scaling, loss-scale collapse,
// and the what-if table. Expected values are worked out by hand from the planted numbers.
#include <gtest/gtest.h>

#include <ampscope/reports/evidence.h>
#include <ampscope/reports/precision_map.h>
#include <ampscope/reports/recommend.h>
#include <ampscope/reports/report.h>
#include <ampscope/reports/report_json.h>
#include <ampscope/reports/summary.h>
#include <ampscope/reports/what_if.h>

#include <cmath>
#include <string>
#include <vector>

using namespace ampscope;
using namespace ampscope::reports;

namespace {

constexpr int kF16 = static_cast<int>(Format::kFloat16);
constexpr int kE4M3 = static_cast<int>(Format::kFloat8E4M3FN);

OpRecord op(const std::string& name, ampscope::Phase phase, const std::string& compute) {
  OpRecord o;
  o.op = name;
  o.phase = phase;
  o.calls = 10;
  o.input_dtype = "float32";
  o.compute_dtype = compute;
  o.output_dtype = compute;
  o.autocast = compute == "float32" ? ampscope::AutocastClass::kFp32 : ampscope::AutocastClass::kLowerPrecision;
  o.last_step = 9;
  o.stats.count = 1000;
  o.stats.absmax = 100.0;
  return o;
}

Report run(const std::string& autocast, std::vector<Layer> layers) {
  Report r;
  r.run.autocast_dtype = autocast;
  r.run.steps = 10;
  r.layers = std::move(layers);
  return r;
}

Layer layer(const std::string& name, std::vector<OpRecord> ops) {
  Layer l;
  l.name = name;
  l.ops = std::move(ops);
  return l;
}

/// absmax series: 2^(e0 + growth * step) for steps 0..n-1.
std::vector<std::pair<std::int64_t, double>> series(int n, double e0, double growth) {
  std::vector<std::pair<std::int64_t, double>> s;
  for (int i = 0; i < n; ++i) s.emplace_back(i, std::exp2(e0 + growth * i));
  return s;
}

/// A float32 gradient block: `normal` values at exponent -10, `tiny` at exponent `tiny_exp`
/// (counted as underflowing/subnormal in float16 as their exponent says).
Stats fp32_grads(std::int64_t normal, std::int64_t tiny, int tiny_exp) {
  Stats s;
  s.count = normal + tiny;
  s.absmax = std::exp2(-9.5);
  s.exp_hist.add(-10, normal);
  s.exp_hist.add(tiny_exp, tiny);
  if (tiny_exp < -25) s.underflow[kF16] = tiny;  // below half the smallest subnormal
  else if (tiny_exp < -14) s.subnormal[kF16] = tiny;
  return s;
}

}  // namespace

// --- precision_loss (--shadow)

TEST(PrecisionLoss, LargeShadowErrorPinsMedium) {
  OpRecord o = op("aten::matmul", ampscope::Phase::kForward, "float16");
  o.shadow.checks = 3;
  o.shadow.max_rel_err = 0.2;
  o.shadow.min_cosine = 0.995;
  o.shadow.worst_step = 7;
  auto recs = recommend(run("float16", {layer("attn.score", {o})}));
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].layer, "attn.score");
  EXPECT_EQ(recs[0].action, Action::kPinFp32);
  EXPECT_EQ(recs[0].severity, Severity::kMedium);
  EXPECT_EQ(recs[0].reasons, std::vector<std::string>{"precision_loss"});
  const auto& ev = recs[0].evidence["shadow"][0];
  EXPECT_DOUBLE_EQ(ev["max_rel_err"].get<double>(), 0.2);
  EXPECT_EQ(ev["worst_step"], 7);
  EXPECT_EQ(ev["checks"], 3);
}

TEST(PrecisionLoss, LowCosineAloneIsEnough) {
  OpRecord o = op("aten::matmul", ampscope::Phase::kForward, "bfloat16");
  o.shadow.checks = 1;
  o.shadow.max_rel_err = 0.01;
  o.shadow.min_cosine = 0.9;
  auto recs = recommend(run("bfloat16", {layer("l", {o})}));
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].reasons[0], "precision_loss");
}

TEST(PrecisionLoss, OrdinaryRoundingErrorIsNotReported) {
  OpRecord o = op("aten::matmul", ampscope::Phase::kForward, "float16");
  o.shadow.checks = 24;
  o.shadow.max_rel_err = 4e-4;   // what float16 matmuls measure in the demo
  o.shadow.min_cosine = 0.99999;
  EXPECT_TRUE(recommend(run("float16", {layer("l", {o})})).empty());
}

// --- headroom_<format> (watch)

TEST(Headroom, CloseToTheMaxIsMediumWatch) {
  OpRecord o = op("aten::linear", ampscope::Phase::kForward, "float16");
  o.absmax_by_step = {{0, 30000.0}, {5, 40000.0}, {9, 35000.0}};
  auto recs = recommend(run("float16", {layer("ffn.wo", {o})}));
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].action, Action::kWatch);
  EXPECT_EQ(recs[0].severity, Severity::kMedium);
  EXPECT_EQ(recs[0].reasons, std::vector<std::string>{"headroom_float16"});
  const auto& ev = recs[0].evidence["headroom"][0];
  EXPECT_DOUBLE_EQ(ev["absmax"].get<double>(), 40000.0);
  EXPECT_NEAR(ev["headroom_binades"].get<double>(), std::log2(65504.0 / 40000.0), 1e-12);
  EXPECT_TRUE(precision_map_from(recs).pin_fp32.empty());  // a warning, not a pin
}

TEST(Headroom, ExactlyTheMaxIsAFillNotAnActivation) {
  // finfo(float16).min written as a mask, or a saturating cast: sits at 65504 every step
  OpRecord mask = op("prims::convert_element_type", ampscope::Phase::kForward, "float16");
  mask.absmax_by_step = {{0, 65504.0}, {1, 65504.0}, {2, 65504.0}};
  EXPECT_TRUE(recommend(run("float16", {layer("attn", {mask})})).empty());
  mask.absmax_by_step = {{0, 65472.0}, {1, 65472.0}, {2, 65472.0}};  // one float16 tick below
  EXPECT_EQ(recommend(run("float16", {layer("attn", {mask})})).size(), 1u);
}

TEST(Headroom, GrowingTowardTheMaxIsLowWatchWithProjection) {
  OpRecord o = op("aten::linear", ampscope::Phase::kForward, "float16");
  o.absmax_by_step = series(10, 3.0, 1.0);  // 8 .. 4096, doubling every step
  auto recs = recommend(run("float16", {layer("ffn.wo", {o})}));
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].severity, Severity::kLow);
  const auto& ev = recs[0].evidence["headroom"][0];
  EXPECT_NEAR(ev["growth_binades_per_step"].get<double>(), 1.0, 1e-9);
  // log2(65504 / 4096) = 3.9996 more doublings after step 9: overflow at step 13.
  EXPECT_EQ(ev["projected_overflow_step"], 13);
}

TEST(Headroom, FlatOrSlowOrFarAwayIsNothing) {
  OpRecord flat = op("aten::linear", ampscope::Phase::kForward, "float16");
  flat.absmax_by_step = series(10, 10.0, 0.0);
  OpRecord slow = op("aten::matmul", ampscope::Phase::kForward, "float16");
  slow.absmax_by_step = series(10, 10.0, 0.05);  // 2 binades from the max, 0.05 per step
  OpRecord far = op("aten::bmm", ampscope::Phase::kForward, "float16");
  far.absmax_by_step = series(10, -20.0, 0.5);   // growing, but 30 binades away
  EXPECT_TRUE(recommend(run("float16", {layer("l", {flat, slow, far})})).empty());
}

TEST(Headroom, NotForFp32OpsOrBFloat16Runs) {
  OpRecord o = op("aten::linear", ampscope::Phase::kForward, "float32");
  o.absmax_by_step = {{0, 60000.0}};
  EXPECT_TRUE(recommend(run("float16", {layer("l", {o})})).empty());
  OpRecord b = op("aten::linear", ampscope::Phase::kForward, "bfloat16");
  b.absmax_by_step = {{0, 60000.0}};
  EXPECT_TRUE(recommend(run("bfloat16", {layer("l", {b})})).empty());
}

TEST(Headroom, APinnedLayerGetsNoWatchOnTop) {
  OpRecord o = op("aten::linear", ampscope::Phase::kForward, "float16");
  o.absmax_by_step = {{0, 60000.0}};
  OpRecord bad = op("aten::matmul", ampscope::Phase::kForward, "float16");
  bad.nonfinite_from_finite = bad.harmful_nonfinite = 1;
  bad.first_nonfinite_step = 3;
  bad.stats.posinf = 4;
  auto recs = recommend(run("float16", {layer("ffn.wo", {o, bad})}));
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].action, Action::kPinFp32);
}

// --- grad_underflow_<format> (loss_scaling)

TEST(GradUnderflow, ExactCountsOnFp32GradientsRecommendLossScaling) {
  OpRecord g = op("AddmmBackward0", ampscope::Phase::kBackward, "float32");
  g.stats = fp32_grads(950, 50, -27);  // 5% of the values below float16's range
  Layer l = layer("head", {op("aten::linear", ampscope::Phase::kForward, "float16"), g});
  auto recs = recommend(run("float16", {l}));
  ASSERT_EQ(recs.size(), 1u);
  const Recommendation& r = recs[0];
  EXPECT_EQ(r.layer, "");
  EXPECT_EQ(r.action, Action::kLossScaling);
  EXPECT_EQ(r.severity, Severity::kHigh);
  EXPECT_EQ(r.reasons, std::vector<std::string>{"grad_underflow_float16"});
  const auto& ev = r.evidence["gradients"];
  EXPECT_DOUBLE_EQ(ev["share_lost"].get<double>(), 0.05);
  EXPECT_EQ(ev["underflow"], 50);
  EXPECT_EQ(ev["grad_exp_low"], -27);
  EXPECT_EQ(ev["grad_exp_high"], -10);
  // The largest power of two keeping 2^-9.5 a binade below 65504 (< 2^15): 2^(14 + 10) = 2^24,
  // which also lifts 2^-27 past float16's smallest normal (2^13 would be just enough).
  EXPECT_DOUBLE_EQ(ev["suggested_scale"].get<double>(), std::exp2(24));
  EXPECT_DOUBLE_EQ(ev["tail_scale"].get<double>(), 8192.0);
  EXPECT_FALSE(ev["range_too_wide"].get<bool>());
  EXPECT_TRUE(ev["loss_scale_in_use"].is_null());
  EXPECT_EQ(ev["worst_layers"][0]["layer"], "head");
  EXPECT_TRUE(precision_map_from(recs).pin_fp32.empty());
}

TEST(GradUnderflow, ScaleIsCappedByTheLargestGradient) {
  OpRecord g = op("MulBackward0", ampscope::Phase::kBackward, "float32");
  g.stats = fp32_grads(900, 100, -30);
  g.stats.absmax = 1000.0;  // exponent 9: at most 2^(15 - 1 - 9) = 32 keeps a binade spare
  g.stats.exp_hist.add(9, 1);
  g.stats.count += 1;
  auto recs = recommend(run("float16", {layer("loss", {g})}));
  ASSERT_EQ(recs.size(), 1u);
  const auto& ev = recs[0].evidence["gradients"];
  EXPECT_DOUBLE_EQ(ev["suggested_scale"].get<double>(), 32.0);
  EXPECT_TRUE(ev["range_too_wide"].get<bool>());
}

TEST(GradUnderflow, Float16GradientsCountTheirSubnormalMass) {
  OpRecord g = op("MmBackward0", ampscope::Phase::kBackward, "float16");
  g.input_dtype = "float16";
  g.stats.count = 1200;
  g.stats.zeros = 200;
  g.stats.exp_hist.add(-5, 900);
  g.stats.exp_hist.add(-20, 100);  // float16 subnormals
  g.stats.absmax = std::exp2(-4.5);
  auto recs = recommend(run("float16", {layer("ffn.wi", {g})}));
  ASSERT_EQ(recs.size(), 1u);
  const auto& ev = recs[0].evidence["gradients"];
  EXPECT_DOUBLE_EQ(ev["share_lost"].get<double>(), 0.1);
  EXPECT_EQ(ev["subnormal"], 100);
  EXPECT_EQ(ev["zeros_in_float16_grads"], 200);
  // Capped by the float16 gradients' own largest value, exponent -5: 2^(14 + 5).
  EXPECT_DOUBLE_EQ(ev["suggested_scale"].get<double>(), std::exp2(19));
}

TEST(GradUnderflow, ParamGradsCountAndExistingScaleIsMultiplied) {
  Layer l = layer("head", {});
  ParamRecord p;
  p.name = "head.weight";
  p.dtype = "float32";
  p.grad = fp32_grads(950, 50, -27);
  l.params.push_back(p);
  Report r = run("float16", {l});
  r.loss_scale = {{0, 1024.0, false}, {1, 1024.0, false}};
  auto recs = recommend(r);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_DOUBLE_EQ(recs[0].evidence["gradients"]["suggested_scale"].get<double>(), 1024.0 * std::exp2(24));
}

TEST(GradUnderflow, AScalerAlreadyAtTheLargestSafeScaleIsInformationOnly) {
  // Scaled float16 gradients whose largest value is a binade below the max: no larger scale
  // is safe, so what still underflows is the range's, not the scaler's doing.
  OpRecord g = op("MmBackward0", ampscope::Phase::kBackward, "float16");
  g.input_dtype = "float16";
  g.stats.count = 1000;
  g.stats.exp_hist.add(14, 10);   // 2^14..2^15: one binade below float16's max
  g.stats.exp_hist.add(-2, 840);
  g.stats.exp_hist.add(-20, 150);  // float16 subnormals
  g.stats.absmax = std::exp2(14.5);
  Report r = run("float16", {layer("ffn.wi", {g})});
  r.loss_scale = {{0, 65536.0, false}, {1, 65536.0, false}};
  auto recs = recommend(r);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].action, Action::kLossScaling);
  EXPECT_EQ(recs[0].severity, Severity::kLow);
  const auto& ev = recs[0].evidence["gradients"];
  EXPECT_DOUBLE_EQ(ev["suggested_scale"].get<double>(), 65536.0);
  EXPECT_DOUBLE_EQ(ev["loss_scale_in_use"].get<double>(), 65536.0);
  EXPECT_NE(key_evidence(recs[0]).find("already the largest safe one"), std::string::npos)
      << key_evidence(recs[0]);
  // Gradients whose largest value is 10 binades lower: a larger scale is safe, a task.
  r.layers[0].ops[0].stats.exp_hist = {};
  r.layers[0].ops[0].stats.exp_hist.add(4, 10);
  r.layers[0].ops[0].stats.exp_hist.add(-2, 840);
  r.layers[0].ops[0].stats.exp_hist.add(-20, 150);
  r.layers[0].ops[0].stats.absmax = std::exp2(4.5);
  recs = recommend(r);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].severity, Severity::kHigh);
  EXPECT_DOUBLE_EQ(recs[0].evidence["gradients"]["suggested_scale"].get<double>(), 65536.0 * 1024);
}

TEST(GradUnderflow, SubnormalsAloneInWiderGradientsAreMedium) {
  OpRecord g = op("AddmmBackward0", ampscope::Phase::kBackward, "float32");
  g.stats = fp32_grads(950, 50, -20);  // 5% float16 subnormals, none becomes 0
  auto recs = recommend(run("float16", {layer("head", {g})}));
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].action, Action::kLossScaling);
  EXPECT_EQ(recs[0].severity, Severity::kMedium);
  EXPECT_EQ(recs[0].evidence["gradients"]["underflow"], 0);
  EXPECT_EQ(recs[0].evidence["gradients"]["subnormal"], 50);
}

TEST(GradUnderflow, BelowThresholdOrBFloat16RunIsNothing) {
  OpRecord g = op("AddmmBackward0", ampscope::Phase::kBackward, "float32");
  g.stats = fp32_grads(995, 5, -27);  // 0.5%
  EXPECT_TRUE(recommend(run("float16", {layer("l", {g})})).empty());
  OpRecord h = op("AddmmBackward0", ampscope::Phase::kBackward, "float32");
  h.stats = fp32_grads(500, 500, -27);  // float16 counts, but the run is bfloat16
  EXPECT_TRUE(recommend(run("bfloat16", {layer("l", {h})})).empty());
  EXPECT_TRUE(recommend(run("", {layer("l", {h})})).empty());
}

// --- loss_scale_collapse

TEST(LossScale, CollapseBelowOneRecommendsLossScaling) {
  Report r = run("float16", {});
  double s = 65536.0;
  for (int i = 0; i < 20; ++i, s /= 2) r.loss_scale.push_back({i, s, true});
  auto recs = recommend(r);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].action, Action::kLossScaling);
  EXPECT_EQ(recs[0].reasons, std::vector<std::string>{"loss_scale_collapse"});
  const auto& ev = recs[0].evidence["loss_scale"];
  EXPECT_EQ(ev["skipped_steps"], 20);
  EXPECT_EQ(ev["first_found_inf_step"], 0);
  EXPECT_DOUBLE_EQ(ev["final_scale"].get<double>(), 65536.0 / std::exp2(19));
}

TEST(LossScale, TrailingRunOfSkippedStepsIsCollapse) {
  Report r = run("float16", {});
  for (int i = 0; i < 10; ++i) r.loss_scale.push_back({i, 4096.0, i >= 5});
  auto recs = recommend(r);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].evidence["loss_scale"]["trailing_found_inf"], 5);
}

TEST(LossScale, BackwardOverflowIsNeverAPin) {
  OpRecord g = op("aten::sum", ampscope::Phase::kBackward, "float16");  // e.g. a broadcast bias gradient
  g.nonfinite_from_finite = 2;
  g.first_nonfinite_step = 0;
  g.stats.posinf = 3;
  Report r = run("float16", {layer("fc", {g})});
  EXPECT_TRUE(recommend(r).empty());
}

NonFiniteEvent backward_origin(const std::string& dtype) {
  NonFiniteEvent e;
  e.step = 2;
  e.phase = ampscope::Phase::kBackward;
  e.layer = "fc2";
  e.op = "AddmmBackward0";
  e.kind = "inf";
  e.compute_dtype = dtype;
  return e;
}

TEST(LossScale, BackwardOriginInFloat16AsksForLossScalingNotPins) {
  Report r = run("float16", {layer("fc2", {op("AddmmBackward0", ampscope::Phase::kBackward, "float16")})});
  r.first_nonfinite = backward_origin("float16");
  auto recs = recommend(r);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].action, Action::kLossScaling);
  EXPECT_EQ(recs[0].severity, Severity::kCritical);
  EXPECT_EQ(recs[0].reasons, std::vector<std::string>{"grad_overflow_float16"});
  EXPECT_EQ(recs[0].layer, "");  // the root: a loss scale acts on the whole model
  EXPECT_EQ(recs[0].evidence["first_nonfinite"]["op"], "AddmmBackward0");
  // Under a GradScaler the overflow is its business.
  r.loss_scale = {{0, 65536.0, true}, {1, 32768.0, false}};
  EXPECT_TRUE(recommend(r).empty());
}

TEST(LossScale, BackwardOriginInFloat32IsAModelBug) {
  Report r = run("float16", {});
  r.first_nonfinite = backward_origin("float32");
  auto recs = recommend(r);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].action, Action::kFixModel);
  EXPECT_EQ(recs[0].layer, "fc2");
}

// GPT-2's GELU in float16: pow(x, 3) overflows in forward and tanh turns the inf into 1 (benign
// there); its backward's 3 * x^2 * grad is then inf * 0 = NaN. Not a matter of the loss scale.
TEST(LossScale, BackwardOriginAfterTheLayersForwardOverflowIsAPin) {
  OpRecord pow = op("aten::pow", ampscope::Phase::kForward, "float16");
  pow.nonfinite_from_finite = 1;
  pow.benign_nonfinite = 1;
  pow.first_nonfinite_step = 2;
  pow.stats.posinf = 12;
  Report r = run("float16", {layer("fc2", {pow, op("AddmmBackward0", ampscope::Phase::kBackward, "float16")})});
  r.first_nonfinite = backward_origin("float16");
  r.first_nonfinite->forward_nonfinite = true;  // the observer matched the node to its forward call
  auto recs = recommend(r);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].layer, "fc2");
  EXPECT_EQ(recs[0].action, Action::kPinFp32);
  EXPECT_EQ(recs[0].severity, Severity::kCritical);
  EXPECT_EQ(recs[0].reasons, std::vector<std::string>{"backward_of_forward_nonfinite"});
  EXPECT_EQ(recs[0].evidence["ops"][0]["op"], "aten::pow");
  EXPECT_EQ(precision_map_from(recs).pin_fp32, std::vector<std::string>{"fc2"});
  // Without that match a forward creation of the same layer explains nothing: the node may have
  // overflowed on its own (an attention mask's -inf is a forward creation too).
  r.first_nonfinite->forward_nonfinite = false;
  EXPECT_EQ(recommend(r).at(0).action, Action::kLossScaling);
  // A forward creation that is non-finite in float32 too is a model bug.
  r.first_nonfinite->forward_nonfinite = true;
  r.layers[0].ops[0].fp32_nonfinite = 1;
  EXPECT_EQ(recommend(r).at(0).action, Action::kFixModel);
  // The flag survives the report's JSON.
  Report back = report_from_json(report_to_json(r));
  EXPECT_TRUE(back.first_nonfinite->forward_nonfinite);
}

TEST(LossScale, ScalerCaughtGradientsFromTheForwardsOverflowAreStillAPin) {
  // The same GELU under a GradScaler: it skips the step, but no scale makes 0 * inf finite, so
  // it would skip every step. Caught gradients of any other making stay information.
  OpRecord pow = op("aten::pow", ampscope::Phase::kForward, "float16");
  pow.nonfinite_from_finite = 3;
  pow.benign_nonfinite = 3;
  pow.first_nonfinite_step = 0;
  Report r = run("float16", {layer("fc2", {pow})});
  r.loss_scale = {{0, 65536.0, true}, {1, 32768.0, true}, {2, 16384.0, true}};
  r.scaler_caught = ScalerCaught{3, backward_origin("float16")};
  EXPECT_TRUE(recommend(r).empty());
  r.scaler_caught->first.forward_nonfinite = true;
  auto recs = recommend(r);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].layer, "fc2");
  EXPECT_EQ(recs[0].action, Action::kPinFp32);
  EXPECT_EQ(recs[0].severity, Severity::kHigh);
  EXPECT_EQ(recs[0].reasons, std::vector<std::string>{"backward_of_forward_nonfinite"});
}

TEST(Origin, AnOriginWhoseMakerWasNotRecordedClaimsNoCause) {
  // The watch saw a float32 parameter gradient go non-finite on an unsampled step.
  Report r = run("float16", {});
  r.first_nonfinite = backward_origin("float32");
  r.first_nonfinite->inputs_finite = false;
  auto recs = recommend(r);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].action, Action::kWatch);
  EXPECT_EQ(recs[0].severity, Severity::kCritical);
  EXPECT_EQ(recs[0].reasons, std::vector<std::string>{"nonfinite_origin_unobserved"});
  EXPECT_TRUE(precision_map_from(recs).pin_fp32.empty());
  // A backward origin from finite gradients in a run that recorded only some ops: the forward
  // NaN/Inf its node met may have come from an op left out.
  r.first_nonfinite->inputs_finite = true;
  EXPECT_EQ(recommend(r).at(0).action, Action::kFixModel);
  r.run.sampling.include_ops = {"aten::*mm*"};
  EXPECT_EQ(recommend(r).at(0).reasons, std::vector<std::string>{"nonfinite_origin_unobserved"});
  // So is a forward op handed NaN/Inf there; without filters that is the data's.
  r.first_nonfinite->phase = ampscope::Phase::kForward;
  r.first_nonfinite->op = "aten::add";
  r.first_nonfinite->inputs_finite = false;
  EXPECT_EQ(recommend(r).at(0).reasons, std::vector<std::string>{"nonfinite_origin_unobserved"});
  r.run.sampling.include_ops.clear();
  EXPECT_EQ(recommend(r).at(0).reasons, std::vector<std::string>{"nonfinite_input"});
}

TEST(LossScale, OrdinaryBackoffIsNothing) {
  Report r = run("float16", {});
  // The usual start: a few overflows halve 2^16, then clean steps.
  r.loss_scale = {{0, 32768.0, true}, {1, 16384.0, true}, {2, 16384.0, false}, {3, 16384.0, false}};
  EXPECT_TRUE(recommend(r).empty());
  // Backing off from a too-high initial scale, skips from the first update on: not a collapse.
  r.loss_scale.clear();
  double s = std::exp2(20);
  for (int i = 0; i < 6; ++i, s /= 2) r.loss_scale.push_back({i, s, true});
  EXPECT_TRUE(recommend(r).empty());
  // ... but not one that never ends: kNeverCleanRun updates and no clean one, training stalled.
  for (int i = 6; i < kNeverCleanRun; ++i, s /= 2) r.loss_scale.push_back({i, s, true});
  auto recs = recommend(r);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].reasons, std::vector<std::string>{"loss_scale_collapse"});
}

// --- fp32 comparison in the origin's evidence

TEST(Origin, Fp32ComparisonIsEvidence) {
  Report r = run("float16", {layer("ffn.wo", {op("aten::linear", ampscope::Phase::kForward, "float16")})});
  NonFiniteEvent e;
  e.step = 3;
  e.phase = ampscope::Phase::kForward;
  e.layer = "ffn.wo";
  e.op = "aten::linear";
  e.kind = "inf";
  e.compute_dtype = "float16";
  e.fp32_also_nonfinite = false;
  Fp32Check c;
  c.compared = 90;
  c.lowp_only_nonfinite = 10;
  c.rel_err = 3e-4;
  c.max_ulp = 1.5;
  c.cosine = 0.99999;
  c.fp32_absmax = 99000.0;
  e.fp32_check = c;
  r.first_nonfinite = e;
  auto recs = recommend(r);
  ASSERT_EQ(recs.size(), 1u);
  const auto& fc = recs[0].evidence["first_nonfinite"]["fp32_check"];
  EXPECT_DOUBLE_EQ(fc["fp32_absmax"].get<double>(), 99000.0);
  EXPECT_EQ(fc["lowp_only_nonfinite"], 10);
  // And the report JSON keeps it.
  Report back = report_from_json(report_to_json(r));
  ASSERT_TRUE(back.first_nonfinite->fp32_check);
  EXPECT_DOUBLE_EQ(back.first_nonfinite->fp32_check->rel_err, 3e-4);
  EXPECT_EQ(back.first_nonfinite->fp32_check->compared, 90);
}

TEST(Shadow, SurvivesJson) {
  OpRecord o = op("aten::matmul", ampscope::Phase::kForward, "float16");
  o.shadow.checks = 2;
  o.shadow.max_rel_err = 1e-3;
  o.shadow.max_ulp = 4;
  o.shadow.min_cosine = 0.9999;
  o.shadow.worst_step = 1;
  Report r = run("float16", {layer("l", {o})});
  r.run.shadow = true;
  r.run.stopped = "nonfinite";
  Report back = report_from_json(report_to_json(r));
  EXPECT_TRUE(back.run.shadow);
  EXPECT_EQ(back.run.stopped, "nonfinite");
  const ShadowSummary& s = back.layers[0].ops[0].shadow;
  EXPECT_EQ(s.checks, 2);
  EXPECT_DOUBLE_EQ(s.max_ulp, 4);
  EXPECT_EQ(s.worst_step, 1);
}

// --- what-if

TEST(WhatIf, Float32OutputsAreCheckedForEveryFormat) {
  OpRecord o = op("aten::add", ampscope::Phase::kForward, "float32");
  o.stats.count = 100;
  o.stats.zeros = 10;
  o.stats.overflow[kF16] = 3;
  o.stats.overflow[kE4M3] = 40;
  o.stats.absmax = 1e5;
  Report r = run("bfloat16", {layer("ffn.wo", {o})});
  auto rows = what_if(r);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].activations[0].values, 90);
  EXPECT_EQ(rows[0].activations[0].overflow, 3);
  EXPECT_EQ(what_if_verdict(rows[0], 0), "overflow");
  EXPECT_EQ(what_if_verdict(rows[0], 1), "overflow");
  EXPECT_EQ(what_if_verdict(rows[0], 2), "safe");
  // A derived section of the JSON report.
  auto j = report_to_json(r);
  EXPECT_EQ(j["what_if"]["layers"][0]["float16"]["verdict"], "overflow");
  EXPECT_EQ(j["what_if"]["layers"][0]["float16"]["activations"]["overflow"], 3);
}

TEST(WhatIf, UnderflowShareAndGradients) {
  OpRecord g = op("MmBackward0", ampscope::Phase::kBackward, "float32");
  g.stats = fp32_grads(1999, 1, -27);  // 0.05% < kWhatIfUnderflowShare
  Layer l = layer("l", {g});
  ParamRecord p;
  p.name = "l.weight";
  p.dtype = "float32";
  p.grad = fp32_grads(1000, 0, -10);
  l.params.push_back(p);
  auto rows = what_if(run("", {l}));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].gradients[0].values, 3000);
  EXPECT_EQ(rows[0].gradients[0].underflow, 1);
  EXPECT_EQ(what_if_verdict(rows[0], 0), "safe");
  g.stats = fp32_grads(990, 10, -27);  // 1%
  rows = what_if(run("", {layer("l", {g})}));
  EXPECT_EQ(what_if_verdict(rows[0], 0), "underflow");
}

TEST(WhatIf, TensorsAlreadyInTheFormatAreNotCounted) {
  OpRecord h = op("aten::linear", ampscope::Phase::kForward, "float16");  // float16 outputs: nothing to learn for fp16
  h.stats.overflow[kE4M3] = 5;
  auto rows = what_if(run("float16", {layer("l", {h})}));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].activations[0].values, 0);
  EXPECT_EQ(what_if_verdict(rows[0], 0), "");
  EXPECT_EQ(what_if_verdict(rows[0], 1), "overflow");
  OpRecord i = op("aten::argmax", ampscope::Phase::kForward, "int64");
  EXPECT_TRUE(what_if(run("float16", {layer("k", {i})})).empty());
}

// --- the summary shows each finding's key evidence

TEST(Summary, NewFindingsShowTheirEvidence) {
  OpRecord g = op("AddmmBackward0", ampscope::Phase::kBackward, "float32");
  g.stats = fp32_grads(950, 50, -27);
  OpRecord h = op("aten::linear", ampscope::Phase::kForward, "float16");
  h.absmax_by_step = series(10, 3.0, 1.0);
  Report r = run("float16", {layer("head", {g}), layer("ffn.wo", {h})});
  r.recommendations = recommend(r);
  const std::string s = render_summary(r);
  EXPECT_NE(s.find("5% of gradient values underflow/subnormal in float16, suggested loss scale"),
            std::string::npos) << s;
  EXPECT_NE(s.find("x2/step, overflow ~step 13"), std::string::npos) << s;
}

// --- silent precision loss: cast_underflow / cast_overflow, degenerate_output, stale_updates
namespace {

/// A float32 source of `normal` values in binade `normal_exp` and `tiny` values in binade -30
/// (below float16's rounding-to-zero threshold 2^-25), cast to float16 `casts` times.
CastLossRecord fp16_cast(std::int64_t normal, int normal_exp, std::int64_t tiny, int arg_index) {
  CastLossRecord c;
  c.argument = arg_index < 0 ? "self" : "weight";
  c.arg_index = arg_index;
  c.source_dtype = "float32";
  c.target_dtype = "float16";
  c.casts = 1;
  c.values = c.nonzero = normal + tiny;
  c.underflow = tiny;
  // squares at the top of each binade, as the observer bounds them
  c.source_sq = static_cast<double>(normal) * std::exp2(2 * (normal_exp + 1)) +
                static_cast<double>(tiny) * std::exp2(2 * -29);
  c.lost_sq = static_cast<double>(tiny) * std::exp2(2 * -29);
  c.worst_rel_l2 = c.lost_rel_l2();
  c.worst_step = c.first_step = tiny > 0 ? 0 : -1;
  return c;
}

}  // namespace

TEST(CastLoss, AWeightThatVanishesIsAHighPin) {
  OpRecord o = op("aten::conv2d", ampscope::Phase::kForward, "float16");
  o.cast_loss = {fp16_cast(0, 0, 400, 1)};
  auto recs = recommend(run("float16", {layer("conv", {o})}));
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].action, Action::kPinFp32);
  EXPECT_EQ(recs[0].severity, Severity::kHigh);
  EXPECT_EQ(recs[0].reasons, std::vector<std::string>{"cast_underflow_float16"});
  const auto& ev = recs[0].evidence["cast_loss"][0];
  EXPECT_EQ(ev["argument"], "weight");
  EXPECT_EQ(ev["cast"], "autocast");
  EXPECT_DOUBLE_EQ(ev["share_lost"].get<double>(), 1.0);
}

TEST(CastLoss, ABiasIsMeasuredAgainstTheOutputItIsAddedTo) {
  // A zero-initialised bias a few SGD steps in: all 64 values near 2^-30, lost to float16. With
  // outputs of mean square 1 (op() gives count 1000), the bias changes nothing there: no
  // finding. Against outputs as tiny as the bias itself it is the whole signal: a pin.
  OpRecord o = op("aten::linear", ampscope::Phase::kForward, "float16");
  CastLossRecord bias = fp16_cast(0, 0, 64, 2);
  bias.argument = "bias";
  o.cast_loss = {bias};
  o.stats.sum_sq = 1000.0;
  EXPECT_TRUE(recommend(run("float16", {layer("fc", {o})})).empty());
  o.stats.sum_sq = 1000.0 * std::exp2(-58);
  auto recs = recommend(run("float16", {layer("fc", {o})}));
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].reasons, std::vector<std::string>{"cast_underflow_float16"});
  // A weight's loss is still measured against the weight.
  o.stats.sum_sq = 1000.0;
  o.cast_loss[0].argument = "weight";
  EXPECT_EQ(recommend(run("float16", {layer("fc", {o})})).size(), 1u);
}

TEST(CastLoss, TinyValuesBesideLargeOnesAreNoLoss) {
  // softmax tails: 40% of the values underflow, but they carry ~2^-21 of the norm
  OpRecord o = op("aten::matmul", ampscope::Phase::kForward, "float16");
  o.cast_loss = {fp16_cast(600, -8, 400, 0)};
  EXPECT_LT(o.cast_loss[0].lost_rel_l2(), 1e-5);
  EXPECT_TRUE(recommend(run("float16", {layer("attn", {o})})).empty());
}

TEST(CastLoss, MaterialShareBoundsTheFinding) {
  // a third of the values, 0.58 of the norm: high; 0.5% of the values: nothing
  OpRecord o = op("aten::linear", ampscope::Phase::kForward, "float16");
  o.cast_loss = {fp16_cast(20, -30, 10, 0)};  // normal_exp -30: the "normal" ones are as tiny
  o.cast_loss[0].underflow = 10;
  o.cast_loss[0].lost_sq = 10 * std::exp2(-58);
  o.cast_loss[0].source_sq = 30 * std::exp2(-58);
  o.cast_loss[0].worst_rel_l2 = o.cast_loss[0].lost_rel_l2();  // sqrt(1/3) = 0.577
  auto recs = recommend(run("float16", {layer("l", {o})}));
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].severity, Severity::kHigh);  // 0.577 of the norm
  o.cast_loss = {fp16_cast(0, 0, 0, 0)};
  o.cast_loss[0].values = o.cast_loss[0].nonzero = 2000;
  o.cast_loss[0].underflow = 10;  // 0.5% of the values
  o.cast_loss[0].source_sq = 1.0;
  o.cast_loss[0].lost_sq = 0.5;
  EXPECT_TRUE(recommend(run("float16", {layer("l", {o})})).empty());
}

TEST(CastLoss, TheModelsOwnCastIsFixModelAndOverflowIsHigh) {
  OpRecord cast = op("aten::to", ampscope::Phase::kForward, "float16");
  cast.cast_loss = {fp16_cast(0, 0, 50, -1)};
  OpRecord lin = op("aten::linear", ampscope::Phase::kForward, "float16");
  lin.cast_loss = {fp16_cast(100, 0, 0, 0)};
  lin.cast_loss[0].overflow = 1;
  auto recs = recommend(run("float16", {layer("a", {cast}), layer("b", {lin})}));
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[0].layer, "a");
  EXPECT_EQ(recs[0].action, Action::kFixModel);
  EXPECT_EQ(recs[1].layer, "b");
  EXPECT_EQ(recs[1].action, Action::kPinFp32);
  EXPECT_EQ(recs[1].severity, Severity::kHigh);
  EXPECT_EQ(recs[1].reasons, std::vector<std::string>{"cast_overflow_float16"});
}

TEST(CastLoss, BackwardCastsAreLeftToLossScaling) {
  OpRecord o = op("MmBackward0", ampscope::Phase::kBackward, "float16");
  o.cast_loss = {fp16_cast(0, 0, 400, 0)};
  EXPECT_TRUE(recommend(run("float16", {layer("l", {o})})).empty());
}

TEST(DegenerateOutput, AZeroOutputWhoseFloat32RunIsNotIsAHighPin) {
  OpRecord o = op("aten::conv2d", ampscope::Phase::kForward, "float16");
  o.degenerate = DegenerateRecord{3, 3, 0, -1, 1.0, 0.0, 0.0};
  EXPECT_TRUE(recommend(run("float16", {layer("c", {o})})).empty());  // float32 was zero too
  o.degenerate = DegenerateRecord{3, 3, 2, 4, 0.0, 1.0, 2e-9};
  auto recs = recommend(run("float16", {layer("c", {o})}));
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].action, Action::kPinFp32);
  EXPECT_EQ(recs[0].severity, Severity::kHigh);
  EXPECT_EQ(recs[0].reasons, std::vector<std::string>{"degenerate_output_float16"});
  EXPECT_EQ(recs[0].evidence["degenerate"][0]["first_step"], 4);
}

TEST(StaleUpdates, ShareOfDueUpdatesRoundedAwayNamesMasterWeights) {
  auto with_stale = [](std::int64_t stale) {
    Layer l = layer("fc1", {});
    ParamRecord p;
    p.name = "fc1.weight";
    p.dtype = "bfloat16";
    p.stale_updates = {StaleUpdateRecord{"value", "bfloat16", 3, 1000, stale, 2, 0.0}};
    l.params = {p};
    return recommend(run("", {l}));
  };
  EXPECT_TRUE(with_stale(50).empty());  // 5%: below kStaleUpdateShare
  auto medium = with_stale(200);
  ASSERT_EQ(medium.size(), 1u);
  EXPECT_EQ(medium[0].action, Action::kFp32MasterWeights);
  EXPECT_EQ(medium[0].severity, Severity::kMedium);
  EXPECT_EQ(medium[0].reasons, std::vector<std::string>{"stale_updates_bfloat16"});
  EXPECT_EQ(with_stale(998)[0].severity, Severity::kHigh);
}

TEST(PrecisionLoss, AReRunThatDiffersCompletelyIsHigh) {
  OpRecord o = op("aten::conv2d", ampscope::Phase::kForward, "float16");
  o.shadow.checks = 1;
  o.shadow.max_rel_err = 1.0;
  o.shadow.min_cosine = 0.0;
  auto recs = recommend(run("float16", {layer("c", {o})}));
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].severity, Severity::kHigh);
}

TEST(SilentLoss, RecordsSurviveJson) {
  OpRecord o = op("aten::conv2d", ampscope::Phase::kForward, "float16");
  o.cast_loss = {fp16_cast(10, -3, 30, 1)};
  o.cast_loss[0].parameter = true;
  o.cast_loss[0].subnormal = 7;
  o.degenerate = DegenerateRecord{3, 2, 1, 4, 0.005, 0.9, 2e-9};
  Layer l = layer("c", {o});
  ParamRecord p;
  p.name = "c.weight";
  p.dtype = "float16";
  p.values = Stats{};
  p.values->count = 12;
  p.values->underflow[kE4M3] = 5;
  p.stale_updates = {StaleUpdateRecord{"exp_avg", "float16", 3, 100, 40, 1, 0.5}};
  l.params = {p};
  Report back = report_from_json(report_to_json(run("float16", {l})));
  const OpRecord& b = back.layers[0].ops[0];
  ASSERT_EQ(b.cast_loss.size(), 1u);
  EXPECT_TRUE(b.cast_loss[0].same_cast(o.cast_loss[0]));
  EXPECT_EQ(b.cast_loss[0].underflow, 30);
  EXPECT_EQ(b.cast_loss[0].subnormal, 7);
  EXPECT_TRUE(b.cast_loss[0].parameter);
  EXPECT_DOUBLE_EQ(b.cast_loss[0].lost_rel_l2(), o.cast_loss[0].lost_rel_l2());
  ASSERT_TRUE(b.degenerate.has_value());
  EXPECT_EQ(b.degenerate->degenerate, 1);
  EXPECT_DOUBLE_EQ(b.degenerate->fp32_absmax, 2e-9);
  const ParamRecord& bp = back.layers[0].params[0];
  ASSERT_TRUE(bp.values.has_value());
  EXPECT_EQ(bp.values->underflow[kE4M3], 5);
  ASSERT_EQ(bp.stale_updates.size(), 1u);
  EXPECT_EQ(bp.stale_updates[0].tensor, "exp_avg");
  EXPECT_EQ(bp.stale_updates[0].stale, 40);
}

TEST(Summary, ParametersShowValueUnderflowAndStaleUpdates) {
  Layer l = layer("fc1", {});
  ParamRecord p;
  p.name = "fc1.weight";
  p.dtype = "float16";
  p.grad.count = 1;
  p.values = Stats{};
  p.values->count = 200;
  p.values->underflow[kE4M3] = 50;  // 25% of the 200 nonzero values
  p.stale_updates = {StaleUpdateRecord{"value", "float16", 2, 100, 90, 1, 0.9}};
  l.params = {p};
  const std::string s = render_summary(run("float16", {l}), SummaryOptions{});
  EXPECT_NE(s.find("STALE UPDATES"), std::string::npos) << s;
  const auto row = s.substr(s.find("fc1.weight"));
  EXPECT_NE(row.find("0%"), std::string::npos) << row;   // float16: none
  EXPECT_NE(row.find("25%"), std::string::npos) << row;  // e4m3
  EXPECT_NE(row.find("90%"), std::string::npos) << row;  // stale
}

// --- typed evidence: what a rule writes reads back as its type; foreign items are left out

using json = nlohmann::json;

TEST(Evidence, ARulesEvidenceReadsBackAsItsType) {
  OpRecord o = op("aten::linear", ampscope::Phase::kForward, "float16");
  o.absmax_by_step = series(10, 3.0, 1.0);  // as GrowingTowardTheMaxIsLowWatchWithProjection
  const auto recs = recommend(run("float16", {layer("ffn.wo", {o})}));
  ASSERT_EQ(recs.size(), 1u);
  const json& j = recs[0].evidence["headroom"][0];
  const auto ev = evidence_of<HeadroomEvidence>(recs[0].evidence);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].op, "aten::linear");
  EXPECT_EQ(ev[0].compute_dtype, "float16");
  EXPECT_DOUBLE_EQ(ev[0].absmax, j["absmax"].get<double>());
  EXPECT_DOUBLE_EQ(ev[0].format_max, 65504.0);
  EXPECT_DOUBLE_EQ(ev[0].growth_binades_per_step, j["growth_binades_per_step"].get<double>());
  ASSERT_TRUE(ev[0].projected_overflow_step.has_value());
  EXPECT_EQ(*ev[0].projected_overflow_step, 13);
  // Another rule's type finds nothing here.
  EXPECT_TRUE(evidence_of<ShadowEvidence>(recs[0].evidence).empty());
  EXPECT_TRUE(evidence_of<OriginEvidence>(recs[0].evidence).empty());
}

TEST(Evidence, ListsAppendObjectsReplaceAndOptionalsStayOut) {
  json evidence = json::object();
  CastLossEvidence a, b;
  a.op = "aten::linear";
  a.share_lost = 0.5;
  b.op = "aten::matmul";
  b.share_lost = std::nan("");  // written as null, read back as NaN
  add_evidence(evidence, a);
  add_evidence(evidence, b);
  ASSERT_TRUE(evidence["cast_loss"].is_array());
  ASSERT_EQ(evidence["cast_loss"].size(), 2u);
  EXPECT_TRUE(evidence["cast_loss"][1]["share_lost"].is_null());
  const auto back = evidence_of<CastLossEvidence>(evidence);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[1].op, "aten::matmul");
  EXPECT_DOUBLE_EQ(back[0].share_lost, 0.5);
  EXPECT_TRUE(std::isnan(back[1].share_lost));

  GradUnderflowEvidence g;
  g.format = "float16";
  g.values_in_format = 7;  // zeros_in_format absent: not written
  add_evidence(evidence, g);
  EXPECT_EQ(evidence["gradients"]["values_in_float16_grads"], 7);
  EXPECT_FALSE(evidence["gradients"].contains("zeros_in_float16_grads"));
  EXPECT_TRUE(evidence["gradients"]["loss_scale_in_use"].is_null());  // no GradScaler: null
  const auto gb = evidence_of<GradUnderflowEvidence>(evidence);
  ASSERT_EQ(gb.size(), 1u);
  EXPECT_EQ(gb[0].values_in_format, std::optional<std::int64_t>(7));
  EXPECT_FALSE(gb[0].zeros_in_format.has_value());
  EXPECT_FALSE(gb[0].loss_scale_in_use.has_value());
}

TEST(Evidence, AnItemOfTheWrongShapeIsLeftOutAndMissingFieldsTakeDefaults) {
  json evidence = json::parse(R"({"ops": [{"op": "aten::mm", "calls": "many"}, 7,
                                          {"op": "aten::bmm", "phase": "backward"}],
                                  "first_nonfinite": "not an object"})");
  const auto ops = evidence_of<NonfiniteOpEvidence>(evidence);
  ASSERT_EQ(ops.size(), 1u);  // the string count and the number are not items
  EXPECT_EQ(ops[0].op, "aten::bmm");
  EXPECT_EQ(ops[0].phase, ampscope::Phase::kBackward);
  EXPECT_EQ(ops[0].calls, 0);
  EXPECT_EQ(ops[0].first_step, -1);
  EXPECT_TRUE(evidence_of<OriginEvidence>(evidence).empty());
  EXPECT_TRUE(evidence_of<NonfiniteOpEvidence>(json(nullptr)).empty());
  // An unknown phase name makes the item unreadable, not a crash.
  evidence["ops"][2]["phase"] = "sideways";
  EXPECT_TRUE(evidence_of<NonfiniteOpEvidence>(evidence).empty());
}
