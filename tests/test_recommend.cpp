// The recommendation engine and precision_map_from on hand-made report models.
#include <gtest/gtest.h>

#include <ampscope/reports/precision_map.h>
#include <ampscope/reports/recommend.h>
#include <ampscope/reports/report.h>

#include <stdexcept>
#include <string>
#include <vector>

using namespace ampscope;
using namespace ampscope::reports;
using nlohmann::json;

namespace {

OpRecord op(const std::string& name, ampscope::Phase phase, const std::string& compute,
            std::int64_t calls = 10) {
  OpRecord o;
  o.op = name;
  o.phase = phase;
  o.calls = calls;
  o.input_dtype = "float32";
  o.compute_dtype = compute;
  o.output_dtype = compute;
  o.autocast = compute == "float32" ? ampscope::AutocastClass::kFp32 : ampscope::AutocastClass::kLowerPrecision;
  o.first_step = 0;
  o.last_step = 9;
  o.stats.count = 1000;
  o.stats.absmax = 100.0;
  return o;
}

/// Marks `o` as having produced non-finite outputs from finite inputs that reached something
/// (harmful, as provenance tracking would say).
OpRecord& origin(OpRecord& o, std::int64_t from_finite, std::int64_t posinf, std::int64_t nan,
                 std::int64_t first_step) {
  o.nonfinite_from_finite = from_finite;
  o.harmful_nonfinite = from_finite;
  o.first_nonfinite_step = first_step;
  o.stats.posinf = posinf;
  o.stats.nan = nan;
  return o;
}

Layer layer(const std::string& name, std::vector<OpRecord> ops) {
  Layer l;
  l.name = name;
  l.type = "Linear";
  l.ops = std::move(ops);
  return l;
}

Report base(const std::string& autocast = "float16") {
  Report r;
  r.run.device = "cuda";
  r.run.autocast_dtype = autocast;
  r.run.steps = 10;
  return r;
}

NonFiniteEvent event(const std::string& layer, const std::string& op, bool inputs_finite,
                     std::optional<bool> fp32) {
  NonFiniteEvent e;
  e.step = 4;
  e.phase = ampscope::Phase::kForward;
  e.layer = layer;
  e.op = op;
  e.kind = "inf";
  e.inputs_finite = inputs_finite;
  e.fp32_also_nonfinite = fp32;
  e.compute_dtype = "float16";
  Stats s;
  s.count = 64;
  s.posinf = 2;
  s.absmax = 60000.0;
  e.output_stats = s;
  return e;
}

/// A clean layer stack: no op saw a non-finite value.
Report clean_report() {
  Report r = base();
  r.layers.push_back(layer("embed", {op("aten::embedding", ampscope::Phase::kForward, "float32")}));
  r.layers.push_back(layer("blocks.0.attn", {op("aten::linear", ampscope::Phase::kForward, "float16"),
                                             op("aten::softmax", ampscope::Phase::kForward, "float32"),
                                             op("MmBackward0", ampscope::Phase::kBackward, "float16")}));
  r.layers.push_back(layer("head", {op("aten::linear", ampscope::Phase::kForward, "float16")}));
  return r;
}

const Recommendation* find(const std::vector<Recommendation>& recs, const std::string& layer,
                           const std::string& action) {
  for (const auto& r : recs)
    if (r.layer == layer && name_of(r.action) == action) return &r;
  return nullptr;
}

}  // namespace

TEST(SeverityRank, Values) {
  EXPECT_EQ(severity_rank("critical"), 3);
  EXPECT_EQ(severity_rank("high"), 2);
  EXPECT_EQ(severity_rank("medium"), 1);
  EXPECT_EQ(severity_rank("low"), 0);
  EXPECT_EQ(severity_rank("urgent"), -1);
  EXPECT_EQ(severity_rank(""), -1);
}

TEST(Recommend, CleanRunGivesNothing) {
  EXPECT_TRUE(recommend(clean_report()).empty());
  EXPECT_TRUE(recommend(Report{}).empty());
  EXPECT_TRUE(precision_map_from(recommend(clean_report())).pin_fp32.empty());
}

TEST(Recommend, OriginFromFiniteInputsPinsCritical) {
  Report r = clean_report();
  r.first_nonfinite = event("blocks.0.attn", "aten::softmax", true, false);
  const auto recs = recommend(r);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].layer, "blocks.0.attn");
  EXPECT_EQ(recs[0].action, Action::kPinFp32);
  EXPECT_EQ(recs[0].severity, Severity::kCritical);
  EXPECT_EQ(recs[0].reasons, std::vector<std::string>{"nonfinite_origin"});
  const json& ev = recs[0].evidence["first_nonfinite"];
  EXPECT_EQ(ev["step"], 4);
  EXPECT_EQ(ev["op"], "aten::softmax");
  EXPECT_EQ(ev["kind"], "inf");
  EXPECT_EQ(ev["fp32_recheck"], "finite");
  EXPECT_EQ(ev["posinf"], 2);
  EXPECT_DOUBLE_EQ(ev["absmax"].get<double>(), 60000.0);
  EXPECT_DOUBLE_EQ(ev["format_max"].get<double>(), 65504.0);

  const PrecisionMap m = precision_map_from(recs);
  EXPECT_EQ(m.pin_fp32, std::vector<std::string>{"blocks.0.attn"});
  EXPECT_EQ(m.why.at("blocks.0.attn"), std::vector<std::string>{"nonfinite_origin"});
}

