// ampscope::GradScaler semantics (hand-computed scale sequences, torch.amp.GradScaler's error
// states), its state dict, and the Session integration: one step per iteration, skipped or
// not, and one loss-scale entry per update. Parity with Python's GradScaler on random
// sequences is tested in tests/python/test_grad_scaler.py.
#include <ampscope/hooks/grad_scaler.h>
#include <ampscope/hooks/layers.h>
#include <ampscope/hooks/session.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

namespace {

using ampscope::GradScaler;
using ampscope::GradScalerOptions;
using ampscope::GradScalerState;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

/// One parameter trained by SGD(lr=1) on loss = sum(w * g), so w.grad = scale * g exactly.
struct Toy {
  torch::Tensor w = torch::tensor({1.0f, 2.0f, 3.0f}, torch::requires_grad());
  torch::optim::SGD opt{{w}, torch::optim::SGDOptions(1.0)};

  /// Zeroes the gradient and back-propagates scaler.scale(sum(w * g)).
  void backward(GradScaler& scaler, const torch::Tensor& g) {
    opt.zero_grad();
    scaler.scale((w * g).sum()).backward();
  }
};

GradScalerOptions small(double init, std::int64_t interval) {
  GradScalerOptions o;
  o.init_scale = init;
  o.growth_interval = interval;
  return o;
}

TEST(GradScalerTest, DefaultsAreTorchs) {
  GradScaler s;
  EXPECT_EQ(s.get_scale(), 65536.0);
  EXPECT_EQ(s.get_growth_tracker(), 0);
  EXPECT_EQ(s.get_growth_factor(), 2.0);
  EXPECT_EQ(s.get_backoff_factor(), 0.5);
  EXPECT_EQ(s.get_growth_interval(), 2000);
  EXPECT_FALSE(s.scale_tensor().defined());  // created lazily, on the first scaled tensor
  auto scaled = s.scale(torch::ones({2}, torch::kDouble));
  EXPECT_EQ(s.scale_tensor().scalar_type(), torch::kFloat);
  EXPECT_EQ(scaled.scalar_type(), torch::kDouble);
  EXPECT_TRUE(torch::equal(scaled, torch::full({2}, 65536.0, torch::kDouble)));
}

TEST(GradScalerTest, GrowsAfterIntervalCleanStepsAndBacksOffOnInfOrNaN) {
  GradScaler scaler(small(8.0, 3));
  Toy toy;
  // Hand-computed: growth x2 after 3 clean updates in a row, backoff x0.5 on inf/NaN.
  const std::vector<float> bad = {0, 0, 0, 0, kInf, kNaN, 0, 0, 0};
  const std::vector<double> scale = {8, 8, 16, 16, 8, 4, 4, 4, 8};
  const std::vector<std::int64_t> tracker = {1, 2, 0, 1, 0, 0, 1, 2, 0};
  for (std::size_t i = 0; i < bad.size(); ++i) {
    auto before = toy.w.detach().clone();
    auto g = torch::tensor({0.5f, -1.0f, bad[i]});
    toy.backward(scaler, g);
    bool stepped = scaler.step(toy.opt);
    scaler.update();
    EXPECT_EQ(stepped, bad[i] == 0) << "iteration " << i;
    EXPECT_EQ(scaler.get_scale(), scale[i]) << "iteration " << i;
    EXPECT_EQ(scaler.get_growth_tracker(), tracker[i]) << "iteration " << i;
    // Stepped: w -= 1 * g with g unscaled exactly (powers of two); skipped: w untouched.
    auto expected = stepped ? before - g : before;
    EXPECT_TRUE(torch::equal(toy.w.detach(), expected)) << "iteration " << i;
  }
}

TEST(GradScalerTest, UnscaleThenStepDoesNotUnscaleTwice) {
  GradScaler scaler(small(1024.0, 2000));
  Toy toy;
  auto g = torch::tensor({0.25f, 3.0f, -7.0f});
  toy.backward(scaler, g);
  EXPECT_TRUE(torch::equal(toy.w.grad(), g * 1024));
  scaler.unscale_(toy.opt);
  EXPECT_TRUE(torch::equal(toy.w.grad(), g));
  auto before = toy.w.detach().clone();
  EXPECT_TRUE(scaler.step(toy.opt));
  EXPECT_TRUE(torch::equal(toy.w.grad(), g));
  EXPECT_TRUE(torch::equal(toy.w.detach(), before - g));
  scaler.update();
}

TEST(GradScalerTest, MisuseRaisesLikeTorch) {
  GradScaler scaler;
  Toy toy;
  EXPECT_THROW(scaler.unscale_(toy.opt), std::runtime_error);  // nothing scaled yet
  EXPECT_THROW(scaler.update(), std::runtime_error);
  toy.backward(scaler, torch::ones({3}));
  EXPECT_THROW(scaler.update(), std::runtime_error);  // no inf checks recorded
  scaler.unscale_(toy.opt);
  EXPECT_THROW(scaler.unscale_(toy.opt), std::runtime_error);  // twice
  scaler.step(toy.opt);
  EXPECT_THROW(scaler.unscale_(toy.opt), std::runtime_error);  // after step
  EXPECT_THROW(scaler.step(toy.opt), std::runtime_error);      // step twice
  scaler.update();
  toy.backward(scaler, torch::ones({3}));
  EXPECT_TRUE(scaler.step(toy.opt));  // a new iteration after update()
  scaler.update();
  EXPECT_THROW(GradScaler(small(1.0, 1)).update(1.0), std::runtime_error);
  GradScalerOptions bad;
  bad.growth_factor = 1.0;
  EXPECT_THROW(GradScaler{bad}, std::invalid_argument);
  bad = {};
  bad.backoff_factor = 1.0;
  EXPECT_THROW(GradScaler{bad}, std::invalid_argument);
}

TEST(GradScalerTest, Float16GradientsAreRefused) {
  GradScaler scaler;
  auto w = torch::ones({2}, torch::TensorOptions().dtype(torch::kHalf).requires_grad(true));
  torch::optim::SGD opt({w}, torch::optim::SGDOptions(0.1));
  scaler.scale(w.sum()).backward();
  EXPECT_THROW(scaler.step(opt), std::invalid_argument);
}

TEST(GradScalerTest, NoGradientsIsAnError) {
  GradScaler scaler;
  Toy toy;
  scaler.scale(torch::ones({}));
  EXPECT_THROW(scaler.step(toy.opt), std::runtime_error);
}

TEST(GradScalerTest, InfInOneDtypeGroupSkipsTheWholeOptimizer) {
  GradScaler scaler(small(4.0, 2000));
  auto a = torch::ones({2}, torch::requires_grad());
  auto b = torch::ones({2}, torch::TensorOptions().dtype(torch::kDouble).requires_grad(true));
  torch::optim::SGD opt({a, b}, torch::optim::SGDOptions(1.0));
  auto loss = (a * torch::tensor({1.0f, 2.0f})).sum() +
              (b * torch::tensor({double(kInf), 1.0}, torch::kDouble)).sum().to(torch::kFloat);
  scaler.scale(loss).backward();
  EXPECT_FALSE(scaler.step(opt));
  EXPECT_TRUE(torch::equal(a.grad(), torch::tensor({1.0f, 2.0f})));  // unscaled all the same
  EXPECT_TRUE(torch::equal(a.detach(), torch::ones({2})));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 2.0);
}

