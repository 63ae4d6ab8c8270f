// The CUDA stats kernel against the CPU kernel (its reference), the device slots, graph capture,
// and the observer on a small CUDA model. Every GPU test skips without a CUDA device. The slot
// decomposition test (how the host turns a read-back slot into a stats block) runs everywhere:
// its oracle is a plain per-value loop over the same values and the CPU kernel.
#include <ATen/ATen.h>
#include <ampscope/hooks/layers.h>
#include <ampscope/hooks/session.h>
#include <ampscope/profiler/cuda_stats.h>
#include <ampscope/profiler/stats.h>
#include <ampscope/profiler/tensor_stats.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "stats_cuda_kernel.h"

namespace {

using ampscope::Format;
using ampscope::kNumFormats;
using ampscope::Stats;
namespace detail = ampscope::detail;

constexpr const std::uint32_t (&kTh)[ampscope::kNumThresholds] = ampscope::kFormatThresholds.v;

bool have_cuda() { return ampscope::cuda_stats_available() && at::hasCUDA(); }

#define SKIP_WITHOUT_CUDA() \
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device: " << ampscope::cuda_unavailable_reason()

void expect_same(const Stats& got, const Stats& want, const std::string& what) {
  EXPECT_EQ(got.count, want.count) << what;
  EXPECT_EQ(got.nan, want.nan) << what;
  EXPECT_EQ(got.posinf, want.posinf) << what;
  EXPECT_EQ(got.neginf, want.neginf) << what;
  EXPECT_EQ(got.zeros, want.zeros) << what;
  EXPECT_EQ(got.absmax, want.absmax) << what;
  EXPECT_EQ(got.absmin_nonzero, want.absmin_nonzero) << what;
  // Sums: double accumulation in another order; the error bound is relative to the magnitudes.
  const double tol = 1e-12 * std::max(1.0, want.sum_sq) + 1e-300;
  EXPECT_NEAR(got.sum, want.sum, std::sqrt(tol) * std::sqrt(static_cast<double>(want.count) + 1))
      << what;
  EXPECT_NEAR(got.sum_sq, want.sum_sq, tol * (static_cast<double>(want.count) + 1)) << what;
  for (int f = 0; f < kNumFormats; ++f) {
    const auto name = std::string(ampscope::format_name(static_cast<Format>(f)));
    EXPECT_EQ(got.overflow[f], want.overflow[f]) << what << " overflow " << name;
    EXPECT_EQ(got.underflow[f], want.underflow[f]) << what << " underflow " << name;
    EXPECT_EQ(got.subnormal[f], want.subnormal[f]) << what << " subnormal " << name;
  }
  EXPECT_TRUE(got.exp_hist == want.exp_hist) << what;
}

/// Values at and around every format's rounding thresholds, specials, subnormals, random.
std::vector<float> awkward_values(std::size_t random_count, unsigned seed) {
  std::vector<float> v;
  auto f32 = [](std::uint32_t b) {
    float f;
    std::memcpy(&f, &b, 4);
    return f;
  };
  for (std::uint32_t t : kTh) {
    for (int d = -2; d <= 2; ++d) {
      v.push_back(f32(t + static_cast<std::uint32_t>(d)));
      v.push_back(-f32(t + static_cast<std::uint32_t>(d)));
    }
  }
  const float inf = std::numeric_limits<float>::infinity();
  for (float x : {0.0f, -0.0f, inf, -inf, std::numeric_limits<float>::quiet_NaN(),
                  std::numeric_limits<float>::denorm_min(),
                  -std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min(),
                  std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(), 65504.0f,
                  65520.0f, 448.0f, 464.0f, 57344.0f, 61440.0f, 1.0f, -1.0f})
    v.push_back(x);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::uint32_t> bits;
  for (std::size_t i = 0; i < random_count; ++i) {
    const std::uint32_t b = bits(rng);
    v.push_back(i % 4 == 0 ? f32(b)
                           : std::ldexp(static_cast<float>(rng() % 1000) / 1000.0f - 0.5f,
                                        static_cast<int>(rng() % 80) - 40));
  }
  return v;
}

// ---------------------------------------------------------------- host decomposition (any machine)

/// What one kernel pass leaves in a slot, computed value by value on the host.
detail::DeviceSlot slot_of(const std::vector<float>& values) {
  detail::DeviceSlot s;
  std::memset(&s, 0, sizeof s);
  std::uint32_t amin = 0xFFFFFFFFu;
  for (float x : values) {
    std::uint32_t b;
    std::memcpy(&b, &x, 4);
    const std::uint32_t m = b & 0x7FFFFFFFu;
    if (m > 0x7F800000u) {
      ++s.nan;
      continue;
    }
    if (m == 0x7F800000u) {
      ++(b >> 31 ? s.neginf : s.posinf);
      continue;
    }
    if (m == 0) {
      ++s.zeros;
      continue;
    }
    s.amax = std::max<unsigned long long>(s.amax, m);
    amin = std::min(amin, m);
    s.sum += static_cast<double>(x);
    s.sum_sq += static_cast<double>(x) * static_cast<double>(x);
    int e2 = 0;
    std::frexp(static_cast<double>(x), &e2);  // |x| = m * 2^e2, m in [0.5, 1)
    const int e = e2 - 1;
    ++s.hist[e + detail::kExpOffset32];
    for (int k = 0; k < detail::kNumThresholds; ++k)
      if (e == detail::threshold_binade(k) && m < kTh[k]) ++s.below_in_binade[k];
  }
  if (amin != 0xFFFFFFFFu) s.amin_inv = ~static_cast<unsigned long long>(amin);
  return s;
}

TEST(SlotDecomposition, MatchesTheCpuKernel) {
  const auto values = awkward_values(200000, 7);
  Stats got;
  detail::slot_to_stats(slot_of(values), static_cast<std::int64_t>(values.size()), got);
  ampscope::TensorView v;
  v.data = values.data();
  v.dtype = ampscope::DType::kFloat32;
  v.sizes = {static_cast<std::int64_t>(values.size())};
  v.strides = {1};
  expect_same(got, ampscope::compute_stats(v, 1), "decomposition");
}

TEST(SlotDecomposition, ThresholdBinadesAreFloorLog2) {
  for (int k = 0; k < detail::kNumThresholds; ++k) {
    float t;
    std::memcpy(&t, &kTh[k], 4);
    int e2 = 0;
    std::frexp(static_cast<double>(t), &e2);
    EXPECT_EQ(detail::threshold_binade(k), e2 - 1) << k;
  }
}

/// The values the kernel would read for `v`: every launch of the plan, indexed exactly as the
/// kernel indexes (element_offset), gathered on the host.
std::vector<float> gathered(const ampscope::TensorView& v) {
  std::vector<float> out;
  for (const auto& l : detail::plan_launches(v, 1)) {
    EXPECT_LE(l.ndim, detail::kMaxKernelDims);
    for (std::int64_t i = 0; i < l.numel; ++i)
      out.push_back(static_cast<const float*>(l.data)[detail::element_offset(l, i)]);
  }
  return out;
}

TEST(LaunchPlan, ReadsEveryElementOnceInAnyLayout) {
  // Oracle: the CPU kernel on the view itself (its own strided gather) and torch's numel.
  auto base = torch::randn({3, 2, 3, 2, 3, 2, 3, 2, 3, 4}).mul(1e3);
  std::vector<std::pair<std::string, at::Tensor>> views = {
      {"contiguous", base},
      {"ten_dims_permuted", base.permute({9, 0, 8, 1, 7, 2, 6, 3, 5, 4})},
      {"transposed", torch::randn({217, 255}).t()},
      {"sliced_step", torch::randn({300, 401}).slice(1, 1, 400, 3)},
      {"expanded", torch::randn({1, 77}).expand({33, 77})},
      {"size_one_dims", torch::randn({1, 5, 1, 7, 1}).transpose(1, 3)},
      {"zero_dim", torch::randn({})},
      {"empty", torch::randn({0, 4})},
  };
  for (const auto& [name, t] : views) {
    const auto v = ampscope::make_view(t);
    const auto values = gathered(v);
    ASSERT_EQ(static_cast<std::int64_t>(values.size()), t.numel()) << name;
    ampscope::TensorView flat;
    flat.data = values.data();
    flat.sizes = {static_cast<std::int64_t>(values.size())};
    flat.strides = {1};
    expect_same(ampscope::compute_stats(flat, 1), ampscope::compute_stats(v, 1), name);
  }
  // Negative strides (TensorView allows them; torch views do not make them).
  std::vector<float> data(60);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i) - 20.5f;
  ampscope::TensorView rev;
  rev.data = data.data() + 59;
  rev.sizes = {6, 10};
  rev.strides = {-10, -1};
  const auto values = gathered(rev);
  ASSERT_EQ(values.size(), 60u);
  EXPECT_EQ(values.front(), data[59]);
  EXPECT_EQ(values.back(), data[0]);
}

