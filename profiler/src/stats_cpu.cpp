// The CPU stats kernel's entry points: one read of the tensor, in cache-sized blocks, exact counts.
//
// Three builds of the block code: AVX-512 F/BW/VL/DQ (stats_cpu_avx512.cpp), AVX2/FMA/F16C
// (stats_cpu_avx2.cpp) and a portable one (stats_cpu_portable.cpp: plain loops GCC
// auto-vectorises for baseline x86-64), picked at run time (stats_isa.cpp). All give identical
// counts. The shared pieces (thresholds, accumulator,
// bit helpers) are in stats_kernel.h and stats_thresholds.h. This file dispatches and splits big
// tensors across threads.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <system_error>
#include <thread>
#include <vector>

#include "ampscope/profiler/stats.h"
#include "stats_kernel.h"

namespace ampscope {
namespace {

using detail::i64;
using detail::kBlock;

}  // namespace

void accumulate_stats(const TensorView& view, std::int64_t begin, std::int64_t end, Stats& out) {
  const i64 n = view.numel();
  begin = std::max<i64>(begin, 0);
  end = std::min<i64>(end, n);
  if (view.data == nullptr || begin >= end) return;
  detail::run_stats_isa(view, begin, end, out);
}

Stats compute_stats(const TensorView& view, int max_threads) {
  Stats result;
  const i64 n = view.numel();
  if (n <= 0 || view.data == nullptr) return result;
  constexpr i64 kMinParallel = i64{1}
                               << 20;  // below this, starting threads costs more than it saves
  constexpr i64 kMinPerThread = i64{1} << 19;
  if (n < kMinParallel || max_threads == 1) {
    accumulate_stats(view, 0, n, result);
    return result;
  }
  // hardware_concurrency() may read /sys: ask once.
  static const int hw = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  int threads = max_threads > 0 ? max_threads : hw;
  if (threads == 1) {
    accumulate_stats(view, 0, n, result);
    return result;
  }
  // Fixed chunks handed out dynamically (a thread slowed by other work takes fewer), each chunk's
  // stats kept apart and merged in chunk order, so the result does not depend on the schedule.
  constexpr i64 kChunk = i64{256} * kBlock;
  const i64 nchunks = (n + kChunk - 1) / kChunk;
  threads =
      static_cast<int>(std::min<i64>({static_cast<i64>(threads), n / kMinPerThread, nchunks}));
  std::vector<Stats> parts(static_cast<std::size_t>(nchunks));
  std::atomic<i64> next{0};
  auto work = [&] {
    for (i64 c; (c = next.fetch_add(1, std::memory_order_relaxed)) < nchunks;)
      accumulate_stats(view, c * kChunk, std::min(n, (c + 1) * kChunk),
                       parts[static_cast<std::size_t>(c)]);
  };
  std::vector<std::thread> pool;
  pool.reserve(static_cast<std::size_t>(threads - 1));
  try {
    for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  } catch (const std::system_error&) {
    // Fewer threads than asked for: the ones running share the chunks.
  }
  work();
  for (auto& th : pool) th.join();
  for (auto& p : parts) result.merge(p);
  return result;
}

Stats compute_stats_chunked(const TensorView& view, ChunkRunner runner) {
  Stats result;
  const i64 n = view.numel();
  if (n <= 0 || view.data == nullptr) return result;
  // Chunks of kStatsChunk elements, longer for big tensors (64 chunks at most above 2 Mi
  // elements, 1 Mi elements at most each): a function of n alone, so the result is too.
  const i64 chunk = std::clamp<i64>((n / 64 + kBlock - 1) / kBlock * kBlock, kStatsChunk, i64{1} << 20);
  const i64 nchunks = (n + chunk - 1) / chunk;
  if (nchunks < 2) {
    accumulate_stats(view, 0, n, result);
    return result;
  }
  std::vector<Stats> parts(static_cast<std::size_t>(nchunks));
  struct Work {
    const TensorView* view;
    i64 n, chunk;
    std::vector<Stats>* parts;
  } work{&view, n, chunk, &parts};
  runner(nchunks, &work, [](void* ctx, i64 c, i64 run_end) {
    auto* w = static_cast<Work*>(ctx);
    const detail::PrefetchBound bound(std::min(w->n, run_end * w->chunk));
    accumulate_stats(*w->view, c * w->chunk, std::min(w->n, (c + 1) * w->chunk),
                     (*w->parts)[static_cast<std::size_t>(c)]);
  });
  for (auto& p : parts) result.merge(p);
  return result;
}

}  // namespace ampscope
