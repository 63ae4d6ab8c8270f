// The observer end to end through a Session: autocast truth (oracle: torch's own results),
// folding of nested ops, casts, backward attribution, parameter gradients, threads, and the
// first non-finite origin with its FP32 re-check.
#include <ampscope/hooks/autocast_guard.h>
#include <ampscope/hooks/layers.h>
#include <ampscope/hooks/session.h>
#include <ampscope/reports/report_json.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/autocast_mode.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ampscope/reports/files.h>
#include <unistd.h>
#include <thread>

namespace {

using ampscope::AutocastGuard;
using ampscope::LayerScope;
using ampscope::Observer;
using ampscope::Session;
using ampscope::reports::Layer;
using ampscope::reports::OpRecord;
using ampscope::reports::Report;

std::string name_of(c10::ScalarType t) {
  switch (t) {
    case torch::kFloat: return "float32";
    case torch::kHalf: return "float16";
    case torch::kBFloat16: return "bfloat16";
    case torch::kDouble: return "float64";
    default: return "other";
  }
}

const Layer& layer(const Report& r, const std::string& name) {
  const Layer* l = r.find_layer(name);
  if (!l) throw std::runtime_error("no layer " + name);
  return *l;
}

std::vector<const OpRecord*> ops_named(const Layer& l, const std::string& op,
                                       ampscope::Phase phase = ampscope::Phase::kForward) {
  std::vector<const OpRecord*> out;
  for (const auto& o : l.ops) {
    if (o.op == op && o.phase == phase) out.push_back(&o);
  }
  return out;
}

const OpRecord& only_op(const Layer& l, const std::string& op) {
  auto found = ops_named(l, op);
  if (found.size() != 1) {
    throw std::runtime_error(l.name + ": expected one " + op + " entry, got " +
                             std::to_string(found.size()));
  }
  return *found[0];
}

bool has_autocast_cpu_kernel(const char* op, const char* overload) {
  auto h = c10::Dispatcher::singleton().findOp({op, overload});
  return h && h->hasKernelForDispatchKey(c10::DispatchKey::AutocastCPU);
}

/// A module tree whose children do nothing themselves: the test runs one op in each's scope.
struct Probe : torch::nn::Module {
  std::shared_ptr<torch::nn::Module> lower, fp32, promote, unlisted;
  Probe() {
    lower = register_module("lower", std::make_shared<torch::nn::Module>());
    fp32 = register_module("fp32", std::make_shared<torch::nn::Module>());
    promote = register_module("promote", std::make_shared<torch::nn::Module>());
    unlisted = register_module("unlisted", std::make_shared<torch::nn::Module>());
  }
};

class ObserverTest : public ::testing::Test {
 protected:
  void TearDown() override { ampscope::detach_all_modules(); }
};

TEST_F(ObserverTest, AutocastChoicesMatchWhatTorchReturns) {
  for (auto dtype : {torch::kBFloat16, torch::kHalf}) {
    SCOPED_TRACE(name_of(dtype));
    auto probe = std::make_shared<Probe>();
    auto a = torch::randn({8, 8}), b = torch::randn({8, 8});
    auto a_low = a.to(dtype), b_low = b.to(dtype);
    // The oracle: what torch itself returns for each call under autocast, unobserved.
    c10::ScalarType mm_t, mse_t, cat_t, relu_t;
    {
      AutocastGuard ac(torch::kCPU, dtype);
      mm_t = torch::mm(a, b).scalar_type();
      mse_t = torch::mse_loss(a_low, b_low).scalar_type();
      cat_t = torch::cat({a_low, b}).scalar_type();
      relu_t = torch::relu(a).scalar_type();
    }
    Session session;
    session.attach(*probe);
    session.start();
    {
      AutocastGuard ac(torch::kCPU, dtype);
      { LayerScope s(*probe->lower); torch::mm(a, b); }
      { LayerScope s(*probe->fp32); torch::mse_loss(a_low, b_low); }
      { LayerScope s(*probe->promote); torch::cat({a_low, b}); }
      { LayerScope s(*probe->unlisted); torch::relu(a); }
    }
    session.stop();
    Report r = session.report();

    const auto& mm = only_op(layer(r, "lower"), "aten::mm");
    EXPECT_EQ(mm.input_dtype, "float32");
    EXPECT_EQ(mm.output_dtype, name_of(mm_t));
    EXPECT_EQ(mm.compute_dtype, name_of(mm_t));
    EXPECT_EQ(mm.autocast, mm_t == dtype ? ampscope::AutocastClass::kLowerPrecision : ampscope::AutocastClass::kNone);
    EXPECT_EQ(mm.casts, 2);  // both float32 inputs cast down (neither is a cached leaf weight)

    const auto& mse = only_op(layer(r, "fp32"), "aten::mse_loss");
    EXPECT_EQ(mse.input_dtype, name_of(dtype));
    EXPECT_EQ(mse.output_dtype, name_of(mse_t));
    EXPECT_EQ(mse.compute_dtype, name_of(mse_t));
    EXPECT_EQ(mse.autocast, mse_t == torch::kFloat ? ampscope::AutocastClass::kFp32 : ampscope::AutocastClass::kNone);

    const auto& cat = only_op(layer(r, "promote"), "aten::cat");
    EXPECT_EQ(cat.input_dtype, "float32");  // widest of what was written
    EXPECT_EQ(cat.output_dtype, name_of(cat_t));
    EXPECT_EQ(cat.autocast, has_autocast_cpu_kernel("aten::cat", "") ? ampscope::AutocastClass::kPromote : ampscope::AutocastClass::kNone);

    const auto& relu = only_op(layer(r, "unlisted"), "aten::relu");
    ASSERT_FALSE(has_autocast_cpu_kernel("aten::relu", ""));
    EXPECT_EQ(relu.output_dtype, name_of(relu_t));
    EXPECT_EQ(relu.autocast, ampscope::AutocastClass::kNone);
    EXPECT_EQ(relu.casts, 0);

    // Autocast's inner calls and casts are folded into the entries, never listed as ops.
    for (const auto& l : r.layers) {
      for (const auto& o : l.ops) {
        EXPECT_NE(o.op, "aten::_to_copy") << l.name;
        EXPECT_NE(o.op, "aten::to") << l.name;
        EXPECT_EQ(o.calls, 1) << l.name << " " << o.op;
      }
    }
    ampscope::detach_all_modules();
  }
}

TEST_F(ObserverTest, NestedOpsFoldIntoTheOuterCall) {
  torch::nn::Linear fc(4, 3);
  Session session;
  session.attach(*fc, "fc");
  session.start();
  for (int i = 0; i < 3; ++i) {
    LayerScope s(*fc);
    torch::linear(torch::randn({2, 4}), fc->weight, fc->bias);  // aten::linear runs t + addmm
  }
  session.stop();
  Report r = session.report();
  const auto& fc_layer = layer(r, "fc");
  EXPECT_EQ(only_op(fc_layer, "aten::linear").calls, 3);
  EXPECT_TRUE(ops_named(fc_layer, "aten::addmm").empty());  // linear's internals
  EXPECT_TRUE(ops_named(fc_layer, "aten::t").empty());
}

TEST_F(ObserverTest, OpStatsAreThoseOfTheOutputs) {
  Session session;
  session.start();
  auto x = torch::randn({64, 32}) * 100;
  torch::Tensor y;
  {
    LayerScope s("scale");
    y = torch::mul(x, 700.0);
  }
  session.stop();
  Report r = session.report();
  const auto& mul = only_op(layer(r, "scale"), "aten::mul");
  EXPECT_EQ(mul.stats.count, y.numel());
  EXPECT_DOUBLE_EQ(mul.stats.absmax, y.abs().max().item<double>());
  auto ov = (y.to(torch::kHalf).isinf() & y.isfinite()).sum().item<int64_t>();
  EXPECT_EQ(mul.stats.overflow_in(ampscope::Format::kFloat16), ov);
  EXPECT_GT(ov, 0);
}

TEST_F(ObserverTest, UninitializedOutputsCarryNoStats) {
  Session session;
  session.start();
  {
    LayerScope s("alloc");
    torch::empty({1000});
  }
  session.stop();
  const Report r = session.report();  // (the op is a reference into it)
  const auto& empty = only_op(layer(r, "alloc"), "aten::empty");
  EXPECT_EQ(empty.calls, 1);
  EXPECT_EQ(empty.stats.count, 0);  // whatever the memory held is not the model's data
}

// detach_, requires_grad_, t_... rewrite metadata, not values: no stats pass (libtorch's
// Optimizer::zero_grad detaches every gradient each step), and NaN they pass on keeps the
// origin of the op that made it. An in-place op that writes values keeps its stats.
TEST_F(ObserverTest, MetadataInPlaceOpsTakeNoStatsPass) {
  Session session;
  session.start();
  auto x = torch::randn({16, 8});
  auto y = torch::randn({16, 8});
  {
    LayerScope s("make");
    x = torch::log(x);  // NaN where x < 0
    y = torch::mul(y, 3.0);
  }
  ASSERT_TRUE(x.isnan().any().item<bool>());
  {
    LayerScope s("meta");
    x.detach_();
    x.t_();
    y.requires_grad_();
    y.detach_();
    y.mul_(2.0);
  }
  session.stop();
  const Report r = session.report();
  const auto& meta = layer(r, "meta");
  for (const char* op : {"aten::detach_", "aten::t_"}) {
    for (const auto* e : ops_named(meta, op)) EXPECT_EQ(e->stats.count, 0) << op;
    EXPECT_FALSE(ops_named(meta, op).empty()) << op;
  }
  const auto& mul = only_op(meta, "aten::mul_");
  EXPECT_EQ(mul.stats.count, y.numel());
  EXPECT_DOUBLE_EQ(mul.stats.absmax, y.abs().max().item<double>());
  EXPECT_EQ(only_op(layer(r, "make"), "aten::log").nonfinite_from_finite, 1);
  for (const char* op : {"aten::detach_", "aten::t_"})
    for (const auto* e : ops_named(meta, op)) EXPECT_EQ(e->nonfinite_from_finite, 0) << op;
}

// What the benchmarks divide by their steps: every element a read asked for, once per pass.
TEST_F(ObserverTest, ReadCountsAreTheElementsRead) {
  auto x = torch::randn({64, 128});  // made before the session: not an observed op's output
  Session session;
  session.start();
  torch::Tensor y, w;
  {
    LayerScope s("ops");
    y = torch::mul(x, 2.0);  // an output: one stats pass
    y.view({128, 64});       // a view: none
    y.detach_();             // metadata only: none
    w = torch::relu(y);      // another output: one pass
  }
  const auto after_ops = Observer::read_counts();
  EXPECT_EQ(after_ops[0], y.numel() + w.numel());
  EXPECT_EQ(after_ops[1], 0);
  // w and its transpose cover the buffer read above, at the same version, in the same step
  EXPECT_FALSE(Observer::any_nonfinite({w, w.t()}));
  const auto after_check = Observer::read_counts();
  EXPECT_EQ(after_check[0], after_ops[0]);
  EXPECT_EQ(after_check[1], 0);
  EXPECT_EQ(after_check[2] - after_ops[2], 2 * w.numel());
  w.mul_(0.5);  // an observed in-place op: its new version read by a stats pass, then reused
  EXPECT_FALSE(Observer::any_nonfinite({w}));
  const auto after_inplace = Observer::read_counts();
  EXPECT_EQ(after_inplace[0], after_check[0] + w.numel());
  EXPECT_EQ(after_inplace[2], after_check[2] + w.numel());
  EXPECT_FALSE(Observer::any_nonfinite({x}));  // never read: a scan for NaN/Inf only
  EXPECT_EQ(Observer::read_counts()[1], x.numel());
  session.stop();
}

struct TwoLayer : torch::nn::Module {
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  TwoLayer() {
    fc1 = register_module("fc1", torch::nn::Linear(6, 5));
    fc2 = register_module("fc2", torch::nn::Linear(5, 2));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    LayerScope s(*this);
    return ampscope::forward(fc2, torch::relu(ampscope::forward(fc1, x)));
  }
};

TEST_F(ObserverTest, BackwardNodesLandInTheirForwardLayer) {
  auto model = std::make_shared<TwoLayer>();
  Session session;
  session.attach(*model, "net");
  session.start();
  auto loss = model->forward(torch::randn({3, 6})).pow(2).sum();
  loss.backward();
  session.stop();
  Report r = session.report();
  if (getenv("AMPSCOPE_DEBUG")) {
    for (const auto& l : r.layers)
      for (const auto& o : l.ops) std::cerr << l.name << " " << o.op << " " << ampscope::name_of(o.phase) << "\n";
  }
  for (const char* name : {"net.fc1", "net.fc2"}) {
    const auto& l = layer(r, name);
    EXPECT_FALSE(ops_named(l, "AddmmBackward0", ampscope::Phase::kBackward).empty()) << name;
  }
  EXPECT_FALSE(ops_named(layer(r, "net"), "ReluBackward0", ampscope::Phase::kBackward).empty());
  // Incoming gradient of fc2's AddmmBackward0 = d(sum y^2)/dy = 2y: 3x2 values.
  EXPECT_EQ(ops_named(layer(r, "net.fc2"), "AddmmBackward0", ampscope::Phase::kBackward)[0]->stats.count, 6);

  // Parameter gradients, per parameter, against autograd's own .grad.
  const auto& fc1 = layer(r, "net.fc1");
  ASSERT_EQ(fc1.params.size(), 2u);
  for (const auto& p : fc1.params) {
    const auto& t = p.name == "net.fc1.weight" ? model->fc1->weight : model->fc1->bias;
    EXPECT_EQ(p.updates, 1) << p.name;
    EXPECT_EQ(p.grad.count, t.grad().numel()) << p.name;
    EXPECT_DOUBLE_EQ(p.grad.absmax, t.grad().abs().max().item<double>()) << p.name;
  }
}

TEST_F(ObserverTest, TwoThreadsLoseNoCalls) {
  constexpr int kCalls = 200;
  Session session;
  session.start();
  auto work = [](const char* name) {
    LayerScope s(name);
    auto a = torch::randn({4, 4});
    for (int i = 0; i < kCalls; ++i) torch::mm(a, a);
  };
  std::thread t1(work, "thread_a"), t2(work, "thread_b");
  t1.join();
  t2.join();
  session.stop();
  Report r = session.report();
  EXPECT_EQ(only_op(layer(r, "thread_a"), "aten::mm").calls, kCalls);
  EXPECT_EQ(only_op(layer(r, "thread_b"), "aten::mm").calls, kCalls);
}

TEST_F(ObserverTest, FirstNonFiniteIsTheOverflowingOpNotItsConsumers) {
  Session session;
  session.start();
  auto a = torch::full({2, 2}, 300.0f), b = torch::full({2, 2}, 300.0f);
  {
    AutocastGuard ac(torch::kCPU, torch::kHalf);
    torch::Tensor h;
    {
      LayerScope s("proj");
      h = s.returns(torch::mm(a, b));  // 180000 in float16 is inf; in float32 it is fine
    }
    LayerScope s("after");
    s.returns(torch::relu(h));
  }
  session.stop();
  Report r = session.report();
  ASSERT_TRUE(r.first_nonfinite.has_value());
  EXPECT_EQ(r.first_nonfinite->layer, "proj");
  EXPECT_EQ(r.first_nonfinite->op, "aten::mm");
  EXPECT_EQ(r.first_nonfinite->kind, "inf");
  EXPECT_TRUE(r.first_nonfinite->inputs_finite);
  ASSERT_TRUE(r.first_nonfinite->fp32_also_nonfinite.has_value());
  EXPECT_FALSE(*r.first_nonfinite->fp32_also_nonfinite);
  EXPECT_EQ(only_op(layer(r, "proj"), "aten::mm").nonfinite_from_finite, 1);
  EXPECT_EQ(only_op(layer(r, "after"), "aten::relu").nonfinite_from_finite, 0);  // propagation
  ASSERT_FALSE(r.recommendations.empty());
  EXPECT_EQ(r.recommendations[0].layer, "proj");
  EXPECT_EQ(r.recommendations[0].action, ampscope::reports::Action::kPinFp32);
  for (const auto& rec : r.recommendations) EXPECT_NE(rec.layer, "after");
}

TEST_F(ObserverTest, AFreedParameterIsNeverTakenForALaterTensor) {
  // Parameters are named by their TensorImpl (as FSDP2's sharded ones are, without a hook that
  // keeps them alive). Tensors made right after one is freed would take its memory; one holding
  // NaN/Inf of unknown source must not become "parameters an unobserved optimizer step wrote"
  // but be named by the op that first saw it (oracle: the op the test calls).
  {
    auto gone = torch::ones({3});
    ampscope::Observer::name_param(gone, 0);
  }
  std::vector<torch::Tensor> held;
  for (int i = 0; i < 64; ++i) held.push_back(torch::full({3}, INFINITY));
  auto net = torch::nn::Linear(4, 1);
  torch::optim::SGD opt(net->parameters(), 0.1);
  Session session;
  session.attach(*net, "net");
  session.start();
  net->forward(torch::ones({2, 4})).sum().backward();
  session.optimizer_step(opt);  // optimizer steps so far are observed: the check applies now
  const float total = torch::stack(held).sum().item<float>();
  session.stop();
  EXPECT_TRUE(std::isinf(total));
  Report r = session.report();
  ASSERT_TRUE(r.first_nonfinite.has_value());
  EXPECT_EQ(r.first_nonfinite->op, "aten::stack");
  EXPECT_EQ(r.first_nonfinite->reached, "host_read");
}

// libtorch's optimizers write parameters through `p.data()` (a new version counter: the
// parameter's own version does not move, and a read of it earlier in the step, at that
// version, no longer holds). A NaN such a step makes, on the run's last step, is still found
// when the step ends, recorded or under the per-op sentinel. Oracle: the weights. (The weight
// is large enough for the read cache, which took the values read before the step for them.)
TEST_F(ObserverTest, ALibtorchOptimizersNanIsFoundWhenTheStepEnds) {
  for (const std::int64_t every : {1, 1000}) {
    torch::manual_seed(0);
    auto net = torch::nn::Linear(torch::nn::LinearOptions(128, 64).bias(false));
    torch::optim::SGD opt(net->parameters(), 0.1);
    ampscope::SessionOptions so;
    so.every = every;
    so.write_html = false;
    Session session(so);
    session.attach(*net, "net");
    session.start();
    for (int step = 0; step < 3; ++step) {
      if (step == 2) static_cast<torch::optim::SGDOptions&>(opt.param_groups()[0].options()).lr(INFINITY);
      opt.zero_grad();
      net->forward(torch::randn({8, 128})).sum().backward();
      const auto version = net->weight._version();
      session.optimizer_step(opt);
      EXPECT_EQ(net->weight._version(), version) << "the premise: .data() writes keep the version";
    }
    session.stop();
    ASSERT_FALSE(torch::isfinite(net->weight).all().item<bool>());  // the NaN is real
    Report r = session.report();
    ASSERT_TRUE(r.first_nonfinite.has_value()) << "every=" << every;
    EXPECT_EQ(r.first_nonfinite->step, 2) << "every=" << every;
    EXPECT_EQ(r.first_nonfinite->phase, ampscope::Phase::kOptimizer) << "every=" << every;
    EXPECT_EQ(r.first_nonfinite->layer, "net") << "every=" << every;
    EXPECT_EQ(r.first_nonfinite->op.rfind("optimizer step", 0), 0u) << r.first_nonfinite->op;
  }
}

TEST_F(ObserverTest, LogOfZeroIsAModelBugInFp32Too) {
  Session session;
  session.start();
  {
    LayerScope s("head");
    s.returns(torch::log(torch::zeros({3})));
  }
  session.stop();
  Report r = session.report();
  ASSERT_TRUE(r.first_nonfinite.has_value());
  EXPECT_EQ(r.first_nonfinite->op, "aten::log");
  EXPECT_EQ(r.first_nonfinite->reached, "module_output");
  ASSERT_TRUE(r.first_nonfinite->fp32_also_nonfinite.has_value());
  EXPECT_TRUE(*r.first_nonfinite->fp32_also_nonfinite);
  for (const auto& rec : r.recommendations) EXPECT_NE(rec.action, ampscope::reports::Action::kPinFp32);
}

TEST_F(ObserverTest, NonFiniteConsumedInsideALayerIsBenign) {
  // T5's relative-position bucketing: log(0) = -inf, discarded by where; nothing leaves the layer.
  Session session;
  session.start();
  torch::Tensor out;
  {
    LayerScope s("attn");
    auto pos = torch::arange(4).to(torch::kFloat);
    auto logs = torch::log(pos);  // -inf at 0
    out = s.returns(torch::where(pos > 0, logs, torch::zeros_like(pos)));
  }
  session.stop();
  ASSERT_TRUE(torch::isfinite(out).all().item<bool>());  // the oracle: torch's own result
  Report r = session.report();
  EXPECT_FALSE(r.first_nonfinite.has_value());
  EXPECT_TRUE(r.recommendations.empty());
  const auto& log = only_op(layer(r, "attn"), "aten::log");
  EXPECT_EQ(log.nonfinite_from_finite, 1);
  EXPECT_EQ(log.benign_nonfinite, 1);
  EXPECT_EQ(log.harmful_nonfinite, 0);
}

TEST_F(ObserverTest, SentinelFindsTheOriginOnAnUnsampledStep) {
  ampscope::SessionOptions o;
  o.every = 4;
  Session session(o);
  session.start();
  auto a = torch::full({2, 2}, 100.0f);
  for (int step = 0; step < 4; ++step) {
    AutocastGuard ac(torch::kCPU, torch::kHalf);
    LayerScope s("proj");
    s.returns(torch::mm(a * (step == 2 ? 4.0f : 1.0f), a));  // 80000 at step 2: inf in fp16
    session.step();
  }
  session.stop();
  Report r = session.report();
  ASSERT_TRUE(r.first_nonfinite.has_value());
  EXPECT_EQ(r.first_nonfinite->step, 2);  // unsampled (every 4): found by the sentinel
  EXPECT_EQ(r.first_nonfinite->layer, "proj");
  EXPECT_EQ(r.first_nonfinite->op, "aten::mm");
  EXPECT_EQ(r.first_nonfinite->compute_dtype, "float16");
  ASSERT_TRUE(r.first_nonfinite->fp32_also_nonfinite.has_value());
  EXPECT_FALSE(*r.first_nonfinite->fp32_also_nonfinite);  // float32 computes 80000 fine
  ASSERT_FALSE(r.recommendations.empty());
  EXPECT_EQ(r.recommendations[0].layer, "proj");
  EXPECT_EQ(r.recommendations[0].action, ampscope::reports::Action::kPinFp32);
}

TEST_F(ObserverTest, CleanRunHasNoRecommendationsAndWritesReadableFiles) {
  auto model = std::make_shared<TwoLayer>();
  // No std::filesystem next to libtorch (see reports/files.h).
  char tmpl[] = "/tmp/ampscope_test_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string dir = std::string(tmpl) + "/out";
  {
    ampscope::SessionOptions o;
    o.out_dir = dir;
    Session session(o);
    session.attach(*model);
    session.start();
    model->forward(torch::randn({3, 6})).sum().backward();
    session.step();
  }  // the destructor stops and writes
  Report r = ampscope::reports::read_report(dir + "/report.json");
  EXPECT_TRUE(r.recommendations.empty());
  EXPECT_FALSE(r.first_nonfinite.has_value());
  EXPECT_EQ(r.run.steps, 1);
  using ampscope::reports::PathKind;
  EXPECT_EQ(ampscope::reports::path_kind(dir + "/report.html"), PathKind::kFile);
  EXPECT_EQ(ampscope::reports::path_kind(dir + "/precision_map.json"), PathKind::kFile);
}

TEST_F(ObserverTest, EveryNSkipsUnsampledSteps) {
  ampscope::SessionOptions o;
  o.every = 2;
  Session session(o);
  session.start();
  auto a = torch::randn({4, 4});
  for (int step = 0; step < 4; ++step) {
    LayerScope s("l");
    torch::mm(a, a);
    session.step();
  }
  session.stop();
  Report r = session.report();
  EXPECT_EQ(only_op(layer(r, "l"), "aten::mm").calls, 2);  // steps 0 and 2
}

TEST(AutocastGuardTest, NestsAndRestoresLikeTorchAutocast) {
  EXPECT_FALSE(at::autocast::is_autocast_enabled(torch::kCPU));
  auto before = at::autocast::get_autocast_dtype(torch::kCPU);
  {
    AutocastGuard outer(torch::kCPU, torch::kHalf);
    EXPECT_TRUE(at::autocast::is_autocast_enabled(torch::kCPU));
    EXPECT_EQ(at::autocast::get_autocast_dtype(torch::kCPU), torch::kHalf);
    {
      AutocastGuard off(torch::kCPU, torch::kHalf, /*enabled=*/false);
      EXPECT_FALSE(at::autocast::is_autocast_enabled(torch::kCPU));
      EXPECT_EQ(torch::mm(torch::randn({2, 2}), torch::randn({2, 2})).scalar_type(), torch::kFloat);
    }
    EXPECT_TRUE(at::autocast::is_autocast_enabled(torch::kCPU));
    EXPECT_EQ(torch::mm(torch::randn({2, 2}), torch::randn({2, 2})).scalar_type(), torch::kHalf);
  }
  EXPECT_FALSE(at::autocast::is_autocast_enabled(torch::kCPU));
  EXPECT_EQ(at::autocast::get_autocast_dtype(torch::kCPU), before);
}

}  // namespace

