// Compiled graphs (torch.compile) as the observer sees them: the graph's own ATen calls (extern
// kernels such as aten::addmm) run inside a compiled region and are folded into it; what the
// region computed is told by its observation points (Observer::record_compiled).
#pragma once

#include <ATen/record_function.h>
#include <ampscope/profiler/observer.h>

#include <string_view>

namespace ampscope::detail {

/// The observation point being recorded on this thread (nullptr: none).
const CompiledPoint*& current_point();

/// Compiled regions running on this thread (AOTAutograd's forward or backward of a graph).
int& compiled_regions();

/// AOTAutograd's autograd.Function around a compiled forward ("CompiledFunction", recorded by
/// its apply) or its backward node ("CompiledFunctionBackward").
inline bool is_compiled_region(const at::RecordFunction& fn) {
  const std::string_view name(fn.name());
  if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION) return name == "CompiledFunctionBackward";
  return fn.scope() == at::RecordScope::FUNCTION && name == "CompiledFunction";
}

/// The dispatcher's record of the observation op itself: transparent, the point's own record
/// (made inside it) is the call.
inline bool is_point_call(const at::RecordFunction& fn) {
  return fn.scope() == at::RecordScope::FUNCTION &&
         std::string_view(fn.name()) == "ampscope::observe";
}

}  // namespace ampscope::detail
