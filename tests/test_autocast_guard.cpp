// AutocastGuard for every device type, checked without a GPU: a kCUDA guard must turn on
// exactly CUDA's autocast (its dispatch key out of the thread-local excluded set, its dtype) and
// leave CPU's alone; nesting and restore as torch.autocast. The CUDA computation itself is
// checked in test_amp_cuda (gpu).
#include <ampscope/hooks/autocast_guard.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <thread>

namespace {

using ampscope::AutocastGuard;

/// What the dispatcher acts on: autocast keys are excluded by default and run once un-excluded.
bool key_active(c10::DispatchKey k) { return !c10::impl::tls_is_dispatch_key_excluded(k); }

TEST(AutocastGuardTest, CudaGuardSetsCudaAutocastOnly) {
  ASSERT_FALSE(key_active(c10::DispatchKey::AutocastCUDA));
  auto cpu_dtype = at::autocast::get_autocast_dtype(torch::kCPU);
  auto cuda_dtype = at::autocast::get_autocast_dtype(torch::kCUDA);
  {
    AutocastGuard guard(torch::kCUDA, torch::kBFloat16);
    EXPECT_TRUE(at::autocast::is_autocast_enabled(torch::kCUDA));
    EXPECT_TRUE(key_active(c10::DispatchKey::AutocastCUDA));
    EXPECT_EQ(at::autocast::get_autocast_dtype(torch::kCUDA), torch::kBFloat16);
    EXPECT_FALSE(at::autocast::is_autocast_enabled(torch::kCPU));
    EXPECT_FALSE(key_active(c10::DispatchKey::AutocastCPU));
    EXPECT_EQ(at::autocast::get_autocast_dtype(torch::kCPU), cpu_dtype);
    // CPU tensors do not go through CUDA's autocast.
    EXPECT_EQ(torch::mm(torch::randn({2, 2}), torch::randn({2, 2})).scalar_type(), torch::kFloat);
  }
  EXPECT_FALSE(at::autocast::is_autocast_enabled(torch::kCUDA));
  EXPECT_FALSE(key_active(c10::DispatchKey::AutocastCUDA));
  EXPECT_EQ(at::autocast::get_autocast_dtype(torch::kCUDA), cuda_dtype);
}

TEST(AutocastGuardTest, CpuAndCudaGuardsNestIndependently) {
  AutocastGuard cuda(torch::kCUDA, torch::kHalf);
  {
    AutocastGuard cpu(torch::kCPU, torch::kBFloat16);
    EXPECT_TRUE(at::autocast::is_autocast_enabled(torch::kCPU));
    EXPECT_TRUE(at::autocast::is_autocast_enabled(torch::kCUDA));
    EXPECT_EQ(torch::mm(torch::randn({2, 2}), torch::randn({2, 2})).scalar_type(), torch::kBFloat16);
    {
      AutocastGuard off(torch::kCUDA, torch::kHalf, /*enabled=*/false);
      EXPECT_FALSE(at::autocast::is_autocast_enabled(torch::kCUDA));
      EXPECT_TRUE(at::autocast::is_autocast_enabled(torch::kCPU));
    }
    EXPECT_TRUE(at::autocast::is_autocast_enabled(torch::kCUDA));
    EXPECT_EQ(at::autocast::get_autocast_dtype(torch::kCUDA), torch::kHalf);
  }
  EXPECT_FALSE(at::autocast::is_autocast_enabled(torch::kCPU));
  EXPECT_TRUE(at::autocast::is_autocast_enabled(torch::kCUDA));
}

TEST(AutocastGuardTest, IsThreadLocal) {
  AutocastGuard guard(torch::kCUDA, torch::kHalf);
  bool other_thread_enabled = true;
  std::thread([&] { other_thread_enabled = at::autocast::is_autocast_enabled(torch::kCUDA); })
      .join();
  EXPECT_FALSE(other_thread_enabled);
}

TEST(AutocastGuardTest, RejectsWhatTorchAutocastRejects) {
  EXPECT_THROW(AutocastGuard(torch::kCPU, torch::kDouble), std::invalid_argument);
  EXPECT_THROW(AutocastGuard(torch::kCPU, torch::kFloat), std::invalid_argument);
  EXPECT_THROW(AutocastGuard(torch::kCUDA, torch::kInt), std::invalid_argument);
  EXPECT_THROW(AutocastGuard(c10::DeviceType::Meta, torch::kHalf), std::invalid_argument);
  EXPECT_NO_THROW(AutocastGuard(torch::kCUDA, torch::kFloat));
  EXPECT_NO_THROW(AutocastGuard(torch::kCPU, torch::kDouble, /*enabled=*/false));
  EXPECT_FALSE(at::autocast::is_autocast_enabled(torch::kCPU));  // a failed guard changes nothing
  EXPECT_FALSE(at::autocast::is_autocast_enabled(torch::kCUDA));
}

}  // namespace