TEST(CudaStats, UnavailableIsReportedNotThrown) {
  if (have_cuda()) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_FALSE(ampscope::cuda_stats_available());
  ampscope::DeviceStatsBuffer buf;
  ampscope::TensorView v;
  float x = 1.0f;
  v.data = &x;
  v.sizes = {1};
  v.strides = {1};
  EXPECT_FALSE(buf.accumulate(v, 0, 0, nullptr));
  EXPECT_TRUE(buf.read_and_reset().empty());
}

// ---------------------------------------------------------------- kernel vs CPU (GPU only)

at::Tensor filled(std::vector<std::int64_t> shape, at::ScalarType dt, unsigned seed) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  auto v = awkward_values(static_cast<std::size_t>(std::max<std::int64_t>(n, 0)), seed);
  v.resize(static_cast<std::size_t>(n));
  auto t = torch::from_blob(v.data(), {n}, at::kFloat).clone().reshape(shape);
  return t.to(dt);  // torch's own cast: the oracle for what a float16/bfloat16 tensor holds
}

/// A base tensor and the view of it that is measured (applied on CPU and on CUDA alike).
struct Case {
  std::string name;
  std::vector<std::int64_t> shape;
  std::function<at::Tensor(const at::Tensor&)> view;
};

std::vector<Case> cases() {
  auto same = [](const at::Tensor& t) { return t; };
  return {
      {"1x1", {1, 1}, same},
      {"1x1296", {1, 1296}, same},
      {"217x255", {217, 255}, same},
      {"empty", {0, 5}, same},
      {"zero_dim", {}, same},
      {"large", {(1 << 22) + 3}, same},
      {"transposed", {217, 255}, [](const at::Tensor& t) { return t.t(); }},
      {"sliced_step", {300, 401}, [](const at::Tensor& t) { return t.slice(1, 1, 400, 3); }},
      {"offset_unaligned", {4099}, [](const at::Tensor& t) { return t.slice(0, 1); }},
      {"expanded",
       {1, 77},
       [](const at::Tensor& t) {
         return t.expand({33, 77});
       }},
      {"ten_dims",
       {3, 2, 3, 2, 3, 2, 3, 2, 3, 4},
       [](const at::Tensor& t) {
         return t.permute({9, 0, 8, 1, 7, 2, 6, 3, 5, 4});
       }},
  };
}

