// The kernel tracer without a GPU: a mock activity source plays CUPTI (external ids pushed per
// thread, one external-correlation record per API call, kernels and copies delivered late, out of
// order and split over flushes) and drives the KernelTracer, then the observer end to end. The
// oracle is the mock's own log of what it launched. Also: the real CUPTI source on a machine
// without a GPU turns itself off with a note, without throwing.
#include <ampscope/hooks/layers.h>
#include <ampscope/hooks/session.h>
#include <ampscope/profiler/cuda_stats.h>
#include <ampscope/profiler/kernel_trace.h>
#include <ampscope/reports/report_json.h>
#include <ampscope/reports/summary.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <random>

namespace {

using ampscope::ActivityBatch;
using ampscope::ActivitySink;
using ampscope::ActivitySource;
using ampscope::KernelActivity;
using ampscope::KernelSummary;
using ampscope::KernelTracer;

/// Plays CUPTI: launch() is a CUDA API call on the calling thread; like CUPTI it is correlated
/// with the innermost external id pushed on that thread. Records wait until flush().
class MockSource final : public ActivitySource {
 public:
  bool fail_start = false;
  /// Launch one kernel named `on_pop` whenever a (non-ampscope) external id is popped: stands in
  /// for "every op runs one kernel" in the observer tests.
  std::string on_pop;

  bool start(ActivitySink sink) override {
    if (fail_start) return false;
    sink_ = std::move(sink);
    running_ = true;
    return true;
  }
  void stop() override {
    flush();
    running_ = false;
  }
  void flush() override {
    ActivityBatch b;
    {
      std::lock_guard<std::mutex> lock(mu_);
      b = std::move(pending_);
      pending_ = {};
    }
    if (sink_) sink_(std::move(b));
  }
  void push_external_id(std::uint64_t id) override { stack().push_back(id); }
  void pop_external_id() override {
    auto& s = stack();
    if (s.empty()) return;
    if (!on_pop.empty() && s.back() != KernelTracer::kOwnExternalId) launch(on_pop, 1000);
    s.pop_back();
  }
  std::string note() const override { return fail_start ? "kernel tracing off: mock refused" : ""; }

  /// A kernel launch on the calling thread; returns its correlation id.
  std::uint32_t launch(const std::string& name, std::uint64_t duration_ns) {
    std::lock_guard<std::mutex> lock(mu_);
    const std::uint32_t corr = ++next_corr_;
    if (!stack().empty()) pending_.correlations.push_back({corr, stack().back()});
    pending_.kernels.push_back({name, clock_, clock_ + duration_ns, corr, 7, 0});
    clock_ += duration_ns + 10;
    ++launched_[stack().empty() ? 0 : stack().back()];
    return corr;
  }
  std::map<std::uint64_t, int> launched() const {
    std::lock_guard<std::mutex> lock(mu_);
    return launched_;
  }

