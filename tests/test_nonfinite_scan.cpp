// The sentinel's scan (has_nonfinite) against torch's own isfinite, for every dtype it reads and
// the layouts op outputs and incoming gradients come in: contiguous, transposed, permuted,
// expanded (stride 0), sliced with gaps, and sizes that end mid-block; spans long enough to be
// split over torch's pool, and the pool runner itself (every chunk once, whatever the threads).
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <limits>
#include <vector>

#include "../profiler/src/nonfinite_scan.h"
#include "../profiler/src/torch_pool.h"

namespace {

using ampscope::detail::has_nonfinite;

bool oracle(const at::Tensor& t) { return !torch::isfinite(t).all().item<bool>(); }

/// The layouts of `base` (2-D, at least 3 x 4) the scan must handle.
std::vector<at::Tensor> layouts(const at::Tensor& base) {
  return {base,
          base.t(),
          base.unsqueeze(0).permute({2, 0, 1}),
          base.slice(0, 0, base.size(0), 2).slice(1, 1, base.size(1), 3),
          base.select(1, 1).unsqueeze(1).expand({base.size(0), 5}),
          base.narrow(0, 1, 1).expand({4, base.size(1)})};
}

TEST(NonFiniteScan, MatchesTorchIsFiniteForEveryDtypeAndLayout) {
  torch::manual_seed(3);
  const double bad[] = {std::numeric_limits<double>::quiet_NaN(),
                        std::numeric_limits<double>::infinity(),
                        -std::numeric_limits<double>::infinity()};
  int checked = 0, positives = 0;
  for (auto dtype : {torch::kFloat32, torch::kFloat64, torch::kFloat16, torch::kBFloat16}) {
    for (std::int64_t cols : {4, 37, 1500}) {
      at::Tensor clean = torch::randn({7, cols}).to(dtype);
      for (const at::Tensor& t : layouts(clean)) {
        EXPECT_FALSE(has_nonfinite(t)) << dtype << " cols " << cols;
        ++checked;
      }
      for (double v : bad) {
        for (std::int64_t r = 0; r < 7; ++r) {  // every row: some layouts see it, some do not
          at::Tensor dirty = clean.clone();
          dirty.index_put_({r, (r * 13) % cols}, v);
          for (const at::Tensor& t : layouts(dirty)) {
            const bool want = oracle(t);
            EXPECT_EQ(has_nonfinite(t), want)
                << dtype << " cols " << cols << " row " << r << " " << v;
            positives += want;
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GT(positives, checked / 4);  // both answers were exercised
}

TEST(NonFiniteScan, LargeValuesAreFiniteAndEmptyOrIntegerTensorsAreNot) {
  // The largest finite values have all exponent bits but one set.
  EXPECT_FALSE(has_nonfinite(torch::full({3000}, 65504.0, torch::kFloat16)));
  EXPECT_FALSE(has_nonfinite(torch::full({3000}, 3.3895e38, torch::kBFloat16)));
  EXPECT_FALSE(has_nonfinite(torch::full({3000}, std::numeric_limits<float>::max())));
  EXPECT_FALSE(has_nonfinite(torch::empty({0})));
  EXPECT_FALSE(has_nonfinite(torch::ones({5}, torch::kInt32)));
}

TEST(NonFiniteScan, LongSpansSplitOverThePool) {
  // 300000 elements: ten chunks of the parallel scan; one bad value in the first, a middle and
  // the last chunk (and its last element), or none, with 1, 2 and 3 pool threads.
  const int threads_before = at::get_num_threads();
  const std::int64_t n = 300000;
  for (int threads : {1, 2, 3}) {
    at::set_num_threads(threads);
    for (auto dtype : {torch::kFloat32, torch::kFloat16, torch::kBFloat16, torch::kFloat64}) {
      at::Tensor clean = torch::randn({n}).to(dtype);
      EXPECT_FALSE(has_nonfinite(clean)) << dtype << " threads " << threads;
      for (std::int64_t at_index : {std::int64_t{5}, n / 2 + 7, n - 1}) {
        at::Tensor dirty = clean.clone();
        dirty.index_put_({at_index}, std::numeric_limits<double>::infinity());
        EXPECT_EQ(has_nonfinite(dirty), oracle(dirty)) << dtype << " at " << at_index;
        EXPECT_TRUE(has_nonfinite(dirty.view({600, 500}).t())) << dtype << " transposed";
      }
    }
  }
  at::set_num_threads(threads_before);
}

TEST(TorchPool, EveryChunkRunsOnceWhateverTheThreads) {
  const int threads_before = at::get_num_threads();
  for (int threads : {1, 2, 3, 5}) {
    at::set_num_threads(threads);
    for (std::int64_t chunks : {0, 1, 2, 3, 7, 64, 1001}) {
      // per chunk: how often it ran, and whether its run's end lay past it and within range
      struct Seen {
        std::int64_t chunks;
        std::vector<std::atomic<int>> runs, bad_end;
      } seen{chunks, std::vector<std::atomic<int>>(static_cast<std::size_t>(chunks)),
             std::vector<std::atomic<int>>(static_cast<std::size_t>(chunks))};
      ampscope::detail::run_on_torch_pool(chunks, &seen,
                                          [](void* ctx, std::int64_t c, std::int64_t end) {
                                            auto& s = *static_cast<Seen*>(ctx);
                                            s.runs[static_cast<std::size_t>(c)]++;
                                            if (end <= c || end > s.chunks)
                                              s.bad_end[static_cast<std::size_t>(c)]++;
                                          });
      int wrong = 0, bad_ends = 0;
      for (auto& r : seen.runs) wrong += r.load() != 1;
      for (auto& b : seen.bad_end) bad_ends += b.load();
      EXPECT_EQ(wrong, 0) << chunks << " chunks, " << threads << " threads";
      EXPECT_EQ(bad_ends, 0) << chunks << " chunks, " << threads << " threads";
    }
    // From inside another parallel region: on the calling thread, still every chunk once.
    std::vector<std::atomic<int>> runs(50);
    at::parallel_for(0, 1, 1, [&](std::int64_t, std::int64_t) {
      ampscope::detail::run_on_torch_pool(50, &runs, [](void* ctx, std::int64_t c, std::int64_t) {
        (*static_cast<std::vector<std::atomic<int>>*>(ctx))[static_cast<std::size_t>(c)]++;
      });
    });
    for (auto& r : runs) EXPECT_EQ(r.load(), 1);
  }
  at::set_num_threads(threads_before);
}

}  // namespace
