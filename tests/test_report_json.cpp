// report.json and precision_map.json round trips and reader errors; summary rendering.
#include <gtest/gtest.h>

#include <ampscope/reports/precision_map.h>
#include <ampscope/reports/recommend.h>
#include <ampscope/reports/report.h>
#include <ampscope/reports/report_json.h>
#include <ampscope/reports/summary.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>

#include <unistd.h>

namespace fs = std::filesystem;
using namespace ampscope;
using namespace ampscope::reports;
using nlohmann::json;

namespace {

// ----------------------------------------------------------------------------- fixtures

/// Values chosen so mean and rms are exact in double (the reader rebuilds sum and sum_sq).
Stats sample_stats() {
  Stats s;
  s.count = 10;
  s.nan = 1;
  s.posinf = 2;
  s.neginf = 1;
  s.zeros = 2;
  s.absmax = 70000.0;
  s.absmin_nonzero = 0.125;
  s.sum = 12.0;     // finite = 6 -> mean 2
  s.sum_sq = 54.0;  // rms = sqrt(9) = 3
  s.overflow = {3, 0, 4, 1};
  s.underflow = {0, 0, 3, 2};
  s.subnormal = {1, 0, 0, 2};  // underflow + subnormal <= the 4 nonzero finite values
  s.exp_hist.add(-3, 1);
  s.exp_hist.add(0, 2);
  s.exp_hist.add(16, 1);
  return s;
}

Stats empty_stats() { return Stats{}; }  // absmin_nonzero = inf -> null

Report sample_report() {
  Report r;
  r.run.torch_version = "2.4.0";
  r.run.device = "cuda";
  r.run.autocast_dtype = "float16";
  r.run.steps = 50;
  r.run.started = "2024-05-01T12:00:00Z";
  r.run.duration_s = 12.5;
  r.run.command = "python train.py --lr 3e-4";
  r.run.rank = 1;
  r.run.world_size = 4;
  r.run.every = 2;
  r.run.notes = {"optimizer hooks unavailable", "second note"};

  Layer l;
  l.name = "blocks.3.ffn.wo";
  l.type = "Linear";
  OpRecord op;
  op.op = "aten::linear";
  op.phase = ampscope::Phase::kForward;
  op.calls = 50;
  op.input_dtype = "float32";
  op.compute_dtype = "float16";
  op.output_dtype = "float16";
  op.autocast = ampscope::AutocastClass::kLowerPrecision;
  op.casts = 100;
  op.first_step = 0;
  op.last_step = 49;
  op.nonfinite_from_finite = 3;
  op.first_nonfinite_step = 17;
  op.stats = sample_stats();
  op.absmax_by_step = {{0, 1.5}, {1, 2.25}, {17, 65504.0}};
  l.ops.push_back(op);
  OpRecord bw;
  bw.op = "AddmmBackward0";
  bw.phase = ampscope::Phase::kBackward;
  bw.calls = 49;
  bw.compute_dtype = "float16";
  bw.output_dtype = "float16";
  bw.autocast = ampscope::AutocastClass::kNone;
  bw.stats = empty_stats();
  l.ops.push_back(bw);
  ParamRecord p;
  p.name = "blocks.3.ffn.wo.weight";
  p.dtype = "float32";
  p.updates = 49;
  p.grad = sample_stats();
  l.params.push_back(p);
  r.layers.push_back(l);

  Layer outside;
  outside.name = kOutsideLayer;
  outside.type = "";
  r.layers.push_back(outside);

  NonFiniteEvent e;
  e.step = 17;
  e.phase = ampscope::Phase::kForward;
  e.layer = "blocks.3.ffn.wo";
  e.op = "aten::linear";
  e.kind = "inf";
  e.inputs_finite = true;
  e.fp32_also_nonfinite = false;
  e.compute_dtype = "float16";
  e.output_stats = sample_stats();
  r.first_nonfinite = e;

  r.loss_scale = {{0, 65536.0, false}, {17, 32768.0, true}};
  Recommendation rec;
  rec.layer = "blocks.3.ffn.wo";
  rec.action = Action::kPinFp32;
  rec.severity = Severity::kCritical;
  rec.reasons = {"nonfinite_origin", "overflow_float16"};
  rec.evidence = json{{"ops", json::array({json{{"op", "aten::linear"}, {"calls", 50}}})},
                      {"format_max", 65504.0}};
  r.recommendations.push_back(rec);
  return r;
}

// ----------------------------------------------------------------------------- comparisons

void expect_stats_eq(const Stats& a, const Stats& b, const std::string& where) {
  SCOPED_TRACE(where);
  EXPECT_EQ(a.count, b.count);
  EXPECT_EQ(a.nan, b.nan);
  EXPECT_EQ(a.posinf, b.posinf);
  EXPECT_EQ(a.neginf, b.neginf);
  EXPECT_EQ(a.zeros, b.zeros);
  EXPECT_DOUBLE_EQ(a.absmax, b.absmax);
  EXPECT_EQ(a.absmin_nonzero, b.absmin_nonzero);  // inf == inf
  EXPECT_DOUBLE_EQ(a.sum, b.sum);
  EXPECT_DOUBLE_EQ(a.sum_sq, b.sum_sq);
  EXPECT_EQ(a.overflow, b.overflow);
  EXPECT_EQ(a.underflow, b.underflow);
  EXPECT_EQ(a.subnormal, b.subnormal);
  EXPECT_TRUE(a.exp_hist == b.exp_hist);
  EXPECT_EQ(a.exp_hist.total(), b.exp_hist.total());
}

void expect_op_eq(const OpRecord& a, const OpRecord& b, const std::string& where) {
  SCOPED_TRACE(where);
  EXPECT_EQ(a.op, b.op);
  EXPECT_EQ(a.phase, b.phase);
  EXPECT_EQ(a.calls, b.calls);
  EXPECT_EQ(a.input_dtype, b.input_dtype);
  EXPECT_EQ(a.compute_dtype, b.compute_dtype);
  EXPECT_EQ(a.output_dtype, b.output_dtype);
  EXPECT_EQ(a.autocast, b.autocast);
  EXPECT_EQ(a.casts, b.casts);
  EXPECT_EQ(a.first_step, b.first_step);
  EXPECT_EQ(a.last_step, b.last_step);
  EXPECT_EQ(a.nonfinite_from_finite, b.nonfinite_from_finite);
  EXPECT_EQ(a.first_nonfinite_step, b.first_nonfinite_step);
  EXPECT_EQ(a.absmax_by_step, b.absmax_by_step);
  expect_stats_eq(a.stats, b.stats, where + ".stats");
}

void expect_report_eq(const Report& a, const Report& b) {
  EXPECT_EQ(a.run.torch_version, b.run.torch_version);
  EXPECT_EQ(a.run.device, b.run.device);
  EXPECT_EQ(a.run.autocast_dtype, b.run.autocast_dtype);
  EXPECT_EQ(a.run.steps, b.run.steps);
  EXPECT_EQ(a.run.started, b.run.started);
  EXPECT_DOUBLE_EQ(a.run.duration_s, b.run.duration_s);
  EXPECT_EQ(a.run.command, b.run.command);
  EXPECT_EQ(a.run.rank, b.run.rank);
  EXPECT_EQ(a.run.world_size, b.run.world_size);
  EXPECT_EQ(a.run.every, b.run.every);
  EXPECT_EQ(a.run.notes, b.run.notes);
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (std::size_t i = 0; i < a.layers.size(); ++i) {
    const Layer &la = a.layers[i], &lb = b.layers[i];
    EXPECT_EQ(la.name, lb.name);
    EXPECT_EQ(la.type, lb.type);
    ASSERT_EQ(la.ops.size(), lb.ops.size());
    for (std::size_t k = 0; k < la.ops.size(); ++k)
      expect_op_eq(la.ops[k], lb.ops[k], "layer " + std::to_string(i) + " op " + std::to_string(k));
    ASSERT_EQ(la.params.size(), lb.params.size());
    for (std::size_t k = 0; k < la.params.size(); ++k) {
      EXPECT_EQ(la.params[k].name, lb.params[k].name);
      EXPECT_EQ(la.params[k].dtype, lb.params[k].dtype);
      EXPECT_EQ(la.params[k].updates, lb.params[k].updates);
      expect_stats_eq(la.params[k].grad, lb.params[k].grad, "param " + la.params[k].name);
    }
  }
  ASSERT_EQ(a.first_nonfinite.has_value(), b.first_nonfinite.has_value());
  if (a.first_nonfinite) {
    const NonFiniteEvent &ea = *a.first_nonfinite, &eb = *b.first_nonfinite;
    EXPECT_EQ(ea.step, eb.step);
    EXPECT_EQ(ea.phase, eb.phase);
    EXPECT_EQ(ea.layer, eb.layer);
    EXPECT_EQ(ea.op, eb.op);
    EXPECT_EQ(ea.kind, eb.kind);
    EXPECT_EQ(ea.inputs_finite, eb.inputs_finite);
    EXPECT_EQ(ea.fp32_also_nonfinite, eb.fp32_also_nonfinite);
    EXPECT_EQ(ea.compute_dtype, eb.compute_dtype);
    ASSERT_EQ(ea.output_stats.has_value(), eb.output_stats.has_value());
    if (ea.output_stats) expect_stats_eq(*ea.output_stats, *eb.output_stats, "output_stats");
  }
  ASSERT_EQ(a.loss_scale.size(), b.loss_scale.size());
  for (std::size_t i = 0; i < a.loss_scale.size(); ++i) {
    EXPECT_EQ(a.loss_scale[i].step, b.loss_scale[i].step);
    EXPECT_DOUBLE_EQ(a.loss_scale[i].scale, b.loss_scale[i].scale);
    EXPECT_EQ(a.loss_scale[i].found_inf, b.loss_scale[i].found_inf);
  }
  ASSERT_EQ(a.recommendations.size(), b.recommendations.size());
  for (std::size_t i = 0; i < a.recommendations.size(); ++i) {
    EXPECT_EQ(a.recommendations[i].layer, b.recommendations[i].layer);
    EXPECT_EQ(a.recommendations[i].action, b.recommendations[i].action);
    EXPECT_EQ(a.recommendations[i].severity, b.recommendations[i].severity);
    EXPECT_EQ(a.recommendations[i].reasons, b.recommendations[i].reasons);
    EXPECT_EQ(a.recommendations[i].evidence, b.recommendations[i].evidence);
  }
}

// ----------------------------------------------------------------------------- files

class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ampscope_test_report_json_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write(const std::string& name, const std::string& content) const {
    std::ofstream(path(name), std::ios::binary) << content;
    return path(name);
  }
  fs::path dir_;
};

