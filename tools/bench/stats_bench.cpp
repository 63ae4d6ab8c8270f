// Benchmark of the CPU stats kernel: ampscope::tensor_stats vs at::sum (the speed of one read)
// vs the same stats composed from ATen ops. Not a test: prints a table and optionally JSON.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "ampscope/profiler/tensor_stats.h"
#include "composed_stats.h"
#include "cpu_name.h"

namespace {

using ampscope::bench::composed_stats;

struct Options {
  std::vector<std::int64_t> sizes = {std::int64_t{4} << 10,   std::int64_t{64} << 10,
                                     std::int64_t{1} << 20,   std::int64_t{16} << 20,
                                     std::int64_t{256} << 20, std::int64_t{1} << 30};  // bytes
  std::vector<c10::ScalarType> dtypes = {at::kFloat, at::kHalf, at::kBFloat16};
  int reps = 5;
  int threads = 0;                       // 0: torch's default and hardware_concurrency
  std::int64_t composed_max = 64 << 20;  // larger sizes: composed time extrapolated
  std::vector<ampscope::StatsIsa> isas;  // builds timed, interleaved (empty: the defaults)
  std::string json;
};

void usage(const char* argv0) {
  std::printf(
      "usage: %s [--sizes 4K,64K,1M,16M,256M,1G] [--dtypes float32,float16,bfloat16] [--reps N]\n"
      "          [--threads N] [--composed-max SIZE] [--isa avx512,avx2,portable] [--no-simd]\n"
      "          [--json FILE]\n"
      "  Times ampscope::tensor_stats, at::sum and the same stats composed from ATen ops on randn\n"
      "  tensors of each size (bytes) and dtype; prints the median of N interleaved repetitions,\n"
      "  then a compact table of throughput ratios: median wall time, best wall time, and process\n"
      "  CPU time (steadier on a loaded machine; with --threads 1 it is the one thread's time).\n"
      "  --threads N        torch's intra-op threads, for at::sum and for tensor_stats, which runs\n"
      "                     on torch's pool as the observer does (default: torch's default)\n"
      "  --composed-max S   largest size at which the composed ATen version is timed (default "
      "64M;\n"
      "                     it takes seconds per run); above it its time is extrapolated linearly\n"
      "                     from the largest timed size and marked '~'\n"
      "  --isa LIST         time these builds of the stats kernel, interleaved in each repetition\n"
      "                     (default: the one ampscope picks per dtype: env AMPSCOPE_STATS_ISA,\n"
      "                     else the widest the CPU runs, AVX2 for 16-bit dtypes on AMD Zen 4);\n"
      "                     error if the CPU cannot run one\n"
      "  --no-simd          same as --isa portable\n",
      argv0);
}

std::int64_t parse_size(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  std::string suffix = end ? end : "";
  if (suffix == "K" || suffix == "k" || suffix == "KiB")
    v *= 1 << 10;
  else if (suffix == "M" || suffix == "m" || suffix == "MiB")
    v *= 1 << 20;
  else if (suffix == "G" || suffix == "g" || suffix == "GiB")
    v *= 1 << 30;
  else if (!suffix.empty())
    throw std::runtime_error("bad size: " + s);
  return static_cast<std::int64_t>(v);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::size_t p = 0;
  while (p <= s.size()) {
    auto q = s.find(',', p);
    if (q == std::string::npos) q = s.size();
    if (q > p) out.push_back(s.substr(p, q - p));
    p = q + 1;
  }
  return out;
}

const char* dtype_name(c10::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return "float32";
    case at::kHalf:
      return "float16";
    case at::kBFloat16:
      return "bfloat16";
    case at::kDouble:
      return "float64";
    default:
      return "?";
  }
}

std::string size_name(std::int64_t b) {
  if (b >= (1 << 30) && b % (1 << 30) == 0) return std::to_string(b >> 30) + " GiB";
  if (b >= (1 << 20) && b % (1 << 20) == 0) return std::to_string(b >> 20) + " MiB";
  if (b >= (1 << 10) && b % (1 << 10) == 0) return std::to_string(b >> 10) + " KiB";
  return std::to_string(b) + " B";
}

/// Process CPU time (all threads) in seconds.
double cpu_now() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