TEST(Recommend, OriginNotRecheckedStillPins) {
  Report r = clean_report();
  r.first_nonfinite = event("head", "aten::linear", true, std::nullopt);
  const auto recs = recommend(r);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].action, Action::kPinFp32);
  EXPECT_EQ(recs[0].evidence["first_nonfinite"]["fp32_recheck"], "not_run");
}

TEST(Recommend, OriginThatAlreadyRanInFp32IsFixModel) {
  Report r = clean_report();
  NonFiniteEvent e = event("head", "aten::log", true, std::nullopt);  // e.g. an in-place op
  e.compute_dtype = "float32";
  r.first_nonfinite = e;
  const auto recs = recommend(r);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].action, Action::kFixModel);
  EXPECT_TRUE(precision_map_from(recs).pin_fp32.empty());
}

// A model converted to float16 as a whole, trained with AdamW: eps (1e-8) is 0 in float16 and
// the update is 0/0 where a gradient is 0. The origin is the optimizer's in-place arithmetic
// (no float32 re-check, outside every module): no pin can reach it.
TEST(Recommend, OriginInALowPrecisionOptimizerStepAsksForFp32MasterWeights) {
  Report r = clean_report();
  NonFiniteEvent e = event(ampscope::reports::kOutsideLayer, "aten::addcdiv_", true, std::nullopt);
  e.phase = ampscope::Phase::kOptimizer;
  e.compute_dtype = "float16";
  r.first_nonfinite = e;
  const auto recs = recommend(r);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].action, Action::kFp32MasterWeights);
  EXPECT_EQ(recs[0].severity, Severity::kCritical);
  EXPECT_EQ(recs[0].reasons, std::vector<std::string>{"optimizer_nonfinite_float16"});
  EXPECT_TRUE(precision_map_from(recs).pin_fp32.empty());
  // the same step computing in float32 (fp32 parameters) is the model's (a learning rate that
  // overflows float32)
  r.first_nonfinite->compute_dtype = "float32";
  EXPECT_EQ(recommend(r)[0].action, Action::kFixModel);
}

TEST(Recommend, OriginAlsoNonFiniteInFp32IsFixModelAndNoPin) {
  Report r = clean_report();
  // The op also reports its own non-finite outputs: it must still not be pinned.
  origin(r.layers[2].ops[0], 3, 5, 0, 4);
  r.first_nonfinite = event("head", "aten::linear", true, true);
  const auto recs = recommend(r);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].layer, "head");
  EXPECT_EQ(recs[0].action, Action::kFixModel);
  EXPECT_EQ(recs[0].severity, Severity::kCritical);
  EXPECT_EQ(recs[0].reasons, std::vector<std::string>{"nonfinite_in_fp32"});
  EXPECT_EQ(recs[0].evidence["first_nonfinite"]["fp32_recheck"], "also_nonfinite");
  const PrecisionMap m = precision_map_from(recs);
  EXPECT_TRUE(m.pin_fp32.empty());
  EXPECT_TRUE(m.why.empty());
}

TEST(Recommend, OriginFedNonFiniteInputsIsAModelBugNotAPin) {
  Report r = clean_report();
  r.first_nonfinite = event("head", "aten::linear", false, std::nullopt);
  auto recs = recommend(r);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].action, Action::kFixModel);
  EXPECT_EQ(recs[0].reasons, std::vector<std::string>{"nonfinite_input"});
  r.first_nonfinite->nonfinite_scalar = true;  // masked_fill(mask, -inf) on an all-masked row
  recs = recommend(r);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].reasons, std::vector<std::string>{"nonfinite_constant"});
}

TEST(Recommend, BenignNonFiniteIsNoFinding) {
  Report r = clean_report();
  OpRecord& lin = r.layers[1].ops[0];
  origin(lin, 3, 3, 0, 0);
  lin.harmful_nonfinite = 0;  // consumed harmlessly every time
  lin.benign_nonfinite = 3;
  EXPECT_TRUE(recommend(r).empty());
}