std::string slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

/// Runs `f`, expects a ReportError with `id` and a one-line message containing `needles`.
void expect_error(const std::function<void()>& f, const std::string& id,
                  std::initializer_list<std::string> needles) {
  try {
    f();
    ADD_FAILURE() << "no ReportError, expected " << id;
  } catch (const ReportError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.id(), id) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\r'), std::string::npos) << msg;
    for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
  }
}

json sample_json() { return report_to_json(sample_report()); }

}  // namespace

// ============================================================================= stats JSON

TEST(StatsJson, Fields) {
  const json j = stats_to_json(sample_stats());
  EXPECT_EQ(j["count"], 10);
  EXPECT_EQ(j["nan"], 1);
  EXPECT_EQ(j["posinf"], 2);
  EXPECT_EQ(j["neginf"], 1);
  EXPECT_EQ(j["zeros"], 2);
  EXPECT_DOUBLE_EQ(j["absmax"].get<double>(), 70000.0);
  EXPECT_DOUBLE_EQ(j["absmin_nonzero"].get<double>(), 0.125);
  EXPECT_DOUBLE_EQ(j["mean"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(j["rms"].get<double>(), 3.0);
  EXPECT_EQ(j["exp_hist"], (json{{"-3", 1}, {"0", 2}, {"16", 1}}));
  EXPECT_EQ(j["overflow"],
            (json{{"float16", 3}, {"bfloat16", 0}, {"float8_e4m3fn", 4}, {"float8_e5m2", 1}}));
  EXPECT_EQ(j["underflow"]["float8_e5m2"], 2);
  EXPECT_EQ(j["subnormal"]["float8_e5m2"], 2);
}

TEST(StatsJson, NullForNoFiniteNonzeroAndNonFiniteDoubles) {
  Stats s = empty_stats();
  json j = stats_to_json(s);
  EXPECT_TRUE(j["absmin_nonzero"].is_null());
  EXPECT_EQ(j["exp_hist"], json::object());
  EXPECT_DOUBLE_EQ(j["mean"].get<double>(), 0.0);

  s.count = 2;
  s.absmax = std::numeric_limits<double>::infinity();
  s.sum = std::numeric_limits<double>::quiet_NaN();
  s.sum_sq = std::numeric_limits<double>::infinity();
  j = stats_to_json(s);
  EXPECT_TRUE(j["absmax"].is_null());
  EXPECT_TRUE(j["mean"].is_null());
  EXPECT_TRUE(j["rms"].is_null());
  const std::string text = j.dump();
  for (const char* bad : {":inf", ":-inf", ":nan", "NaN", "Infinity"})
    EXPECT_EQ(text.find(bad), std::string::npos) << bad << " in " << text;
  EXPECT_NO_THROW(json::parse(text));

  Stats back = stats_from_json(json::parse(text), "s");
  EXPECT_TRUE(std::isinf(back.absmin_nonzero));
}

TEST(StatsJson, RoundTrip) {
  const Stats s = sample_stats();
  expect_stats_eq(stats_from_json(json::parse(stats_to_json(s).dump()), "stats"), s, "stats");
  expect_stats_eq(stats_from_json(stats_to_json(empty_stats()), "stats"), empty_stats(), "empty");
}

TEST(StatsJson, BadExpHistKey) {
  json j = stats_to_json(sample_stats());
  j["exp_hist"]["x1"] = 3;
  expect_error([&] { stats_from_json(j, "layers[0].ops[0].stats"); }, "report.value",
               {"layers[0].ops[0].stats.exp_hist", "x1"});
  j = stats_to_json(sample_stats());
  j["exp_hist"]["4"] = "three";
  expect_error([&] { stats_from_json(j, "st"); }, "report.type",
               {"st.exp_hist.4: expected integer, got string"});
}

// ============================================================================= report JSON

TEST(ReportJson, RoundTripThroughText) {
  const Report r = sample_report();
  const std::string text = report_to_json(r).dump();
  const Report back = report_from_json(json::parse(text));
  expect_report_eq(back, r);
}

TEST(ReportJson, RoundTripWithoutFirstNonFiniteAndOptionals) {
  Report r = sample_report();
  r.first_nonfinite.reset();
  r.recommendations.clear();
  r.loss_scale.clear();
  const json j = report_to_json(r);
  EXPECT_TRUE(j["first_nonfinite"].is_null());
  expect_report_eq(report_from_json(json::parse(j.dump())), r);

  r = sample_report();
  r.first_nonfinite->fp32_also_nonfinite.reset();
  r.first_nonfinite->output_stats.reset();
  r.first_nonfinite->kind = "nan";
  r.first_nonfinite->inputs_finite = false;
  const json j2 = report_to_json(r);
  EXPECT_TRUE(j2["first_nonfinite"]["fp32_also_nonfinite"].is_null());
  expect_report_eq(report_from_json(json::parse(j2.dump())), r);
}

TEST(ReportJson, TopLevelShape) {
  const json j = sample_json();
  EXPECT_EQ(j["schema"], "ampscope.report/1");
  for (const char* k : {"torch_version", "device", "autocast_dtype", "steps", "started",
                        "duration_s", "command", "rank", "world_size", "every", "notes"})
    EXPECT_TRUE(j["run"].contains(k)) << k;
  const json& op = j["layers"][0]["ops"][0];
  EXPECT_EQ(op["absmax_by_step"], json::parse("[[0,1.5],[1,2.25],[17,65504.0]]"));
  EXPECT_EQ(j["first_nonfinite"]["kind"], "inf");
  EXPECT_EQ(j["loss_scale"][1], (json{{"step", 17}, {"scale", 32768.0}, {"found_inf", true}}));
  EXPECT_EQ(j["recommendations"][0]["reasons"], (json{"nonfinite_origin", "overflow_float16"}));
}

TEST(ReportJson, OptionalFieldsDefault) {
  json j = sample_json();
  j["run"].erase("every");
  j["run"].erase("notes");
  json& op = j["layers"][0]["ops"][0];
  for (const char* k : {"first_step", "last_step", "nonfinite_from_finite", "first_nonfinite_step",
                        "absmax_by_step"})
    op.erase(k);
  j["layers"][0]["params"][0].erase("updates");
  j["first_nonfinite"].erase("compute_dtype");
  j["first_nonfinite"].erase("output_stats");
  j["recommendations"][0].erase("evidence");
  const Report r = report_from_json(j);
  EXPECT_EQ(r.run.every, 1);
  EXPECT_TRUE(r.run.notes.empty());
  const OpRecord& o = r.layers[0].ops[0];
  EXPECT_EQ(o.first_step, 0);
  EXPECT_EQ(o.last_step, 0);
  EXPECT_EQ(o.nonfinite_from_finite, 0);
  EXPECT_EQ(o.first_nonfinite_step, -1);
  EXPECT_TRUE(o.absmax_by_step.empty());
  EXPECT_EQ(r.layers[0].params[0].updates, 0);
  EXPECT_EQ(r.first_nonfinite->compute_dtype, "");
  EXPECT_FALSE(r.first_nonfinite->output_stats.has_value());
  EXPECT_EQ(r.recommendations[0].evidence, json::object());
}

TEST(ReportJson, SchemaErrors) {
  expect_error([] { report_from_json(json::array({1, 2})); }, "report.schema", {"got array"});
  expect_error([] { report_from_json(json(42)); }, "report.schema", {"object"});
  json j = sample_json();
  j.erase("schema");
  expect_error([&] { report_from_json(j); }, "report.schema", {"missing \"schema\""});
  j["schema"] = "ampscope.report/2";
  expect_error([&] { report_from_json(j); }, "report.schema", {"ampscope.report/2", "ampscope.report/1"});
  j["schema"] = 1;
  expect_error([&] { report_from_json(j); }, "report.schema", {"schema is 1"});
}

TEST(ReportJson, TypeErrorsNameThePath) {
  json j = sample_json();
  j["layers"][0]["ops"][0]["calls"] = "50";
  expect_error([&] { report_from_json(j); }, "report.type",
               {"layers[0].ops[0].calls: expected integer, got string"});

  j = sample_json();
  j["layers"][0]["ops"][0]["stats"]["overflow"]["float16"] = 1.5;
  expect_error([&] { report_from_json(j); }, "report.type",
               {"layers[0].ops[0].stats.overflow.float16: expected integer, got number"});

  j = sample_json();
  j["layers"][0]["params"][0]["grad"]["absmax"] = "big";
  expect_error([&] { report_from_json(j); }, "report.type",
               {"layers[0].params[0].grad.absmax: expected number, got string"});

  j = sample_json();
  j["run"]["steps"] = nullptr;
  expect_error([&] { report_from_json(j); }, "report.type", {"run.steps: expected integer, got null"});

  j = sample_json();
  j["layers"] = json::object();
  expect_error([&] { report_from_json(j); }, "report.type", {"layers: expected array, got object"});

  j = sample_json();
  j["layers"][0]["ops"][0].erase("op");
  expect_error([&] { report_from_json(j); }, "report.type", {"layers[0].ops[0]", "missing", "\"op\""});

  j = sample_json();
  j["first_nonfinite"]["fp32_also_nonfinite"] = "yes";
  expect_error([&] { report_from_json(j); }, "report.type",
               {"first_nonfinite.fp32_also_nonfinite: expected boolean or null, got string"});

  j = sample_json();
  j["layers"][0]["ops"][0]["absmax_by_step"][1] = json::array({1});
  expect_error([&] { report_from_json(j); }, "report.type", {"layers[0].ops[0].absmax_by_step[1]"});

  j = sample_json();
  j["recommendations"][0]["reasons"][1] = 7;
  expect_error([&] { report_from_json(j); }, "report.type",
               {"recommendations[0].reasons[1]: expected string, got integer"});

  j = sample_json();
  j["layers"][0]["ops"][0]["phase"] = "sideways";
  expect_error([&] { report_from_json(j); }, "report.value", {"layers[0].ops[0].phase", "sideways"});

  j = sample_json();
  j["recommendations"][0]["severity"] = "urgent";
  expect_error([&] { report_from_json(j); }, "report.value", {"recommendations[0].severity"});
  j = sample_json();
  j["recommendations"][0]["action"] = "pin_fp16";
  expect_error([&] { report_from_json(j); }, "report.value",
               {"recommendations[0].action", "pin_fp32|loss_scaling|fix_model|watch|fp32_master_weights"});
}

// ============================================================================= files

using ReportFile = TempDir;

TEST_F(ReportFile, WriteReadRoundTrip) {
  const Report r = sample_report();
  const std::string p = path("out/nested/report.json");  // parents created
  write_report(r, p);
  expect_report_eq(read_report(p), r);
  // Written atomically: nothing but the target is left in the folder.
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(fs::path(p).parent_path()))
    names.push_back(e.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"report.json"});
  // Overwrite in place.
  Report r2 = r;
  r2.run.steps = 7;
  write_report(r2, p);
  EXPECT_EQ(read_report(p).run.steps, 7);
  EXPECT_EQ(std::distance(fs::directory_iterator(fs::path(p).parent_path()), fs::directory_iterator()), 1);
  // The file is valid JSON with the SPEC key order.
  const std::string text = slurp(p);
  EXPECT_EQ(text.rfind("{\"schema\":\"ampscope.report/1\",\"run\":", 0), 0u) << text.substr(0, 80);
}

