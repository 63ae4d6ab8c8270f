// Reads of the same memory, once: what the last reads of a few tensors found, per thread.
//
// The same elements reach the observer several times in one step: a gradient passed along a
// chain of view nodes in backward (ViewBackward0 -> TBackward0 -> ... each receives a view of the
// buffer the node before it made), a parameter gradient seen by its AccumulateGrad node and by
// its gradient hook, a module output that an op already returned. The cache keys a read on what
// makes its result the same: the storage (held weakly, so a freed storage's address is never
// mistaken for a new one's), the span of elements (dense tensors only: a transposed or permuted
// view covers the same span), the dtype and the version counter (bumped by every in-place write).
// Entries live for one step of one thread: a weight read for its cast in forward is not read
// again for its values at the optimizer step.
//
// A copy that keeps every value (a widening cast: bfloat16/float16 to float32, or a same-dtype
// copy) holds what its source held: its read is the source's. Forward casts are told at their
// end (note_exact_copy); the backward of a narrowing cast (ToCopyBackward0, which casts the
// incoming gradient back up, e.g. a float32 weight's gradient under autocast) by a post hook on
// the node that the forward cast made (reuse_read_in_backward).
#pragma once

#include <ATen/core/Tensor.h>
#include <ampscope/profiler/stats.h>

namespace ampscope::detail {

/// Below this many elements a read costs about what a lookup does: not cached.
inline constexpr std::int64_t kMinCachedElements = 4096;

/// The full stats block of a supported CPU tensor (stats_supported), read at most once per
/// (elements, version) and step on this thread. Dense tensors are read in memory order.
Stats cached_stats(const at::Tensor& t, std::int64_t step);

/// Whether a CPU floating tensor holds NaN/Inf (the sentinel's check), known from an earlier
/// read of the same elements in this step on this thread when there was one.
bool cached_has_nonfinite(const at::Tensor& t, std::int64_t step);

/// Drops what an earlier read of `t`'s elements found in this step on this thread: an in-place
/// op wrote them, perhaps through an alias whose version counter is not theirs (`p.data()`).
void forget_read(const at::Tensor& t);

/// Elements the observer's reads asked for since the last reset_read_counts(), all threads:
/// read by a full stats pass, scanned for NaN/Inf only, or answered from an earlier read.
struct ReadCounts {
  std::int64_t stats = 0;
  std::int64_t scanned = 0;
  std::int64_t cached = 0;
};
ReadCounts read_counts();
void reset_read_counts();

/// `dst` holds exactly the values of `src` (a widening cast or a same-dtype copy; nothing when
/// it is not one): what a read of `src` at its current version found in this step on this
/// thread becomes dst's read. Nothing happens when `src` was not read.
void note_exact_copy(const at::Tensor& src, const at::Tensor& dst, std::int64_t step);

/// `out` is `src` cast down in forward (float32 to bfloat16, ...): its ToCopyBackward0 node gets
/// a post hook that hands the read of the gradient it receives to the gradient it returns (the
/// same values, widened back to src's dtype) when that backward runs in the same `step`. Casts
/// that do not narrow, or whose output needs no gradient, are left alone.
void reuse_read_in_backward(const at::Tensor& src, const at::Tensor& out, std::int64_t step);

}  // namespace ampscope::detail
