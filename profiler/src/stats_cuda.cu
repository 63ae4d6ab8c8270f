// The CUDA stats kernel: one pass over a float32/float16/bfloat16 device tensor of any layout,
// accumulating into a device-resident slot (stats_cuda_kernel.h) on the caller's stream.
//
// Like the CPU kernel, every value is brought to float32 bits (float16 and bfloat16 exactly) and
// every count is an integer compare on |bits|, so counts are exact and independent of FTZ modes:
//   - NaN/+inf/-inf/zero counts, max and min of the finite |bits|, in registers;
//   - sum and sum of squares of the finite values in double, in registers;
//   - the exponent histogram (floor(log2|x|), float32 subnormals exact) in a per-block shared
//     histogram with one copy per lane (bin * 32 + lane): a warp's increments never collide on
//     an address or a bank, however clustered the exponents (real tensors put most values in
//     a few binades, which would serialise a single shared histogram up to 32-fold);
//   - the twelve format thresholds: "|x| < T" = zeros + values of lower binades + values of T's
//     own binade below T. The first two follow from the histogram on the host, so per value only
//     those in one of the (at most two) threshold binades are compared, through a per-bin table.
// At the end each block reduces its registers (warp shuffles, then shared memory) and adds its
// results to the slot with one set of global atomics.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "stats_cuda_kernel.h"

namespace ampscope::detail {
namespace {

using u16 = std::uint16_t;
using u32 = std::uint32_t;
using u64 = unsigned long long;
using i64 = std::int64_t;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr u32 kAbs = 0x7FFFFFFFu;
constexpr u32 kInf = 0x7F800000u;
constexpr u16 kNoThreshold = 0xFFFFu;

__constant__ ThresholdTable kThDev = make_threshold_table();

/// Histogram bin (floor(log2) + 149) of a nonzero finite float32 magnitude.
__host__ __device__ inline int bin_of(u32 m) {
  const u32 b = m >> 23;
#ifdef __CUDA_ARCH__
  return b != 0 ? static_cast<int>(b) - 127 + kExpOffset32 : 31 - __clz(static_cast<int>(m));
#else
  return b != 0 ? static_cast<int>(b) - 127 + kExpOffset32 : 31 - __builtin_clz(m);
#endif
}

struct ThreadAcc {
  u32 nan = 0, pinf = 0, ninf = 0, zeros = 0;
  u32 amax = 0, amin = 0xFFFFFFFFu;
  double sum = 0.0, sq = 0.0;
};

constexpr int kLanes = 32;

struct BlockShared {
  u32 hist[kExpBins32 * kLanes];  ///< index bin * 32 + lane
  u16 table[kExpBins32];          ///< per bin: threshold indices (low byte, high byte; 0xFF none)
  u32 below[kNumThresholds * kLanes];  ///< index k * 32 + lane
  u32 red_u[kWarps][6];
  double red_d[kWarps][2];
};

__device__ inline void visit(u32 x, ThreadAcc& a, BlockShared& sh) {
  const u32 m = x & kAbs;
  if (m >= kInf) {
    a.nan += m > kInf;
    a.pinf += x == kInf;
    a.ninf += x == (kInf | 0x80000000u);
    return;
  }
  if (m == 0) {
    ++a.zeros;
    return;
  }
  a.amax = max(a.amax, m);
  a.amin = min(a.amin, m);
  const double d = static_cast<double>(__uint_as_float(x));
  a.sum += d;
  a.sq = fma(d, d, a.sq);
  const int bin = bin_of(m);
  const u32 lane = threadIdx.x & (kLanes - 1);
  atomicAdd(&sh.hist[bin * kLanes + lane], 1u);
  const u16 t = sh.table[bin];
  if (t != kNoThreshold) {
    const u32 k0 = t & 0xFFu, k1 = t >> 8;
    if (m < kThDev.v[k0]) atomicAdd(&sh.below[k0 * kLanes + lane], 1u);
    if (k1 != 0xFFu && m < kThDev.v[k1]) atomicAdd(&sh.below[k1 * kLanes + lane], 1u);
  }
}

/// Element loaders: float32 bits of element i (logical row-major index) or of a raw word.
struct Bits32 {
  __device__ static u32 of(u32 w) { return w; }
};
struct BitsBF16 {
  __device__ static u32 of(u16 w) { return static_cast<u32>(w) << 16; }
};
struct BitsF16 {
  __device__ static u32 of(u16 w) { return __float_as_uint(__half2float(__ushort_as_half(w))); }
};

__device__ void init_shared(BlockShared& sh) {
  for (int b = threadIdx.x; b < kExpBins32; b += blockDim.x) {
    u16 t = kNoThreshold;
    int found = 0;
    for (int k = 0; k < kNumThresholds; ++k) {
      if (bin_of(kThDev.v[k]) != b) continue;
      t = found == 0 ? static_cast<u16>(0xFF00u | k) : static_cast<u16>((t & 0xFFu) | (k << 8));
      ++found;
    }
    sh.table[b] = t;
  }
  for (int i = threadIdx.x; i < kExpBins32 * kLanes; i += blockDim.x) sh.hist[i] = 0;
  for (int i = threadIdx.x; i < kNumThresholds * kLanes; i += blockDim.x) sh.below[i] = 0;
  __syncthreads();
}

template <typename T>
__device__ T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xFFFFFFFFu, v, o);
  return v;
}
__device__ u32 warp_max(u32 v) {
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_down_sync(0xFFFFFFFFu, v, o));
  return v;
}
__device__ u32 warp_min(u32 v) {
  for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_down_sync(0xFFFFFFFFu, v, o));
  return v;
}

