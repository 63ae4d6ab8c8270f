#include "recheck.h"

#include <ATen/ATen.h>
#include <ATen/core/Generator.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>
#include <ampscope/profiler/tensor_stats.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <cmath>
#include <mutex>

#include "own_work.h"

namespace ampscope::detail {
namespace {

/// The state of every random generator a re-run could draw from (the default CPU one, the
/// default one of each CUDA device among the inputs, generators passed as arguments), restored
/// when the guard ends: a profiler must not change the random numbers the program draws next.
class RngGuard {
 public:
  explicit RngGuard(const std::vector<c10::IValue>& inputs) {
    keep(at::globalContext().defaultGenerator(c10::DeviceType::CPU));
    for (const auto& v : inputs) {
      if (v.isGenerator()) keep(v.toGenerator());
      if (v.isTensor() && v.toTensor().defined() && v.toTensor().is_cuda())
        keep(at::globalContext().defaultGenerator(v.toTensor().device()));
    }
  }
  RngGuard(const RngGuard&) = delete;
  RngGuard& operator=(const RngGuard&) = delete;
  ~RngGuard() {
    for (auto& s : saved_) {
      std::lock_guard<std::mutex> lock(s.gen.mutex());
      s.gen.set_state(s.state);
    }
  }
  /// True when the re-run drew random numbers (its result is not comparable with the call's).
  bool consumed() {
    for (auto& s : saved_) {
      at::Tensor now;
      {
        std::lock_guard<std::mutex> lock(s.gen.mutex());
        now = s.gen.get_state();
      }
      if (!at::equal(s.state, now)) return true;
    }
    return false;
  }

 private:
  struct Saved {
    at::Generator gen;
    at::Tensor state;
  };
  void keep(at::Generator gen) {
    if (!gen.defined()) return;
    for (const auto& s : saved_)
      if (s.gen == gen) return;
    std::lock_guard<std::mutex> lock(gen.mutex());
    saved_.push_back({gen, gen.get_state()});
  }
  std::vector<Saved> saved_;
};

/// Only tensors with memory of their own are copied and compared (never a wrapper's).
bool all_readable(const std::vector<c10::IValue>& values) {
  for (const auto& v : values) {
    if (v.isTensor() && v.toTensor().defined() && !has_readable_storage(v.toTensor())) return false;
    if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList().vec())
        if (t.defined() && !has_readable_storage(t)) return false;
    }
  }
  return true;
}

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

template <typename F>
void for_each_floating(const c10::IValue& v, F&& f) {
  auto visit = [&](const at::Tensor& t) {
    if (t.defined() && t.is_floating_point()) f(t);
  };
  if (v.isTensor()) {
    visit(v.toTensor());
  } else if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList().vec()) visit(t);
  }
}

bool any_nonfinite(const std::vector<c10::IValue>& values) {
  bool found = false;
  for (const auto& v : values) {
    for_each_floating(v, [&](const at::Tensor& t) {
      if (!found && !at::isfinite(t).all().item<bool>()) found = true;
    });
  }
  return found;
}

at::Tensor first_floating(const std::vector<c10::IValue>& values) {
  at::Tensor out;
  for (const auto& v : values) {
    for_each_floating(v, [&](const at::Tensor& t) {
      if (!out.defined()) out = t;
    });
  }
  return out;
}

/// Mantissa bits and smallest normal exponent of a floating dtype: the ulp of x is
/// 2^(max(floor(log2|x|), emin) - mantissa).
void ulp_params(c10::ScalarType t, int* mantissa, int* emin) {
  switch (t) {
    case at::kHalf: *mantissa = 10; *emin = -14; return;
    case at::kBFloat16: *mantissa = 7; *emin = -126; return;
    case at::kDouble: *mantissa = 52; *emin = -1022; return;
    case at::kFloat8_e4m3fn: *mantissa = 3; *emin = -6; return;
    case at::kFloat8_e5m2: *mantissa = 2; *emin = -14; return;
    default: *mantissa = 23; *emin = -126; return;
  }
}

/// Fills the error fields of `c` from the call's output `low` and the float32 re-run `ref`.
void compare(const at::Tensor& low, const at::Tensor& ref, Fp32Check& c) {
  if (!low.defined() || !ref.defined() || low.numel() != ref.numel()) return;
  const at::Tensor a = low.detach().reshape({-1}).to(at::kDouble);
  const at::Tensor b = ref.detach().reshape({-1}).to(at::kDouble);
  const at::Tensor fa = at::isfinite(a), fb = at::isfinite(b);
  c.lowp_only_nonfinite = at::logical_and(fa.logical_not(), fb).sum().item<std::int64_t>();
  if (fb.any().item<bool>()) c.fp32_absmax = b.masked_select(fb).abs().max().item<double>();
  const at::Tensor both = at::logical_and(fa, fb);
  c.compared = both.sum().item<std::int64_t>();
  if (c.compared == 0) return;
  const at::Tensor x = a.masked_select(both), y = b.masked_select(both);
  const at::Tensor d = x - y;
  const double nd = d.norm().item<double>(), ny = y.norm().item<double>(), nx = x.norm().item<double>();
  // Against an all-zero float32 result (the residue of a cancellation, such as a norm of a
  // constant row) neither a relative error nor an angle means anything: NaN, no evidence.
  c.rel_err = ny > 0 ? nd / ny : (nd == 0 ? 0.0 : NAN);
  if (nx > 0 && ny > 0) {
    c.cosine = (x * y).sum().item<double>() / (nx * ny);
  } else {
    c.cosine = nx == ny ? 1.0 : NAN;
  }
  int mantissa = 23, emin = -126;
  ulp_params(low.scalar_type(), &mantissa, &emin);
  const at::Tensor e = at::floor(at::log2(y.abs())).clamp_min(emin);  // log2(0) = -inf -> emin
  const at::Tensor ulp = at::exp2(e - mantissa);
  c.max_ulp = (d.abs() / ulp).max().item<double>();
}

}  // namespace

std::optional<Fp32Check> recheck_fp32(const at::RecordFunction& fn,
                                      const std::vector<c10::IValue>& inputs,
                                      const std::vector<c10::IValue>& outputs) {
  auto name = fn.operator_name();
  if (!name || !all_readable(inputs) || !all_readable(outputs)) return std::nullopt;
  auto handle = c10::Dispatcher::singleton().findOp(*name);
  if (!handle) return std::nullopt;
  try {
    OwnWork own;
    at::NoGradGuard no_grad;
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    torch::jit::Stack stack;
    stack.reserve(inputs.size());
    for (const auto& v : inputs) stack.push_back(upcast(v));
    RngGuard rng(inputs);
    handle->callBoxed(&stack);
    if (rng.consumed()) return std::nullopt;  // dropout, randn_like...: another draw
    Fp32Check c;
    c.also_nonfinite = any_nonfinite(stack);
    compare(first_floating(outputs), first_floating(stack), c);
    return c;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace ampscope::detail
