// Which build of the CPU stats kernel reads each dtype (see stats.h): AMPSCOPE_STATS_ISA when it
// names one this CPU can run, else the widest, but for 16-bit sources on AMD Zen 4.
//
// Widest is not fastest everywhere. On AMD Zen 4 (family 19h with AVX-512; an EPYC of that
// family, 2026-12-06, 2 threads, both builds interleaved in one process by `ampscope-bench-stats
// --isa avx512,avx2`) the AVX-512 build reads float16 and bfloat16 from memory 1.1-1.35x slower
// than the AVX2 build (256 MiB - 1 GiB: 0.31-0.38x `at::sum` against 0.39-0.49x), about as fast
// in cache (1-16 MiB: within +-10% either way, run to run), while float32 is 5-15% faster on it
// at every size. Zen 4 runs AVX-512 on 256-bit units; why its 16-bit paths lose from memory is
// not known (software prefetch on or off makes no difference to them there). On the Intel Xeons
// of the benchmarks the AVX-512 build is the faster one for every dtype. The rule is fixed, not
// timed at start-up: a timing in cache does not see the difference, and a choice that could
// flip from run to run would change the last bits of reported sums (the builds add in
// different orders).
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

#include "ampscope/profiler/stats.h"
#include "stats_kernel.h"

namespace ampscope {
namespace {

using detail::i64;

/// The build chosen by set_stats_isa (-1: none chosen, the defaults).
std::atomic<int> g_isa{-1};

constexpr StatsIsa kAllIsas[kNumStatsIsas] = {StatsIsa::kPortable, StatsIsa::kAvx2,
                                              StatsIsa::kAvx512};

/// Elements [begin, end) of `v` by one build (usable on this CPU).
void run_build(StatsIsa isa, const TensorView& v, i64 begin, i64 end, Stats& out) {
  switch (isa) {
    case StatsIsa::kAvx512:
      detail::run_stats_avx512(v, begin, end, out);
      return;
    case StatsIsa::kAvx2:
      detail::run_stats_avx2(v, begin, end, out);
      return;
    case StatsIsa::kPortable:
      detail::run_stats_portable(v, begin, end, out);
      return;
  }
}

/// AMD family 19h with AVX-512: Zen 4 (Zen 3, the same family, has no AVX-512).
bool amd_zen4() {
#if defined(__x86_64__) && defined(__GNUC__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0, &a, &b, &c, &d) == 0) return false;
  char vendor[13] = {};
  std::memcpy(vendor, &b, 4);
  std::memcpy(vendor + 4, &d, 4);
  std::memcpy(vendor + 8, &c, 4);
  if (std::strcmp(vendor, "AuthenticAMD") != 0 || __get_cpuid(1, &a, &b, &c, &d) == 0)
    return false;
  unsigned family = (a >> 8) & 0xF;
  if (family == 0xF) family += (a >> 20) & 0xFF;
  return family == 0x19 && stats_isa_usable(StatsIsa::kAvx512);
#else
  return false;
#endif
}

/// The default build of each DType (indexed by its value), and how it was decided.
struct Choice {
  StatsIsa by_dtype[4] = {};
  std::string how;
};

/// AMPSCOPE_STATS_ISA, when set to a build this CPU runs; a name it cannot run or does not know
/// is said once on stderr, and the rule decides.
Choice choose() {
  Choice c;
  const char* env = std::getenv("AMPSCOPE_STATS_ISA");
  if (env != nullptr && *env != '\0' && std::strcmp(env, "auto") != 0) {
    bool known = false;
    for (StatsIsa isa : kAllIsas) {
      if (stats_isa_name(isa) != env) continue;
      known = true;
      if (stats_isa_usable(isa)) {
        for (auto& b : c.by_dtype) b = isa;
        c.how = std::string("AMPSCOPE_STATS_ISA=") + env;
        return c;
      }
    }
    std::fprintf(stderr,
                 known ? "ampscope: AMPSCOPE_STATS_ISA=%s: this CPU cannot run that build; "
                         "using the default\n"
                       : "ampscope: AMPSCOPE_STATS_ISA=%s is not a build (avx512, avx2, portable "
                         "or auto); using the default\n",
                 env);
  }
  const bool zen4 = amd_zen4();
  for (DType dt : {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kFloat64})
    c.by_dtype[static_cast<int>(dt)] = stats_isa_rule(dt, stats_isa_best(), zen4);
  c.how = zen4 ? "AMD Zen 4: float16/bfloat16 on avx2, the rest on the widest build"
               : "the widest build this CPU runs";
  return c;
}

const Choice& choice() {
  static const Choice c = choose();
  return c;
}

}  // namespace

std::string_view stats_isa_name(StatsIsa isa) {
  switch (isa) {
    case StatsIsa::kPortable:
      return "portable";
    case StatsIsa::kAvx2:
      return "avx2";
    case StatsIsa::kAvx512:
      return "avx512";
  }
  return "unknown";
}

bool stats_isa_usable(StatsIsa isa) {
  switch (isa) {
    case StatsIsa::kPortable:
      return true;
    case StatsIsa::kAvx2:
      return detail::stats_avx2_usable();
    case StatsIsa::kAvx512:
      return detail::stats_avx512_usable();
  }
  return false;
}

StatsIsa stats_isa_rule(DType dtype, StatsIsa widest, bool amd_zen4) {
  const bool sixteen = dtype == DType::kFloat16 || dtype == DType::kBFloat16;
  if (amd_zen4 && sixteen && widest == StatsIsa::kAvx512) return StatsIsa::kAvx2;
  return widest;
}

StatsIsa stats_isa_best() {
  static const StatsIsa best = stats_isa_usable(StatsIsa::kAvx512) ? StatsIsa::kAvx512
                               : stats_isa_usable(StatsIsa::kAvx2) ? StatsIsa::kAvx2
                                                                   : StatsIsa::kPortable;
  return best;
}

StatsIsa stats_isa_default(DType dtype) { return choice().by_dtype[static_cast<int>(dtype)]; }

std::string stats_isa_choice() { return choice().how; }

std::string stats_isa_summary() {
  std::string out;
  bool avx512 = false;
  for (DType dt : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    if (!out.empty()) out += ", ";
    out += dt == DType::kFloat32 ? "float32 " : dt == DType::kFloat16 ? "float16 " : "bfloat16 ";
    out += stats_isa_name(stats_isa(dt));
    avx512 = avx512 || stats_isa(dt) == StatsIsa::kAvx512;
  }
  const bool gfni = avx512 && detail::stats_avx512_gfni();
  return out + " (" + stats_isa_choice() + (gfni ? "; avx512 bit counts by GFNI/BITALG" : "") + ")";
}

StatsIsa stats_isa(DType dtype) {
  const int chosen = g_isa.load(std::memory_order_relaxed);
  return chosen < 0 ? stats_isa_default(dtype) : static_cast<StatsIsa>(chosen);
}

bool set_stats_isa(StatsIsa isa) {
  if (!stats_isa_usable(isa)) return false;
  g_isa.store(static_cast<int>(isa), std::memory_order_relaxed);
  return true;
}

void set_stats_simd(bool enabled) {
  g_isa.store(enabled ? -1 : static_cast<int>(StatsIsa::kPortable), std::memory_order_relaxed);
}

bool stats_simd() { return stats_isa(DType::kFloat32) != StatsIsa::kPortable; }

namespace detail {
void run_stats_isa(const TensorView& v, i64 begin, i64 end, Stats& out) {
  run_build(stats_isa(v.dtype), v, begin, end, out);
}
}  // namespace detail

}  // namespace ampscope