class KernelVsCpu : public ::testing::TestWithParam<at::ScalarType> {};

TEST_P(KernelVsCpu, EveryShape) {
  SKIP_WITHOUT_CUDA();
  unsigned seed = 1;
  for (const auto& c : cases()) {
    const at::Tensor base = filled(c.shape, GetParam(), seed++);
    const at::Tensor cpu = c.view(base);
    const at::Tensor dev = c.view(base.cuda());  // the same layout on the device
    ASSERT_EQ(cpu.strides(), dev.strides()) << c.name;
    const Stats want = ampscope::tensor_stats(cpu, 1);
    const Stats got = ampscope::tensor_stats(dev);
    expect_same(got, want, c.name + " " + std::string(c10::toString(GetParam())));
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, KernelVsCpu,
                         ::testing::Values(at::kFloat, at::kHalf, at::kBFloat16),
                         [](const auto& info) { return std::string(c10::toString(info.param)); });

TEST(CudaStats, Float64IsReadOnTheHost) {
  SKIP_WITHOUT_CUDA();
  auto cpu = filled({1000}, at::kDouble, 12);
  expect_same(ampscope::tensor_stats(cpu.cuda()), ampscope::tensor_stats(cpu, 1), "float64");
}

TEST(DeviceStatsBuffer, SlotsAccumulateAndReset) {
  SKIP_WITHOUT_CUDA();
  ampscope::DeviceStatsBuffer buf;
  auto stream = c10::cuda::getCurrentCUDAStream();
  std::vector<at::Tensor> ts = {filled({999}, at::kFloat, 20), filled({64, 3}, at::kHalf, 21),
                                filled({5000}, at::kBFloat16, 22)};
  Stats want[3];
  std::vector<at::Tensor> keep;
  for (int rep = 0; rep < 2; ++rep) {
    for (int i = 0; i < 3; ++i) {
      keep.push_back(ts[i].cuda());
      ASSERT_TRUE(buf.accumulate(ampscope::make_view(keep.back()), 0, i * 70, stream.stream(),
                                 static_cast<std::uint64_t>(10 + i)));
      want[i].merge(ampscope::tensor_stats(ts[i], 1));
    }
  }
  auto got = buf.read_and_reset();
  ASSERT_EQ(got.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(got[i].slot, i * 70);
    expect_same(got[i].stats, want[i], "slot " + std::to_string(i));
    // Every tensor holds NaN/inf: the slot keeps the smallest call number that saw them.
    EXPECT_EQ(got[i].first_nonfinite_seq, static_cast<std::uint64_t>(10 + i));
  }
  EXPECT_TRUE(buf.read_and_reset().empty());  // reset, and no sync when nothing is pending
  ASSERT_TRUE(buf.accumulate(ampscope::make_view(keep[0]), 0, 0, stream.stream(), 1));
  auto again = buf.read_and_reset();
  ASSERT_EQ(again.size(), 1u);
  expect_same(again[0].stats, ampscope::tensor_stats(ts[0], 1), "after reset");
}

TEST(DeviceStatsBuffer, GraphCaptureIsSkippedAndCounted) {
  SKIP_WITHOUT_CUDA();
  ampscope::DeviceStatsBuffer buf;
  auto t = filled({4096}, at::kFloat, 30).cuda();
  auto side = c10::cuda::getStreamFromPool();
  c10::cuda::getCurrentCUDAStream().synchronize();
  ASSERT_EQ(cudaStreamBeginCapture(side.stream(), cudaStreamCaptureModeThreadLocal), cudaSuccess);
  EXPECT_FALSE(buf.accumulate(ampscope::make_view(t), 0, 0, side.stream(), 1));
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(side.stream(), &graph), cudaSuccess);
  if (graph) cudaGraphDestroy(graph);
  EXPECT_EQ(buf.skipped_captures(), 1);
  EXPECT_EQ(buf.errors(), 0);
  EXPECT_TRUE(buf.read_and_reset().empty());
}