TEST(GradScalerTest, EachOptimizerSkipsOnItsOwnGradientsAndUpdateSeesAll) {
  GradScaler scaler(small(4.0, 2000));
  Toy clean, dirty;
  clean.backward(scaler, torch::ones({3}));
  dirty.backward(scaler, torch::tensor({1.0f, kNaN, 1.0f}));
  EXPECT_TRUE(scaler.step(clean.opt));
  EXPECT_FALSE(scaler.step(dirty.opt));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 2.0);
  EXPECT_EQ(scaler.get_growth_tracker(), 0);
}

TEST(GradScalerTest, UpdateWithANewScale) {
  GradScaler scaler(small(4.0, 1));
  Toy toy;
  toy.backward(scaler, torch::ones({3}));
  scaler.step(toy.opt);
  scaler.update(100.0);  // replaces the growth the clean step would have caused
  EXPECT_EQ(scaler.get_scale(), 100.0);
  EXPECT_EQ(scaler.get_growth_tracker(), 0);
  scaler.update(torch::tensor({3.0f}));
  EXPECT_EQ(scaler.get_scale(), 3.0);
  EXPECT_THROW(scaler.update(torch::ones({2})), std::invalid_argument);
}

TEST(GradScalerTest, DisabledPassesThrough) {
  GradScalerOptions o;
  o.enabled = false;
  o.growth_factor = 0.5;  // not checked when disabled, as in torch
  GradScaler scaler(o);
  Toy toy;
  auto loss = (toy.w * 2).sum();
  EXPECT_TRUE(scaler.scale(loss).is_same(loss));
  loss.backward();
  auto before = toy.w.detach().clone();
  EXPECT_TRUE(scaler.step(toy.opt));
  EXPECT_FALSE(torch::equal(toy.w.detach(), before));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 1.0);
  EXPECT_FALSE(scaler.state_dict().has_value());
  scaler.load_state_dict(std::nullopt);  // a no-op when disabled
}

