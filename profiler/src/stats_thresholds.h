// What the stats kernels (CPU: stats_cpu*.cpp, CUDA: stats_cuda.cu) share about the target
// formats: their thresholds, from formats.h's table (counts are "how many |x|, float32 bits
// without sign, lie below T", three per format: index 3 * format + {0: Tu + 1, 1: Ts, 2: To}),
// and the float32 exponent histogram's range.
#pragma once

#include <ampscope/profiler/formats.h>

namespace ampscope::detail {

using ampscope::kNumThresholds;
/// Exponent histogram of float32-domain sources: floor(log2|x|) in [-149, 127], index e + 149.
inline constexpr int kExpOffset32 = 149;
inline constexpr int kExpBins32 = 149 + 128;

}  // namespace ampscope::detail