 private:
  static std::vector<std::uint64_t>& stack() {
    thread_local std::vector<std::uint64_t> s;
    return s;
  }
  mutable std::mutex mu_;
  ActivitySink sink_;
  ActivityBatch pending_;
  std::uint32_t next_corr_ = 100;
  std::uint64_t clock_ = 1'000'000;
  bool running_ = false;
  std::map<std::uint64_t, int> launched_;
};

KernelActivity kernel(std::string name, std::uint32_t corr, std::uint64_t start,
                      std::uint64_t end) {
  return {std::move(name), start, end, corr, 1, 0};
}

const KernelSummary* find(const std::vector<std::pair<int, KernelSummary>>& v, int entry) {
  for (const auto& [e, s] : v)
    if (e == entry) return &s;
  return nullptr;
}

// ---------------------------------------------------------------- names

struct NameCase {
  const char* name;
  bool matrix;
  bool tensor_core;
};

TEST(ClassifyKernel, RealWorldNames) {
  const NameCase cases[] = {
      {"sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_"
       "segment_k_off_kernel__5x_cublas",
       true, true},
      {"ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_tn", true, true},
      {"cutlass_80_tensorop_s1688gemm_64x64_16x6_tn_align4", true, true},
      {"sm80_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x128x32_stage4_"
       "warpsize2x2x1_g1_tensor16x8x16_kernel",
       true, true},
      {"void "
       "cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align8>",
       true, true},
      {"void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
       "cutlass::half_t>, false, false>",
       true, true},
      {"sm90_gemm_tma_warpspecialized_cooperative_bf16_128x128", true, true},
      {"ampere_sgemm_128x64_tn", true, false},  // SIMT float32 GEMM
      {"void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false, "
       "cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<float const>>>",
       true, false},
      {"void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
       "at::detail::Array<char*, 3>>(int, at::native::CUDAFunctor_add<float>, "
       "at::detail::Array<char*, 3>)",
       false, false},
      {"void at::native::(anonymous namespace)::lgamma_kernel_cuda", false, false},
      {"void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda, "
       "convert_float_to_half>",
       false, false},
      {"void splitKreduce_kernel<32, 16, int, float, float, float, float, true, false, false>",
       false, false},
  };
  for (const auto& c : cases) {
    const auto k = ampscope::classify_kernel(c.name);
    EXPECT_EQ(k.matrix, c.matrix) << c.name;
    EXPECT_EQ(k.tensor_core, c.tensor_core) << c.name;
  }
}

// ---------------------------------------------------------------- tracer

TEST(KernelTracer, OutOfOrderAndSplitOverFlushes) {
  KernelTracer t;
  // Round 1: kernels of external id 11 arrive before their correlation records, and before
  // the op ended (bind comes later); a memcpy of id 12 arrives with its correlation.
  ActivityBatch b1;
  b1.kernels.push_back(kernel("sm80_xmma_gemm_f16f16_f16f32_f32_nn_n_kernel", 501, 100, 400));
  b1.kernels.push_back(kernel("elementwise_add", 502, 400, 450));
  b1.memcpys.push_back({4096, 1, 10, 30, 503});
  b1.correlations.push_back({503, 12});
  t.consume(std::move(b1));
  t.finish_round();
  t.bind(12, 2);
  // Round 2: the correlations for 501/502 arrive, split over two batches; then the binding.
  ActivityBatch b2;
  b2.correlations.push_back({501, 11});
  t.consume(std::move(b2));
  ActivityBatch b3;
  b3.correlations.push_back({502, 11});
  b3.kernels.push_back(kernel("elementwise_add", 504, 500, 520));
  b3.correlations.push_back({504, 11});
  t.consume(std::move(b3));
  t.bind(11, 1);
  t.finish_round();
  auto s = t.take();
  ASSERT_EQ(s.size(), 2u);
  const KernelSummary* e1 = find(s, 1);
  ASSERT_NE(e1, nullptr);
  EXPECT_EQ(e1->launches, 3);
  EXPECT_EQ(e1->time_ns, 300 + 50 + 20);
  EXPECT_EQ(e1->matrix_launches, 1);
  EXPECT_EQ(e1->tensor_core_launches, 1);
  ASSERT_EQ(e1->top.size(), 2u);
  EXPECT_EQ(e1->top[0].name, "sm80_xmma_gemm_f16f16_f16f32_f32_nn_n_kernel");  // most time first
  EXPECT_EQ(e1->top[1].launches, 2);
  const KernelSummary* e2 = find(s, 2);
  ASSERT_NE(e2, nullptr);
  EXPECT_EQ(e2->launches, 0);
  EXPECT_EQ(e2->memcpys, 1);
  EXPECT_EQ(e2->memcpy_bytes, 4096);
  EXPECT_EQ(e2->memcpy_time_ns, 20);
  EXPECT_TRUE(t.take().empty());  // taken once
  EXPECT_EQ(t.unattributed_kernels(), 0);
}

TEST(KernelTracer, UnknownCorrelationsAgeOutAsUnattributed) {
  KernelTracer t;
  t.bind(5, 0);
  ActivityBatch b;
  b.kernels.push_back(kernel("orphan", 900, 0, 10));   // no correlation record ever
  b.kernels.push_back(kernel("unbound", 901, 0, 10));  // correlated to an id nobody binds
  b.correlations.push_back({901, 77});
  b.kernels.push_back(kernel("mine", 902, 0, 10));
  b.correlations.push_back({902, 5});
  t.consume(std::move(b));
  for (int i = 0; i < KernelTracer::kMaxAge; ++i) {
    t.finish_round();
    EXPECT_EQ(t.unattributed_kernels(), 0) << "round " << i;  // still waiting
  }
  t.finish_round();
  EXPECT_EQ(t.unattributed_kernels(), 2);
  auto s = t.take();
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].first, 0);
  EXPECT_EQ(s[0].second.launches, 1);
}

TEST(KernelTracer, OwnWorkAndSyncs) {
  KernelTracer t;
  t.bind(3, 4);
  ActivityBatch b;
  b.kernels.push_back(kernel("ampscope_stats", 10, 0, 5));
  b.correlations.push_back({10, KernelTracer::kOwnExternalId});
  b.syncs.push_back({"cudaStreamSynchronize", 11});  // ampscope's read-back
  b.correlations.push_back({11, KernelTracer::kOwnExternalId});
  b.syncs.push_back({"cudaStreamSynchronize", 12});  // inside op 3 (e.g. .item())
  b.correlations.push_back({12, 3});
  b.syncs.push_back({"cudaDeviceSynchronize", 13});  // outside every op: no correlation
  t.consume(std::move(b));
  EXPECT_EQ(t.host_syncs(), 1);  // the one inside op 3 is known at once
  t.finish_round();
  EXPECT_EQ(t.host_syncs(), 1);  // the uncorrelated one waits a round for a late record
  t.finish_round();
  EXPECT_EQ(t.host_syncs(), 2);
  t.finish_round();
  t.finish_round();
  EXPECT_TRUE(t.take().empty());  // ampscope's own kernel is nobody's
  EXPECT_EQ(t.unattributed_kernels(), 0);
}

