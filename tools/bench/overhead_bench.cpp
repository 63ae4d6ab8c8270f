// Benchmark of what profiling costs a training run (issue 7 (b)-(d)); not a test.
//  (b) training-step time of a transformer (4 blocks, d=256, seq 64, batch 8) with profiling
//      off / full / every-10 (per-op sentinel) / every-10 (watch), interleaved in one process,
//      medians of per-block means, ratios;
//  (c) callback cost per op: a loop of tiny ops timed off, recorded, and on unsampled steps;
//  (d) peak RSS and report size after 50 and 2,000 profiled steps (each in a fresh child).
// Prints a table; --json FILE writes the figures.
#include <ampscope/hooks/autocast_guard.h>
#include <ampscope/hooks/layers.h>
#include <ampscope/hooks/session.h>

#include <ATen/Version.h>
#include <ATen/record_function.h>
#include <torch/torch.h>

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_model.h"
#include "cpu_name.h"

namespace {

using Clock = std::chrono::steady_clock;
using ampscope::bench::ModelShape;
using ampscope::bench::Trainer;

struct Options {
  std::string device = "cpu";
  std::string dtype = "bfloat16";
  int rounds = 7;          ///< interleaved rounds of (off, full, every-10)
  int block = 10;          ///< steps per mode per round
  int warmup = 3;
  std::int64_t tiny_ops = 200000;
  std::vector<int> rss_steps = {50, 2000};
  std::string parts = "bcd";  ///< which of (b), (c), (d) to run
  int threads = 0;            ///< torch intra-op threads (0: torch's default)
  int only_every = -1;        ///< (b) with one mode only, for a profiler: 0 off, 1 full, N every-N
  std::string json;
  int child_steps = 0;     ///< internal: run the RSS child
  std::string child_out;
};

void usage(const char* argv0) {
  std::printf(
      "usage: %s [--device cpu|cuda] [--dtype bfloat16|float16|float32] [--rounds N]\n"
      "          [--block N] [--tiny-ops N] [--rss-steps A,B] [--parts bcd] [--threads N]\n"
      "          [--json FILE]\n"
      "  (b) training-step overhead: a 4-block transformer (d=256, seq 64, batch 8) trained\n"
      "      under autocast with profiling off / full / every-10, interleaved in rounds of\n"
      "      --block steps per mode; the ratio of median block means to 'off'.\n"
      "  (c) callback cost per op (ns): --tiny-ops calls of a 1-element add, off vs recorded\n"
      "      vs on an unsampled step of an every-N session.\n"
      "  (d) peak RSS and report size after each --rss-steps count (fresh child process each,\n"
      "      a small model so that 2,000 steps stay quick).\n"
      "  --parts    which of b, c, d to run (default bcd)\n"
      "  --threads  torch intra-op threads (default: torch's; 1 is steadier on a busy machine)\n"
      "  --only-every N  (b) in one mode only, no ratios: 0 off, 1 full, N every-N (to run\n"
      "             under perf: `perf record -g ... --parts b --only-every 10`)\n",
      argv0);
}

/// `s` as a whole integer; `what` names it in the error.
long long to_int(const std::string& s, const std::string& what) {
  std::size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != s.size()) throw std::runtime_error(what + " needs an integer, got \"" + s + "\"");
  return v;
}

