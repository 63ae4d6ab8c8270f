// The FP32 re-check: re-executes one op call in float32 with autocast off, outside the observer,
// and compares its result with what the low-precision call returned.
#pragma once

#include <ampscope/profiler/fp32_check.h>

#include <ATen/core/ivalue.h>

#include <optional>
#include <string_view>
#include <vector>

namespace at {
struct RecordFunction;
}

namespace ampscope::detail {

/// Re-runs the op of `fn` through the dispatcher on copies of `inputs` with floating tensors
/// upcast to float32, autocast excluded, grad mode off and observation disabled, and compares
/// the first floating output with the first floating tensor of `outputs` (the call's own
/// result; ulps are counted in that tensor's dtype). nullopt when the op cannot be re-run.
std::optional<Fp32Check> recheck_fp32(const at::RecordFunction& fn,
                                      const std::vector<c10::IValue>& inputs,
                                      const std::vector<c10::IValue>& outputs);

/// Runs a compiled point's region (`program`: ATen calls, see python/ampscope/_compile_region.py)
/// on copies of `inputs` (the point's deps) upcast to float32, with every low-precision dtype
/// argument read as float32, under the same guards; true when its result holds NaN/Inf.
/// nullopt when the program cannot be run (an op not found, an argument it cannot build).
std::optional<bool> rerun_region_fp32(std::string_view program,
                                      const std::vector<c10::IValue>& inputs);

}  // namespace ampscope::detail