TEST(Recommend, NonFiniteInFp32TooIsNeverAPin) {
  Report r = clean_report();
  OpRecord& lin = r.layers[1].ops[0];
  origin(lin, 2, 2, 0, 1);
  lin.fp32_nonfinite = 2;  // every FP32 re-run was non-finite as well: a model bug
  EXPECT_TRUE(recommend(r).empty());
  lin.fp32_finite = 1;     // one re-run was finite: precision did it there
  EXPECT_EQ(recommend(r).size(), 1u);
}

TEST(Recommend, LowPrecisionOverflowPinsHigh) {
  Report r = clean_report();
  OpRecord& lin = r.layers[1].ops[0];  // blocks.0.attn aten::linear, float16
  origin(lin, 2, 7, 0, 3);
  lin.stats.absmax = 61000.0;
  const auto recs = recommend(r);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].layer, "blocks.0.attn");
  EXPECT_EQ(recs[0].action, Action::kPinFp32);
  EXPECT_EQ(recs[0].severity, Severity::kHigh);
  EXPECT_EQ(recs[0].reasons, std::vector<std::string>{"overflow_float16"});
  const json& ops = recs[0].evidence["ops"];
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops[0]["op"], "aten::linear");
  EXPECT_EQ(ops[0]["calls"], 10);
  EXPECT_EQ(ops[0]["nonfinite_from_finite"], 2);
  EXPECT_EQ(ops[0]["first_step"], 3);
  EXPECT_EQ(ops[0]["posinf"], 7);
  EXPECT_DOUBLE_EQ(ops[0]["absmax"].get<double>(), 61000.0);
  EXPECT_DOUBLE_EQ(ops[0]["format_max"].get<double>(), 65504.0);
  EXPECT_EQ(precision_map_from(recs).pin_fp32, std::vector<std::string>{"blocks.0.attn"});
}

TEST(Recommend, LowPrecisionNanWithoutInfIsNonfiniteLowp) {
  Report r = clean_report();
  origin(r.layers[2].ops[0], 1, 0, 4, 6);
  const auto recs = recommend(r);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].layer, "head");
  EXPECT_EQ(recs[0].reasons, std::vector<std::string>{"nonfinite_lowp"});
}

TEST(Recommend, BFloat16RunUsesItsFormat) {
  Report r = clean_report();
  r.run.autocast_dtype = "bfloat16";
  OpRecord bf = op("aten::matmul", ampscope::Phase::kForward, "bfloat16");
  origin(bf, 1, 1, 0, 2);
  r.layers.push_back(layer("mlp", {bf}));
  // float16 ops in a bfloat16 run are not the run's low-precision format.
  origin(r.layers[2].ops[0], 1, 1, 0, 2);
  const auto recs = recommend(r);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].layer, "mlp");
  EXPECT_EQ(recs[0].reasons, std::vector<std::string>{"overflow_bfloat16"});
}

TEST(Recommend, Fp32OpsAndAutocastOffGiveNoLowpPin) {
  Report r = clean_report();
  origin(r.layers[1].ops[1], 1, 1, 0, 2);  // aten::softmax computes in float32
  EXPECT_TRUE(recommend(r).empty());
  Report off = clean_report();
  off.run.autocast_dtype = "";
  origin(off.layers[1].ops[0], 1, 1, 0, 2);
  EXPECT_TRUE(recommend(off).empty());
}

TEST(Recommend, PropagationOnlyGivesNothing) {
  Report r = clean_report();
  // Every layer downstream saw NaN/Inf, but none of them made it from finite inputs.
  for (Layer& l : r.layers)
    for (OpRecord& o : l.ops) {
      o.stats.nan = 12;
      o.stats.posinf = 3;
      o.first_nonfinite_step = 5;
      o.nonfinite_from_finite = 0;
    }
  EXPECT_TRUE(recommend(r).empty());
}

TEST(Recommend, MergesPerLayerAndAction) {
  Report r = clean_report();
  OpRecord& lin = r.layers[1].ops[0];
  origin(lin, 2, 7, 0, 4);
  OpRecord gelu = op("aten::gelu", ampscope::Phase::kForward, "float16");  // NaN only
  origin(gelu, 1, 0, 3, 5);
  r.layers[1].ops.push_back(gelu);
  OpRecord extra = op("aten::linear", ampscope::Phase::kForward, "float16");
  origin(extra, 1, 2, 0, 8);  // a second entry of the same op with another dtype key
  extra.input_dtype = "float16";
  r.layers[1].ops.push_back(extra);
  r.first_nonfinite = event("blocks.0.attn", "aten::linear", true, false);

  const auto recs = recommend(r);
  ASSERT_EQ(recs.size(), 1u);
  const Recommendation& rec = recs[0];
  EXPECT_EQ(rec.layer, "blocks.0.attn");
  EXPECT_EQ(rec.action, Action::kPinFp32);
  EXPECT_EQ(rec.severity, Severity::kCritical);  // the most severe finding wins
  EXPECT_EQ(rec.reasons,
            (std::vector<std::string>{"nonfinite_origin", "overflow_float16", "nonfinite_lowp"}));
  EXPECT_TRUE(rec.evidence.contains("first_nonfinite"));
  ASSERT_EQ(rec.evidence["ops"].size(), 3u);
  EXPECT_EQ(rec.evidence["ops"][0]["fp32_recheck"], "finite");
  const PrecisionMap m = precision_map_from(recs);
  EXPECT_EQ(m.pin_fp32, std::vector<std::string>{"blocks.0.attn"});
  EXPECT_EQ(m.why.at("blocks.0.attn"), rec.reasons);
}

