// CUDA mixed precision (label gpu, skipped without a device): AutocastGuard(kCUDA) really
// computes in the low-precision dtype, the GradScaler on CUDA follows the same trajectory as
// on CPU (oracle: the CPU run), and the observer records the scaler's CUDA updates.
#include <ampscope/hooks/autocast_guard.h>
#include <ampscope/hooks/grad_scaler.h>
#include <ampscope/hooks/layers.h>
#include <ampscope/hooks/session.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <limits>

namespace {

using ampscope::AutocastGuard;
using ampscope::GradScaler;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

#define SKIP_WITHOUT_CUDA() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device"

TEST(AmpCudaTest, AutocastGuardComputesInTheLowPrecisionDtype) {
  SKIP_WITHOUT_CUDA();
  auto a = torch::randn({8, 8}, torch::kCUDA), b = torch::randn({8, 8}, torch::kCUDA);
  for (auto dtype : {torch::kHalf, torch::kBFloat16}) {
    AutocastGuard guard(torch::kCUDA, dtype);
    auto out = torch::mm(a, b);
    EXPECT_EQ(out.scalar_type(), dtype);
    EXPECT_TRUE(torch::allclose(out.to(torch::kFloat), torch::mm(a.to(dtype), b.to(dtype)).to(torch::kFloat)));
    EXPECT_EQ(torch::mm(a.cpu(), b.cpu()).scalar_type(), torch::kFloat);  // CPU untouched
  }
  EXPECT_EQ(torch::mm(a, b).scalar_type(), torch::kFloat);
}

struct Trajectory {
  std::vector<double> scales;
  std::vector<std::int64_t> trackers;
  std::vector<bool> stepped;
  torch::Tensor w;
};

/// SGD with momentum on loss = sum(w * g_i) under the scaler, on `device`.
Trajectory run(const torch::Device& device) {
  ampscope::GradScalerOptions o;
  o.init_scale = 256.0;
  o.growth_interval = 3;
  GradScaler scaler(o);
  auto w = torch::linspace(-1, 1, 5).to(device).requires_grad_();
  torch::optim::SGD opt({w}, torch::optim::SGDOptions(0.1).momentum(0.9));
  Trajectory t;
  torch::manual_seed(3);
  for (int i = 0; i < 20; ++i) {
    auto g = torch::randn({5});
    if (i % 7 == 4) g[2] = kInf;
    if (i % 11 == 6) g[0] = kNaN;
    opt.zero_grad();
    scaler.scale((w * g.to(device)).sum()).backward();
    t.stepped.push_back(scaler.step(opt));
    scaler.update();
    t.scales.push_back(scaler.get_scale());
    t.trackers.push_back(scaler.get_growth_tracker());
  }
  t.w = w.detach().cpu();
  EXPECT_EQ(scaler.scale_tensor().device().type(), device.type());
  return t;
}

TEST(AmpCudaTest, GradScalerOnCudaFollowsTheCpuTrajectory) {
  SKIP_WITHOUT_CUDA();
  Trajectory cpu = run(torch::kCPU), cuda = run(torch::kCUDA);
  EXPECT_EQ(cuda.scales, cpu.scales);
  EXPECT_EQ(cuda.trackers, cpu.trackers);
  EXPECT_EQ(cuda.stepped, cpu.stepped);
  EXPECT_TRUE(torch::allclose(cuda.w, cpu.w, 1e-6, 1e-6)) << cuda.w << cpu.w;
}

TEST(AmpCudaTest, ObserverRecordsEveryCudaScalerUpdate) {
  SKIP_WITHOUT_CUDA();
  ampscope::GradScalerOptions o;
  o.init_scale = 1024.0;
  o.growth_interval = 4;
  GradScaler scaler(o);
  auto w = torch::ones({64}, torch::kCUDA).requires_grad_();
  torch::optim::SGD opt({w}, torch::optim::SGDOptions(0.01));
  ampscope::Session session;
  session.start();
  std::vector<double> scales;
  const int n = 70;  // more than the observer keeps pending on the device
  for (int i = 0; i < n; ++i) {
    opt.zero_grad();
    {
      AutocastGuard guard(torch::kCUDA, torch::kHalf);
      auto g = torch::full({64}, i % 9 == 2 ? kInf : 1.0f, torch::kCUDA);
      scaler.scale((w * g).sum()).backward();
    }
    session.optimizer_step(scaler, opt);
    scales.push_back(scaler.get_scale());
  }
  session.stop();
  auto r = session.report();
  EXPECT_EQ(r.run.steps, n);
  ASSERT_EQ(r.loss_scale.size(), static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(r.loss_scale[i].step, i);
    EXPECT_EQ(r.loss_scale[i].scale, scales[i]) << "step " << i;
    EXPECT_EQ(r.loss_scale[i].found_inf, i % 9 == 2) << "step " << i;
  }
  ampscope::detach_all_modules();
}

}  // namespace