/// Block reduction of the registers, then one set of global atomics into the slot.
__device__ void flush_block(ThreadAcc& a, BlockShared& sh, DeviceSlot* slot, u64 seq) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const u32 r[6] = {warp_sum(a.nan),   warp_sum(a.pinf), warp_sum(a.ninf),
                    warp_sum(a.zeros), warp_max(a.amax), warp_min(a.amin)};
  const double s = warp_sum(a.sum), q = warp_sum(a.sq);
  if (lane == 0) {
    for (int i = 0; i < 6; ++i) sh.red_u[warp][i] = r[i];
    sh.red_d[warp][0] = s;
    sh.red_d[warp][1] = q;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    u64 c[4] = {0, 0, 0, 0};
    u32 mx = 0, mn = 0xFFFFFFFFu;
    double ss = 0.0, qq = 0.0;
    for (int w = 0; w < kWarps; ++w) {
      for (int i = 0; i < 4; ++i) c[i] += sh.red_u[w][i];
      mx = max(mx, sh.red_u[w][4]);
      mn = min(mn, sh.red_u[w][5]);
      ss += sh.red_d[w][0];
      qq += sh.red_d[w][1];
    }
    if (c[0]) atomicAdd(&slot->nan, c[0]);
    if (c[1]) atomicAdd(&slot->posinf, c[1]);
    if (c[2]) atomicAdd(&slot->neginf, c[2]);
    if (c[3]) atomicAdd(&slot->zeros, c[3]);
    if (c[0] + c[1] + c[2] != 0) atomicMax(&slot->seq_inv, ~seq);
    if (mx) atomicMax(&slot->amax, static_cast<u64>(mx));
    if (mn != 0xFFFFFFFFu) atomicMax(&slot->amin_inv, ~static_cast<u64>(mn));
    if (ss != 0.0) atomicAdd(&slot->sum, ss);
    if (qq != 0.0) atomicAdd(&slot->sum_sq, qq);
  }
  // One thread per bin sums its 32 lane copies, starting at a different lane per bin so the
  // warp's reads fall in different banks.
  auto lanes_sum = [](const u32* row, int rot) {
    u64 n = 0;
    for (int l = 0; l < kLanes; ++l) n += row[(l + rot) & (kLanes - 1)];
    return n;
  };
  for (int b = threadIdx.x; b < kExpBins32; b += blockDim.x) {
    const u64 n = lanes_sum(&sh.hist[b * kLanes], b);
    if (n) atomicAdd(&slot->hist[b], n);
  }
  if (threadIdx.x < kNumThresholds) {
    const u64 n = lanes_sum(&sh.below[threadIdx.x * kLanes], threadIdx.x);
    if (n) atomicAdd(&slot->below_in_binade[threadIdx.x], n);
  }
}

