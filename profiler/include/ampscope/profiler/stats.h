// The stats block: exact value counts and ranges of one tensor, or of many merged.
// Plain C++ (no torch): the CPU kernel, the CUDA kernel, reports and benchmarks share it.
#pragma once

#include <ampscope/profiler/formats.h>

#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ampscope {

/// Floating source dtypes the stats kernels read.
enum class DType : std::uint8_t { kFloat32, kFloat16, kBFloat16, kFloat64 };

/// Counts of nonzero finite values by floor(log2|x|), stored densely over the exponents seen.
class ExpHist {
 public:
  /// Adds `n` values of exponent `e`.
  void add(int e, std::int64_t n = 1);
  /// Adds every bin of `other`.
  void merge(const ExpHist& other);
  /// Adds counts[i] values of exponent lo + i, i in [0, n) (zero counts at either end are not
  /// stored). The storage grows at most once.
  void add_bins(int lo, const std::int64_t* counts, int n);
  /// Count in bin `e` (0 outside the range seen).
  std::int64_t at(int e) const;
  /// Sum of all bins.
  std::int64_t total() const;
  /// True when no value was added.
  bool empty() const { return bins_.empty(); }
  /// Lowest exponent stored (valid when !empty()).
  int lo() const { return lo_; }
  /// One past the highest exponent stored.
  int hi() const { return lo_ + static_cast<int>(bins_.size()); }
  bool operator==(const ExpHist& o) const;

 private:
  /// Makes bins [lo, hi) addressable (one allocation at most).
  void cover(int lo, int hi);

  int lo_ = 0;
  std::vector<std::int64_t> bins_;
};

/// The SPEC stats block. Counts are exact; absmax, absmin_nonzero, sum and sum_sq are over the
/// finite values only (non-finite values are counted, not folded into the ranges).
struct Stats {
  std::int64_t count = 0;  ///< every element seen
  std::int64_t nan = 0;
  std::int64_t posinf = 0;
  std::int64_t neginf = 0;
  std::int64_t zeros = 0;  ///< +0 and -0
  double absmax = 0.0;     ///< largest finite |x| (0 when none)
  double absmin_nonzero = std::numeric_limits<double>::infinity();  ///< inf when none
  double sum = 0.0;                                                 ///< of finite values, in double
  double sum_sq = 0.0;                                ///< of finite values squared, in double
  std::array<std::int64_t, kNumFormats> overflow{};   ///< finite, rounds past the format's max
  std::array<std::int64_t, kNumFormats> underflow{};  ///< nonzero finite, rounds to 0
  std::array<std::int64_t, kNumFormats> subnormal{};  ///< nonzero finite, rounds to a subnormal
  ExpHist exp_hist;

  /// Number of finite values.
  std::int64_t finite() const { return count - nan - posinf - neginf; }
  /// NaN + inf count.
  std::int64_t nonfinite() const { return nan + posinf + neginf; }
  /// Mean of the finite values (0 when none).
  double mean() const;
  /// Root mean square of the finite values (0 when none).
  double rms() const;
  /// Adds another block's counts and ranges into this one.
  void merge(const Stats& other);
  std::int64_t overflow_in(Format f) const { return overflow[static_cast<int>(f)]; }
  std::int64_t underflow_in(Format f) const { return underflow[static_cast<int>(f)]; }
  std::int64_t subnormal_in(Format f) const { return subnormal[static_cast<int>(f)]; }
};

/// Halves a per-step series of maxima: keeps every other point, folding each dropped point's
/// value into its kept neighbour (max). Used to keep time series bounded.
void halve_series(std::vector<std::pair<std::int64_t, double>>& series);

/// A strided view of a tensor's elements: plain pointer, dtype, sizes and strides in elements.
struct TensorView {
  const void* data = nullptr;
  DType dtype = DType::kFloat32;
  std::vector<std::int64_t> sizes;
  std::vector<std::int64_t> strides;
  /// Product of sizes (1 for a zero-dim view).
  std::int64_t numel() const;
  /// True when the elements are dense in row-major order.
  bool is_contiguous() const;
};