namespace {

TEST_F(ObserverTest, PinnedLayersComputeAndReturnFloat32) {
  auto model = std::make_shared<TwoLayer>();
  Session session;
  session.attach(*model, "net");
  std::vector<std::string> unknown;
  auto pinned = ampscope::pin_layers({"net.fc2", "net.nope"}, &unknown);
  EXPECT_EQ(pinned, std::vector<std::string>{"net.fc2"});
  EXPECT_EQ(unknown, std::vector<std::string>{"net.nope"});
  session.start();
  torch::Tensor out;
  {
    AutocastGuard ac(torch::kCPU, torch::kBFloat16);
    out = model->forward(torch::randn({3, 6}));
    EXPECT_TRUE(at::autocast::is_autocast_enabled(torch::kCPU));  // restored after the pin
  }
  session.stop();
  Report r = session.report();
  EXPECT_EQ(out.scalar_type(), torch::kFloat);
  const auto& fc2 = only_op(layer(r, "net.fc2"), "aten::addmm");
  EXPECT_EQ(fc2.compute_dtype, "float32");
  EXPECT_EQ(fc2.input_dtype, "float32");  // cast up by ampscope::forward
  EXPECT_EQ(fc2.autocast, ampscope::AutocastClass::kNone);
  EXPECT_EQ(only_op(layer(r, "net.fc1"), "aten::addmm").compute_dtype, "bfloat16");
}

}  // namespace

