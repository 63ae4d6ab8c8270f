// Internal interface between the CUDA stats kernel (stats_cuda.cu) and its host side
// (cuda_stats.cpp). No CUDA headers: streams are void*, errors are cudaError_t values as int.
#pragma once

#include <ampscope/profiler/stats.h>

#include <cstdint>
#include <vector>

#include "stats_thresholds.h"

namespace ampscope::detail {

/// One stats slot in device memory. All-zero bytes are the empty slot, so a chunk is reset with
/// one memset. float16/bfloat16 values are counted in the float32 domain (exact conversion).
struct DeviceSlot {
  unsigned long long nan, posinf, neginf, zeros;
  unsigned long long amax;      ///< largest finite |float32 bits|
  unsigned long long amin_inv;  ///< ~(smallest nonzero finite |float32 bits|); 0: none yet
  unsigned long long seq_inv;   ///< ~(smallest seq of a call that saw NaN/Inf); 0: none
  unsigned long long pad;
  double sum, sum_sq;  ///< of the finite values, in double
  /// Per threshold k: values inside T_k's binade (same floor(log2)) with |bits| < T_k.
  unsigned long long below_in_binade[kNumThresholds];
  unsigned long long hist[kExpBins32];  ///< nonzero finite values by floor(log2|x|) + 149
};

/// Most dimensions the strided kernel indexes (after size-1 dims are dropped and contiguous
/// neighbours merged); the host splits views with more.
inline constexpr int kMaxKernelDims = 8;

/// One launch: a view already collapsed by the host.
struct StatsLaunch {
  const void* data = nullptr;
  DType dtype = DType::kFloat32;
  std::int64_t numel = 0;
  int ndim = 0;             ///< 0 with numel 1: a single element
  bool contiguous = false;  ///< dense, stride 1 over numel elements
  std::int64_t sizes[kMaxKernelDims] = {};
  std::int64_t strides[kMaxKernelDims] = {};
  std::uint64_t seq = 0;
};

#if defined(__CUDACC__)
#define AMPSCOPE_HOST_DEVICE __host__ __device__
#else
#define AMPSCOPE_HOST_DEVICE
#endif

/// Offset, in elements from `l.data`, of the launch's element with row-major index `i` (the
/// strided kernel's indexing; the host tests run the same function).
AMPSCOPE_HOST_DEVICE inline std::int64_t element_offset(const StatsLaunch& l, std::int64_t i) {
  if (l.contiguous) return i;
  std::int64_t rem = i, off = 0;
  for (int d = l.ndim - 1; d > 0; --d) {
    const std::int64_t s = l.sizes[d];
    off += (rem % s) * l.strides[d];
    rem /= s;
  }
  return off + rem * l.strides[0];
}

/// The launches covering every element of `v` once: size-1 dimensions dropped, neighbours that
/// are contiguous with each other merged, views with more than kMaxKernelDims dimensions left
/// split over their leading indices. Empty for an empty view.
std::vector<StatsLaunch> plan_launches(const TensorView& v, std::uint64_t seq);

/// Enqueues the stats of `l` into `slot` on `stream` (no sync). `sm_count` sizes the grid.
/// Returns a cudaError_t value (0: success).
int launch_stats_kernel(const StatsLaunch& l, DeviceSlot* slot, int sm_count, void* stream);

/// Floor(log2) of the float32 threshold k's magnitude (the binade it cuts).
int threshold_binade(int k);

/// Folds a slot read back to the host into a Stats block (count is known on the host).
void slot_to_stats(const DeviceSlot& s, std::int64_t count, Stats& out);

}  // namespace ampscope::detail