/// Wall-clock seconds of f(); the process CPU seconds it used are added to `*cpu`.
double seconds_of(const std::function<void()>& f, double* cpu = nullptr) {
  const double c0 = cpu_now();
  const auto t0 = std::chrono::steady_clock::now();
  f();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (cpu != nullptr) *cpu += cpu_now() - c0;
  return wall;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Row {
  std::int64_t bytes, numel;
  const char* dtype;
  std::string isa;                    // the build timed
  double stats_s, sum_s, composed_s;  // medians
  double stats_best_s, sum_best_s;    // best of the repetitions
  double stats_cpu_s, sum_cpu_s;      // process CPU seconds per call, mean over the repetitions
  bool agree;
  bool extrapolated;
  double ratio() const { return sum_s / stats_s; }
  double best_ratio() const { return sum_best_s / stats_best_s; }
  double cpu_ratio() const { return sum_cpu_s / stats_cpu_s; }
};

bool same_counts(const ampscope::Stats& a, const ampscope::Stats& b) {
  return a.count == b.count && a.nan == b.nan && a.posinf == b.posinf && a.neginf == b.neginf &&
         a.zeros == b.zeros && a.overflow == b.overflow && a.underflow == b.underflow &&
         a.subnormal == b.subnormal && a.exp_hist == b.exp_hist && a.absmax == b.absmax &&
         a.absmin_nonzero == b.absmin_nonzero;
}

/// randn values of dtype `dt`, made in chunks so a 1 GiB tensor needs no 4 GiB float32 temporary.
at::Tensor randn_of(std::int64_t n, c10::ScalarType dt) {
  auto t = at::empty({n}, at::TensorOptions().dtype(dt));
  constexpr std::int64_t kChunk = std::int64_t{1} << 24;
  for (std::int64_t p = 0; p < n; p += kChunk) {
    const std::int64_t m = std::min(kChunk, n - p);
    t.slice(0, p, p + m).copy_(at::randn({m}, at::TensorOptions().dtype(at::kFloat)));
  }
  return t;
}

/// Timed runs of the three ways on one tensor (the stats once per build of `opt.isas`, or by
/// the default build). `last_comp` (per dtype: numel and seconds of the largest composed run
/// timed) scales the composed time of sizes above --composed-max. One row per build.
std::vector<Row> measure(std::int64_t bytes, c10::ScalarType dt, const Options& opt,
                         std::map<c10::ScalarType, std::pair<std::int64_t, double>>& last_comp) {
  const std::int64_t esize = c10::elementSize(dt);
  const std::int64_t n = std::max<std::int64_t>(1, bytes / esize);
  auto t = randn_of(n, dt);
  // Enough inner iterations that a small tensor's time is measurable.
  const int inner =
      static_cast<int>(std::clamp<std::int64_t>((std::int64_t{4} << 20) / (n * esize), 1, 1000));
  // the builds: as chosen, or the default one (-1)
  std::vector<int> builds;
  for (auto isa : opt.isas) builds.push_back(static_cast<int>(isa));
  if (builds.empty()) builds.push_back(-1);
  auto select = [](int b) {
    if (b < 0)
      ampscope::set_stats_simd(true);
    else
      ampscope::set_stats_isa(static_cast<ampscope::StatsIsa>(b));
  };
  const std::size_t nb = builds.size();
  std::vector<std::vector<double>> ts(nb);
  std::vector<double> tsum, tcomp, cpu_st(nb, 0.0);
  ampscope::Stats st, comp;
  volatile double sink = 0;
  const bool timed_comp = bytes <= opt.composed_max;
  // Warm up each once, then interleave the repetitions.
  for (int b : builds) {
    select(b);
    st = ampscope::tensor_stats(t);  // torch's pool, as the observer reads tensors
  }
  sink = sink + at::sum(t).item<double>();
  const bool big = bytes >= (64 << 20);  // composed takes seconds there: one timed run
  if (timed_comp && !big) comp = composed_stats(t);
  const int comp_inner = std::max(1, inner / 20);
  double cpu_sum = 0;
  for (int r = 0; r < opt.reps; ++r) {
    for (std::size_t k = 0; k < nb; ++k) {
      const std::size_t b = (k + static_cast<std::size_t>(r)) % nb;  // rotated order
      select(builds[b]);
      ts[b].push_back(seconds_of(
                          [&] {
                            for (int i = 0; i < inner; ++i) st = ampscope::tensor_stats(t);
                          },
                          &cpu_st[b]) /
                      inner);
    }
    tsum.push_back(seconds_of(
                       [&] {
                         for (int k = 0; k < inner; ++k) sink = sink + at::sum(t).item<double>();
                       },
                       &cpu_sum) /
                   inner);
    if (timed_comp && (big ? r == 0 : r < 3))
      tcomp.push_back(seconds_of([&] {
                        for (int k = 0; k < comp_inner; ++k) comp = composed_stats(t);
                      }) /
                      comp_inner);
  }
  double comp_s = 0;
  bool agree = true;
  if (timed_comp) {
    comp_s = median(tcomp);
    agree = same_counts(st, comp);
    last_comp[dt] = {n, comp_s};
  } else if (last_comp.count(dt) != 0) {
    comp_s =
        last_comp[dt].second * static_cast<double>(n) / static_cast<double>(last_comp[dt].first);
  }
  std::vector<Row> rows;
  for (std::size_t b = 0; b < nb; ++b) {
    select(builds[b]);
    rows.push_back(Row{bytes,
                       n,
                       dtype_name(dt),
                       std::string(ampscope::stats_isa_name(ampscope::stats_isa(*ampscope::to_dtype(dt)))),
                       median(ts[b]),
                       median(tsum),
                       comp_s,
                       *std::min_element(ts[b].begin(), ts[b].end()),
                       *std::min_element(tsum.begin(), tsum.end()),
                       cpu_st[b] / (opt.reps * inner),
                       cpu_sum / (opt.reps * inner),
                       agree,
                       !timed_comp});
  }
  ampscope::set_stats_simd(true);  // back to the defaults
  return rows;
}

void print_row(const Row& row) {
  const double gb = static_cast<double>(row.bytes) / 1e9;
  char comp_ms[32] = "n/a", comp_ratio[32] = "n/a";
  if (row.composed_s > 0) {
    std::snprintf(comp_ms, sizeof(comp_ms), "%s%.3f", row.extrapolated ? "~" : "",
                  row.composed_s * 1e3);
    std::snprintf(comp_ratio, sizeof(comp_ratio), "%s%.1f", row.extrapolated ? "~" : "",
                  row.composed_s / row.stats_s);
  }
  std::printf("%-9s %-8s %-8s %10.3f %9.2f %10.3f %9.2f %8.2f %12s %9s %s\n",
              size_name(row.bytes).c_str(), row.dtype, row.isa.c_str(), row.stats_s * 1e3,
              gb / row.stats_s,
              row.sum_s * 1e3, gb / row.sum_s, row.ratio(), comp_ms, comp_ratio,
              row.agree ? "" : "(counts differ from composed!)");
  std::fflush(stdout);
}

/// One line per size, one column per dtype: stats/sum throughput (median wall time, best wall
/// time, CPU time) and composed/stats time.
void print_ratio_table(const std::vector<Row>& rows, const Options& opt) {
  std::printf(
      "\nstats / at::sum throughput by median wall time, best wall time, CPU time; composed / "
      "stats "
      "time\n[bars: >= 0.5 (goal 0.8); >= 5]\n");
  const std::size_t nb = std::max<std::size_t>(1, opt.isas.size());  // rows per size and dtype
  std::printf("%-16s", "size");
  for (auto dt : opt.dtypes) std::printf(" | %-25s", dtype_name(dt));
  std::printf("\n");
  for (auto bytes : opt.sizes) {
    for (std::size_t k = 0; k < nb; ++k) {
      std::string label = size_name(bytes);
      if (!opt.isas.empty()) label += " " + std::string(ampscope::stats_isa_name(opt.isas[k]));
      std::printf("%-16s", label.c_str());
      for (auto dt : opt.dtypes) {
        std::size_t seen = 0;
        for (const auto& r : rows) {
          if (r.bytes != bytes || std::strcmp(r.dtype, dtype_name(dt)) != 0 || seen++ != k)
            continue;
          char comp[32] = "n/a";
          if (r.composed_s > 0)
            std::snprintf(comp, sizeof(comp), "%s%.0fx", r.extrapolated ? "~" : "",
                          r.composed_s / r.stats_s);
          char cell[64];
          std::snprintf(cell, sizeof(cell), "%.2f %.2f %.2f  %s", r.ratio(), r.best_ratio(),
                        r.cpu_ratio(), comp);
          std::printf(" | %-25s", cell);
        }
      }
      std::printf("\n");
    }
  }
}

bool write_json(const std::vector<Row>& rows, const Options& opt) {
  FILE* f = std::fopen(opt.json.c_str(), "w");
  if (f == nullptr) return false;
  std::fprintf(
      f, "{\n  \"benchmark\": \"stats\",\n  \"torch_threads\": %d,\n  \"stats_threads\": %d,\n",
      at::get_num_threads(), at::get_num_threads());
  std::fprintf(f, "  \"default_isa\": \"%s\",\n", ampscope::stats_isa_summary().c_str());
  std::fprintf(f, "  \"cpu\": \"%s\",\n", ampscope::bench::cpu_model().c_str());
  std::fprintf(f, "  \"reps\": %d,\n  \"results\": [\n", opt.reps);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    std::fprintf(
        f,
        "    {\"bytes\": %lld, \"numel\": %lld, \"dtype\": \"%s\", \"isa\": \"%s\", \"stats_s\": %.9g, "
        "\"sum_s\": %.9g, "
        "\"stats_best_s\": %.9g, \"sum_best_s\": %.9g, \"stats_cpu_s\": %.9g, \"sum_cpu_s\": %.9g, "
        "\"composed_s\": %.9g, "
        "\"stats_over_sum_throughput\": %.4f, \"stats_over_sum_throughput_best\": %.4f, "
        "\"stats_over_sum_cpu_time\": %.4f, "
        "\"composed_over_stats_time\": %.3f, \"composed_extrapolated\": %s, "
        "\"counts_agree\": %s}%s\n",
        static_cast<long long>(r.bytes), static_cast<long long>(r.numel), r.dtype, r.isa.c_str(),
        r.stats_s,
        r.sum_s, r.stats_best_s, r.sum_best_s, r.stats_cpu_s, r.sum_cpu_s, r.composed_s, r.ratio(),
        r.best_ratio(), r.cpu_ratio(), r.composed_s / r.stats_s, r.extrapolated ? "true" : "false",
        r.agree ? "true" : "false", i + 1 < rows.size() ? "," : "");
  }
  std::fprintf(f, "  ]\n}\n");
  return std::fclose(f) == 0;
}