namespace {

TEST_F(ObserverTest, PerStepSeriesStaysBoundedAndKeepsTheMaximum) {
  Session session;
  session.start();
  auto a = torch::ones({2});
  for (int step = 0; step < 700; ++step) {
    LayerScope s("grow");
    torch::mul(a, step == 333 ? 1e6 : 1.0);
    session.step();
  }
  session.stop();
  const Report r = session.report();
  const auto& mul = only_op(layer(r, "grow"), "aten::mul");
  EXPECT_EQ(mul.calls, 700);
  EXPECT_LE(mul.absmax_by_step.size(), ampscope::kMaxSeries);
  double peak = 0;
  for (const auto& point : mul.absmax_by_step) peak = std::max(peak, point.second);
  EXPECT_DOUBLE_EQ(peak, 1e6);  // down-sampling keeps maxima
}

}  // namespace

// ---- the C++ watch of unsampled steps (SessionOptions::watch_unsampled, detail::WatchFrame)

/// A parent module (its output is checked on a watched step): Linear, BatchNorm (buffers the
/// replay writes), Dropout (the CPU RNG) and an exp that overflows float32 when `boost` is set
/// (bounded by a tanh otherwise).
struct WatchFfn : torch::nn::Module {
  torch::nn::Linear wi{nullptr}, wo{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
  torch::nn::Dropout drop{nullptr};
  float boost = 1.0f;
  WatchFfn() {
    wi = register_module("wi", torch::nn::Linear(4, 8));
    bn = register_module("bn", torch::nn::BatchNorm1d(8));
    drop = register_module("drop", torch::nn::Dropout(0.25));
    wo = register_module("wo", torch::nn::Linear(8, 4));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    LayerScope s(*this);
    auto h = ampscope::forward(drop, ampscope::forward(bn, ampscope::forward(wi, x)));
    return ampscope::forward(wo, torch::exp(torch::tanh(h) * boost));
  }
};

/// The root marks itself with a LayerScope only (not replayable); `shift` makes a NaN with an
/// op of its own, outside every ampscope::forward call.
struct WatchNet : torch::nn::Module {
  torch::nn::Linear inp{nullptr};
  std::shared_ptr<WatchFfn> ffn;
  float shift = 0.0f;
  WatchNet() {
    inp = register_module("inp", torch::nn::Linear(4, 4));
    ffn = register_module("ffn", std::make_shared<WatchFfn>());
  }
  torch::Tensor forward(const torch::Tensor& x) {
    LayerScope s(*this);
    auto h = ampscope::forward(inp, x);
    if (shift != 0.0f) h = torch::log(h - shift);  // NaN where h < shift
    return ampscope::forward(ffn, h);
  }
};

/// What a run leaves behind: every parameter and buffer (bits), the next CPU random number.
struct RunEnd {
  std::vector<torch::Tensor> state;
  float next_random = 0;
  Report report;
  bool same_as(const RunEnd& o) const {
    if (state.size() != o.state.size() || next_random != o.next_random) return false;
    for (std::size_t i = 0; i < state.size(); ++i) {  // bit patterns: NaN equals itself
      if (!torch::equal(state[i].view(torch::kInt), o.state[i].view(torch::kInt))) return false;
    }
    return true;
  }
};

/// Trains WatchNet for steps 0..5 (SGD); at step 5 the forward goes non-finite (through
/// `boost` or `shift`). every = 0: unprofiled.
RunEnd train_watch_net(int every, bool watch, float boost, float shift) {
  torch::manual_seed(0);
  auto net = std::make_shared<WatchNet>();
  torch::optim::SGD opt(net->parameters(), 0.01);
  auto x = torch::randn({16, 4});
  std::unique_ptr<Session> session;
  if (every > 0) {
    ampscope::SessionOptions o;
    o.every = every;
    o.watch_unsampled = watch;
    session = std::make_unique<Session>(o);
    session->attach(*net, "net");
    session->start();
  }
  for (int step = 0; step < 6; ++step) {
    net->ffn->boost = step == 5 ? boost : 1.0f;
    net->shift = step == 5 ? shift : 0.0f;
    auto loss = net->forward(x).pow(2).mean();
    opt.zero_grad();
    loss.backward();
    if (session) {
      session->optimizer_step(opt);
    } else {
      opt.step();
    }
  }
  RunEnd end;
  if (session) {
    session->stop();
    end.report = session->report();
  }
  for (const auto& p : net->parameters()) end.state.push_back(p.detach().clone());
  for (const auto& b : net->buffers()) end.state.push_back(b.detach().clone().to(torch::kFloat));
  end.next_random = torch::rand({1}).item<float>();
  return end;
}

TEST_F(ObserverTest, CppWatchReplaysTheModuleAndNamesTheOpAsAnObservedStepWould) {
  // exp(h * 1000) overflows float32 at step 5, unsampled under every=4.
  const RunEnd plain = train_watch_net(0, false, 1000.0f, 0.0f);
  const RunEnd observed = train_watch_net(1, false, 1000.0f, 0.0f);  // every op observed
  const RunEnd watched = train_watch_net(4, true, 1000.0f, 0.0f);
  const RunEnd sentinel = train_watch_net(4, false, 1000.0f, 0.0f);  // the per-op sentinel
  ASSERT_TRUE(observed.report.first_nonfinite.has_value());
  const auto& want = *observed.report.first_nonfinite;
  EXPECT_EQ(want.step, 5);
  EXPECT_EQ(want.layer, "net.ffn");
  EXPECT_EQ(want.op, "aten::exp");
  for (const RunEnd* run : {&watched, &sentinel}) {
    SCOPED_TRACE(run == &watched ? "watch" : "per-op sentinel");
    ASSERT_TRUE(run->report.first_nonfinite.has_value());
    const auto& got = *run->report.first_nonfinite;
    EXPECT_EQ(got.step, want.step);
    EXPECT_EQ(got.layer, want.layer);
    EXPECT_EQ(got.op, want.op);
    EXPECT_EQ(got.phase, want.phase) << got.op;
    EXPECT_EQ(got.kind, want.kind);
  }
  // The replay ran Dropout (RNG) and BatchNorm (running stats) again: the training sees none
  // of it, bit for bit.
  EXPECT_TRUE(observed.same_as(plain));
  EXPECT_TRUE(watched.same_as(plain));
}

TEST_F(ObserverTest, CppWatchOfACleanRunChangesNothingAndFindsNothing) {
  const RunEnd plain = train_watch_net(0, false, 1.0f, 0.0f);
  const RunEnd watched = train_watch_net(4, true, 1.0f, 0.0f);
  EXPECT_FALSE(watched.report.first_nonfinite.has_value());
  EXPECT_TRUE(watched.same_as(plain));
  // Steps 0 and 4 recorded with stats; the watched steps observe no op (and replay nothing).
  for (const auto& o : layer(watched.report, "net.inp").ops) {
    if (o.phase == ampscope::Phase::kForward) {
      EXPECT_EQ(o.calls, 2) << o.op;
    }
  }
}

TEST_F(ObserverTest, CppWatchBlamesTheLayerWhoseOwnOpsCannotBeReplayed) {
  // log(h - 1000) in the root's own code: NaN before ffn's call. The root is a LayerScope,
  // not a call ampscope can run again: the root's layer is named, the op is not.
  const RunEnd watched = train_watch_net(4, true, 1.0f, 1000.0f);
  ASSERT_TRUE(watched.report.first_nonfinite.has_value());
  const auto& got = *watched.report.first_nonfinite;
  EXPECT_EQ(got.step, 5);
  EXPECT_EQ(got.layer, "net");
  EXPECT_NE(got.op.find("not replayable"), std::string::npos) << got.op;
  const RunEnd observed = train_watch_net(1, false, 1.0f, 1000.0f);
  ASSERT_TRUE(observed.report.first_nonfinite.has_value());
  EXPECT_EQ(observed.report.first_nonfinite->layer, "net");  // the same layer, op by op
  EXPECT_EQ(observed.report.first_nonfinite->op, "aten::log");
}
