// Cast loss of an explicit narrowing cast in model code, against torch's own cast.
#include <ATen/autocast_mode.h>
#include <ampscope/hooks/layers.h>
#include <ampscope/hooks/param_watch.h>
#include <ampscope/hooks/session.h>
#include <ampscope/profiler/observer.h>
#include <ampscope/profiler/silent_loss.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

namespace {

TEST(SilentLoss, ExplicitHalfCastCountsWhatTorchsCastZeroes) {
  // Half the values far below float16's smallest subnormal (~6e-8), half representable.
  at::Tensor x = at::cat({at::rand({500}) * 1e-9 + 1e-10, at::rand({500}) + 0.5});
  const std::int64_t oracle = (x.to(at::kHalf) == 0).sum().item<std::int64_t>();
  ampscope::Observer::start();
  at::Tensor y = x.to(at::kHalf);
  ampscope::Observer::mark_step();
  ampscope::Observer::stop();
  std::int64_t underflow = 0;
  for (const auto& e : ampscope::silent_loss_snapshot())
    for (const auto& c : e.casts) underflow += c.underflow;
  EXPECT_EQ(oracle, 500);
  EXPECT_EQ(underflow, oracle);
}

TEST(SilentLoss, AutocastWeightCastCountsWhatTorchsCastZeroes) {
  at::Tensor x = at::randn({8, 16});
  at::Tensor w = at::randn({4, 16}) * 1e-9;  // every weight below float16's smallest subnormal
  const std::int64_t oracle = (w.to(at::kHalf) == 0).sum().item<std::int64_t>();
  ampscope::Observer::start();
  at::autocast::set_autocast_dtype(at::kCPU, at::kHalf);
  at::autocast::set_autocast_enabled(at::kCPU, true);
  at::Tensor y = at::linear(x, w);
  at::autocast::set_autocast_enabled(at::kCPU, false);
  at::autocast::clear_cache();
  ampscope::Observer::mark_step();
  ampscope::Observer::stop();
  std::int64_t weight_underflow = 0;
  for (const auto& e : ampscope::silent_loss_snapshot())
    for (const auto& c : e.casts)
      if (c.argument == "weight") weight_underflow += c.underflow;
  EXPECT_EQ(oracle, w.numel());
  EXPECT_EQ(weight_underflow, oracle);
}

}  // namespace

namespace {

// A float16 Linear trained with plain SGD at a learning rate whose updates mostly round away:
// the stale count equals the elements with a nonzero gradient whose stored value did not
// change, compared here on a copy taken before optimizer.step().
TEST(SilentLoss, StaleUpdatesOfAHalfLinearMatchABeforeAfterComparison) {
  torch::nn::Linear lin(32, 32);
  lin->to(at::kHalf);
  ampscope::attach_modules(*lin);
  torch::optim::SGD opt(lin->parameters(), torch::optim::SGDOptions(1e-4));
  ampscope::Session session;
  session.start();
  opt.zero_grad();
  lin->forward(at::randn({16, 32}).to(at::kHalf)).to(at::kFloat).square().sum().backward();
  const at::Tensor before = lin->weight.detach().clone();
  const at::Tensor grad = lin->weight.grad().clone();
  session.optimizer_step(opt);
  const at::Tensor same = (lin->weight.detach() == before) & (grad != 0);
  const std::int64_t oracle = same.sum().item<std::int64_t>();
  session.stop();
  std::int64_t stale = 0;
  for (const auto& p : ampscope::param_watch_snapshot())
    if (p.name.find("weight") != std::string::npos)
      for (const auto& s : p.stale) stale += s.stale;
  ampscope::detach_all_modules();
  EXPECT_GT(oracle, 0);
  EXPECT_LT(oracle, lin->weight.numel());
  EXPECT_EQ(stale, oracle);
}

}  // namespace