std::vector<int> split_ints(const std::string& s) {
  std::vector<int> out;
  std::size_t p = 0;
  while (p < s.size()) {
    auto q = s.find(',', p);
    if (q == std::string::npos) q = s.size();
    out.push_back(static_cast<int>(to_int(s.substr(p, q - p), "--rss-steps")));
    p = q + 1;
  }
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      usage(argv[0]);
      std::exit(0);
    } else if (a == "--device") o.device = value();
    else if (a == "--dtype") o.dtype = value();
    else if (a == "--rounds") o.rounds = static_cast<int>(to_int(value(), a));
    else if (a == "--block") o.block = static_cast<int>(to_int(value(), a));
    else if (a == "--tiny-ops") o.tiny_ops = to_int(value(), a);
    else if (a == "--rss-steps") o.rss_steps = split_ints(value());
    else if (a == "--parts") o.parts = value();
    else if (a == "--threads") o.threads = static_cast<int>(to_int(value(), a));
    else if (a == "--json") o.json = value();
    else if (a == "--only-every") o.only_every = static_cast<int>(to_int(value(), a));
    else if (a == "--child-steps") o.child_steps = static_cast<int>(to_int(value(), a));
    else if (a == "--child-out") o.child_out = value();
    else throw std::runtime_error("unknown option " + a);
  }
  if (o.only_every < -1) throw std::runtime_error("--only-every must be >= 0");
  if (o.rounds < 1 || o.block < 1) throw std::runtime_error("--rounds and --block must be >= 1");
  return o;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  auto n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// Elements a step's reads asked for in the last block of each mode (Observer::read_counts:
/// stats passes, NaN/Inf scans only, the read cache), per step.
std::map<int, std::array<double, 3>> g_reads_per_step;

/// One block of `steps` steps under `every` (0: profiling off; negative: every -N with the
/// unsampled steps watched instead of the per-op sentinel); mean seconds per step.
double timed_block(Trainer& trainer, int steps, int mode) {
  std::unique_ptr<ampscope::Session> session;
  if (mode != 0) {
    ampscope::SessionOptions so;
    so.every = mode > 0 ? mode : -mode;
    so.watch_unsampled = mode < 0;
    so.write_html = false;
    session = std::make_unique<ampscope::Session>(so);
    session->attach(*trainer.model());
    session->start();
  }
  auto t0 = Clock::now();
  for (int s = 0; s < steps; ++s) trainer.step(session.get());
  trainer.sync();
  double dt = std::chrono::duration<double>(Clock::now() - t0).count();
  if (session) {
    const auto reads = ampscope::Observer::read_counts();  // since start: this block's
    for (int i = 0; i < 3; ++i) g_reads_per_step[mode][i] = static_cast<double>(reads[i]) / steps;
    session->stop();
  }
  return dt / steps;
}

struct Overhead {
  double off_ms = 0, full_ms = 0, every_ms = 0, watch_ms = 0;
};

Overhead step_overhead(const Options& o) {
  ModelShape shape;  // 4 blocks, d=256, seq 64, batch 8
  Trainer trainer(shape, o.device, o.dtype);
  for (int i = 0; i < o.warmup; ++i) trainer.step(nullptr);
  timed_block(trainer, 2, 1);  // warm the observer's caches once
  std::map<int, std::vector<double>> per_mode;
  if (o.only_every >= 0) {  // one mode, for a profiler
    for (int r = 0; r < o.rounds; ++r)
      per_mode[0].push_back(timed_block(trainer, std::max(o.block, o.only_every), o.only_every));
    std::printf("(b) only every=%d: %.2f ms/step (median of %d blocks)\n", o.only_every,
                median(per_mode[0]) * 1e3, o.rounds);
    std::exit(0);
  }
  const int modes[] = {0, 1, 10, -10};  // -10: every-10, unsampled steps watched
  for (int r = 0; r < o.rounds; ++r) {
    for (int k = 0; k < 4; ++k) {
      int mode = modes[(k + r) % 4];  // rotate the order so drift hits every mode alike
      per_mode[mode].push_back(timed_block(trainer, std::max(o.block, std::abs(mode)), mode));
    }
    std::fprintf(stderr,
                 "  round %d/%d: off %.1f ms  full %.1f ms  every-10 %.1f ms  every-10 watch "
                 "%.1f ms\n",
                 r + 1, o.rounds, per_mode[0].back() * 1e3, per_mode[1].back() * 1e3,
                 per_mode[10].back() * 1e3, per_mode[-10].back() * 1e3);
  }
  return {median(per_mode[0]) * 1e3, median(per_mode[1]) * 1e3, median(per_mode[10]) * 1e3,
          median(per_mode[-10]) * 1e3};
}

struct CallbackCost {
  double off_ns = 0, recorded_ns = 0, unsampled_ns = 0;
};

