// The walk over a view's blocks, shared by the SIMD builds of the CPU stats kernel
// (stats_cpu_avx2.cpp, stats_cpu_avx512.cpp): software prefetch of a later block, contiguous
// views read in place and strided ones gathered, partial blocks and float64 to the portable code,
// one entry point per build that switches on the dtype. Each build defines AMP_SIMD_TARGET (its
// target ISA) and AMP_SIMD_INLINE (the same, always inlined) before including this header, so
// these functions compile into that build only, and hands its full-block kernels to
// run_stats_with as a type:
//   Kernel::block32(const u32* x, Prefetch pf, Acc32& A)            a full float32 block
//   Kernel::block16<kBF16>(const u16* x, u32* scratch, Prefetch pf, Acc32& A)
//                                                  a full float16 / bfloat16 block (`scratch`:
//                                                  kBlock float32 bits the kernel may fill)
#pragma once

#if !defined(AMP_SIMD_TARGET) || !defined(AMP_SIMD_INLINE)
#error "define AMP_SIMD_TARGET and AMP_SIMD_INLINE (the including build's attributes) first"
#endif

#include <immintrin.h>

#include <algorithm>
#include <memory>
#include <optional>

#include "stats_block64.h"
#include "stats_gather.h"
#include "stats_kernel.h"

namespace ampscope::detail {
namespace {

constexpr int kPrefetchAhead = 16;  // blocks ahead of the one being read (measured: 8-32 alike)

/// Software prefetch (into L2) of a later block, one cache line per step, spread over the passes
/// of the current one: memory keeps streaming while L1-resident data is counted (prefetching a
/// whole block at once fills the line buffers, then leaves memory idle). Where a build steps it
/// is its own choice (a step in a tight loop can cost more than the loop's work).
struct Prefetch {
  const char* p = nullptr;
  const char* end = nullptr;
  AMP_SIMD_INLINE void step() {
    if (p < end) {
      _mm_prefetch(p, _MM_HINT_T1);
      p += 64;
    }
  }
  AMP_SIMD_INLINE void drain() {
    for (; p < end; p += 64) _mm_prefetch(p, _MM_HINT_T1);
  }
};

/// The NaN and infinities of a block of float32 bits, set apart so that the rest takes the fast
/// path: a real tensor that went non-finite usually holds some in every block (a NaN run, a
/// GradScaler's overflowed gradients), and the general block costs ~20 times the fast one.
struct NonFinite {
  i64 nan = 0, posinf = 0, neginf = 0;

  /// Copies the block into `dst` with NaN/inf as +0 (zeros are counted below every threshold
  /// and outside the histogram and moments), counting them.
  AMP_SIMD_INLINE void zero_into(const u32* __restrict src, u32* __restrict dst) {
    i32 n = 0, p = 0, m = 0;
    for (int i = 0; i < kBlock; ++i) {
      const u32 x = src[i], a = x & kAbs32;
      n += a > kInf32;
      p += x == kInf32;
      m += x == (kInf32 | 0x80000000u);
      dst[i] = a >= kInf32 ? 0u : x;
    }
    nan = n, posinf = p, neginf = m;
  }
  /// The block's counts, taken on the copy, corrected: they were zeros there.
  void correct(Acc32& A) const {
    const i64 all = nan + posinf + neginf;
    A.nan += nan, A.posinf += posinf, A.neginf += neginf;
    A.zeros -= all;
    for (int k = 0; k < kNumTh; ++k) A.lt[k] -= all;
  }
};

/// Hands each block of a view to `block(ptr, n, prefetch)`: contiguous views in place (with a
/// later block to prefetch), strided ones gathered into `buf`.
template <typename T, typename Block>
AMP_SIMD_INLINE void for_each_block(const TensorView& v, i64 begin, i64 end, T* buf,
                                    Block&& block) {
  const bool contig = v.is_contiguous();
  const i64 limit = tls_prefetch_end >= 0 ? std::min(v.numel(), tls_prefetch_end) : v.numel();
  std::optional<Gather> g;  // strided views only (its index vectors are allocations)
  if (!contig) g.emplace(v, begin, sizeof(T));
  const T* base = static_cast<const T*>(v.data) + (contig ? begin : 0);
  for (i64 pos = begin; pos < end; pos += kBlock) {
    const int n = static_cast<int>(std::min<i64>(kBlock, end - pos));
    const T* src = base + (pos - begin);
    Prefetch pf;
    if (!contig) {
      g->next(n, buf);
      src = buf;
    } else {
      // ahead past `end` into what this thread reads next (tls_prefetch_end), not just [begin,
      // end): a chunk of a split tensor is as short as the prefetch distance
      const i64 ahead = kPrefetchAhead * kBlock;
      const i64 next_n = std::clamp<i64>(limit - pos - ahead, 0, kBlock);
      pf.p = reinterpret_cast<const char*>(src + ahead);
      pf.end = pf.p + next_n * static_cast<i64>(sizeof(T));
    }
    block(src, n, pf);
  }
}

template <typename Kernel, bool kBF16>
AMP_SIMD_TARGET void run16(const TensorView& v, i64 begin, i64 end, Stats& out) {
  const FlushToZeroScope ftz;
  Acc32 A;  // on the stack: a heap one was an allocation per chunk read
  alignas(64) u16 raw[kBlock];
  alignas(64) u32 buf[kBlock];
  for_each_block(v, begin, end, raw, [&](const u16* src, int n, Prefetch pf) AMP_SIMD_TARGET {
    if (n == kBlock) return Kernel::template block16<kBF16>(src, buf, pf, A);
    if constexpr (kBF16)
      bf16_to_f32(src, n, buf);
    else
      f16_to_f32(src, n, buf);
    block32_portable(buf, n, A);
  });
  finish32(A, out);
}

template <typename Kernel>
AMP_SIMD_TARGET void run32(const TensorView& v, i64 begin, i64 end, Stats& out) {
  const FlushToZeroScope ftz;
  Acc32 A;  // on the stack: a heap one was an allocation per chunk read
  alignas(64) u32 buf[kBlock];
  for_each_block(v, begin, end, buf, [&](const u32* src, int n, Prefetch pf) AMP_SIMD_TARGET {
    if (n == kBlock) return Kernel::block32(src, pf, A);
    block32_portable(src, n, A);
  });
  finish32(A, out);
}

/// float64: the portable block, compiled here for the build's ISA.
AMP_SIMD_TARGET inline void run64(const TensorView& v, i64 begin, i64 end, Stats& out) {
  auto A = std::make_unique<Acc64>();
  alignas(64) u64 buf[kBlock];
  for_each_block(v, begin, end, buf,
                 [&](const u64* src, int n, Prefetch) AMP_SIMD_TARGET { block64(src, n, *A); });
  finish64(*A, out);
}

/// The stats of elements [begin, end) of `v` (in its logical order) with the build's kernels.
template <typename Kernel>
void run_stats_with(const TensorView& v, i64 begin, i64 end, Stats& out) {
  switch (v.dtype) {
    case DType::kFloat32:
      return run32<Kernel>(v, begin, end, out);
    case DType::kFloat16:
      return run16<Kernel, false>(v, begin, end, out);
    case DType::kBFloat16:
      return run16<Kernel, true>(v, begin, end, out);
    case DType::kFloat64:
      return run64(v, begin, end, out);
  }
}

}  // namespace
}  // namespace ampscope::detail
