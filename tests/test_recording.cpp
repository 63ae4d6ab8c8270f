// What a run records (issue 7): every-N sampling with the recording callback switched off on
// unsampled steps, layer and op filters, input stats, the bounded loss-scale history, and the
// report's statement of what was sampled. Oracles: the ops the test itself ran, torch's own
// reductions, and counts worked out by hand.
#include <ampscope/hooks/layers.h>
#include <ampscope/hooks/session.h>
#include <ampscope/profiler/name_filter.h>
#include <ampscope/profiler/tensor_stats.h>
#include <ampscope/reports/report_json.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "observer_state.h"

namespace {

using ampscope::LayerScope;
using ampscope::NameFilter;
using ampscope::Session;
using ampscope::SessionOptions;
using ampscope::reports::Layer;
using ampscope::reports::Report;

std::int64_t calls_of(const Report& r, const std::string& layer, const std::string& op,
                      ampscope::Phase phase = ampscope::Phase::kForward) {
  const Layer* l = r.find_layer(layer);
  if (!l) return 0;
  std::int64_t n = 0;
  for (const auto& o : l->ops) {
    if (o.op == op && o.phase == phase) n += o.calls;
  }
  return n;
}

std::int64_t all_calls(const Report& r) {
  std::int64_t n = 0;
  for (const auto& l : r.layers) {
    for (const auto& o : l.ops) n += o.calls;
  }
  return n;
}

/// Three sibling modules and a child: the names the filters are tested on.
struct Tree : torch::nn::Module {
  std::shared_ptr<torch::nn::Module> a, ab, c;
  Tree() {
    a = register_module("enc", std::make_shared<torch::nn::Module>());
    ab = a->register_module("attn", std::make_shared<torch::nn::Module>());
    c = register_module("dec", std::make_shared<torch::nn::Module>());
  }
};

class RecordingTest : public ::testing::Test {
 protected:
  void TearDown() override { ampscope::detach_all_modules(); }