/// Accumulates the stats of elements [begin, end) of `view` (row-major logical order) into `out`.
/// Single-threaded; the caller splits work across threads and merges the partial blocks.
void accumulate_stats(const TensorView& view, std::int64_t begin, std::int64_t end, Stats& out);

/// The stats of every element of `view`, using up to `max_threads` threads (0: hardware).
Stats compute_stats(const TensorView& view, int max_threads = 0);

/// Runs `body(ctx, chunk, run_end)` for every chunk in [0, chunks), on as many threads as it
/// likes, and returns when all are done (e.g. over torch's intra-op pool). Chunks [chunk,
/// run_end) are the rest of the run the runner hands out together (a thread's share): what the
/// thread that reads `chunk` will most likely read next.
using ChunkRunner = void (*)(std::int64_t chunks, void* ctx,
                             void (*body)(void* ctx, std::int64_t chunk, std::int64_t run_end));

/// The stats of every element of `view` in chunks whose length depends on the element count
/// alone (kStatsChunk, longer for big tensors), run by `runner` and merged in chunk order: the
/// result does not depend on how many threads ran them. Views shorter than two chunks are read
/// on the calling thread.
Stats compute_stats_chunked(const TensorView& view, ChunkRunner runner);
/// Shortest chunk of compute_stats_chunked (16 blocks of the CPU kernel).
inline constexpr std::int64_t kStatsChunk = std::int64_t{1} << 15;

/// The builds of the CPU stats kernel, chosen at run time (every build gives the same counts).
enum class StatsIsa : std::uint8_t { kPortable = 0, kAvx2, kAvx512 };
inline constexpr int kNumStatsIsas = 3;
/// "portable", "avx2", "avx512".
std::string_view stats_isa_name(StatsIsa isa);
/// Whether this CPU (and this compiler's build) can run `isa`; kPortable always can.
bool stats_isa_usable(StatsIsa isa);
/// The widest build this CPU runs: AVX-512 (F/BW/VL/DQ), else AVX2/FMA/F16C, else portable.
StatsIsa stats_isa_best();
/// The build that reads `dtype` unless a test or benchmark chose one, decided once per process:
/// AMPSCOPE_STATS_ISA when it names a build this CPU runs (avx512, avx2, portable; unset or
/// "auto": the rule), else stats_isa_rule(dtype, stats_isa_best(), CPU is AMD Zen 4).
StatsIsa stats_isa_default(DType dtype);
/// The rule: the widest build, but float16 and bfloat16 on AVX2 on AMD Zen 4 (family 19h with
/// AVX-512), where the AVX-512 build reads them from memory 1.1-1.35x slower (see stats_isa.cpp
/// for the measurements).
StatsIsa stats_isa_rule(DType dtype, StatsIsa widest, bool amd_zen4);
/// How the defaults were decided, for benchmarks and logs: "AMPSCOPE_STATS_ISA=avx2", "the
/// widest build this CPU runs", "AMD Zen 4: ...".
std::string stats_isa_choice();
/// The build that reads `dtype`: the one set_stats_isa chose, else stats_isa_default(dtype).
StatsIsa stats_isa(DType dtype);
/// For benchmark headers: "float32 avx512, float16 avx2, bfloat16 avx2 (<stats_isa_choice()>)",
/// with "; avx512 bit counts by GFNI/BITALG" inside the parentheses where the AVX-512 build
/// reads some dtype and sums its histogram windows with those instructions.
std::string stats_isa_summary();
/// Test and benchmark hook: selects a build; false (and no change) when the CPU cannot run it.
bool set_stats_isa(StatsIsa isa);

/// Whether the CPU kernel reads float32 with a SIMD build (false: no SIMD build runs,
/// AMPSCOPE_STATS_ISA=portable or set_stats_simd(false)).
bool stats_simd();
/// Test and benchmark hook: false forces the portable baseline build, true the defaults.
void set_stats_simd(bool enabled);

}  // namespace ampscope
