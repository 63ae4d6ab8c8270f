// Benchmark of the CUDA stats kernel: ampscope's device stats pass vs at::sum (one read of the
// tensor) vs the same stats composed from ATen ops, on CUDA tensors, timed with CUDA events.
// Not a test: prints a table (and optionally JSON). Without a GPU it says so and exits 0.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "ampscope/profiler/cuda_stats.h"
#include "ampscope/profiler/tensor_stats.h"
#include "composed_stats.h"

namespace {

using ampscope::bench::composed_stats;

struct Options {
  std::vector<std::int64_t> sizes = {4 << 10, 1 << 20, 64 << 20, 256 << 20, std::int64_t{1} << 30};
  std::vector<c10::ScalarType> dtypes = {at::kFloat, at::kHalf, at::kBFloat16};
  int reps = 20;
  std::string json;
};

[[noreturn]] void usage_error(const std::string& what) {
  std::fprintf(stderr, "ampscope: error: %s (see --help)\n", what.c_str());
  std::exit(2);
}

void usage(const char* argv0) {
  std::printf(
      "usage: %s [--sizes 4K,1M,64M,256M,1G] [--dtypes float32,float16,bfloat16] [--reps N]\n"
      "          [--json FILE]\n"
      "  Times, on the current CUDA device, ampscope's stats kernel (enqueued into a device slot,\n"
      "  as the observer does), at::sum and the same stats composed from ATen ops, on randn\n"
      "  tensors of each size (bytes) and dtype; CUDA-event times, median of N repetitions.\n"
      "  Bars (SPEC): stats >= 0.8x at::sum throughput; composed >= 5x slower than stats.\n",
      argv0);
}

std::int64_t parse_size(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  const std::string suffix = end ? end : "";
  if (suffix == "K" || suffix == "KiB")
    v *= 1 << 10;
  else if (suffix == "M" || suffix == "MiB")
    v *= 1 << 20;
  else if (suffix == "G" || suffix == "GiB")
    v *= 1 << 30;
  else if (!suffix.empty())
    usage_error("bad size: " + s);
  if (v <= 0) usage_error("bad size: " + s);
  return static_cast<std::int64_t>(v);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::size_t p = 0;
  while (p <= s.size()) {
    const std::size_t q = std::min(s.find(',', p), s.size());
    if (q > p) out.push_back(s.substr(p, q - p));
    p = q + 1;
  }
  return out;
}

c10::ScalarType parse_dtype(const std::string& s) {
  if (s == "float32") return at::kFloat;
  if (s == "float16") return at::kHalf;
  if (s == "bfloat16") return at::kBFloat16;
  usage_error("bad dtype: " + s);
}

const char* dtype_name(c10::ScalarType t) {
  return t == at::kFloat ? "float32" : t == at::kHalf ? "float16" : "bfloat16";
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      usage(argv[0]);
      std::exit(0);
    } else if (a == "--sizes") {
      o.sizes.clear();
      for (const auto& s : split(value())) o.sizes.push_back(parse_size(s));
    } else if (a == "--dtypes") {
      o.dtypes.clear();
      for (const auto& s : split(value())) o.dtypes.push_back(parse_dtype(s));
    } else if (a == "--reps") {
      o.reps = std::atoi(value().c_str());
      if (o.reps < 1) usage_error("--reps must be >= 1");
    } else if (a == "--json") {
      o.json = value();
    } else {
      usage_error("unknown argument: " + a);
    }
  }
  return o;
}

bool same_counts(const ampscope::Stats& a, const ampscope::Stats& b) {
  return a.count == b.count && a.nan == b.nan && a.posinf == b.posinf && a.neginf == b.neginf &&
         a.zeros == b.zeros && a.absmax == b.absmax && a.overflow == b.overflow &&
         a.underflow == b.underflow && a.subnormal == b.subnormal && a.exp_hist == b.exp_hist;
}