TEST_F(ReportFile, WriteFileAtomicFailures) {
  fs::create_directories(path("adir"));
  EXPECT_THROW(write_file_atomic(path("adir"), "x"), std::runtime_error);
  write("afile", "x");
  try {
    write_file_atomic(path("afile/sub/report.json"), "x");  // parent is a file
    ADD_FAILURE() << "no throw";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("afile/sub/report.json"), std::string::npos) << e.what();
  }
  // No temp files left behind after failures.
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
}

TEST_F(ReportFile, Missing) {
  const std::string p = path("nope.json");
  expect_error([&] { read_report(p); }, "report.missing", {p});
}

TEST_F(ReportFile, Directory) {
  const std::string p = path("sub");
  fs::create_directories(p);
  expect_error([&] { read_report(p); }, "report.directory", {p});
}

TEST_F(ReportFile, Empty) {
  const std::string p = write("empty.json", "");
  expect_error([&] { read_report(p); }, "report.empty", {p});
  const std::string q = write("blank.json", " \n\t\n");
  expect_error([&] { read_report(q); }, "report.empty", {q});
}

TEST_F(ReportFile, Truncated) {
  const std::string full = sample_json().dump(2);
  const std::string p = write("trunc.json", full.substr(0, full.size() / 2));
  expect_error([&] { read_report(p); }, "report.parse", {p});
}

