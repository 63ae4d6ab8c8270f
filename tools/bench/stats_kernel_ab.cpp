// In-cache A/B of versions of one CPU stats kernel build, in one process (tools/bench/
// stats_kernel_ab.sh compiles each version under its own name and this file's main against them).
// Swapping libampscope.so between runs is at the mercy of a noisy host's phases; here every
// repetition runs each version back to back on the same data, so they share the phases.
//
// Prints, per dtype, the best and first-quartile time per element of each version, and
// MISMATCH when a version's stats differ from the first one's in any count, range or sum.
#include <ampscope/profiler/stats.h>
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "stats_kernel_ab_variants.h"  // generated: kVariants[], kNumVariants

namespace {

using ampscope::DType;
using ampscope::Stats;
using ampscope::TensorView;

bool same(const Stats& a, const Stats& b) {
  return a.count == b.count && a.nan == b.nan && a.posinf == b.posinf && a.neginf == b.neginf &&
         a.zeros == b.zeros && a.absmax == b.absmax && a.absmin_nonzero == b.absmin_nonzero &&
         a.sum == b.sum && a.sum_sq == b.sum_sq && a.overflow == b.overflow &&
         a.underflow == b.underflow && a.subnormal == b.subnormal && a.exp_hist == b.exp_hist;
}

std::uint16_t to_bf16(float f) {  // round to nearest even (finite inputs)
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

std::uint16_t to_f16(float f) {  // through the hardware conversion (F16C), round to nearest
  return static_cast<std::uint16_t>(_cvtss_sh(f, 0));
}

int usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--n ELEMENTS] [--reps N] [--scale S] [--data normal|relu|wide|zeros]\n"
               "  (run through tools/bench/stats_kernel_ab.sh, which builds it)\n",
               argv0);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  long n = 1 << 18;  // 256 Ki elements: 512 KiB of 16-bit values, in L2
  int reps = 300;
  float scale = 1.0f;
  std::string data = "normal";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage(argv[0]);
    if (a == "--n") n = std::atol(argv[++i]);
    else if (a == "--reps") reps = std::atoi(argv[++i]);
    else if (a == "--scale") scale = static_cast<float>(std::atof(argv[++i]));
    else if (a == "--data") data = argv[++i];
    else return usage(argv[0]);
  }
  if (n < 1 || reps < 1 || (data != "normal" && data != "relu" && data != "wide" && data != "zeros"))
    return usage(argv[0]);
  // randn * scale; relu: negatives zeroed; wide: times 2^u, u uniform in (-20, 20); zeros: one
  // value in 64 zero
  std::mt19937 gen(1);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> u(-20.0f, 20.0f);
  std::vector<float> f32(static_cast<std::size_t>(n));
  for (auto& x : f32) {
    x = normal(gen) * scale;
    if (data == "relu" && x < 0) x = 0;
    if (data == "wide") x *= std::exp2(u(gen));
    if (data == "zeros" && gen() % 64 == 0) x = 0;
  }
  std::vector<std::uint16_t> f16(f32.size()), bf16(f32.size());
  for (std::size_t i = 0; i < f32.size(); ++i) f16[i] = to_f16(f32[i]), bf16[i] = to_bf16(f32[i]);

  std::printf("stats kernel A/B, %s build, %ld elements, %d repetitions, data %s x %g\n",
              kIsaName, n, reps, data.c_str(), static_cast<double>(scale));
  std::printf("ns per element (best / first quartile):\n");
  struct Source {
    const char* name;
    const void* data;
    DType dtype;
  } sources[] = {{"float16", f16.data(), DType::kFloat16},
                 {"bfloat16", bf16.data(), DType::kBFloat16},
                 {"float32", f32.data(), DType::kFloat32}};
  for (const auto& src : sources) {
    TensorView v;
    v.data = src.data;
    v.dtype = src.dtype;
    v.sizes = {n};
    v.strides = {1};
    std::vector<std::vector<double>> t(kNumVariants);
    Stats first;
    kVariants[0].run(v, 0, n, first);
    for (int r = 0; r < reps; ++r) {
      for (int k = 0; k < kNumVariants; ++k) {
        Stats s;
        const auto t0 = std::chrono::steady_clock::now();
        kVariants[k].run(v, 0, n, s);
        const auto t1 = std::chrono::steady_clock::now();
        t[k].push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() /
                       static_cast<double>(n));
        if (r == 0 && !same(s, first))
          std::printf("MISMATCH: %s differs from %s on %s\n", kVariants[k].name, kVariants[0].name,
                      src.name);
      }
    }
    std::printf("%-9s", src.name);
    for (int k = 0; k < kNumVariants; ++k) {
      auto& x = t[k];
      std::sort(x.begin(), x.end());
      std::printf("  %s %.4f / %.4f", kVariants[k].name, x[0], x[x.size() / 4]);
    }
    std::printf("\n");
  }
  return 0;
}
