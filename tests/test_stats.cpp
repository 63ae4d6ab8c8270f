// Tests of the stats block and the CPU stats kernel. The oracle is torch itself: every count is
// recomputed with torch ops (casts to each format included) and must match value for value.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ampscope/profiler/stats.h"
#include "ampscope/profiler/tensor_stats.h"
#include "stats_kernel.h"  // the AVX-512 build's GFNI switch

namespace {

using ampscope::DType;
using ampscope::ExpHist;
using ampscope::Format;
using ampscope::kNumFormats;
using ampscope::Stats;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

const c10::ScalarType kFormatTypes[kNumFormats] = {at::kHalf, at::kBFloat16, at::kFloat8_e4m3fn,
                                                   at::kFloat8_e5m2};
const double kMinNormal[kNumFormats] = {0x1p-14, 0x1p-126, 0x1p-6, 0x1p-14};

std::int64_t count_true(const at::Tensor& mask) { return mask.sum().item<std::int64_t>(); }

/// float8_e4m3fn overflow computed independently of torch's cast: torch's e4m3fn cast has no
/// infinity and does not saturate (every magnitude that rounds past 448 becomes NaN), so the cast
/// alone cannot show *why* a value went NaN. Here the rounding is done in float64: first to float32
/// (as torch does for every source: the c10 float8 types are constructed from float), then RNE to
/// 3 mantissa bits with an unbounded exponent; overflow means the rounded magnitude exceeds 448.
at::Tensor e4m3_overflow_by_rounding(const at::Tensor& flat) {
  auto a = flat.to(at::kFloat).abs().to(at::kDouble);
  auto safe = at::where(a > 0, a, at::ones_like(a));
  auto e = at::floor(at::log2(safe));
  // log2 may be off by one right at powers of two; fix it exactly.
  e = at::where(at::pow(2.0, e) > safe, e - 1, e);
  e = at::where(at::pow(2.0, e + 1) <= safe, e + 1, e);
  e = at::clamp_min(e, -6);  // subnormal quantum 2^-9
  auto q = at::pow(2.0, e - 3);
  auto r = at::round(a / q) * q;                       // torch.round: half to even
  return flat.isfinite() & ((r > 448.0) | a.isinf());  // float32 inf: past every format
}

/// The stats of a tensor computed with torch ops only.
Stats oracle(const at::Tensor& t0) {
  Stats s;
  auto t = t0.contiguous().reshape({-1});
  s.count = t.numel();
  if (s.count == 0) return s;
  auto fin = t.isfinite();
  s.nan = count_true(t.isnan());
  s.posinf = count_true(t.isposinf());
  s.neginf = count_true(t.isneginf());
  s.zeros = count_true(t == 0);
  auto d = t.to(at::kDouble).masked_select(fin);
  auto ad = d.abs();
  if (ad.numel() > 0) s.absmax = ad.max().item<double>();
  auto nzv = ad.masked_select(ad != 0);
  if (nzv.numel() > 0) s.absmin_nonzero = nzv.min().item<double>();
  s.sum = d.sum().item<double>();
  s.sum_sq = (d * d).sum().item<double>();
  auto nzf = fin & (t != 0);
  for (int f = 0; f < kNumFormats; ++f) {
    auto c = t.to(kFormatTypes[f]);
    at::Tensor over;
    if (kFormatTypes[f] == at::kFloat8_e4m3fn) {
      over = fin & c.isnan();  // no inf in e4m3fn: out-of-range finite values become NaN
      EXPECT_EQ(count_true(over), count_true(e4m3_overflow_by_rounding(t)))
          << "torch's e4m3fn cast disagrees with the float64 rounding model";
    } else {
      over = fin & c.isinf();
    }
    auto cf = c.to(at::kFloat);
    s.overflow[f] = count_true(over);
    s.underflow[f] = count_true(nzf & (cf == 0));
    s.subnormal[f] = count_true(nzf & (cf != 0) & cf.isfinite() & (cf.abs() < kMinNormal[f]));
  }
  if (nzv.numel() > 0) {
    auto fr = at::frexp(nzv);  // x = m * 2^e with m in [0.5, 1): floor(log2 x) = e - 1
    auto e = std::get<1>(fr).to(at::kLong) - 1;
    constexpr int kOff = 1100;
    auto counts = at::bincount(e + kOff).contiguous();
    auto* p = counts.data_ptr<std::int64_t>();
    for (std::int64_t i = 0; i < counts.numel(); ++i)
      if (p[i] != 0) s.exp_hist.add(static_cast<int>(i) - kOff, p[i]);
  }
  return s;
}

std::string hist_str(const ExpHist& h) {
  std::string s;
  if (h.empty()) return "{}";
  for (int e = h.lo(); e < h.hi(); ++e)
    if (h.at(e) != 0) s += std::to_string(e) + ":" + std::to_string(h.at(e)) + " ";
  return s;
}

/// The AVX2 build sums float32/float16/bfloat16 sources in float within groups of 128 values
/// (double across groups): the sum of squares is within 7 float roundings (7 * 2^-24) of exact,
/// the sum within 6 * 2^-24 * sum|x| <= 6 * 2^-24 * sqrt(n * sum_sq). A little above that bound:
constexpr double kFloatMomentsRel = 8 * 0x1p-24;

/// Exact equality of counts and ranges, sums within a relative tolerance: `moments_rel` is the
/// relative error bound of the sums (0: sums in double, the portable build and float64 sources).
void expect_same(const Stats& got, const Stats& want, const std::string& what,
                 double moments_rel = kFloatMomentsRel) {
  SCOPED_TRACE(what);
  EXPECT_EQ(got.count, want.count);
  EXPECT_EQ(got.nan, want.nan);
  EXPECT_EQ(got.posinf, want.posinf);
  EXPECT_EQ(got.neginf, want.neginf);
  EXPECT_EQ(got.zeros, want.zeros);
  EXPECT_EQ(got.absmax, want.absmax);
  EXPECT_EQ(got.absmin_nonzero, want.absmin_nonzero);
  for (int f = 0; f < kNumFormats; ++f) {
    const auto name = std::string(ampscope::format_name(static_cast<Format>(f)));
    EXPECT_EQ(got.overflow[f], want.overflow[f]) << "overflow " << name;
    EXPECT_EQ(got.underflow[f], want.underflow[f]) << "underflow " << name;
    EXPECT_EQ(got.subnormal[f], want.subnormal[f]) << "subnormal " << name;
  }
  EXPECT_TRUE(got.exp_hist == want.exp_hist)
      << "got  " << hist_str(got.exp_hist) << "\nwant " << hist_str(want.exp_hist);
  EXPECT_EQ(got.exp_hist.total(), got.finite() - got.zeros);
  // Sums: the summation order differs, so compare within a tolerance scaled by the magnitude.
  const double n = static_cast<double>(std::max<std::int64_t>(got.count, 1));
  if (!std::isfinite(want.sum_sq) || !std::isfinite(want.sum)) {  // float64 near DBL_MAX
    EXPECT_EQ(std::isfinite(got.sum_sq), std::isfinite(want.sum_sq));
    return;
  }
  const double sum_abs_bound = std::sqrt(std::max(want.sum_sq, 0.0) * n);  // >= sum |x|
  const double sum_tol = std::max(1e-12 * n, moments_rel) * sum_abs_bound + 1e-300;
  EXPECT_NEAR(got.sum, want.sum, sum_tol);
  EXPECT_NEAR(got.sum_sq, want.sum_sq, std::max(1e-12 * n, moments_rel) * want.sum_sq + 1e-300);
  if (want.finite() > 0) {
    EXPECT_NEAR(got.rms(), want.rms(), std::max(1e-9, moments_rel / 2) * want.rms());
    EXPECT_TRUE(std::isfinite(got.rms()));
  }
}

/// Every build of the CPU kernel this CPU can run (the portable one always), widest last.
std::vector<ampscope::StatsIsa> usable_isas() {
  std::vector<ampscope::StatsIsa> out;
  for (int i = 0; i < ampscope::kNumStatsIsas; ++i)
    if (ampscope::stats_isa_usable(static_cast<ampscope::StatsIsa>(i)))
      out.push_back(static_cast<ampscope::StatsIsa>(i));
  return out;
}

std::string isa_str(ampscope::StatsIsa isa) { return std::string(ampscope::stats_isa_name(isa)); }

/// Runs f(isa) with each usable build selected in turn, then goes back to the best build. Where
/// the CPU has GFNI and BITALG, the AVX-512 build runs twice: summing its histogram windows' bit
/// counters with them (its default there) and with the loop of the CPUs without them.
template <typename F>
void for_each_isa(F&& f) {
  for (auto isa : usable_isas()) {
    EXPECT_TRUE(ampscope::set_stats_isa(isa));
    f(isa);
    if (isa == ampscope::StatsIsa::kAvx512 && ampscope::detail::stats_avx512_gfni_usable()) {
      SCOPED_TRACE("avx512, bit counts without GFNI/BITALG");
      EXPECT_FALSE(ampscope::detail::set_stats_avx512_gfni(false));
      f(isa);
      EXPECT_TRUE(ampscope::detail::set_stats_avx512_gfni(true));
    }
  }
  ampscope::set_stats_simd(true);
}

/// The sums' error bound of a build on a source dtype: SIMD builds sum float32-domain sources in
/// float per group (kFloatMomentsRel); float64 sources and the portable build sum in double.
double moments_rel(ampscope::StatsIsa isa, c10::ScalarType dt) {
  return isa == ampscope::StatsIsa::kPortable || dt == at::kDouble ? 0.0 : kFloatMomentsRel;
}

/// Checks the kernel against torch, with every build of it this CPU can run.
void check_tensor(const at::Tensor& t, const std::string& what, int threads = 1) {
  const Stats want = oracle(t);
  for_each_isa([&](ampscope::StatsIsa isa) {
    expect_same(ampscope::tensor_stats(t, threads), want, what + " (" + isa_str(isa) + ")",
                moments_rel(isa, t.scalar_type()));
  });
}

// ---------------------------------------------------------------- data

double f32_bits(std::uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
double f64_bits(std::uint64_t b) {
  double d;
  std::memcpy(&d, &b, 8);
  return d;
}

/// Values planted at every format's edges.
std::vector<double> edge_values() {
  std::vector<double> v = {65504,
                           65519,
                           65520,
                           65519.99,
                           65520.01,
                           0x1p-24,
                           0x1p-25,
                           0x1p-25 * 1.0001,
                           0x1p-24 * 0.75,
                           0x1p-14,
                           0x1p-15,
                           0x1p-14 * (1 - 0x1p-11),
                           0x1p-14 * (1 - 0x1p-12),
                           3 * 0x1p-24,
                           1e-40,
                           1e-45,
                           0x1p-149,
                           0x1p-126,
                           0x1p-133,
                           0x1p-134,
                           0x1p-134 * 1.01,
                           3.4e38,
                           3.39e38,
                           3.3895313892515355e38,
                           3.396e38,
                           3.4028234663852886e38,
                           448,
                           449,
                           463.99,
                           464,
                           465,
                           480,
                           500,
                           57344,
                           61439,
                           61440,
                           61441,
                           0x1p-6,
                           0x1p-9,
                           0x1p-10,
                           0x1p-10 * 1.001,
                           0x1p-14 * 0.875,
                           0x1p-14 * 0.8749,
                           0x1p-14 * 0.9375,
                           0x1p-6 * 0.9375,
                           0x1p-6 * 0.93,
                           0x1p-16,
                           0x1p-17,
                           0x1p-17 * 1.0001,
                           1.0,
                           1.5,
                           1e-3,
                           1e-8,
                           123456.0,
                           kInf,
                           kNaN,
                           0.0};
  std::vector<double> out;
  for (double x : v) {
    out.push_back(x);
    out.push_back(-x);
  }
  return out;
}

/// float32 bit patterns around every threshold of the kernel, and their negatives.
std::vector<double> threshold_neighbours() {
  const std::uint32_t centres[] = {0x33000000, 0x387FE000, 0x477FF000, 0x00008000, 0x007F8000,
                                   0x7F7F8000, 0x3A800000, 0x3C700000, 0x43E80000, 0x37000000,
                                   0x38600000, 0x47700000, 0x00800000, 0x7F7FFFF0, 0x00000008};
  std::vector<double> out;
  for (auto c : centres)
    for (int k = -8; k <= 8; ++k) {
      const double x = f32_bits(c + static_cast<std::uint32_t>(k));
      out.push_back(x);
      out.push_back(-x);
    }
  return out;
}

/// float64 values around the float32 rounding points of every threshold: these are rounded to
/// float32 first by torch, so e.g. 65520 - 2^-30 counts as float16 overflow.
std::vector<double> double_rounding_values() {
  std::vector<double> out;
  for (double x : threshold_neighbours()) {
    if (!std::isfinite(x) || x == 0) continue;
    const double half_ulp32 = std::ldexp(1.0, std::ilogb(x) - 24);
    std::uint64_t b;
    std::memcpy(&b, &x, 8);
    for (int k = -2; k <= 2; ++k) out.push_back(f64_bits(b + static_cast<std::uint64_t>(k)));
    out.push_back(x + half_ulp32);
    out.push_back(x - half_ulp32);
    out.push_back(x + half_ulp32 * (1 + 0x1p-40));
    out.push_back(x - half_ulp32 * (1 - 0x1p-40));
  }
  for (double x :
       {65520 - 0x1p-30, 464 + 0x1p-30, 464 - 0x1p-40, 61440 - 0x1p-30, 0x1p-25 * (1 + 0x1p-30),
        0x1p-10 * (1 + 0x1p-25), 1e39, -1e39, 1e300, 1e-50, -1e-50, 1e-310, 0x1p-1074, 0x1p-1022,
        1.7976931348623157e308, 3.4028235677973366e38, 3.4028235677973362e38})
    out.push_back(x);
  return out;
}

/// A mixture: wide log-uniform magnitudes over [lo, hi) binades, normal-ish values, zeros,
/// planted edges and a few non-finite values.
std::vector<double> mixed_values(std::int64_t n, double lo, double hi, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::normal_distribution<double> g(0.0, 1.0);
  const auto edges = edge_values();
  std::vector<double> v(static_cast<std::size_t>(n));
  for (auto& x : v) {
    const double r = u(rng);
    const double sign = u(rng) < 0.5 ? -1.0 : 1.0;
    if (r < 0.6)
      x = sign * std::exp2(lo + (hi - lo) * u(rng));
    else if (r < 0.85)
      x = g(rng);
    else if (r < 0.9)
      x = 0.0;
    else
      x = edges[static_cast<std::size_t>(u(rng) * static_cast<double>(edges.size())) %
                edges.size()];
  }
  return v;
}

at::Tensor tensor_of(const std::vector<double>& v, c10::ScalarType dt) {
  auto t = at::from_blob(const_cast<double*>(v.data()), {static_cast<std::int64_t>(v.size())},
                         at::TensorOptions().dtype(at::kDouble))
               .clone();
  return t.to(dt);
}

/// Normal values scaled by 2^k: narrow blocks that take the kernel's fast path, with the
/// thresholds' binades densely populated for the right k.
at::Tensor scaled_normal(std::int64_t n, double scale, c10::ScalarType dt, std::uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return (at::randn({n}, gen, at::TensorOptions().dtype(at::kDouble)) * scale).to(dt);
}

struct DtypeCase {
  c10::ScalarType dt;
  const char* name;
  double lo, hi;  // binade range of the wide random values
};
void PrintTo(const DtypeCase& c, std::ostream* os) { *os << c.name; }

const DtypeCase kDtypes[] = {
    {at::kFloat, "float32", -140, 130},
    {at::kHalf, "float16", -26, 17},
    {at::kBFloat16, "bfloat16", -140, 130},
    {at::kDouble, "float64", -160, 140},
};

/// The oracle runs torch ops on small tensors: one intra-op thread avoids OpenMP barrier waits
/// that dominate on a loaded machine. (The kernel's own threads are std::threads, unaffected.)
class SingleThreadedTorch : public ::testing::Environment {
 public:
  void SetUp() override { at::set_num_threads(1); }
};
[[maybe_unused]] ::testing::Environment* const kTorchEnv =
    ::testing::AddGlobalTestEnvironment(new SingleThreadedTorch);

// ---------------------------------------------------------------- block basics

constexpr ampscope::DType kSimdDtypes[] = {ampscope::DType::kFloat32, ampscope::DType::kFloat16,
                                           ampscope::DType::kBFloat16};

TEST(StatsBlock, Avx512BitCountsUseGfniWhereTheCpuHasIt) {
  namespace d = ampscope::detail;
  // on by default exactly where usable; the hook cannot turn it on elsewhere
  EXPECT_EQ(d::stats_avx512_gfni(), d::stats_avx512_gfni_usable());
  EXPECT_FALSE(d::set_stats_avx512_gfni(false));
  EXPECT_FALSE(d::stats_avx512_gfni());
  EXPECT_EQ(d::set_stats_avx512_gfni(true), d::stats_avx512_gfni_usable());
  if (d::stats_avx512_gfni_usable()) {
    EXPECT_TRUE(d::stats_avx512_usable());
  }
}

TEST(StatsBlock, IsaSelection) {
  using ampscope::StatsIsa;
  const auto best = ampscope::stats_isa_best();
  EXPECT_TRUE(ampscope::stats_isa_usable(StatsIsa::kPortable));
  EXPECT_TRUE(ampscope::stats_isa_usable(best));
  for (int i = static_cast<int>(best) + 1; i < ampscope::kNumStatsIsas; ++i)
    EXPECT_FALSE(ampscope::stats_isa_usable(static_cast<StatsIsa>(i)));  // wider than the widest
  for (auto dt : kSimdDtypes) {
    const auto def = ampscope::stats_isa_default(dt);
    EXPECT_TRUE(ampscope::stats_isa_usable(def));
    EXPECT_EQ(ampscope::stats_isa(dt), def);
    for (int i = 0; i < ampscope::kNumStatsIsas; ++i) {
      const auto isa = static_cast<StatsIsa>(i);
      EXPECT_EQ(ampscope::set_stats_isa(isa), ampscope::stats_isa_usable(isa)) << isa_str(isa);
      EXPECT_EQ(ampscope::stats_isa(dt), ampscope::stats_isa_usable(isa) ? isa : def);
      ampscope::set_stats_simd(true);
      EXPECT_EQ(ampscope::stats_isa(dt), def);
    }
    ampscope::set_stats_simd(false);
    EXPECT_FALSE(ampscope::stats_simd());
    EXPECT_EQ(ampscope::stats_isa(dt), StatsIsa::kPortable);
    ampscope::set_stats_simd(true);
    EXPECT_EQ(ampscope::stats_isa(dt), def);
  }
  EXPECT_EQ(isa_str(StatsIsa::kAvx512), "avx512");
  std::string names, used;
  for (auto isa : usable_isas()) names += isa_str(isa) + " ";
  for (auto dt : kSimdDtypes) used += isa_str(ampscope::stats_isa(dt)) + " ";
  std::printf("stats kernel builds tested on this CPU: %s(in use for float32/16/bf16: %s; %s)\n",
              names.c_str(), used.c_str(), ampscope::stats_isa_choice().c_str());
}

TEST(StatsBlock, IsaRule) {
  using ampscope::DType;
  using ampscope::StatsIsa;
  for (auto widest : {StatsIsa::kPortable, StatsIsa::kAvx2, StatsIsa::kAvx512}) {
    for (auto dt : kSimdDtypes) {
      EXPECT_EQ(ampscope::stats_isa_rule(dt, widest, false), widest);  // Intel, older AMD
      const bool sixteen = dt != DType::kFloat32;
      EXPECT_EQ(ampscope::stats_isa_rule(dt, widest, true),
                sixteen && widest == StatsIsa::kAvx512 ? StatsIsa::kAvx2 : widest);
    }
    EXPECT_EQ(ampscope::stats_isa_rule(DType::kFloat64, widest, true), widest);
  }
}

/// AMPSCOPE_STATS_ISA decides at the first use in a process: each case runs in a fresh one.
TEST(StatsIsaDeathTest, EnvironmentNamesTheBuild) {
  if (std::getenv("AMPSCOPE_STATS_ISA") != nullptr)
    GTEST_SKIP() << "AMPSCOPE_STATS_ISA is set for the whole test run";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto all_are = [](ampscope::StatsIsa isa) {
    for (auto dt : kSimdDtypes)
      if (ampscope::stats_isa_default(dt) != isa || ampscope::stats_isa(dt) != isa) return false;
    return true;
  };
  for (auto isa : usable_isas()) {
    const std::string name = isa_str(isa);
    EXPECT_EXIT(
        {
          setenv("AMPSCOPE_STATS_ISA", name.c_str(), 1);
          const bool ok =
              all_are(isa) && ampscope::stats_isa_choice() == "AMPSCOPE_STATS_ISA=" + name;
          std::exit(ok ? 0 : 1);
        },
        ::testing::ExitedWithCode(0), "")
        << name;
  }
  // the rule's choice (nothing may decide before a child sets its environment: computed there)
  auto is_the_rule = [] {
    const std::string how = ampscope::stats_isa_choice();
    const bool zen4 = how.rfind("AMD Zen 4", 0) == 0;
    if (!zen4 && how != "the widest build this CPU runs") return false;
    for (auto dt : kSimdDtypes)
      if (ampscope::stats_isa_default(dt) !=
          ampscope::stats_isa_rule(dt, ampscope::stats_isa_best(), zen4))
        return false;
    return true;
  };
  // a name it does not know, or a build this CPU cannot run: said on stderr, then the rule
  std::vector<std::string> bad = {"avx1024"};
  for (int i = 0; i < ampscope::kNumStatsIsas; ++i) {
    const auto isa = static_cast<ampscope::StatsIsa>(i);
    if (!ampscope::stats_isa_usable(isa)) bad.push_back(isa_str(isa));
  }
  for (const auto& name : bad) {
    EXPECT_EXIT(
        {
          setenv("AMPSCOPE_STATS_ISA", name.c_str(), 1);
          std::exit(is_the_rule() ? 0 : 1);
        },
        ::testing::ExitedWithCode(0), "AMPSCOPE_STATS_ISA=" + name + ".*using the default")
        << name;
  }
  for (const char* name : {"", "auto"}) {
    EXPECT_EXIT(
        {
          setenv("AMPSCOPE_STATS_ISA", name, 1);
          std::exit(is_the_rule() ? 0 : 1);
        },
        ::testing::ExitedWithCode(0), "")
        << name;
  }
}

TEST(StatsBlock, FloatControlRestored) {
#if defined(__x86_64__)
  // The SIMD builds set flush-to-zero for their float moments: the caller's MXCSR comes back.
  const unsigned before = __builtin_ia32_stmxcsr();
  auto t = scaled_normal(1 << 16, 0x1p-50, at::kFloat, 21);
  for_each_isa([&](ampscope::StatsIsa isa) {
    ampscope::tensor_stats(t, 1);
    EXPECT_EQ(__builtin_ia32_stmxcsr(), before) << isa_str(isa);
  });
#endif
}

TEST(StatsBlock, FormatNames) {
  const char* names[] = {"float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"};
  for (int f = 0; f < kNumFormats; ++f) {
    EXPECT_EQ(ampscope::format_name(static_cast<Format>(f)), names[f]);
    Format g;
    ASSERT_TRUE(ampscope::format_from_name(names[f], &g));
    EXPECT_EQ(g, static_cast<Format>(f));
  }
  Format g;
  EXPECT_FALSE(ampscope::format_from_name("float32", &g));
  EXPECT_FALSE(ampscope::format_from_name("", &g));
  EXPECT_EQ(ampscope::format_max(Format::kFloat16), 65504.0);
  EXPECT_EQ(ampscope::format_max(Format::kBFloat16), 3.3895313892515355e38);
  EXPECT_EQ(ampscope::format_max(Format::kFloat8E4M3FN), 448.0);
  EXPECT_EQ(ampscope::format_max(Format::kFloat8E5M2), 57344.0);
  // The maxima agree with torch's own.
  EXPECT_EQ(ampscope::format_max(Format::kFloat16),
            static_cast<double>(std::numeric_limits<c10::Half>::max()));
  EXPECT_EQ(ampscope::format_max(Format::kBFloat16),
            static_cast<double>(std::numeric_limits<c10::BFloat16>::max()));
  EXPECT_EQ(ampscope::format_max(Format::kFloat8E4M3FN),
            static_cast<double>(std::numeric_limits<c10::Float8_e4m3fn>::max()));
  EXPECT_EQ(ampscope::format_max(Format::kFloat8E5M2),
            static_cast<double>(std::numeric_limits<c10::Float8_e5m2>::max()));
}

TEST(StatsBlock, ExpHist) {
  ExpHist h;
  EXPECT_TRUE(h.empty());
  EXPECT_EQ(h.total(), 0);
  h.add(3);
  h.add(-2, 5);
  h.add(10, 2);
  h.add(0, 0);  // no-op
  EXPECT_EQ(h.lo(), -2);
  EXPECT_EQ(h.hi(), 11);
  EXPECT_EQ(h.at(3), 1);
  EXPECT_EQ(h.at(-2), 5);
  EXPECT_EQ(h.at(10), 2);
  EXPECT_EQ(h.at(0), 0);
  EXPECT_EQ(h.at(100), 0);
  EXPECT_EQ(h.total(), 8);
  ExpHist o;
  o.add(-150, 1);
  o.add(3, 4);
  h.merge(o);
  EXPECT_EQ(h.lo(), -150);
  EXPECT_EQ(h.at(3), 5);
  EXPECT_EQ(h.total(), 13);
  ExpHist a, b;
  a.add(1);
  a.add(4);
  b.add(4);
  b.add(1);
  EXPECT_TRUE(a == b);
  b.add(2);
  EXPECT_FALSE(a == b);
  EXPECT_TRUE(ExpHist{} == ExpHist{});
  EXPECT_FALSE(a == ExpHist{});
  // add_bins against bin-by-bin adds: zero edges are not stored, ranges grow either way
  std::mt19937_64 rng(9);
  for (int trial = 0; trial < 200; ++trial) {
    ExpHist bulk, one;
    for (int k = 0; k < 3; ++k) {
      const int lo = static_cast<int>(rng() % 60) - 30, n = static_cast<int>(rng() % 12);
      std::vector<std::int64_t> counts(static_cast<std::size_t>(n));
      for (auto& c : counts) c = rng() % 3 == 0 ? 0 : static_cast<std::int64_t>(rng() % 5);
      bulk.add_bins(lo, counts.data(), n);
      for (int i = 0; i < n; ++i) one.add(lo + i, counts[static_cast<std::size_t>(i)]);
    }
    ASSERT_TRUE(bulk == one) << "trial " << trial;
    ASSERT_EQ(bulk.empty(), one.empty());
    if (!bulk.empty()) {
      EXPECT_NE(bulk.at(bulk.lo()), 0);
      EXPECT_NE(bulk.at(bulk.hi() - 1), 0);
    }
  }
}

TEST(StatsBlock, MeanRmsMerge) {
  Stats s;
  EXPECT_EQ(s.mean(), 0.0);
  EXPECT_EQ(s.rms(), 0.0);
  s.count = 4;
  s.nan = 1;
  s.sum = 6;
  s.sum_sq = 14;  // finite values 1, 2, 3
  EXPECT_EQ(s.finite(), 3);
  EXPECT_EQ(s.nonfinite(), 1);
  EXPECT_DOUBLE_EQ(s.mean(), 2.0);
  EXPECT_DOUBLE_EQ(s.rms(), std::sqrt(14.0 / 3));
  Stats t;
  t.count = 2;
  t.absmax = 7;
  t.absmin_nonzero = 0.5;
  t.overflow[2] = 1;
  t.exp_hist.add(2, 2);
  s.merge(t);
  EXPECT_EQ(s.count, 6);
  EXPECT_EQ(s.absmax, 7);
  EXPECT_EQ(s.absmin_nonzero, 0.5);
  EXPECT_EQ(s.overflow_in(Format::kFloat8E4M3FN), 1);
  EXPECT_EQ(s.exp_hist.total(), 2);
}

TEST(StatsBlock, TensorView) {
  ampscope::TensorView v;
  EXPECT_EQ(v.numel(), 1);  // zero-dim
  EXPECT_TRUE(v.is_contiguous());
  v.sizes = {3, 4};
  v.strides = {4, 1};
  EXPECT_EQ(v.numel(), 12);
  EXPECT_TRUE(v.is_contiguous());
  v.strides = {1, 3};
  EXPECT_FALSE(v.is_contiguous());
  v.sizes = {1, 4};
  v.strides = {99, 1};
  EXPECT_TRUE(v.is_contiguous());
  v.sizes = {3, 0};
  EXPECT_EQ(v.numel(), 0);
}

// ---------------------------------------------------------------- torch's cast behaviour

TEST(TorchCasts, AsTheKernelAssumes) {
  auto cast = [](double x, c10::ScalarType src, c10::ScalarType f) {
    return at::tensor({x}, at::kDouble).to(src).to(f).to(at::kDouble).item<double>();
  };
  // float16: 65519.99... rounds to 65504, 65520 is the tie that rounds to inf.
  EXPECT_EQ(cast(65519.99, at::kFloat, at::kHalf), 65504.0);
  EXPECT_TRUE(std::isinf(cast(65520, at::kFloat, at::kHalf)));
  // float64 is rounded to float32 first: 65520 - 2^-30 becomes 65520.0f, then inf.
  EXPECT_TRUE(std::isinf(cast(65520 - 0x1p-30, at::kDouble, at::kHalf)));
  // e4m3fn: 464 is a tie to even 448; 465 has no finite result and torch gives NaN, not inf.
  EXPECT_EQ(cast(464, at::kFloat, at::kFloat8_e4m3fn), 448.0);
  EXPECT_TRUE(std::isnan(cast(465, at::kFloat, at::kFloat8_e4m3fn)));
  EXPECT_TRUE(std::isnan(cast(kInf, at::kFloat, at::kFloat8_e4m3fn)));
  // float64 464 + 2^-30 rounds to 464.0f first, then to 448 (a direct rounding would give NaN).
  EXPECT_EQ(cast(464 + 0x1p-30, at::kDouble, at::kFloat8_e4m3fn), 448.0);
  // e5m2 has inf: 61440 is the tie that rounds up past 57344.
  EXPECT_EQ(cast(61439, at::kFloat, at::kFloat8_e5m2), 57344.0);
  EXPECT_TRUE(std::isinf(cast(61440, at::kFloat, at::kFloat8_e5m2)));
  // Underflow ties go to zero.
  EXPECT_EQ(cast(0x1p-25, at::kFloat, at::kHalf), 0.0);
  EXPECT_EQ(cast(0x1p-10, at::kFloat, at::kFloat8_e4m3fn), 0.0);
  EXPECT_EQ(cast(0x1p-17, at::kFloat, at::kFloat8_e5m2), 0.0);
  EXPECT_EQ(cast(0x1p-134, at::kFloat, at::kBFloat16), 0.0);
  // A float64 just above the float16 underflow tie rounds to the tie in float32, then to zero.
  EXPECT_EQ(cast(0x1p-25 * (1 + 0x1p-30), at::kDouble, at::kHalf), 0.0);
}

// ---------------------------------------------------------------- values, per source dtype

class PerDtype : public ::testing::TestWithParam<DtypeCase> {};

TEST_P(PerDtype, WideRandom) {
  const auto& c = GetParam();
  check_tensor(tensor_of(mixed_values(200000, c.lo, c.hi, 7), c.dt), "wide random");
}

TEST_P(PerDtype, NonFiniteInEveryBlock) {
  // A tensor that went non-finite holds NaN/inf in most blocks beside ordinary values: the SIMD
  // builds set them apart and count the rest on the fast path (each build against the oracle).
  const auto& c = GetParam();
  auto t = scaled_normal(50000, 1.0, c.dt, 3);
  t.index_put_({at::arange(0, t.numel(), 997)}, kInf);
  t.index_put_({at::arange(5, t.numel(), 1499)}, -kInf);
  t.index_put_({at::arange(11, t.numel(), 2003)}, kNaN);
  check_tensor(t, "randn with NaN/inf in every block");
  check_tensor(t.clamp_min(0), "relu(randn) with NaN/+inf in every block");
  check_tensor(at::full({8192}, kNaN, t.options()), "all NaN");
}

TEST_P(PerDtype, PlantedEdges) {
  const auto& c = GetParam();
  check_tensor(tensor_of(edge_values(), c.dt), "edge values");
  check_tensor(tensor_of(threshold_neighbours(), c.dt), "threshold neighbours");
  if (c.dt == at::kDouble)
    check_tensor(tensor_of(double_rounding_values(), c.dt), "double rounding");
}

TEST_P(PerDtype, ScaledNormalFastPath) {
  // Narrow blocks (fast path) with each threshold's binade populated in turn.
  const auto& c = GetParam();
  const double scales[] = {0x1p-26, 0x1p-20, 0x1p-16, 0x1p-12, 0x1p-8,  0x1p-5,   1.0,     0x1p7,
                           0x1p13,  0x1p14,  0x1p15,  0x1p120, 0x1p126, 0x1p-120, 0x1p-128};
  std::uint64_t seed = 1;
  for (double s : scales) {
    auto t = scaled_normal(20000, s, c.dt, seed++);
    check_tensor(t, "normal * " + std::to_string(std::log2(s)));
    check_tensor(t.clamp_min(0), "relu(normal) * " + std::to_string(std::log2(s)));  // half zeros
    // Planted edge values that lie in the block's natural range (so the block stays narrow).
    std::vector<double> in_range;
    for (double x : edge_values())
      if (std::isfinite(x) && std::abs(x) >= s * 0x1p-12 && std::abs(x) <= s * 4)
        in_range.push_back(x);
    for (double x : threshold_neighbours())
      if (std::isfinite(x) && std::abs(x) >= s * 0x1p-12 && std::abs(x) <= s * 4)
        in_range.push_back(x);
    if (!in_range.empty()) {
      auto p = t.clone();
      auto edges = tensor_of(in_range, c.dt);
      const std::int64_t m = std::min<std::int64_t>(edges.numel(), p.numel() / 7);
      auto idx = at::arange(0, m * 7, 7);
      p.index_put_({idx}, edges.slice(0, 0, m));
      check_tensor(p, "normal * " + std::to_string(std::log2(s)) + " with edges");
    }
  }
  // Narrow log-uniform windows around the thresholds, with exact powers of two and threshold
  // neighbours planted: every block is narrow, so the fast path must get the ties right.
  // {-60, 60} and {-126, 128}: finite and normal but wider than the kernel's byte-compare sweeps.
  // {-20, 8} and {-30, -3}: between the sweeps and the AVX-512 build's table histogram.
  const int windows[][2] = {{-27, -22}, {-18, -13}, {-11, -6}, {-8, -3},  {7, 10},    {14, 17},
                            {120, 128}, {-20, 8},   {-30, -3}, {-60, 60}, {-126, 128}};
  for (auto& w : windows) {
    std::mt19937_64 rng(seed++);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    std::vector<double> near;
    for (double x : threshold_neighbours())
      if (std::isfinite(x) && std::abs(x) >= std::ldexp(1.0, w[0]) &&
          std::abs(x) < std::ldexp(1.0, w[1]))
        near.push_back(x);
    std::vector<double> v(30000);
    for (std::size_t i = 0; i < v.size(); ++i) {
      const double r = u(rng);
      const double sign = u(rng) < 0.5 ? -1.0 : 1.0;
      if (r < 0.05)
        v[i] = sign * std::ldexp(1.0, w[0] + static_cast<int>(u(rng) * (w[1] - w[0])));
      else if (r < 0.08)
        v[i] = 0.0;
      else if (r < 0.15 && !near.empty())
        v[i] =
            near[static_cast<std::size_t>(u(rng) * static_cast<double>(near.size())) % near.size()];
      else
        v[i] = sign * std::exp2(w[0] + (w[1] - w[0]) * u(rng));
    }
    check_tensor(tensor_of(v, c.dt),
                 "window 2^" + std::to_string(w[0]) + "..2^" + std::to_string(w[1]));
  }
}

TEST_P(PerDtype, MergeOfHalvesEqualsWhole) {
  const auto& c = GetParam();
  auto t = tensor_of(mixed_values(50001, c.lo, c.hi, 11), c.dt);
  const auto v = ampscope::make_view(t);
  Stats whole = ampscope::compute_stats(v, 1);
  for (std::int64_t k : {std::int64_t{0}, std::int64_t{1}, std::int64_t{2047}, std::int64_t{2048},
                         std::int64_t{25000}, std::int64_t{50001}}) {
    Stats a, b;
    ampscope::accumulate_stats(v, 0, k, a);
    ampscope::accumulate_stats(v, k, t.numel(), b);
    a.merge(b);
    expect_same(a, whole, "split at " + std::to_string(k));
  }
}

INSTANTIATE_TEST_SUITE_P(Stats, PerDtype, ::testing::ValuesIn(kDtypes),
                         [](const ::testing::TestParamInfo<DtypeCase>& i) {
                           return std::string(i.param.name);
                         });

TEST(Exhaustive, AllFloat16AndBFloat16Patterns) {
  // Every 16-bit pattern: all finite values, subnormals, infinities and NaN payloads.
  auto bits = at::arange(-32768, 32768, at::TensorOptions().dtype(at::kInt)).to(at::kShort);
  check_tensor(bits.view(at::kHalf), "all float16");
  check_tensor(bits.view(at::kBFloat16), "all bfloat16");
}

/// Every normal 16-bit pattern of both signs plus zeros, padded with zeros to whole kernel blocks
/// (2048 elements): blocks without subnormals or NaN/inf, which the AVX2 build reads in place.
at::Tensor all_normal_patterns(bool bf16, bool shuffled) {
  const std::int32_t min_normal = bf16 ? 0x0080 : 0x0400, inf = bf16 ? 0x7F80 : 0x7C00;
  std::vector<std::int16_t> bits;
  for (std::int32_t h = min_normal; h < inf; ++h) {
    bits.push_back(static_cast<std::int16_t>(h));
    bits.push_back(static_cast<std::int16_t>(h | 0x8000));
  }
  for (int z = 0; z < 300; ++z)
    bits.push_back(static_cast<std::int16_t>(z % 2 ? 0x8000 : 0));  // -0 and +0
  while (bits.size() % 2048 != 0) bits.push_back(0);
  if (shuffled) std::shuffle(bits.begin(), bits.end(), std::mt19937_64(5));
  auto t = at::from_blob(bits.data(), {static_cast<std::int64_t>(bits.size())}, at::kShort).clone();
  return t.view(bf16 ? at::kBFloat16 : at::kHalf);
}

TEST(Exhaustive, NormalFloat16AndBFloat16PatternsInPlace) {
  // Sorted: narrow blocks (sweeps, the two-binade key-sum solve, dense threshold passes, the
  // float16 zero key). Shuffled: blocks spanning every binade (the scan by mask).
  for (bool shuffled : {false, true}) {
    check_tensor(all_normal_patterns(false, shuffled),
                 shuffled ? "float16 shuffled" : "float16 sorted");
    check_tensor(all_normal_patterns(true, shuffled),
                 shuffled ? "bfloat16 shuffled" : "bfloat16 sorted");
  }
  // Runs of 2048 equal magnitudes per block (a single binade per block), each pattern in turn.
  for (bool bf16 : {false, true}) {
    auto base = all_normal_patterns(bf16, false);
    auto idx = at::arange(0, base.numel(), 97, at::kLong);
    auto rep = base.index_select(0, idx).repeat_interleave(2048);
    check_tensor(rep.slice(0, 0, 2048 * 40),
                 bf16 ? "bfloat16 constant blocks" : "float16 constant blocks");
  }
}

/// Relative error of the kernel's sum of squares and rms against float64 torch sums.
void check_moments(const at::Tensor& t, const std::string& what, double rel) {
  SCOPED_TRACE(what);
  const auto d = t.to(at::kDouble);
  const double want_sq = (d * d).sum().item<double>(), want_sum = d.sum().item<double>();
  const double sum_abs = d.abs().sum().item<double>();
  for_each_isa([&](ampscope::StatsIsa isa) {
    const Stats s = ampscope::tensor_stats(t, 1);
    EXPECT_LE(std::abs(s.sum_sq - want_sq), rel * want_sq) << isa_str(isa);
    EXPECT_LE(std::abs(s.sum - want_sum), rel * sum_abs + 1e-300) << isa_str(isa);
    EXPECT_TRUE(std::isfinite(s.rms()));
    EXPECT_GT(s.rms(), 0.0);
  });
}

TEST(Moments, WithinTheFloatGroupBound) {
  // The AVX2 build sums in float per group of 128 values: the error bound is kFloatMomentsRel.
  // Equal values make every rounding go the same way (the worst case for a float sum).
  const std::int64_t n = 2048 * 64;
  for (auto dt : {at::kFloat, at::kHalf, at::kBFloat16}) {
    const std::string name = c10::toString(dt);
    check_moments(at::full({n}, 13526.6455078125, at::kFloat).to(dt), name + " constant",
                  kFloatMomentsRel);
    check_moments(at::full({n}, 1.0 + 1.0 / 3, at::kFloat).to(dt), name + " constant 4/3",
                  kFloatMomentsRel);
    check_moments(scaled_normal(n, 1.0, dt, 3), name + " normal", kFloatMomentsRel);
    // One large value among small ones per group: the small squares are below its float ulp.
    auto t = scaled_normal(n, 0x1p-10, dt, 4);
    t.slice(0, 0, n, 128).fill_(300.0);
    check_moments(t, name + " spikes", kFloatMomentsRel);
  }
  // Outside float's safe range the AVX2 build sums in double: squares of 2^60 or of 2^-60 would
  // overflow / underflow float, and still come out right (float32 and bfloat16 sources).
  for (auto dt : {at::kFloat, at::kBFloat16}) {
    const std::string name = c10::toString(dt);
    check_moments(scaled_normal(n, 0x1p100, dt, 5), name + " 2^100", 1e-10);
    check_moments(scaled_normal(n, 0x1p-60, dt, 6), name + " 2^-60", 1e-10);
    check_moments(at::full({n}, 3.0e38, at::kFloat).to(dt), name + " near max", 1e-10);
  }
}

TEST(Exhaustive, Float32AroundThresholds) {
  // 2^16 consecutive float32 patterns centred on every threshold (2^12 among the subnormals).
  const std::int64_t centres[] = {0x33000000, 0x387FE000,          0x477FF000, 0x00008000,
                                  0x007F8000, 0x7F7F8000,          0x3A800000, 0x3C700000,
                                  0x43E80000, 0x37000000,          0x38600000, 0x47700000,
                                  0x00800000, 0x7F800000 - 0x8000, 0x7F800000};
  for (auto c : centres) {
    // Narrower among float32 subnormals: torch's own ops (the oracle) can be very slow on them.
    const std::int64_t half = c < 0x01000000 ? 0x800 : 0x8000;
    auto bits = at::arange(std::max<std::int64_t>(c - half, 0),
                           std::min<std::int64_t>(c + half, 0x7FFFFFFF),
                           at::TensorOptions().dtype(at::kInt));
    auto t = at::cat({bits, bits | static_cast<std::int32_t>(0x80000000u)}).view(at::kFloat);
    check_tensor(t, "around " + std::to_string(c));
    check_tensor(t.to(at::kDouble), "around " + std::to_string(c) + " as float64");
  }
}

// ---------------------------------------------------------------- shapes and strides

struct ShapeCase {
  const char* name;
  at::Tensor (*make)(c10::ScalarType dt);
};

at::Tensor base_values(std::int64_t n, c10::ScalarType dt, std::uint64_t seed) {
  return tensor_of(mixed_values(n, -30, 20, seed), dt);
}

const ShapeCase kShapes[] = {
    {"empty", [](c10::ScalarType dt) { return base_values(0, dt, 1); }},
    {"empty_2d",
     [](c10::ScalarType dt) {
       return base_values(0, dt, 1).reshape({0, 5});
     }},
    {"zero_dim", [](c10::ScalarType dt) { return base_values(1, dt, 2).reshape({}); }},
    {"one_by_one",
     [](c10::ScalarType dt) {
       return base_values(1, dt, 3).reshape({1, 1});
     }},
    {"row_1x1296",
     [](c10::ScalarType dt) {
       return base_values(1296, dt, 4).reshape({1, 1296});
     }},
    {"matrix_217x255",
     [](c10::ScalarType dt) {
       return base_values(217 * 255, dt, 5).reshape({217, 255});
     }},
    {"transposed",
     [](c10::ScalarType dt) {
       return base_values(217 * 255, dt, 6).reshape({217, 255}).t();
     }},
    {"sliced_step",
     [](c10::ScalarType dt) {
       return base_values(217 * 255, dt, 7)
           .reshape({217, 255})
           .slice(0, 1, 217, 3)
           .slice(1, 0, 255, 2);
     }},
    {"expanded_stride0",
     [](c10::ScalarType dt) {
       return base_values(300, dt, 8).reshape({1, 300}).expand({217, 300});
     }},
    {"scalar_expanded",
     [](c10::ScalarType dt) {
       return base_values(1, dt, 9).reshape({}).expand({33, 70});
     }},
    {"permuted_3d",
     [](c10::ScalarType dt) {
       return base_values(7 * 11 * 13, dt, 10).reshape({7, 11, 13}).permute({2, 0, 1});
     }},
    {"offset_contiguous",
     [](c10::ScalarType dt) { return base_values(3 * 2048 + 6, dt, 14).slice(0, 1); }},
    {"column_slice",
     [](c10::ScalarType dt) {
       return base_values(4096 * 3, dt, 11).reshape({4096, 3}).select(1, 1);
     }},
};

class ShapeTest : public ::testing::TestWithParam<std::tuple<DtypeCase, ShapeCase>> {};

TEST_P(ShapeTest, MatchesOracle) {
  const auto& [d, s] = GetParam();
  auto t = s.make(d.dt);
  check_tensor(t, s.name);
  // The view path directly, single and multi-threaded.
  if (t.numel() > 0) {
    expect_same(ampscope::compute_stats(ampscope::make_view(t), 3), oracle(t), "3 threads");
  } else {
    EXPECT_EQ(ampscope::compute_stats(ampscope::make_view(t), 1).count, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Stats, ShapeTest,
                         ::testing::Combine(::testing::ValuesIn(kDtypes),
                                            ::testing::ValuesIn(kShapes)),
                         [](const ::testing::TestParamInfo<std::tuple<DtypeCase, ShapeCase>>& i) {
                           return std::string(std::get<0>(i.param).name) + "_" +
                                  std::get<1>(i.param).name;
                         });

TEST(Strides, NegativeStrides) {
  // torch has no negative strides; build the view by hand: the reversed 2-D walk of a matrix.
  for (const auto& d : kDtypes) {
    auto t = base_values(37 * 41, d.dt, 12).reshape({37, 41});
    auto v = ampscope::make_view(t);
    const auto esize = static_cast<std::int64_t>(t.element_size());
    v.data = static_cast<const char*>(t.data_ptr()) + (t.numel() - 1) * esize;
    v.strides = {-41, -1};
    expect_same(ampscope::compute_stats(v, 1), oracle(t.flip({0, 1})),
                std::string("negative ") + d.name);
    // A negative outer stride with a positive inner one.
    auto w = ampscope::make_view(t);
    w.data = static_cast<const char*>(t.data_ptr()) + 36 * 41 * esize;
    w.strides = {-41, 1};
    expect_same(ampscope::compute_stats(w, 1), oracle(t.flip({0})),
                std::string("negative outer ") + d.name);
  }
}

// ---------------------------------------------------------------- big tensors, threads

TEST(Threads, BigTensorMatchesSingleThread) {
  const std::int64_t n = (std::int64_t{1} << 22) + 12345;
  for (auto dt : {at::kFloat, at::kBFloat16}) {
    auto t = scaled_normal(n, 1.0, dt, 99);
    // Some structure: zeros, a wide-range stretch, planted edges and non-finite values.
    t.slice(0, 1000, 200000).zero_();
    t.slice(0, 300000, 300000 + 50001).copy_(tensor_of(mixed_values(50001, -140, 130, 5), dt));
    const auto one = ampscope::tensor_stats(t, 1);
    const auto many = ampscope::tensor_stats(t, 4);
    const auto dflt = ampscope::tensor_stats(t);
    EXPECT_EQ(one.count, n);
    expect_same(many, one, "4 threads vs 1");
    expect_same(dflt, one, "default threads vs 1");
    EXPECT_TRUE(many.exp_hist == one.exp_hist);
    expect_same(one, oracle(t), "vs torch");
    for_each_isa([&](ampscope::StatsIsa isa) {
      expect_same(ampscope::tensor_stats(t, 4), one, isa_str(isa) + " build, 4 threads");
    });
    // Non-contiguous through the threaded path too.
    auto nc = t.slice(0, 0, n - 1, 2);
    expect_same(ampscope::tensor_stats(nc, 4), ampscope::tensor_stats(nc, 1),
                "strided, 4 threads vs 1");
  }
}

// ---------------------------------------------------------------- the tensor edge

TEST(TensorEdge, UnsupportedGiveEmpty) {
  EXPECT_EQ(ampscope::tensor_stats(at::Tensor()).count, 0);
  EXPECT_EQ(ampscope::tensor_stats(at::arange(10, at::kLong)).count, 0);
  EXPECT_EQ(ampscope::tensor_stats(at::ones({4}, at::kBool)).count, 0);
  EXPECT_EQ(ampscope::tensor_stats(at::ones({4}, at::kInt)).count, 0);
  EXPECT_EQ(ampscope::tensor_stats(at::ones({4}, at::kFloat).to(at::kFloat8_e4m3fn)).count, 0);
  EXPECT_FALSE(ampscope::stats_supported(at::arange(10, at::kLong)));
  EXPECT_FALSE(ampscope::stats_supported(at::Tensor()));
  EXPECT_TRUE(ampscope::stats_supported(at::ones({2}, at::kHalf)));
  EXPECT_EQ(ampscope::to_dtype(at::kFloat), DType::kFloat32);
  EXPECT_EQ(ampscope::to_dtype(at::kHalf), DType::kFloat16);
  EXPECT_EQ(ampscope::to_dtype(at::kBFloat16), DType::kBFloat16);
  EXPECT_EQ(ampscope::to_dtype(at::kDouble), DType::kFloat64);
  EXPECT_FALSE(ampscope::to_dtype(at::kLong).has_value());
}

TEST(TensorEdge, NegatedView) {
  auto t = base_values(1000, at::kFloat, 13);
  auto n = t.neg().contiguous();
  check_tensor(n, "negated");
  auto lazy = at::_neg_view(t);
  expect_same(ampscope::tensor_stats(lazy), oracle(n), "lazy neg view");
}

TEST(TensorEdge, Simple) {
  auto t =
      at::tensor({1.0f, -2.0f, 0.0f, 4.0f, static_cast<float>(kNaN), static_cast<float>(-kInf)});
  const auto s = ampscope::tensor_stats(t);
  EXPECT_EQ(s.count, 6);
  EXPECT_EQ(s.nan, 1);
  EXPECT_EQ(s.neginf, 1);
  EXPECT_EQ(s.posinf, 0);
  EXPECT_EQ(s.zeros, 1);
  EXPECT_EQ(s.absmax, 4.0);
  EXPECT_EQ(s.absmin_nonzero, 1.0);
  EXPECT_DOUBLE_EQ(s.mean(), 3.0 / 4);
  EXPECT_DOUBLE_EQ(s.rms(), std::sqrt(21.0 / 4));
  EXPECT_EQ(s.exp_hist.at(0), 1);
  EXPECT_EQ(s.exp_hist.at(1), 1);
  EXPECT_EQ(s.exp_hist.at(2), 1);
  EXPECT_EQ(s.exp_hist.total(), 3);
  // Large finite values do not overflow rms.
  auto big = at::full({1000}, 3.4e38, at::kFloat);
  EXPECT_TRUE(std::isfinite(ampscope::tensor_stats(big).rms()));
  EXPECT_EQ(ampscope::tensor_stats(big).overflow_in(Format::kBFloat16), 1000);
}

TEST(TensorEdge, CudaTensorsRunTheCudaKernel) {
  // Full coverage is tests/test_stats_cuda.cpp; here only that the edge dispatches to it.
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA";
  auto t = at::arange(-8, 8, at::TensorOptions().dtype(at::kFloat)).mul(1e4);
  expect_same(ampscope::tensor_stats(t.cuda()), ampscope::tensor_stats(t), "cuda edge");
}

}  // namespace