TEST_F(ReportFile, BinaryGarbage) {
  std::string junk;
  for (int i = 0; i < 512; ++i) junk.push_back(static_cast<char>((i * 37 + 11) % 256));
  junk[3] = '\n';
  const std::string p = write("junk.json", junk);
  expect_error([&] { read_report(p); }, "report.parse", {p});
  const std::string q = write("junk2.json", std::string("{\"schema\": \"\xff\xfe\n\x01\"}"));
  expect_error([&] { read_report(q); }, "report.parse", {q});
}

TEST_F(ReportFile, NotAnObject) {
  const std::string p = write("arr.json", "[1, 2, 3]");
  expect_error([&] { read_report(p); }, "report.schema", {p, "array"});
}

TEST_F(ReportFile, WrongAndMissingSchema) {
  json j = sample_json();
  j["schema"] = "something.else/1";
  const std::string p = write("wrong.json", j.dump());
  expect_error([&] { read_report(p); }, "report.schema", {p, "something.else/1"});
  j.erase("schema");
  const std::string q = write("noschema.json", j.dump());
  expect_error([&] { read_report(q); }, "report.schema", {q, "missing"});
}

TEST_F(ReportFile, WrongTypeDeepInside) {
  json j = sample_json();
  j["layers"][0]["ops"][1]["calls"] = "49";
  const std::string p = write("deep.json", j.dump(2));
  expect_error([&] { read_report(p); }, "report.type",
               {p + ": layers[0].ops[1].calls: expected integer, got string"});
}

