// The CUDA stats kernel behind a plain interface: device pointers in a TensorView, streams as
// void* (a cudaStream_t), no CUDA or torch headers. The CPU kernel (stats.h) is its reference:
// both count exactly the same values (shared thresholds, exact integer compares on float32 bits).
//
// Views passed here hold a *device* pointer (memory of the current CUDA device or of `device`),
// float32/float16/bfloat16 elements, any strides (negative included). float64 is not read on the
// device (tensor_stats() copies float64 CUDA tensors to the host instead).
#pragma once

#include <ampscope/profiler/stats.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ampscope {

/// True when the CUDA runtime sees at least one device. Asked once and cached; never throws.
bool cuda_stats_available();
/// Why CUDA stats are unavailable ("" when they are available).
std::string cuda_unavailable_reason();

/// Device-resident stats slots: each slot accumulates the stats of any number of tensors, on
/// the device, on the caller's stream; the host reads every slot back at once (once per step).
/// Slots live in chunks that are never moved (a new chunk is allocated when a slot index needs
/// it, which costs one device allocation and one sync of a private stream, every 64 slots).
/// Thread-safe.
class DeviceStatsBuffer {
 public:
  DeviceStatsBuffer();
  ~DeviceStatsBuffer();
  DeviceStatsBuffer(const DeviceStatsBuffer&) = delete;
  DeviceStatsBuffer& operator=(const DeviceStatsBuffer&) = delete;

  /// Enqueues the stats of `view` (device memory of CUDA device `device`) into `slot` on
  /// `stream` (a cudaStream_t; nullptr: the legacy default stream). Never synchronises the host.
  /// `seq` orders calls: the slot keeps the smallest seq of a call that saw NaN/Inf. Returns
  /// false when the call was skipped: the stream is capturing a CUDA graph (counted, see
  /// skipped_captures()), CUDA is unavailable, the dtype is float64, or a CUDA error occurred.
  bool accumulate(const TensorView& view, int device, int slot, void* stream,
                  std::uint64_t seq = 0);

  /// One slot read back: its stats and the smallest seq of a call that saw NaN/Inf (0: none).
  struct SlotResult {
    int slot = 0;
    Stats stats;
    std::uint64_t first_nonfinite_seq = 0;
  };
  /// Copies every slot used since the last call back to the host (waits for the streams those
  /// calls ran on: one host sync per device) and resets them. Returns nothing and does not sync
  /// when no call was made. Never throws; CUDA errors drop the pending results.
  std::vector<SlotResult> read_and_reset();

  /// Calls skipped because their stream was capturing a CUDA graph.
  std::int64_t skipped_captures() const;
  /// Calls dropped because of a CUDA error (the last error is in last_error()).
  std::int64_t errors() const;
  std::string last_error() const;
  /// Host synchronisations this buffer made itself (read-backs and slot growth), so that a
  /// count of the process's synchronising CUDA calls can leave them out.
  std::int64_t own_syncs() const;
  /// Forgets every pending result and counter (device memory is kept).
  void reset();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The stats of one device view, computed on `stream` and copied back (one host sync). For the
/// explicit API (tensor_stats() on CUDA tensors); throws std::runtime_error on CUDA errors.
Stats compute_stats_cuda(const TensorView& view, int device, void* stream);

}  // namespace ampscope