  /// One mm in each of enc, enc.attn and dec, `steps` times, each step marked.
  Report run_tree(SessionOptions o, int steps = 1) {
    auto holder = std::make_shared<Tree>();  // named_modules() needs the root in a shared_ptr
    Tree& tree = *holder;
    auto x = torch::randn({8, 8});
    Session session(o);
    session.attach(tree);
    session.start();
    for (int s = 0; s < steps; ++s) {
      {
        LayerScope enc(*tree.a);
        torch::mm(x, x);
        LayerScope attn(*tree.ab);
        torch::mm(x, x);
      }
      {
        LayerScope dec(*tree.c);
        torch::mm(x, x);
        torch::relu(x);
      }
      session.step();
    }
    session.stop();
    Report r = session.report();
    ampscope::detach_all_modules();  // the next tree may reuse these modules' addresses
    return r;
  }
};

TEST(GlobMatch, MatchesLikeShellPatterns) {
  using ampscope::glob_match;
  EXPECT_TRUE(glob_match("aten::*mm*", "aten::addmm"));
  EXPECT_TRUE(glob_match("aten::*mm*", "aten::mm"));
  EXPECT_FALSE(glob_match("aten::*mm*", "aten::relu"));
  EXPECT_TRUE(glob_match("*Backward0", "AddmmBackward0"));
  EXPECT_TRUE(glob_match("blocks.?.ffn", "blocks.3.ffn"));
  EXPECT_FALSE(glob_match("blocks.?.ffn", "blocks.10.ffn"));
  EXPECT_TRUE(glob_match("*", ""));
  EXPECT_FALSE(glob_match("", "x"));
  EXPECT_TRUE(glob_match("a*b*c", "axxbyyc"));
  EXPECT_FALSE(glob_match("a*b*c", "axxbyy"));
}

TEST(NameFilterTest, HierarchicalPatternsCoverSubLayers) {
  NameFilter f{{"blocks.1"}, {"blocks.1.attn"}, true};
  EXPECT_TRUE(f.allows("blocks.1"));
  EXPECT_TRUE(f.allows("blocks.1.ffn.wo"));
  EXPECT_FALSE(f.allows("blocks.1.attn.qkv"));
  EXPECT_FALSE(f.allows("blocks.10"));  // a dotted prefix, not a string prefix
  EXPECT_FALSE(f.allows("blocks.0"));
  NameFilter flat{{"blocks.1"}, {}, false};
  EXPECT_FALSE(flat.allows("blocks.1.ffn"));
  EXPECT_EQ(ampscope::split_patterns("a,,b*,"), (std::vector<std::string>{"a", "b*"}));
}

TEST_F(RecordingTest, IncludeRecordsTheLayerAndItsSubLayersOnly) {
  SessionOptions o;
  o.layers.include = {"enc"};
  Report r = run_tree(o);
  EXPECT_EQ(calls_of(r, "enc", "aten::mm"), 1);
  EXPECT_EQ(calls_of(r, "enc.attn", "aten::mm"), 1);
  EXPECT_EQ(calls_of(r, "dec", "aten::mm"), 0);
  EXPECT_EQ(calls_of(r, "dec", "aten::relu"), 0);
  EXPECT_EQ(all_calls(r), 2);
  EXPECT_EQ(r.run.sampling.include_layers, std::vector<std::string>{"enc"});
}

TEST_F(RecordingTest, ExcludeDropsASubLayerAndGlobsWork) {
  SessionOptions o;
  o.layers.exclude = {"enc.att*"};
  Report r = run_tree(o);
  EXPECT_EQ(calls_of(r, "enc", "aten::mm"), 1);
  EXPECT_EQ(calls_of(r, "enc.attn", "aten::mm"), 0);
  EXPECT_EQ(calls_of(r, "dec", "aten::mm"), 1);
  EXPECT_EQ(calls_of(r, "dec", "aten::relu"), 1);
  EXPECT_EQ(r.run.sampling.exclude_layers, std::vector<std::string>{"enc.att*"});
}

TEST_F(RecordingTest, OpFilterKeepsOnlyMatchingOps) {
  SessionOptions o;
  o.ops.include = {"aten::relu"};
  Report r = run_tree(o);
  EXPECT_EQ(calls_of(r, "dec", "aten::relu"), 1);
  EXPECT_EQ(all_calls(r), 1);
  o.ops.include.clear();
  o.ops.exclude = {"aten::m*"};
  Report r2 = run_tree(o);
  EXPECT_EQ(all_calls(r2), 1);
  EXPECT_EQ(calls_of(r2, "dec", "aten::relu"), 1);
}

TEST_F(RecordingTest, ExcludedLayersBackwardIsNotMisattributed) {
  auto enc = torch::nn::Linear(4, 4);
  auto dec = torch::nn::Linear(4, 4);
  auto root = std::make_shared<torch::nn::Module>();
  root->register_module("enc", enc);
  root->register_module("dec", dec);
  SessionOptions o;
  o.layers.exclude = {"enc"};
  Session session(o);
  session.attach(*root);
  session.start();
  auto y = ampscope::forward(dec, ampscope::forward(enc, torch::randn({2, 4})));
  y.sum().backward();
  session.stop();
  Report r = session.report();
  const Layer* e = r.find_layer("enc");
  ASSERT_NE(e, nullptr);
  EXPECT_TRUE(e->ops.empty());
  // dec's own backward is recorded; enc's AddmmBackward0 lands nowhere else.
  EXPECT_EQ(calls_of(r, "dec", "AddmmBackward0", ampscope::Phase::kBackward), 1);
  EXPECT_EQ(calls_of(r, "<outside>", "AddmmBackward0", ampscope::Phase::kBackward), 0);
  EXPECT_EQ(calls_of(r, "", "AddmmBackward0", ampscope::Phase::kBackward), 0);
}

TEST_F(RecordingTest, InputStatsEqualTorchsCountsOfTheInputs) {
  SessionOptions o;
  o.input_stats = true;
  Session session(o);
  session.start();
  auto a = torch::randn({5, 7});
  a[1][2] = std::numeric_limits<float>::quiet_NaN();
  a[0][0] = 0.0f;
  auto b = torch::randn({7, 3}) * 1e5;
  {
    LayerScope s("l");
    torch::mm(a, b);
  }
  session.stop();
  Report r = session.report();
  const Layer* l = r.find_layer("l");
  ASSERT_NE(l, nullptr);
  ASSERT_EQ(l->ops.size(), 1u);
  ASSERT_TRUE(l->ops[0].input_stats.has_value());
  const auto& in = *l->ops[0].input_stats;
  EXPECT_EQ(in.count, a.numel() + b.numel());
  EXPECT_EQ(in.nan, torch::isnan(a).sum().item<std::int64_t>());
  EXPECT_EQ(in.zeros, (a == 0).sum().item<std::int64_t>() + (b == 0).sum().item<std::int64_t>());
  const double absmax = std::max(torch::nan_to_num(a, 0.0).abs().max().item<double>(),
                                 b.abs().max().item<double>());
  EXPECT_DOUBLE_EQ(in.absmax, absmax);
  auto overflow16 = torch::isinf(b.to(torch::kHalf)).sum().item<std::int64_t>() +
                    torch::isinf(a.to(torch::kHalf)).sum().item<std::int64_t>();
  EXPECT_EQ(in.overflow_in(ampscope::Format::kFloat16), overflow16);
  EXPECT_EQ(r.run.sampling.stats_on, "inputs_and_outputs");
  // Round trip through report.json keeps them.
  Report back = ampscope::reports::report_from_json(ampscope::reports::report_to_json(r));
  ASSERT_TRUE(back.find_layer("l")->ops[0].input_stats.has_value());
  EXPECT_EQ(back.find_layer("l")->ops[0].input_stats->nan, in.nan);
  EXPECT_EQ(back.run.sampling.stats_on, "inputs_and_outputs");
}

TEST_F(RecordingTest, WithoutInputStatsOpsCarryNone) {
  Report r = run_tree(SessionOptions{});
  for (const auto& l : r.layers) {
    for (const auto& op : l.ops) EXPECT_FALSE(op.input_stats.has_value()) << l.name << op.op;
  }
  EXPECT_EQ(r.run.sampling.stats_on, "outputs");
}

TEST_F(RecordingTest, EveryNRecordsSampledStepsAndSaysSo) {
  SessionOptions o;
  o.every = 3;
  Report r = run_tree(o, 7);  // steps 0, 3, 6
  EXPECT_EQ(calls_of(r, "dec", "aten::relu"), 3);
  EXPECT_EQ(r.run.sampling.every, 3);
  EXPECT_EQ(r.run.steps, 7);
}

/// GradScaler updates end skipped steps (no optimizer step marked them). On unsampled steps
/// only the light callback runs; it must still count them, or sampling would drift.
TEST_F(RecordingTest, SkippedStepsAreCountedOnUnsampledSteps) {
  SessionOptions o;
  o.every = 2;
  Session session(o);
  session.start();
  auto scale = torch::full({1}, 65536.0f);
  auto tracker = torch::zeros({1}, torch::kInt);
  auto found_inf = torch::ones({1});
  auto x = torch::randn({4, 4});
  for (int it = 0; it < 6; ++it) {
    {
      LayerScope s("l");
      torch::mm(x, x);
    }
    at::_amp_update_scale_(scale, tracker, found_inf, 2.0, 0.5, 2000);  // a skipped step
  }
  EXPECT_EQ(ampscope::Observer::current_step(), 6);
  session.stop();
  Report r = session.report();
  EXPECT_EQ(calls_of(r, "l", "aten::mm"), 3);  // iterations 0, 2, 4
  // Every update is recorded with its value, sampled step or not: 2^16 halved each time.
  ASSERT_EQ(r.loss_scale.size(), 6u);
  for (std::size_t k = 0; k < 6; ++k) {
    EXPECT_DOUBLE_EQ(r.loss_scale[k].scale, 65536.0 / std::pow(2.0, double(k + 1)));
    EXPECT_EQ(r.loss_scale[k].step, static_cast<std::int64_t>(k));
    EXPECT_TRUE(r.loss_scale[k].found_inf);
  }
}

TEST(LossScaleHistory, StaysBoundedAndKeepsEveryFoundInf) {
  std::vector<ampscope::LossScaleRecord> series;
  std::int64_t found = 0;
  const std::int64_t n = 20000;
  for (std::int64_t s = 0; s < n; ++s) {
    bool inf = s % 97 == 0;
    found += inf;
    ampscope::detail::append_loss_scale(series, {s, 1024.0, inf});
    ASSERT_LE(series.size(), ampscope::kMaxLossScale);
  }
  std::int64_t kept_found = 0;
  for (std::size_t i = 0; i < series.size(); ++i) {
    kept_found += series[i].found_inf;
    if (i) {
      EXPECT_LT(series[i - 1].step, series[i].step);
    }
  }
  EXPECT_EQ(kept_found, found);
  EXPECT_EQ(series.back().step, n - 1);
  // The newest points are whole: the last 100 steps are all there.
  for (std::size_t i = 0; i < 100; ++i) EXPECT_EQ(series[series.size() - 1 - i].step, n - 1 - i);
}

}  // namespace