// ============================================================================= precision map

using PrecisionMapFile = TempDir;

TEST_F(PrecisionMapFile, RoundTrip) {
  PrecisionMap m;
  m.pin_fp32 = {"blocks.3.ffn.wo", "head"};
  m.why = {{"blocks.3.ffn.wo", {"nonfinite_origin", "overflow_float16"}}, {"head", {"nonfinite_lowp"}}};
  const json j = precision_map_to_json(m);
  EXPECT_EQ(j["schema"], "ampscope.precision_map/1");
  EXPECT_EQ(j["pin_fp32"], (json{"blocks.3.ffn.wo", "head"}));
  EXPECT_EQ(j["why"]["head"], (json{"nonfinite_lowp"}));
  const std::string p = path("pm/precision_map.json");
  write_precision_map(m, p);
  const PrecisionMap back = read_precision_map(p);
  EXPECT_EQ(back.pin_fp32, m.pin_fp32);
  EXPECT_EQ(back.why, m.why);
  EXPECT_EQ(std::distance(fs::directory_iterator(fs::path(p).parent_path()), fs::directory_iterator()), 1);
}

TEST_F(PrecisionMapFile, Errors) {
  const std::string missing = path("none.json");
  expect_error([&] { read_precision_map(missing); }, "precision_map.missing", {missing});
  fs::create_directories(path("d"));
  expect_error([&] { read_precision_map(path("d")); }, "precision_map.directory", {path("d")});
  const std::string empty = write("e.json", "");
  expect_error([&] { read_precision_map(empty); }, "precision_map.empty", {empty});
  const std::string trunc = write("t.json", "{\"schema\": \"ampscope.precision_map/1\", \"pin_");
  expect_error([&] { read_precision_map(trunc); }, "precision_map.parse", {trunc});
  const std::string arr = write("a.json", "[]");
  expect_error([&] { read_precision_map(arr); }, "precision_map.schema", {arr});
  const std::string wrong = write("w.json", R"({"schema": "ampscope.report/1", "pin_fp32": []})");
  expect_error([&] { read_precision_map(wrong); }, "precision_map.schema", {wrong});
  const std::string noschema = write("n.json", R"({"pin_fp32": []})");
  expect_error([&] { read_precision_map(noschema); }, "precision_map.schema", {noschema});
  const std::string badtype =
      write("b.json", R"({"schema": "ampscope.precision_map/1", "pin_fp32": ["a", 3], "why": {}})");
  expect_error([&] { read_precision_map(badtype); }, "precision_map.type",
               {badtype, "pin_fp32[1]: expected string, got integer"});
  const std::string badwhy =
      write("y.json", R"({"schema": "ampscope.precision_map/1", "pin_fp32": ["a"], "why": {"a": "x"}})");
  expect_error([&] { read_precision_map(badwhy); }, "precision_map.type", {badwhy, "why"});
  const std::string nopins = write("p.json", R"({"schema": "ampscope.precision_map/1"})");
  expect_error([&] { read_precision_map(nopins); }, "precision_map.type", {nopins, "pin_fp32"});
}