// ---------------------------------------------------------------- the observer on CUDA

struct Elementwise : torch::nn::Module {
  // Elementwise IEEE ops round the same on CPU and CUDA: the CPU run is an exact oracle.
  torch::Tensor forward(const torch::Tensor& x) {
    ampscope::LayerScope s(*this);
    auto y = torch::mul(x, 3.0);
    {
      ampscope::LayerScope inner("act");
      y = torch::relu(y);
    }
    return torch::add(y, x);
  }
};

ampscope::reports::Report run_model(const torch::Tensor& x) {
  auto m = std::make_shared<Elementwise>();
  ampscope::Session session;
  session.attach(*m, "net");
  session.start();
  for (int step = 0; step < 3; ++step) {
    m->forward(x);
    session.step();
  }
  session.stop();
  auto r = session.report();
  ampscope::detach_all_modules();
  return r;
}

TEST(ObserverCuda, StatsEqualTheCpuRunAndNoSyncPerOp) {
  SKIP_WITHOUT_CUDA();
  auto x = filled({257, 129}, at::kHalf, 40);
  auto xc = x.cuda();
  c10::cuda::getCurrentCUDAStream().synchronize();
  auto cpu = run_model(x);
  auto gpu = run_model(xc);
  std::size_t compared = 0;
  for (const auto& l : cpu.layers) {
    const auto* g = gpu.find_layer(l.name);
    ASSERT_NE(g, nullptr) << l.name;
    for (const auto& op : l.ops) {
      for (const auto& go : g->ops) {
        if (go.op != op.op || go.phase != op.phase) continue;
        EXPECT_EQ(go.calls, op.calls) << l.name << " " << op.op;
        expect_same(go.stats, op.stats, l.name + " " + op.op);
        EXPECT_EQ(go.absmax_by_step.size(), op.absmax_by_step.size()) << l.name << " " << op.op;
        ++compared;
      }
    }
  }
  EXPECT_GE(compared, 3u);
  if (gpu.run.host_syncs < 0) {
    std::cerr << "kernel tracing was off; host syncs not checked\n";
  } else {
    EXPECT_EQ(gpu.run.host_syncs, 0);  // no sync per op (ampscope's own read-backs excluded)
    const auto* act = gpu.find_layer("act");
    ASSERT_NE(act, nullptr);
    ASSERT_FALSE(act->ops.empty());
    EXPECT_EQ(act->ops[0].kernels.launches, act->ops[0].calls);  // one relu kernel per call
  }
}