double tiny_loop_ns(std::int64_t n) {
  auto x = torch::ones({1});
  auto y = torch::ones({1});
  auto t0 = Clock::now();
  for (std::int64_t i = 0; i < n; ++i) y = at::add(x, y);
  return std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / n;
}

CallbackCost callback_cost(const Options& o) {
  const int prev_threads = at::get_num_threads();
  at::set_num_threads(1);
  tiny_loop_ns(o.tiny_ops / 10);
  std::vector<double> off, rec, unsampled;
  for (int r = 0; r < 5; ++r) {
    off.push_back(tiny_loop_ns(o.tiny_ops));
    {
      ampscope::SessionOptions so;
      ampscope::Session s(so);
      s.start();
      rec.push_back(tiny_loop_ns(o.tiny_ops));
    }
    {
      ampscope::SessionOptions so;
      so.every = 1000;
      ampscope::Session s(so);
      s.start();
      s.step();  // step 1 of every-1000: not sampled
      unsampled.push_back(tiny_loop_ns(o.tiny_ops));
    }
  }
  at::set_num_threads(prev_threads);
  double base = median(off);
  return {base, median(rec) - base, median(unsampled) - base};
}

/// Child of (d): trains the small model `steps` steps under a full session, writes the report
/// and prints "rss_kib report_bytes".
int run_rss_child(const Options& o) {
  ModelShape shape = ModelShape::small();
  Trainer trainer(shape, o.device, o.dtype);
  ampscope::SessionOptions so;
  so.out_dir = o.child_out;
  so.write_html = true;
  {
    ampscope::Session session(so);
    session.attach(*trainer.model());
    session.start();
    for (int s = 0; s < o.child_steps; ++s) trainer.step(&session);
    session.stop();
  }
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  struct stat st {};
  std::string path = o.child_out + "/report.json";
  long long bytes = stat(path.c_str(), &st) == 0 ? static_cast<long long>(st.st_size) : -1;
  std::printf("%ld %lld\n", ru.ru_maxrss, bytes);
  return 0;
}

struct RssPoint {
  int steps = 0;
  long rss_kib = 0;
  long long report_bytes = 0;
};

RssPoint rss_after(const char* self, const Options& o, int steps) {
  char dir[] = "/tmp/ampscope-bench-XXXXXX";
  if (!mkdtemp(dir)) throw std::runtime_error("mkdtemp failed");
  std::string cmd = std::string(self) + " --device " + o.device + " --dtype " + o.dtype +
                    " --threads " + std::to_string(o.threads) +
                    " --child-steps " + std::to_string(steps) + " --child-out " + dir;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) throw std::runtime_error("cannot run " + cmd);
  RssPoint r;
  r.steps = steps;
  if (std::fscanf(p, "%ld %lld", &r.rss_kib, &r.report_bytes) != 2) r.rss_kib = -1;
  pclose(p);
  std::system((std::string("rm -rf ") + dir).c_str());
  return r;
}

void write_json(const std::string& path, const Options& o, const Overhead& oh,
                const CallbackCost& cb, const std::vector<RssPoint>& rss) {
  std::ofstream f(path);
  f << "{\n  \"device\": \"" << o.device << "\", \"dtype\": \"" << o.dtype << "\",\n";
  f << "  \"cpu\": \"" << ampscope::bench::cpu_model() << "\", \"stats_builds\": \""
    << ampscope::stats_isa_summary() << "\",\n";
  f << "  \"step_ms\": {\"off\": " << oh.off_ms << ", \"full\": " << oh.full_ms
    << ", \"every10\": " << oh.every_ms << ", \"every10_watch\": " << oh.watch_ms << "},\n";
  f << "  \"overhead\": {\"full\": " << oh.full_ms / oh.off_ms
    << ", \"every10\": " << oh.every_ms / oh.off_ms
    << ", \"every10_watch\": " << oh.watch_ms / oh.off_ms << "},\n";
  f << "  \"callback_ns\": {\"op_off\": " << cb.off_ns << ", \"recorded\": " << cb.recorded_ns
    << ", \"unsampled\": " << cb.unsampled_ns << "},\n  \"rss\": [";
  for (std::size_t i = 0; i < rss.size(); ++i) {
    f << (i ? ", " : "") << "{\"steps\": " << rss[i].steps << ", \"peak_rss_kib\": "
      << rss[i].rss_kib << ", \"report_bytes\": " << rss[i].report_bytes << "}";
  }
  f << "]\n}\n";
}

