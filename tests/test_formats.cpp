// The format traits table (formats.h) against torch's own types, and EntryStats::merge (the one
// merge of op entries) against entries built another way.
#include <ampscope/profiler/entry_stats.h>
#include <ampscope/profiler/formats.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Float8_e4m3fn.h>
#include <c10/util/Float8_e5m2.h>
#include <c10/util/Half.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace {

using ampscope::EntryStats;
using ampscope::Format;
using ampscope::traits;

template <typename T>
void expect_traits_match(Format f, c10::ScalarType dtype) {
  const auto& t = traits(f);
  SCOPED_TRACE(std::string(t.name));
  EXPECT_EQ(t.torch_dtype, static_cast<int>(dtype));
  const double max = static_cast<float>(std::numeric_limits<T>::max());
  const double min_normal = static_cast<float>(std::numeric_limits<T>::min());
  const double min_sub = static_cast<float>(std::numeric_limits<T>::denorm_min());
  EXPECT_EQ(t.max, max);
  EXPECT_EQ(t.max_exp, std::ilogb(max));
  EXPECT_EQ(t.min_normal_exp, std::ilogb(min_normal));
  EXPECT_EQ(ampscope::min_subnormal_exp(f), std::ilogb(min_sub));
  EXPECT_EQ(t.mantissa_bits, std::numeric_limits<T>::digits - 1);
  // Tu = 2^underflow_exp rounds to 0, the next float32 above it does not (torch's cast).
  const float tu = std::ldexp(1.0f, t.underflow_exp);
  EXPECT_EQ(static_cast<float>(T(tu)), 0.0f);
  EXPECT_NE(static_cast<float>(T(std::nextafter(tu, 1.0f))), 0.0f);
  // The thresholds as the kernels count them: |x| < Ts is below the smallest normal.
  float ts;
  std::uint32_t bits = t.thresholds[1];
  std::memcpy(&ts, &bits, 4);
  EXPECT_LT(std::fabs(static_cast<float>(T(std::nextafter(ts, 0.0f)))), min_normal);
  EXPECT_EQ(static_cast<float>(T(ts)), min_normal);
  // The name round-trips.
  Format back;
  ASSERT_TRUE(ampscope::format_from_name(t.name, &back));
  EXPECT_EQ(back, f);
}

TEST(Formats, TableMatchesTorchTypes) {
  expect_traits_match<c10::Half>(Format::kFloat16, at::kHalf);
  expect_traits_match<c10::BFloat16>(Format::kBFloat16, at::kBFloat16);
  expect_traits_match<c10::Float8_e4m3fn>(Format::kFloat8E4M3FN, at::kFloat8_e4m3fn);
  expect_traits_match<c10::Float8_e5m2>(Format::kFloat8E5M2, at::kFloat8_e5m2);
  Format f;
  EXPECT_FALSE(ampscope::format_from_name("float32", &f));
}

EntryStats recorded(std::int64_t step, double absmax) {
  EntryStats e;
  e.calls = 1;
  e.first_step = e.last_step = step;
  e.stats.count = 4;
  e.stats.absmax = absmax;
  ampscope::add_series_point(e.absmax_by_step, step, absmax);
  return e;
}

EntryStats sentinel_only(std::int64_t step) {
  EntryStats e;  // what an unsampled step leaves: counts, no calls, default steps
  e.nonfinite_from_finite = 1;
  e.harmful_nonfinite = 1;
  e.first_nonfinite_step = step;
  return e;
}

TEST(EntryStatsMerge, SentinelCountsDoNotMoveTheRecordedSteps) {
  // Either order gives the recorded entry's steps and blocks plus the sentinel's counts.
  EntryStats a = recorded(10, 2.0);
  a.merge(sentinel_only(13));
  EntryStats b = sentinel_only(13);
  b.merge(recorded(10, 2.0));
  for (const EntryStats* e : {&a, &b}) {
    EXPECT_EQ(e->calls, 1);
    EXPECT_EQ(e->first_step, 10);  // not 0, the sentinel entry's default
    EXPECT_EQ(e->last_step, 10);
    EXPECT_EQ(e->nonfinite_from_finite, 1);
    EXPECT_EQ(e->first_nonfinite_step, 13);
    EXPECT_EQ(e->stats.count, 4);
    ASSERT_EQ(e->absmax_by_step.size(), 1u);
  }
}

TEST(EntryStatsMerge, SeriesKeepsTheMaximumPerStepAndStaysBounded) {
  EntryStats a, b;
  a.calls = b.calls = 1;
  const double peak = 1e6;
  for (std::int64_t s = 0; s < 400; ++s) {
    ampscope::add_series_point(a.absmax_by_step, 2 * s, 1.0);
    ampscope::add_series_point(b.absmax_by_step, 2 * s + (s % 2), s == 123 ? 1e6 : 2.0);
  }
  a.merge(b);
  EXPECT_LE(a.absmax_by_step.size(), ampscope::kMaxSeries);
  double seen = 0;
  std::int64_t prev = -1;
  for (const auto& [step, v] : a.absmax_by_step) {
    EXPECT_GT(step, prev);  // sorted, no duplicates
    prev = step;
    seen = std::max(seen, v);
  }
  EXPECT_EQ(seen, peak);
}

TEST(EntryStatsMerge, CountsRefuseToWrap) {
  EntryStats a = recorded(0, 1.0), b = recorded(1, 1.0);
  a.calls = std::numeric_limits<std::int64_t>::max();
  EXPECT_THROW(a.merge(b), std::overflow_error);
}

}  // namespace