// The HTML writer is tested in test_html.cpp (and in a browser: tests/python/test_html_browser.py).

// ============================================================================= summary

TEST(Summary, ContainsLayersAndVerdict) {
  const std::string s = render_summary(sample_report());
  ASSERT_FALSE(s.empty());
  EXPECT_EQ(s.back(), '\n');
  for (const char* needle :
       {"cuda", "autocast float16", "50 steps", "torch 2.4.0", "blocks.3.ffn.wo", "aten::linear",
        "Top risks", "pin_fp32", "critical", "Autocast choices per layer", "fp32→fp16→fp16",
        "lower_precision", "Gradient ranges", "blocks.3.ffn.wo.weight",
        "first non-finite: step 17, phase forward, layer blocks.3.ffn.wo, op aten::linear (inf) — "
        "from finite inputs; FP32 re-check: finite"})
    EXPECT_NE(s.find(needle), std::string::npos) << needle << "\n" << s;
  EXPECT_EQ(s.find("\x1b["), std::string::npos);  // no colour unless asked
  SummaryOptions color;
  color.color = true;
  EXPECT_NE(render_summary(sample_report(), color).find("\x1b["), std::string::npos);
}

TEST(Summary, CleanRunAndVerdictVariants) {
  Report r = sample_report();
  r.first_nonfinite.reset();
  r.recommendations.clear();
  std::string s = render_summary(r);
  EXPECT_NE(s.find("clean"), std::string::npos) << s;
  EXPECT_NE(s.find("none"), std::string::npos) << s;

  r = sample_report();
  r.first_nonfinite->inputs_finite = false;
  r.first_nonfinite->fp32_also_nonfinite.reset();
  r.first_nonfinite->kind = "nan";
  s = render_summary(r);
  EXPECT_NE(s.find("(nan) — handed non-finite inputs; FP32 re-check: not run"), std::string::npos) << s;
  r.first_nonfinite->fp32_also_nonfinite = true;
  s = render_summary(r);
  EXPECT_NE(s.find("FP32 re-check: also non-finite"), std::string::npos) << s;
}