int run(int argc, char** argv) {
  Options o = parse(argc, argv);
  if (o.device == "cuda" && !torch::cuda::is_available()) {
    std::printf("overhead bench: no CUDA device here; nothing to measure for --device cuda\n");
    return 0;
  }
  if (o.threads > 0) at::set_num_threads(o.threads);
  if (o.child_steps > 0) return run_rss_child(o);
  std::printf("ampscope overhead bench: device %s, autocast %s, torch threads %d\n",
              o.device.c_str(), o.dtype.c_str(), at::get_num_threads());
  std::printf("cpu: %s; torch kernels %s; stats builds: %s\n", ampscope::bench::cpu_model().c_str(),
              at::get_cpu_capability().c_str(), ampscope::stats_isa_summary().c_str());
  auto want = [&](char part) { return o.parts.find(part) != std::string::npos; };
  Overhead oh;
  CallbackCost cb;
  std::vector<RssPoint> rss;
  if (want('b')) oh = step_overhead(o);
  if (want('c')) cb = callback_cost(o);
  if (want('d')) {
    for (int n : o.rss_steps) rss.push_back(rss_after(argv[0], o, n));
  }
  if (want('b')) {
    std::printf("\n(b) training step, 4 blocks d=256 seq 64 batch 8, %d rounds x %d steps\n",
                o.rounds, o.block);
    std::printf("  off        %8.2f ms/step\n", oh.off_ms);
    std::printf("  full       %8.2f ms/step   %.3fx  (bar <= 1.30x)\n", oh.full_ms,
                oh.full_ms / oh.off_ms);
    std::printf("  every-10   %8.2f ms/step   %.3fx  (bar <= 1.05x; per-op sentinel)\n",
                oh.every_ms, oh.every_ms / oh.off_ms);
    std::printf("  every-10   %8.2f ms/step   %.3fx  (bar <= 1.05x; watch_unsampled)\n",
                oh.watch_ms, oh.watch_ms / oh.off_ms);
    std::printf("  what a step reads, M elements (stats passes / NaN-Inf scans only / read "
                "cache):\n");
    for (const auto& [mode, name] : {std::pair{1, "full"}, std::pair{10, "every-10 (per-op sentinel)"},
                                     std::pair{-10, "every-10 (watch_unsampled)"}}) {
      const auto& r = g_reads_per_step[mode];
      std::printf("    %-28s %6.1f / %6.1f / %6.1f\n", name, r[0] / 1e6, r[1] / 1e6, r[2] / 1e6);
    }
  }
  if (want('c')) {
    std::printf("(c) per op: a 1-element add costs %.0f ns unobserved; observer adds %.0f ns "
                "recorded, %.0f ns on unsampled steps\n",
                cb.off_ns, cb.recorded_ns, cb.unsampled_ns);
  }
  if (want('d')) {
    std::printf("(d) small model, full profiling:\n");
    for (const auto& r : rss) {
      std::printf("  %5d steps: peak RSS %8.1f MiB, report.json %8.1f KiB\n", r.steps,
                  r.rss_kib / 1024.0, r.report_bytes / 1024.0);
    }
    if (rss.size() >= 2 && rss.front().rss_kib > 0) {
      std::printf("  RSS ratio %d/%d steps: %.3fx (bar <= 1.2x); report size ratio %.3fx\n",
                  rss.back().steps, rss.front().steps,
                  double(rss.back().rss_kib) / rss.front().rss_kib,
                  double(rss.back().report_bytes) / std::max(1LL, rss.front().report_bytes));
    }
  }
  if (!o.json.empty()) write_json(o.json, o, oh, cb, rss);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ampscope-bench-overhead: error: %s\n", e.what());
    return 2;
  }
}
