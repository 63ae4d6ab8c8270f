// The read cache (profiler/src/read_cache.h): a span read once per version and step gives what a
// fresh read gives (oracle: tensor_stats and torch's own counts); in-place writes, a new step
// and a freed storage are never served stale. Also the chunked pool path of tensor_stats and the
// sentinel's parallel scan against torch.
#include <ampscope/profiler/tensor_stats.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "nonfinite_scan.h"
#include "read_cache.h"

namespace {

using ampscope::Stats;
using ampscope::detail::cached_has_nonfinite;
using ampscope::detail::cached_stats;

void expect_same(const Stats& got, const Stats& want) {
  EXPECT_EQ(got.count, want.count);
  EXPECT_EQ(got.nan, want.nan);
  EXPECT_EQ(got.posinf, want.posinf);
  EXPECT_EQ(got.neginf, want.neginf);
  EXPECT_EQ(got.zeros, want.zeros);
  EXPECT_EQ(got.absmax, want.absmax);
  EXPECT_EQ(got.absmin_nonzero, want.absmin_nonzero);
  EXPECT_EQ(got.overflow, want.overflow);
  EXPECT_EQ(got.underflow, want.underflow);
  EXPECT_EQ(got.subnormal, want.subnormal);
  EXPECT_TRUE(got.exp_hist == want.exp_hist);
  EXPECT_EQ(got.sum, want.sum);
  EXPECT_EQ(got.sum_sq, want.sum_sq);
}

TEST(ReadCache, AReadAgreesWithAFreshOneAndAViewOfTheSameSpan) {
  torch::manual_seed(1);
  auto t = torch::randn({256, 256});
  expect_same(cached_stats(t, 5), ampscope::tensor_stats(t));
  // a transposed view covers the same span: the same block, read or not (a dense tensor is
  // read in memory order, so even the sums are the same bits)
  auto v = t.t();
  expect_same(cached_stats(v, 5), ampscope::tensor_stats(v));
  const Stats logical = ampscope::tensor_stats(v.contiguous());  // other order: other roundings
  EXPECT_EQ(cached_stats(v, 5).exp_hist, logical.exp_hist);
  EXPECT_NEAR(cached_stats(v, 5).sum, logical.sum, 1e-9 * logical.sum_sq);
  EXPECT_NEAR(cached_stats(v, 5).sum_sq, logical.sum_sq, 1e-9 * logical.sum_sq);
}

TEST(ReadCache, ItReallyCachesWithinAStepAndReadsAgainInTheNext) {
  auto t = torch::ones({8192});
  EXPECT_EQ(cached_stats(t, 11).nan, 0);
  // a write torch does not see (no version bump): served from the cache within the step ...
  t.data_ptr<float>()[17] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(cached_stats(t, 11).nan, 0);
  EXPECT_FALSE(cached_has_nonfinite(t, 11));
  // ... and read again in the next one
  EXPECT_EQ(cached_stats(t, 12).nan, 1);
  EXPECT_TRUE(cached_has_nonfinite(t, 12));
}

TEST(ReadCache, AnInPlaceWriteIsSeen) {
  torch::manual_seed(2);
  auto t = torch::randn({100000});
  EXPECT_EQ(cached_stats(t, 21).posinf + cached_stats(t, 21).neginf, 0);
  EXPECT_FALSE(cached_has_nonfinite(t, 21));
  t.mul_(1e39);  // every nonzero value overflows float32
  const auto inf = (t.isinf()).sum().item<std::int64_t>();
  ASSERT_GT(inf, 0);
  const Stats s = cached_stats(t, 21);
  EXPECT_EQ(s.posinf + s.neginf, inf);
  EXPECT_TRUE(cached_has_nonfinite(t, 21));
  expect_same(s, ampscope::tensor_stats(t));
}

TEST(ReadCache, AFreedStorageIsNeverMistakenForANewOne) {
  for (int round = 0; round < 20; ++round) {
    Stats first;
    {
      auto a = torch::zeros({65536});
      first = cached_stats(a, 31);
      EXPECT_EQ(first.zeros, 65536);
    }
    // likely at the same address, same size, same step, version 0: other values
    auto b = torch::full({65536}, 3.0f);
    const Stats s = cached_stats(b, 31);
    EXPECT_EQ(s.zeros, 0);
    EXPECT_EQ(s.absmax, 3.0);
  }
}

TEST(ReadCache, SmallAndStridedTensorsAreReadEveryTime) {
  auto t = torch::ones({64});
  EXPECT_EQ(cached_stats(t, 41).nan, 0);
  t.data_ptr<float>()[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(cached_stats(t, 41).nan, 1);  // below the caching size: read again
  auto big = torch::ones({20000});
  auto every_other = big.slice(0, 0, 20000, 2);
  EXPECT_EQ(cached_stats(every_other, 41).nan, 0);
  big.data_ptr<float>()[2] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(cached_stats(every_other, 41).posinf, 1);  // gaps: not cached
}

TEST(ChunkedPool, TheResultDoesNotDependOnTorchsThreadCount) {
  torch::manual_seed(3);
  const int before = at::get_num_threads();
  for (auto dt : {torch::kFloat, torch::kBFloat16, torch::kHalf}) {
    auto t = (torch::randn({1 << 20}) * 100).to(dt);
    t.index_put_({12345}, std::numeric_limits<float>::infinity());
    at::set_num_threads(1);
    const Stats one = ampscope::tensor_stats(t);
    at::set_num_threads(2);
    const Stats two = ampscope::tensor_stats(t);
    expect_same(two, one);
    EXPECT_EQ(one.posinf, 1);
    EXPECT_EQ(one.count, t.numel());
  }
  at::set_num_threads(before);
}

TEST(SentinelScan, BigTensorsSplitOverThePoolFindOneBadValueAnywhere) {
  for (auto dt : {torch::kFloat, torch::kBFloat16, torch::kHalf, torch::kDouble}) {
    auto t = torch::randn({3 << 20}).to(dt);
    EXPECT_FALSE(ampscope::detail::has_nonfinite(t));
    for (std::int64_t at : {std::int64_t{0}, std::int64_t{1} << 20, t.numel() - 1}) {
      auto u = t.clone();
      u.index_put_({at}, std::numeric_limits<float>::quiet_NaN());
      EXPECT_EQ(ampscope::detail::has_nonfinite(u), u.isnan().any().item<bool>());
      EXPECT_TRUE(ampscope::detail::has_nonfinite(u.t().contiguous().t()));
    }
  }
}

}  // namespace