TEST(KernelTracer, NestedRegionsGoToTheInnermostId) {
  MockSource src;
  KernelTracer t;
  ASSERT_TRUE(src.start([&](ActivityBatch&& b) { t.consume(std::move(b)); }));
  src.push_external_id(1);
  src.launch("outer_a", 10);
  src.push_external_id(2);
  src.launch("inner", 20);
  src.flush();  // a flush in the middle of the region
  src.pop_external_id();
  src.launch("outer_b", 30);
  src.pop_external_id();
  src.launch("outside", 5);
  t.bind(1, 100);
  t.bind(2, 200);
  src.stop();
  for (int i = 0; i <= KernelTracer::kMaxAge; ++i) t.finish_round();
  auto s = t.take();
  ASSERT_NE(find(s, 100), nullptr);
  ASSERT_NE(find(s, 200), nullptr);
  EXPECT_EQ(find(s, 100)->launches, 2);
  EXPECT_EQ(find(s, 100)->time_ns, 40);
  EXPECT_EQ(find(s, 200)->launches, 1);
  EXPECT_EQ(t.unattributed_kernels(), 1);
}

TEST(KernelTracer, ShuffledRecordsGiveTheSameSummary) {
  // Oracle: the totals per entry computed from the generated records themselves.
  std::mt19937 rng(42);
  std::vector<KernelActivity> kernels;
  std::vector<ampscope::ExternalCorrelation> corr;
  std::map<int, std::int64_t> launches, time;
  for (std::uint32_t c = 1; c <= 500; ++c) {
    const int entry = static_cast<int>(rng() % 7);
    const std::uint64_t d = 1 + rng() % 1000;
    kernels.push_back(kernel("k" + std::to_string(rng() % 11), c, c * 2000, c * 2000 + d));
    corr.push_back({c, static_cast<std::uint64_t>(1000 + entry)});
    ++launches[entry];
    time[entry] += static_cast<std::int64_t>(d);
  }
  std::shuffle(kernels.begin(), kernels.end(), rng);
  std::shuffle(corr.begin(), corr.end(), rng);
  KernelTracer t;
  for (int e = 0; e < 7; ++e) t.bind(1000 + e, e);
  for (std::size_t i = 0; i < kernels.size(); i += 37) {
    ActivityBatch b;
    for (std::size_t j = i; j < std::min(i + 37, kernels.size()); ++j) {
      b.kernels.push_back(kernels[j]);
      b.correlations.push_back(corr[j]);
    }
    t.consume(std::move(b));
    if (i == 37 * 7) t.finish_round();  // a round boundary in the middle (fewer than kMaxAge)
  }
  t.finish_round();
  std::map<int, KernelSummary> got;
  for (auto& [e, s] : t.take()) got[e].merge(s);
  for (const auto& [e, n] : launches) {
    EXPECT_EQ(got[e].launches, n) << e;
    EXPECT_EQ(got[e].time_ns, time[e]) << e;
    EXPECT_LE(got[e].top.size(), KernelSummary::kMaxKernelNames);
  }
  EXPECT_EQ(t.unattributed_kernels(), 0);
}

// ---------------------------------------------------------------- the real source, no GPU

TEST(CuptiSource, OffWithANoteWithoutAGpu) {
  if (ampscope::cuda_stats_available()) GTEST_SKIP() << "a CUDA device is present";
  auto src = ampscope::make_cupti_source();
  bool delivered = false;
  bool started = true;
  EXPECT_NO_THROW(started = src->start([&](ActivityBatch&&) { delivered = true; }));
  EXPECT_FALSE(started);
  EXPECT_NE(src->note().find("kernel tracing off"), std::string::npos) << src->note();
  EXPECT_NO_THROW(src->push_external_id(1));
  EXPECT_NO_THROW(src->pop_external_id());
  EXPECT_NO_THROW(src->flush());
  EXPECT_NO_THROW(src->stop());
  EXPECT_FALSE(delivered);
  EXPECT_FALSE(ampscope::cuda_unavailable_reason().empty());
}