TEST(Summary, CapsLayersTruncatesNamesAndShowsHeadroom) {
  Report r = sample_report();
  r.run.autocast_dtype = "bfloat16";
  r.layers.clear();
  for (int i = 0; i < 5; ++i) {
    Layer l;
    l.name = "model.encoder.layers." + std::to_string(i) + ".very_long_submodule_name.attention.proj";
    l.type = "Linear";
    OpRecord op;
    op.op = "aten::linear";
    op.phase = ampscope::Phase::kForward;
    op.calls = 3;
    op.input_dtype = "float32";
    op.compute_dtype = "bfloat16";
    op.output_dtype = "bfloat16";
    op.autocast = ampscope::AutocastClass::kLowerPrecision;
    op.stats.count = 4;
    op.stats.absmax = i == 1 ? 1e5 : 10.0;
    if (i == 1) op.stats.overflow[static_cast<int>(Format::kFloat16)] = 2;
    l.ops.push_back(op);
    r.layers.push_back(l);
  }
  SummaryOptions opt;
  opt.max_layers = 2;
  const std::string s = render_summary(r, opt);
  EXPECT_NE(s.find("... 3 more layers"), std::string::npos) << s;
  EXPECT_NE(s.find("…"), std::string::npos) << s;
  EXPECT_NE(s.find("fp32→bf16→bf16"), std::string::npos) << s;
  // The what-if table lists only the layer that would overflow in float16, the rest as safe.
  EXPECT_NE(s.find("overflow 2 (absmax 100000)"), std::string::npos) << s;
  std::size_t lines = 0;
  for (std::size_t p = s.find("overflow 2"); p != std::string::npos; p = s.find("overflow 2", p + 1))
    ++lines;
  EXPECT_EQ(lines, 1u) << s;
  EXPECT_NE(s.find("4 of 5 layers safe in float16"), std::string::npos) << s;
  // A float16 run does not get the what-if section.
  r.run.autocast_dtype = "float16";
  EXPECT_EQ(render_summary(r, opt).find("What if"), std::string::npos);
}