TEST(GradScalerTest, StateDictRoundTripsBeforeAndAfterLazyInit) {
  GradScaler a(small(8.0, 3));
  Toy toy;
  for (int i = 0; i < 2; ++i) {
    toy.backward(a, torch::ones({3}));
    a.step(toy.opt);
    a.update();
  }
  GradScalerState s = *a.state_dict();
  EXPECT_EQ(s.scale, 8.0);
  EXPECT_EQ(s.growth_tracker, 2);
  EXPECT_EQ(s.growth_interval, 3);
  GradScaler fresh;  // loaded before its scale exists: used when created
  fresh.load_state_dict(s);
  EXPECT_EQ(fresh.get_scale(), 8.0);
  EXPECT_EQ(fresh.get_growth_tracker(), 2);
  GradScaler used(small(2.0, 50));  // loaded after: its tensors are filled
  used.scale(torch::ones({}));
  used.load_state_dict(s);
  for (GradScaler* sc : {&fresh, &used}) {
    Toy t;
    t.backward(*sc, torch::ones({3}));
    EXPECT_TRUE(torch::equal(t.w.grad(), torch::full({3}, 8.0f)));
    sc->step(t.opt);
    sc->update();  // third clean step of interval 3
    EXPECT_EQ(sc->get_scale(), 16.0);
    EXPECT_EQ(sc->get_growth_tracker(), 0);
  }
  EXPECT_THROW(fresh.load_state_dict(std::nullopt), std::runtime_error);
}

TEST(GradScalerTest, StateJsonUsesPythonsKeys) {
  GradScalerState s{1024.0, 3.0, 0.25, 7, 5};
  auto text = ampscope::grad_scaler_state_to_json(s);
  EXPECT_EQ(text,
            R"({"scale":1024.0,"growth_factor":3.0,"backoff_factor":0.25,"growth_interval":7,)"
            R"("_growth_tracker":5})");
  auto back = ampscope::grad_scaler_state_from_json(text);
  EXPECT_EQ(back.scale, 1024.0);
  EXPECT_EQ(back.growth_factor, 3.0);
  EXPECT_EQ(back.backoff_factor, 0.25);
  EXPECT_EQ(back.growth_interval, 7);
  EXPECT_EQ(back.growth_tracker, 5);
  EXPECT_THROW(ampscope::grad_scaler_state_from_json(R"({"scale": 1})"), std::invalid_argument);
  EXPECT_THROW(ampscope::grad_scaler_state_from_json("[1"), std::invalid_argument);
  EXPECT_THROW(ampscope::grad_scaler_state_from_json(
                   R"({"scale":1,"growth_factor":2,"backoff_factor":0.5,"growth_interval":1.5,)"
                   R"("_growth_tracker":0})"),
               std::invalid_argument);
}

class GradScalerSessionTest : public ::testing::Test {
 protected:
  void TearDown() override { ampscope::detach_all_modules(); }
};

// 70 iterations (more than the observer keeps pending before reading them back) with a few
// planted infs: exactly one step per iteration, one loss-scale entry each, in order, with the
// scale after that iteration's update.
TEST_F(GradScalerSessionTest, OneStepAndOneLossScaleEntryPerIteration) {
  GradScaler scaler(small(1024.0, 4));
  Toy toy;
  ampscope::Session session;
  session.start();
  std::vector<double> scales;
  std::vector<bool> infs;
  const int n = 70;
  for (int i = 0; i < n; ++i) {
    bool inf = i % 9 == 2;
    toy.backward(scaler, torch::tensor({1.0f, inf ? kInf : 1.0f, 0.5f}));
    EXPECT_EQ(ampscope::Observer::current_step(), i);
    EXPECT_EQ(session.optimizer_step(scaler, toy.opt), !inf);
    scales.push_back(scaler.get_scale());
    infs.push_back(inf);
  }
  session.stop();
  auto r = session.report();
  EXPECT_EQ(r.run.steps, n);
  ASSERT_EQ(r.loss_scale.size(), static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(r.loss_scale[i].step, i);
    EXPECT_EQ(r.loss_scale[i].scale, scales[i]) << "step " << i;
    EXPECT_EQ(r.loss_scale[i].found_inf, infs[i]) << "step " << i;
  }
}

}  // namespace