TEST(CuptiSource, EnvironmentSwitchTurnsItOff) {
  // Checked before anything else, so this holds on a GPU machine too.
  setenv("AMPSCOPE_CUPTI", "0", 1);
  auto src = ampscope::make_cupti_source();
  EXPECT_FALSE(src->start([](ActivityBatch&&) {}));
  EXPECT_NE(src->note().find("AMPSCOPE_CUPTI=0"), std::string::npos) << src->note();
  unsetenv("AMPSCOPE_CUPTI");
}

// ---------------------------------------------------------------- the observer, end to end

struct Net : torch::nn::Module {
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  Net() {
    fc1 = register_module("fc1", torch::nn::Linear(8, 16));
    fc2 = register_module("fc2", torch::nn::Linear(16, 4));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    ampscope::LayerScope s(*this);
    return ampscope::forward(fc2, torch::relu(ampscope::forward(fc1, x)));
  }
};

class ObserverTrace : public ::testing::Test {
 protected:
  void TearDown() override {
    ampscope::set_activity_source_factory(nullptr);
    ampscope::detach_all_modules();
  }
};

TEST_F(ObserverTrace, EveryRecordedCallGetsItsKernels) {
  // The mock launches one "hmma gemm" kernel per top-level call: each entry must show exactly
  // as many launches as calls, nested ops (linear -> addmm) folded into the outer call.
  MockSource* mock = nullptr;
  ampscope::set_activity_source_factory([&] {
    auto m = std::make_unique<MockSource>();
    m->on_pop = "sm80_xmma_gemm_f16f16_hmma_kernel";
    mock = m.get();
    return m;
  });
  auto net = std::make_shared<Net>();
  ampscope::Session session;
  session.attach(*net, "net");
  session.start();
  ASSERT_NE(mock, nullptr);
  torch::optim::SGD opt(net->parameters(), 0.1);
  for (int step = 0; step < 3; ++step) {
    auto loss = net->forward(torch::randn({5, 8})).pow(2).mean();
    opt.zero_grad();
    loss.backward();
    session.optimizer_step(opt);
  }
  session.stop();
  auto report = session.report();
  std::int64_t calls = 0, launches = 0;
  for (const auto& l : report.layers) {
    for (const auto& op : l.ops) {
      EXPECT_EQ(op.kernels.launches, op.calls) << l.name << " " << op.op << " " << ampscope::name_of(op.phase);
      EXPECT_EQ(op.kernels.tensor_core_launches, op.calls) << l.name << " " << op.op;
      EXPECT_EQ(op.kernels.time_ns, 1000 * op.calls) << l.name << " " << op.op;
      calls += op.calls;
      launches += op.kernels.launches;
    }
  }
  EXPECT_GT(calls, 20);
  // Every launch the mock made inside a recorded call landed in some entry (own work aside).
  std::int64_t made = 0;
  for (const auto& [id, n] : mock->launched())
    if (id != 0 && id != KernelTracer::kOwnExternalId) made += n;
  EXPECT_EQ(launches, made);
  EXPECT_EQ(report.run.host_syncs, 0);
  // The JSON round trip keeps the kernels block.
  auto back = ampscope::reports::report_from_json(ampscope::reports::report_to_json(report));
  const auto* fc1 = back.find_layer("net.fc1");
  ASSERT_NE(fc1, nullptr);
  ASSERT_FALSE(fc1->ops.empty());
  EXPECT_EQ(fc1->ops[0].kernels.launches, fc1->ops[0].calls);
  EXPECT_EQ(fc1->ops[0].kernels.top.at(0).name, "sm80_xmma_gemm_f16f16_hmma_kernel");
  EXPECT_EQ(back.run.host_syncs, 0);
  // The terminal summary lists them per layer.
  const std::string text = ampscope::reports::render_summary(report);
  EXPECT_NE(text.find("GPU kernels per layer"), std::string::npos) << text;
  EXPECT_NE(text.find("sm80_xmma_gemm_f16f16_hmma_kernel"), std::string::npos) << text;
}

TEST_F(ObserverTrace, RefusedSourceLeavesANoteAndNoKernels) {
  ampscope::set_activity_source_factory([] {
    auto m = std::make_unique<MockSource>();
    m->fail_start = true;
    return m;
  });
  ampscope::Session session;
  session.start();
  {
    ampscope::LayerScope s("x");
    torch::mul(torch::ones({3}), 2.0);
  }
  session.stop();
  auto report = session.report();
  const auto& notes = report.run.notes;
  EXPECT_NE(std::find(notes.begin(), notes.end(), "kernel tracing off: mock refused"), notes.end());
  EXPECT_EQ(report.run.host_syncs, -1);
  for (const auto& l : report.layers)
    for (const auto& op : l.ops) EXPECT_TRUE(op.kernels.empty());
  auto j = ampscope::reports::report_to_json(report);
  EXPECT_FALSE(j["run"].contains("host_syncs"));
}

}  // namespace
