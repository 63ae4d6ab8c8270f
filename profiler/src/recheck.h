// The FP32 re-check: re-executes one op call in float32 with autocast off, outside the observer.
#pragma once

#include <ATen/core/ivalue.h>

#include <optional>
#include <vector>

namespace at {
struct RecordFunction;
}

namespace ampscope::detail {

/// Re-runs the op of `fn` through the dispatcher on copies of `inputs` with floating tensors
/// upcast to float32, autocast excluded, grad mode off and observation disabled. True when the
/// float32 outputs are also non-finite; nullopt when the op cannot be re-run.
std::optional<bool> recheck_fp32(const at::RecordFunction& fn,
                                 const std::vector<c10::IValue>& inputs);

}  // namespace ampscope::detail