/// The stats kernel build named `name`; throws when unknown or not runnable here.
ampscope::StatsIsa isa_named(const std::string& name) {
  for (int i = 0; i < ampscope::kNumStatsIsas; ++i) {
    const auto isa = static_cast<ampscope::StatsIsa>(i);
    if (ampscope::stats_isa_name(isa) != name) continue;
    if (!ampscope::stats_isa_usable(isa))
      throw std::runtime_error("this CPU cannot run --isa " + name);
    return isa;
  }
  throw std::runtime_error("unknown --isa " + name + " (avx512, avx2, portable)");
}

/// Parses the command line into `opt`; throws std::runtime_error on bad input. False: --help.
bool parse_args(int argc, char** argv, Options& opt) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error("missing value for " + a);
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      return false;
    } else if (a == "--sizes") {
      opt.sizes.clear();
      for (auto& s : split(value())) opt.sizes.push_back(parse_size(s));
    } else if (a == "--dtypes") {
      opt.dtypes.clear();
      for (auto& s : split(value())) {
        if (s == "float32")
          opt.dtypes.push_back(at::kFloat);
        else if (s == "float16")
          opt.dtypes.push_back(at::kHalf);
        else if (s == "bfloat16")
          opt.dtypes.push_back(at::kBFloat16);
        else if (s == "float64")
          opt.dtypes.push_back(at::kDouble);
        else
          throw std::runtime_error("bad dtype: " + s);
      }
    } else if (a == "--reps") {
      opt.reps = std::max(1, std::atoi(value().c_str()));
    } else if (a == "--threads") {
      opt.threads = std::max(0, std::atoi(value().c_str()));
    } else if (a == "--composed-max") {
      opt.composed_max = parse_size(value());
    } else if (a == "--no-simd") {
      opt.isas = {ampscope::StatsIsa::kPortable};
    } else if (a == "--isa") {
      opt.isas.clear();
      for (auto& name : split(value())) opt.isas.push_back(isa_named(name));
    } else if (a == "--json") {
      opt.json = value();
    } else {
      throw std::runtime_error("unknown argument: " + a);
    }
  }
  for (auto b : opt.sizes)
    if (b <= 0) throw std::runtime_error("sizes must be positive");
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  try {
    if (!parse_args(argc, argv, opt)) {
      usage(argv[0]);
      return 0;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ampscope: error: %s\n", e.what());
    usage(argv[0]);
    return 2;
  }
  if (opt.threads > 0) at::set_num_threads(opt.threads);
  std::printf("cpu: %s, %u hardware threads; default stats builds: %s\n",
              ampscope::bench::cpu_model().c_str(),
              std::thread::hardware_concurrency(), ampscope::stats_isa_summary().c_str());
  std::printf("threads: %d (torch's pool, at::sum and tensor_stats alike)\n", at::get_num_threads());
  std::printf("%-9s %-8s %-8s %10s %9s %10s %9s %8s %12s %9s %s\n", "size", "dtype", "build",
              "stats ms", "GB/s", "sum ms", "GB/s", "st/sum", "composed ms", "comp/st", "");
  std::vector<Row> rows;
  std::map<c10::ScalarType, std::pair<std::int64_t, double>> last_comp;  // numel, seconds
  for (auto bytes : opt.sizes)
    for (auto dt : opt.dtypes) {
      for (auto& row : measure(bytes, dt, opt, last_comp)) {
        print_row(row);
        rows.push_back(std::move(row));
      }
    }
  std::printf(
      "st/sum: stats throughput / at::sum throughput (bar >= 0.5); comp/st: composed time / stats "
      "time "
      "(bar >= 5); ~: composed time extrapolated (see --composed-max)\n");
  print_ratio_table(rows, opt);
  if (!opt.json.empty() && !write_json(rows, opt)) {
    std::fprintf(stderr, "ampscope: error: cannot write %s\n", opt.json.c_str());
    return 1;
  }
  return 0;
}