TEST(ObserverCuda, FirstNonFiniteIsTheOverflowingOp) {
  SKIP_WITHOUT_CUDA();
  auto x = torch::full({1000}, 300.0, at::TensorOptions().dtype(at::kHalf).device(at::kCUDA));
  ampscope::Session session;
  session.start();
  for (int step = 0; step < 2; ++step) {
    torch::Tensor y;
    {
      ampscope::LayerScope s("big");
      y = torch::mul(x, 1000.0);  // 3e5 > 65504: inf in float16, from finite inputs
    }
    {
      ampscope::LayerScope s("after");
      torch::add(y, 1.0);  // inf in, inf out: not the origin
    }
    session.step();
  }
  session.stop();
  auto r = session.report();
  ASSERT_TRUE(r.first_nonfinite.has_value());
  EXPECT_EQ(r.first_nonfinite->layer, "big");
  EXPECT_EQ(r.first_nonfinite->op, "aten::mul");
  EXPECT_EQ(r.first_nonfinite->step, 0);
  EXPECT_EQ(r.first_nonfinite->kind, "inf");
  const auto* big = r.find_layer("big");
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(big->ops[0].stats.posinf, 2000);
  EXPECT_EQ(big->ops[0].nonfinite_from_finite, 1);
}

TEST(ObserverCuda, ParameterGradientsAreReadBackPerStep) {
  SKIP_WITHOUT_CUDA();
  torch::manual_seed(0);
  torch::nn::Linear fc(16, 8);
  fc->to(torch::kCUDA);
  auto x = torch::randn({32, 16}, torch::kCUDA);
  torch::optim::SGD opt(fc->parameters(), 0.0);  // lr 0: the gradients are the same each step
  ampscope::Session session;
  session.attach(*fc, "fc");
  session.start();
  for (int step = 0; step < 2; ++step) {
    opt.zero_grad();
    ampscope::forward(fc, x).pow(2).sum().backward();
    session.optimizer_step(opt);
  }
  session.stop();
  auto r = session.report();
  const auto* l = r.find_layer("fc");
  ASSERT_NE(l, nullptr);
  ASSERT_EQ(l->params.size(), 2u);
  for (const auto& p : l->params) {
    const auto& t = p.name == "fc.weight" ? fc->weight : fc->bias;
    const Stats one = ampscope::tensor_stats(t.grad().cpu(), 1);
    Stats want = one;
    want.merge(one);  // two identical steps
    EXPECT_EQ(p.updates, 2) << p.name;
    expect_same(p.grad, want, p.name);
  }
  ampscope::detach_all_modules();
}

}  // namespace
