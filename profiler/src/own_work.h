// The observer's own tensor work (stats reads, finiteness checks, re-checks, loss-scale copies)
// runs torch ops that are not the user's: neither ampscope nor another profiler may see them.
#pragma once

#include <ATen/record_function.h>

#include <optional>

namespace ampscope::detail {

/// Scope of the observer's own work on this thread. The observer's callbacks ignore the ops
/// it runs (a thread-local flag); RecordFunction itself is switched off only while another
/// callback (torch.profiler, a second tool) is active, because each switch rebuilds torch's
/// per-thread callback cache (~175 ns).
class OwnWork {
 public:
  OwnWork();
  ~OwnWork();
  OwnWork(const OwnWork&) = delete;
  OwnWork& operator=(const OwnWork&) = delete;

 private:
  std::optional<at::DisableRecordFunctionGuard> others_off_;
  bool was_busy_;
};

}  // namespace ampscope::detail
