// Calls on wrapper tensors that torch re-runs on the tensors they wrap (DTensor's local shard,
// torch.func levels): the observer records the inner call, not the wrapper's.
#pragma once

#include <ATen/record_function.h>
#include <ampscope/profiler/tensor_stats.h>

namespace ampscope::detail {

/// True when some tensor argument of the call is such a wrapper. Valid in a start callback.
inline bool is_wrapper_call(const at::RecordFunction& fn) {
  if (fn.scope() != at::RecordScope::FUNCTION) return false;  // autograd nodes stay entries
  for (const c10::IValue& v : fn.inputs()) {
    if (v.isTensor() && is_unwrapped_by_torch(v.toTensor())) return true;
    if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList().vec())
        if (is_unwrapped_by_torch(t)) return true;
    }
  }
  return false;
}

/// True for records that stand around user code rather than being an op: a custom autograd
/// Function's apply (e.g. reentrant checkpointing's CheckpointFunction; the ops its forward
/// runs are the model's), and reentrant checkpointing's backward node, inside which the
/// checkpointed layers are recomputed and their own backward nodes run.
inline bool is_transparent_record(const at::RecordFunction& fn) {
  if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION)
    return std::string_view(fn.name()) == "CheckpointFunctionBackward";
  // dispatcher ops are "ns::name"; a Function's apply records its class name (no string copy
  // here: operator_name() would build one per op)
  return fn.scope() == at::RecordScope::FUNCTION &&
         std::string_view(fn.name()).find("::") == std::string_view::npos;
}

/// True for communication ops (c10d collectives, FSDP's buffer ops): their outputs are filled
/// asynchronously or are empty buffers, so they are recorded as calls without stats.
inline bool is_collective(std::string_view name) {
  return name.rfind("c10d::", 0) == 0 || name.rfind("_c10d_functional::", 0) == 0 ||
         name.rfind("c10d_functional::", 0) == 0 || name.rfind("fsdp::", 0) == 0;
}

}  // namespace ampscope::detail
