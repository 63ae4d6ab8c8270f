// The read cache (profiler/src/read_cache.h): a span read once per version and step gives what a
// fresh read gives (oracle: tensor_stats and torch's own counts); in-place writes, a new step
// and a freed storage are never served stale; a copy that keeps every value (a widening cast,
// forward or in the backward of a narrowing one) takes its source's read, and gives what a fresh
// read of it gives. Also the chunked pool path of tensor_stats and the sentinel's parallel scan
// against torch.
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
using ampscope::detail::note_exact_copy;
using ampscope::detail::reuse_read_in_backward;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

/// Every count and range equal; the sums of two reads of the same values in other dtypes may
/// round differently: equal to 1e-6 of the sum of squares (the kernel's bound is 7 * 2^-24).
void expect_same_values(const Stats& got, const Stats& want) {
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
  EXPECT_NEAR(got.sum, want.sum, 1e-6 * want.sum_sq);
  EXPECT_NEAR(got.sum_sq, want.sum_sq, 1e-6 * want.sum_sq);
}

/// The same read: the sums too, bit for bit.
void expect_same(const Stats& got, const Stats& want) {
  expect_same_values(got, want);
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

/// Writes a value torch does not see (no version bump) into element 0: a later read in the same
/// step shows it only if it really reads.
void poke(const at::Tensor& t, float v) {
  if (t.scalar_type() == torch::kFloat) {
    t.data_ptr<float>()[0] = v;
  } else {
    t.data_ptr<at::BFloat16>()[0] = at::BFloat16(v);
  }
}

TEST(ReadCache, AWideningCopyTakesItsSourcesRead) {
  torch::manual_seed(4);
  for (auto wide : {torch::kFloat, torch::kDouble}) {
    auto src = (torch::randn({300, 100}) * 1000).to(torch::kBFloat16);
    src.index_put_({7, 3}, kNaN);
    src.index_put_({9, 9}, 1e-39);  // a bfloat16 subnormal: the same value in float32
    const std::int64_t step = 51;
    const Stats read = cached_stats(src, step);
    auto dst = src.to(wide);
    note_exact_copy(src, dst, step);
    expect_same_values(cached_stats(dst, step), ampscope::tensor_stats(dst));  // a fresh read
    EXPECT_EQ(cached_stats(dst, step).nan, 1);
    if (wide == torch::kFloat) {  // not read: a write torch does not see stays unseen ...
      poke(dst, kInf);
      EXPECT_EQ(cached_stats(dst, step).posinf, read.posinf);
      EXPECT_EQ(cached_stats(dst, step + 1).posinf, read.posinf + 1);  // ... until the next step
    }
  }
}

TEST(ReadCache, OnlyCopiesThatKeepEveryValueOfAReadSourceTakeItsRead) {
  torch::manual_seed(5);
  const std::int64_t step = 61;
  // narrowing: values change, the copy is read
  auto wide = torch::randn({20000}) * 1e30;
  cached_stats(wide, step);
  auto narrow = wide.to(torch::kBFloat16);
  note_exact_copy(wide, narrow, step);
  poke(narrow, kInf);
  EXPECT_EQ(cached_stats(narrow, step).posinf, 1);
  // a source never read: nothing to take
  auto unread = torch::randn({20000}).to(torch::kBFloat16);
  auto copy = unread.to(torch::kFloat);
  note_exact_copy(unread, copy, step);
  poke(copy, kInf);
  EXPECT_EQ(cached_stats(copy, step).posinf, 1);
  // a source written after its read: its read is stale, nothing to take
  auto src = torch::randn({20000}).to(torch::kBFloat16);
  cached_stats(src, step);
  src.mul_(2);
  auto dst = src.to(torch::kFloat);
  note_exact_copy(src, dst, step);
  poke(dst, kNaN);
  EXPECT_EQ(cached_stats(dst, step).nan, 1);
}

/// The backward of `w.to(bfloat16)` (w float32, as autocast casts a weight), the cast's node
/// hooked or not: the reads of the gradient the node receives and of the one w receives (with a
/// NaN written first that torch does not see: found only by a real read), and a fresh read of the
/// latter before that write.
struct CastBackward {
  Stats incoming, received, fresh;
};
CastBackward backward_of_narrowing_cast(bool hooked) {
  CastBackward r;
  torch::manual_seed(6);
  auto w = torch::randn({256, 128}, torch::requires_grad());
  auto low = w.to(torch::kBFloat16);
  const std::int64_t step = 71;
  if (hooked) reuse_read_in_backward(w, low, step);
  // what the observer does at the cast's backward node: reads the gradient it receives
  low.register_hook([&](const at::Tensor& g) { r.incoming = cached_stats(g, step); });
  w.register_hook([&](const at::Tensor& g) {  // and at the weight's AccumulateGrad
    EXPECT_EQ(g.scalar_type(), torch::kFloat);
    r.fresh = ampscope::tensor_stats(g);
    poke(g, kNaN);
    r.received = cached_stats(g, step);
  });
  auto coef = (torch::randn({256, 128}) * 1e3).to(torch::kBFloat16);
  coef.index_put_({0, 5}, 0);
  (low * coef).sum().backward();
  return r;
}

TEST(ReadCache, TheBackwardOfANarrowingCastHandsItsGradientsReadOn) {
  const CastBackward hooked = backward_of_narrowing_cast(true);
  expect_same_values(hooked.received, hooked.fresh);  // what a read of it would have found
  expect_same_values(hooked.received, hooked.incoming);
  EXPECT_EQ(hooked.fresh.zeros, 1);
  EXPECT_EQ(hooked.received.nan, 0);  // taken over, not read
  // without the hook the float32 gradient is read on its own
  const CastBackward plain = backward_of_narrowing_cast(false);
  EXPECT_EQ(plain.received.nan, 1);
  EXPECT_EQ(plain.fresh.zeros, 1);
}

}  // namespace
