// The observer's device side: stats of CUDA outputs accumulated on the device (one slot per
// entry, read back once per step), and CUPTI kernel records tied to entries through external ids.
// observer.cpp calls these few functions; everything else lives in observer_device.cpp.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <ampscope/profiler/observer.h>

#include <atomic>
#include <cstdint>

namespace ampscope::detail {

struct ThreadTable;

/// Resets slots and tracer for a new run and starts kernel tracing when a GPU is there.
void device_start();
/// Stops kernel tracing and reads back what is pending.
void device_stop();

/// True while kernel tracing runs (one relaxed load).
bool device_tracing();
/// A top-level call begins: pushes a fresh external id for CUPTI and returns it (0: off).
std::uint64_t device_call_begin();
/// The call ends: pops its external id.
void device_call_end();
/// Binds a call's external id to its entry (its kernels are then counted there).
void device_bind(std::uint64_t external_id, ThreadTable& table, const OpKey& key);

/// Enqueues the stats of one CUDA tensor into the entry's device slot (no sync). False when the
/// tensor is not a CUDA float32/float16/bfloat16 tensor.
bool device_record_tensor(const at::Tensor& t, ThreadTable& table, const OpKey& key,
                          std::int64_t step);

/// Enqueues every CUDA floating tensor among `values` (tensors and tensor lists).
template <typename Range>
void device_record(const Range& values, ThreadTable& table, const OpKey& key, std::int64_t step) {
  for (const c10::IValue& v : values) {
    if (v.isTensor()) {
      device_record_tensor(v.toTensor(), table, key, step);
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList().vec()) device_record_tensor(t, table, key, step);
    }
  }
}

/// Reads device stats and kernel records back into the tables (one host sync when CUDA stats
/// are pending). Called at step ends and by snapshot(); never per op.
void device_flush();
/// Run notes (tracing off and why, graph-capture skips, CUDA origin granularity) and the
/// count of host synchronisations CUPTI saw (-1: not traced).
void device_report(ObserverSnapshot& snap);

}  // namespace ampscope::detail
