// Chunked reads on torch's intra-op pool, shared by the stats kernel's entry point and the
// sentinel's check (nonfinite_scan.cpp). No torch types. Defined in tensor_stats.cpp, the one
// file built with -fopenmp for it (see profiler/CMakeLists.txt): callers need no OpenMP flags.
#pragma once

#include <cstdint>

namespace ampscope::detail {

/// Runs body(ctx, c, run_end) once for every chunk c in [0, chunks) on torch's intra-op pool (an OpenMP
/// region of the runtime torch's own ops use; on the calling thread alone inside another
/// parallel region or without OpenMP). Each thread first takes the chunks of its own share (the
/// static split torch's ops use, so an op's output is read on the core whose cache the op left
/// it in), then the chunks still left in the other shares: a pool thread that wakes late does
/// not make the caller wait at the region's end. Which thread ran a chunk must not matter to
/// `body`'s result. `run_end`: the end of c's share (a ChunkRunner's run, stats.h).
void run_on_torch_pool(std::int64_t chunks, void* ctx,
                       void (*body)(void*, std::int64_t, std::int64_t));

}  // namespace ampscope::detail
