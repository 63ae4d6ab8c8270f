#include "recheck.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

namespace ampscope::detail {
namespace {

at::Tensor upcast(const at::Tensor& t) {
  if (!t.defined() || !t.is_floating_point()) return t;
  // Always a copy: the re-run must never write into the user's tensors.
  return t.detach().to(at::kFloat, /*non_blocking=*/false, /*copy=*/true);
}

c10::IValue upcast(const c10::IValue& v) {
  if (v.isTensor()) return upcast(v.toTensor());
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorList().vec()) out.push_back(upcast(t));
    return out;
  }
  return v;
}

bool any_nonfinite(const c10::IValue& v) {
  auto check = [](const at::Tensor& t) {
    return t.defined() && t.is_floating_point() && !at::isfinite(t).all().item<bool>();
  };
  if (v.isTensor()) return check(v.toTensor());
  if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList().vec()) {
      if (check(t)) return true;
    }
  }
  return false;
}

}  // namespace

std::optional<bool> recheck_fp32(const at::RecordFunction& fn,
                                 const std::vector<c10::IValue>& inputs) {
  auto name = fn.operator_name();
  if (!name) return std::nullopt;
  auto handle = c10::Dispatcher::singleton().findOp(*name);
  if (!handle) return std::nullopt;
  try {
    at::DisableRecordFunctionGuard no_observe;
    at::NoGradGuard no_grad;
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    torch::jit::Stack stack;
    stack.reserve(inputs.size());
    for (const auto& v : inputs) stack.push_back(upcast(v));
    handle->callBoxed(&stack);
    for (const auto& v : stack) {
      if (any_nonfinite(v)) return true;
    }
    return false;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace ampscope::detail