/// Median device time (ms) of `f` enqueued on the current stream, bracketed by CUDA events.
double device_ms(const std::function<void()>& f, int reps) {
  cudaStream_t st = c10::cuda::getCurrentCUDAStream().stream();
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  f();  // warm-up
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    cudaEventRecord(a, st);
    f();
    cudaEventRecord(b, st);
    cudaEventSynchronize(b);
    float t = 0;
    cudaEventElapsedTime(&t, a, b);
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

double wall_ms(const std::function<void()>& f, int reps) {
  f();
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    cudaDeviceSynchronize();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    cudaDeviceSynchronize();
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

struct Row {
  const char* dtype;
  std::int64_t bytes;
  double stats_ms, sum_ms, composed_ms, explicit_ms;
  bool agree;
};

Row measure(c10::ScalarType dt, std::int64_t bytes, int reps, ampscope::DeviceStatsBuffer& buf) {
  const std::int64_t n =
      std::max<std::int64_t>(1, bytes / static_cast<std::int64_t>(c10::elementSize(dt)));
  auto t = at::randn({n}, at::TensorOptions().dtype(at::kFloat).device(at::kCUDA)).mul_(100).to(dt);
  const int dev = t.device().index();
  void* st = c10::cuda::getCurrentCUDAStream(dev).stream();
  const auto view = ampscope::make_view(t);
  Row r{dtype_name(dt), bytes, 0, 0, 0, 0, false};
  r.stats_ms = device_ms([&] { buf.accumulate(view, dev, 0, st, 1); }, reps);
  (void)buf.read_and_reset();
  r.sum_ms = device_ms([&] { (void)at::sum(t); }, reps);
  const int comp_reps = bytes >= (std::int64_t{256} << 20) ? 1 : std::min(reps, 5);
  ampscope::Stats comp;
  r.composed_ms = wall_ms([&] { comp = composed_stats(t); }, comp_reps);
  ampscope::Stats mine;
  r.explicit_ms = wall_ms([&] { mine = ampscope::tensor_stats(t); }, std::min(reps, 5));
  r.agree = same_counts(mine, comp);
  return r;
}

std::string size_name(std::int64_t b) {
  if (b >= (1 << 30) && b % (1 << 30) == 0) return std::to_string(b >> 30) + "GiB";
  if (b >= (1 << 20) && b % (1 << 20) == 0) return std::to_string(b >> 20) + "MiB";
  if (b >= (1 << 10) && b % (1 << 10) == 0) return std::to_string(b >> 10) + "KiB";
  return std::to_string(b) + "B";
}

void write_json(const std::string& path, const std::vector<Row>& rows) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) usage_error("cannot write " + path);
  std::fprintf(f, "[\n");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    std::fprintf(f,
                 "  {\"dtype\": \"%s\", \"bytes\": %lld, \"stats_ms\": %.6g, \"sum_ms\": %.6g, "
                 "\"composed_ms\": %.6g, \"tensor_stats_ms\": %.6g, \"stats_over_sum_throughput\": "
                 "%.4f, \"composed_over_stats_time\": %.2f, \"counts_agree\": %s}%s\n",
                 r.dtype, static_cast<long long>(r.bytes), r.stats_ms, r.sum_ms, r.composed_ms,
                 r.explicit_ms, r.sum_ms / r.stats_ms, r.composed_ms / r.stats_ms,
                 r.agree ? "true" : "false", i + 1 < rows.size() ? "," : "");
  }
  std::fprintf(f, "]\n");
  std::fclose(f);
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  if (!ampscope::cuda_stats_available() || !at::hasCUDA()) {
    std::printf("ampscope-bench-stats-cuda: no CUDA device (%s); nothing to measure\n",
                ampscope::cuda_unavailable_reason().c_str());
    return 0;
  }
  try {
    ampscope::DeviceStatsBuffer buf;
    std::vector<Row> rows;
    std::printf("%-9s %8s %10s %10s %9s %12s %9s %14s %s\n", "dtype", "size", "stats ms", "sum ms",
                "st/sum", "composed ms", "comp/st", "tensor_stats ms", "");
    for (auto dt : opt.dtypes) {
      for (auto bytes : opt.sizes) {
        const Row r = measure(dt, bytes, opt.reps, buf);
        rows.push_back(r);
        std::printf("%-9s %8s %10.4f %10.4f %9.2f %12.3f %9.1f %14.4f %s\n", r.dtype,
                    size_name(r.bytes).c_str(), r.stats_ms, r.sum_ms, r.sum_ms / r.stats_ms,
                    r.composed_ms, r.composed_ms / r.stats_ms, r.explicit_ms,
                    r.agree ? "" : "(counts differ from composed!)");
      }
    }
    std::printf(
        "st/sum: stats throughput / at::sum throughput (bar >= 0.8); comp/st: composed time / "
        "stats time (bar >= 5); tensor_stats ms: the explicit API with its one sync\n");
    if (buf.errors() != 0) std::printf("CUDA errors: %s\n", buf.last_error().c_str());
    if (!opt.json.empty()) write_json(opt.json, rows);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ampscope: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
