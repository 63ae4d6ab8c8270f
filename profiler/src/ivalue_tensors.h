// The tensors inside a boxed op argument or result (a Tensor, a Tensor[] or a list holding
// tensors): shared by the observer and provenance tracking.
#pragma once

#include <ATen/core/ivalue.h>

namespace ampscope::detail {

/// Calls `f(tensor)` for every tensor `v` holds.
template <typename F>
void for_each_tensor(const c10::IValue& v, F&& f) {
  if (v.isTensor()) {
    f(v.toTensor());
  } else if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList().vec()) f(t);
  } else if (v.isList()) {
    for (const c10::IValue& e : v.toListRef()) {
      if (e.isTensor()) f(e.toTensor());
    }
  }
}

}  // namespace ampscope::detail