/// Dense elements, 16-byte vector loads when the pointer allows (W: the stored word type).
template <typename W, typename Conv>
__global__ void __launch_bounds__(kThreads)
    contiguous_kernel(const W* __restrict__ data, i64 n, DeviceSlot* slot, u64 seq) {
  __shared__ BlockShared sh;
  init_shared(sh);
  ThreadAcc a;
  constexpr int kPerVec = 16 / sizeof(W);
  const i64 tid = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x;
  const i64 stride = static_cast<i64>(gridDim.x) * blockDim.x;
  i64 done = 0;
  if ((reinterpret_cast<std::uintptr_t>(data) & 15) == 0) {
    const i64 nvec = n / kPerVec;
    const uint4* v = reinterpret_cast<const uint4*>(data);
    auto visit_vec = [&](const uint4& q) {
      const W* w = reinterpret_cast<const W*>(&q);
#pragma unroll
      for (int j = 0; j < kPerVec; ++j) visit(Conv::of(w[j]), a, sh);
    };
    // Two loads in flight per thread before the work on them: more bytes in flight per SM.
    i64 i = tid;
    for (; i + stride < nvec; i += 2 * stride) {
      const uint4 q0 = __ldg(v + i);
      const uint4 q1 = __ldg(v + i + stride);
      visit_vec(q0);
      visit_vec(q1);
    }
    if (i < nvec) visit_vec(__ldg(v + i));
    done = nvec * kPerVec;
  }
  for (i64 i = done + tid; i < n; i += stride) visit(Conv::of(__ldg(data + i)), a, sh);
  __syncthreads();
  flush_block(a, sh, slot, seq);
}

/// Any layout: each logical index is decomposed over the (collapsed) sizes and strides.
template <typename W, typename Conv>
__global__ void __launch_bounds__(kThreads)
    strided_kernel(const W* __restrict__ data, StatsLaunch l, DeviceSlot* slot) {
  __shared__ BlockShared sh;
  init_shared(sh);
  ThreadAcc a;
  const i64 tid = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x;
  const i64 stride = static_cast<i64>(gridDim.x) * blockDim.x;
  for (i64 i = tid; i < l.numel; i += stride)
    visit(Conv::of(__ldg(data + element_offset(l, i))), a, sh);
  __syncthreads();
  flush_block(a, sh, slot, l.seq);
}

template <typename W, typename Conv>
cudaError_t launch_typed(const StatsLaunch& l, DeviceSlot* slot, int sm_count, cudaStream_t st) {
  constexpr i64 kPerThreadIter = 16 / sizeof(W);
  const i64 want = (l.numel + kThreads * kPerThreadIter - 1) / (kThreads * kPerThreadIter);
  // One wave: ~38 KiB of shared memory and 54 registers a thread let 4 blocks share an SM
  // (grid-stride loops do the rest). Each block's shared counters stay below 2^32 (min_blocks).
  constexpr i64 kBlocksPerSm = 4;
  const i64 wave = static_cast<i64>(sm_count) * kBlocksPerSm;
  i64 blocks = want < wave ? want : wave;
  const i64 min_blocks = l.numel / (i64{1} << 30) + 1;
  if (blocks < min_blocks) blocks = min_blocks;
  if (blocks < 1) blocks = 1;
  const W* data = static_cast<const W*>(l.data);
  if (l.contiguous) {
    contiguous_kernel<W, Conv>
        <<<static_cast<unsigned>(blocks), kThreads, 0, st>>>(data, l.numel, slot, l.seq);
  } else {
    strided_kernel<W, Conv><<<static_cast<unsigned>(blocks), kThreads, 0, st>>>(data, l, slot);
  }
  return cudaGetLastError();
}

}  // namespace

int launch_stats_kernel(const StatsLaunch& l, DeviceSlot* slot, int sm_count, void* stream) {
  if (l.numel <= 0) return 0;
  auto st = static_cast<cudaStream_t>(stream);
  switch (l.dtype) {
    case DType::kFloat32:
      return launch_typed<u32, Bits32>(l, slot, sm_count, st);
    case DType::kFloat16:
      return launch_typed<u16, BitsF16>(l, slot, sm_count, st);
    case DType::kBFloat16:
      return launch_typed<u16, BitsBF16>(l, slot, sm_count, st);
    case DType::kFloat64:
      return static_cast<int>(cudaErrorInvalidValue);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

int threshold_binade(int k) {
  return bin_of(kFormatThresholds.v[k]) - kExpOffset32;
}

}  // namespace ampscope::detail