TEST(Summary, AlignedColumns) {
  Report r = sample_report();
  Layer l;
  l.name = "x";
  l.type = "ReLU";
  OpRecord op = r.layers[0].ops[0];
  op.op = "aten::relu";
  l.ops.push_back(op);
  r.layers.push_back(l);
  const std::string s = render_summary(r);
  // The OP column starts at the same column on both rows of the autocast table.
  auto col_of = [&](const std::string& needle) {
    const std::size_t p = s.find(needle);
    EXPECT_NE(p, std::string::npos) << needle;
    const std::size_t bol = s.rfind('\n', p) + 1;
    return p - bol;
  };
  EXPECT_EQ(col_of("aten::linear  "), col_of("aten::relu  "));
}

TEST(ReportJson, ActionAndSeverityNamesRoundTrip) {
  // Every enum value has a distinct name that reads back to it and is what report.json holds.
  for (std::size_t i = 0; i < kActionNames.size(); ++i) {
    const auto a = static_cast<Action>(i);
    Action back{};
    ASSERT_TRUE(from_name(name_of(a), &back));
    EXPECT_EQ(back, a);
    EXPECT_EQ(json(a), json(std::string(kActionNames[i])));
  }
  for (std::size_t i = 0; i < kSeverityNames.size(); ++i) {
    const auto s = static_cast<Severity>(i);
    Severity back{};
    ASSERT_TRUE(from_name(name_of(s), &back));
    EXPECT_EQ(back, s);
    EXPECT_EQ(severity_rank(std::string(name_of(s))), severity_rank(s));
  }
  EXPECT_EQ(severity_rank("critical"), 3);
  EXPECT_EQ(severity_rank("low"), 0);
  EXPECT_EQ(severity_rank("urgent"), -1);
  Action a = Action::kWatch;
  EXPECT_FALSE(from_name("pin_fp16", &a));
  EXPECT_EQ(a, Action::kWatch);  // unchanged
}