TEST(Recommend, OrderedBySeverityThenLayer) {
  Report r = clean_report();
  r.layers.push_back(layer("zeta", {op("aten::linear", ampscope::Phase::kForward, "float16")}));
  r.layers.push_back(layer("alpha", {op("aten::linear", ampscope::Phase::kForward, "float16")}));
  origin(r.layers[3].ops[0], 1, 1, 0, 1);  // zeta: high
  origin(r.layers[4].ops[0], 1, 1, 0, 1);  // alpha: high
  origin(r.layers[2].ops[0], 1, 1, 0, 1);  // head: high
  r.first_nonfinite = event("zeta", "aten::linear", true, false);  // zeta: critical
  const auto recs = recommend(r);
  ASSERT_EQ(recs.size(), 3u);
  EXPECT_EQ(recs[0].layer, "zeta");
  EXPECT_EQ(recs[0].severity, Severity::kCritical);
  EXPECT_EQ(recs[1].layer, "alpha");
  EXPECT_EQ(recs[2].layer, "head");
  EXPECT_EQ(precision_map_from(recs).pin_fp32, (std::vector<std::string>{"zeta", "alpha", "head"}));
}

TEST(Recommend, FixModelAndPinOnDifferentLayers) {
  Report r = clean_report();
  origin(r.layers[2].ops[0], 1, 1, 0, 1);  // head overflows in float16
  r.first_nonfinite = event("blocks.0.attn", "aten::softmax", true, true);
  const auto recs = recommend(r);
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[0].action, Action::kFixModel);
  EXPECT_EQ(recs[0].layer, "blocks.0.attn");
  EXPECT_EQ(recs[1].action, Action::kPinFp32);
  EXPECT_EQ(recs[1].layer, "head");
  EXPECT_EQ(precision_map_from(recs).pin_fp32, std::vector<std::string>{"head"});
}

TEST(PrecisionMapFrom, MinSeverityFilter) {
  Report r = clean_report();
  origin(r.layers[2].ops[0], 1, 1, 0, 1);                        // head: high
  r.first_nonfinite = event("embed", "aten::embedding", true, false);  // embed: critical
  const auto recs = recommend(r);
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(precision_map_from(recs, "low").pin_fp32, (std::vector<std::string>{"embed", "head"}));
  EXPECT_EQ(precision_map_from(recs, "high").pin_fp32, (std::vector<std::string>{"embed", "head"}));
  const PrecisionMap crit = precision_map_from(recs, "critical");
  EXPECT_EQ(crit.pin_fp32, std::vector<std::string>{"embed"});
  EXPECT_EQ(crit.why.count("head"), 0u);
  EXPECT_THROW(precision_map_from(recs, "urgent"), std::invalid_argument);
}

TEST(PrecisionMapFrom, SkipsOutsideAndOtherActions) {
  std::vector<Recommendation> recs(4);
  recs[0] = {kOutsideLayer, Action::kPinFp32, Severity::kCritical, {"nonfinite_origin"}, json::object()};
  recs[1] = {"a", Action::kLossScaling, Severity::kHigh, {"grad_underflow"}, json::object()};
  recs[2] = {"b", Action::kPinFp32, Severity::kMedium, {"x", "y"}, json::object()};
  recs[3] = {"b", Action::kPinFp32, Severity::kLow, {"y", "z"}, json::object()};
  const PrecisionMap m = precision_map_from(recs);
  EXPECT_EQ(m.pin_fp32, std::vector<std::string>{"b"});
  EXPECT_EQ(m.why.at("b"), (std::vector<std::string>{"x", "y", "z"}));
}

TEST(Recommend, OutsideLayerIsRecommendedButNotPinned) {
  Report r = clean_report();
  Layer outside = layer(kOutsideLayer, {op("aten::mul", ampscope::Phase::kForward, "float16")});
  origin(outside.ops[0], 1, 1, 0, 1);
  r.layers.push_back(outside);
  const auto recs = recommend(r);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_NE(find(recs, kOutsideLayer, "pin_fp32"), nullptr);
  EXPECT_TRUE(precision_map_from(recs).pin_fp32.empty());
}
