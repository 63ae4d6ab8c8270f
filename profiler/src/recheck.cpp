#include "recheck.h"

#include <ATen/ATen.h>
#include <ATen/ScalarOps.h>
#include <ATen/core/Generator.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>
#include <ampscope/profiler/tensor_stats.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <cmath>
#include <cstdlib>
#include <mutex>
#include <string>

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

namespace {

/// Reads one program (see rerun_region_fp32): arguments are built for their schema types.
class RegionRunner {
 public:
  explicit RegionRunner(const std::vector<c10::IValue>& inputs) {
    for (const auto& v : inputs) values_.push_back(upcast(v));
  }

  /// Runs every line; the value `out` names, or nullopt.
  std::optional<c10::IValue> run(std::string_view program) {
    while (!program.empty()) {
      const auto end = program.find('\n');
      const std::string_view line = program.substr(0, end);
      program = end == std::string_view::npos ? std::string_view() : program.substr(end + 1);
      std::vector<std::string_view> tokens = split(line, ' ');
      if (tokens.empty()) return std::nullopt;
      if (tokens[0] == "out") {
        if (tokens.size() != 2 || tokens[1].empty() || tokens[1][0] != 't') return std::nullopt;
        return ref(tokens[1].substr(1));
      }
      if (!call(tokens)) return std::nullopt;
    }
    return std::nullopt;
  }

 private:
  static std::vector<std::string_view> split(std::string_view text, char sep) {
    std::vector<std::string_view> out;
    int depth = 0;
    std::size_t start = 0;
    for (std::size_t i = 0; i <= text.size(); ++i) {
      if (i < text.size() && text[i] == '[') ++depth;
      if (i < text.size() && text[i] == ']') --depth;
      if (i == text.size() || (text[i] == sep && depth == 0)) {
        if (i > start) out.push_back(text.substr(start, i - start));
        start = i + 1;
      }
    }
    return out;
  }

  static std::optional<std::int64_t> integer(std::string_view text) {
    const std::string s(text);
    char* end = nullptr;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    if (s.empty() || end != s.c_str() + s.size()) return std::nullopt;
    return v;
  }

  /// "K" or "K.J": value K, or element J of it.
  std::optional<c10::IValue> ref(std::string_view text) const {
    const auto dot = text.find('.');
    const auto k = integer(text.substr(0, dot));
    if (!k || *k < 0 || *k >= static_cast<std::int64_t>(values_.size())) return std::nullopt;
    const c10::IValue& v = values_[static_cast<std::size_t>(*k)];
    if (dot == std::string_view::npos) return v;
    const auto j = integer(text.substr(dot + 1));
    if (!j || *j < 0) return std::nullopt;
    if (v.isTuple()) {
      const auto& items = v.toTupleRef().elements();
      if (*j < static_cast<std::int64_t>(items.size())) return items[static_cast<std::size_t>(*j)];
    } else if (v.isTensorList()) {
      const auto list = v.toTensorList();
      if (*j < static_cast<std::int64_t>(list.size())) return c10::IValue(list.get(*j));
    }
    return std::nullopt;
  }

  /// One argument for a schema type (optional types unwrapped). A number where a Tensor is
  /// declared (mul.Tensor(x, 8) in a graph) is a wrapped number, as Python passes it.
  std::optional<c10::IValue> arg(std::string_view tok, const c10::TypePtr& declared) const {
    if (tok.empty()) return std::nullopt;
    c10::TypePtr type = declared;
    if (auto opt = type->cast<c10::OptionalType>()) {
      if (tok == "n") return c10::IValue();
      type = opt->getElementType();
    }
    auto v = value(tok, type);
    if (v && (v->isInt() || v->isDouble() || v->isBool()) && type->kind() == c10::TypeKind::TensorType)
      return c10::IValue(at::native::wrapped_scalar_tensor(v->toScalar()));
    return v;
  }

  std::optional<c10::IValue> value(std::string_view tok, const c10::TypePtr& type) const {
    const std::string_view body = tok.substr(1);
    switch (tok[0]) {
      case 't':
        return ref(body);
      case 'n':
        return c10::IValue();
      case 'b':
        return c10::IValue(body == "1");
      case 'i': {
        auto v = integer(body);
        if (!v) return std::nullopt;
        return c10::IValue(*v);
      }
      case 'f': {
        const std::string s(body);
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (s.empty() || end != s.c_str() + s.size()) return std::nullopt;
        return c10::IValue(v);
      }
      case 'd': {  // a dtype: low precision is float32 in the re-run
        auto v = integer(body);
        if (!v) return std::nullopt;
        auto t = static_cast<c10::ScalarType>(*v);
        if (t == at::kHalf || t == at::kBFloat16 || c10::isFloat8Type(t)) t = at::kFloat;
        return c10::IValue(static_cast<std::int64_t>(t));
      }
      case 'v':
        return c10::IValue(c10::Device(std::string(body)));
      case 's':
        return c10::IValue(std::string(body));
      case '[':
        return list(tok, type);
      default:
        return std::nullopt;
    }
  }

  std::optional<c10::IValue> list(std::string_view tok, const c10::TypePtr& type) const {
    auto list_type = type->cast<c10::ListType>();
    if (!list_type || tok.size() < 2 || tok.back() != ']') return std::nullopt;
    const c10::TypePtr elem = list_type->getElementType();
    c10::impl::GenericList out(elem);
    for (std::string_view item : split(tok.substr(1, tok.size() - 2), ',')) {
      auto v = arg(item, elem);
      if (!v) return std::nullopt;
      out.push_back(std::move(*v));
    }
    return c10::IValue(std::move(out));
  }

  bool call(const std::vector<std::string_view>& tokens) {
    const std::string_view op = tokens[0];
    const auto dot = op.rfind('.');
    if (dot == std::string_view::npos) return false;
    std::string overload(op.substr(dot + 1));
    if (overload == "default") overload.clear();  // Python's name for the unnamed overload
    auto handle = c10::Dispatcher::singleton().findOp(
        c10::OperatorName(std::string(op.substr(0, dot)), std::move(overload)));
    if (!handle) return false;
    const auto& args = handle->schema().arguments();
    if (args.size() != tokens.size() - 1) return false;
    torch::jit::Stack stack;
    for (std::size_t i = 0; i < args.size(); ++i) {
      auto v = arg(tokens[i + 1], args[i].type());
      if (!v) return false;
      stack.push_back(std::move(*v));
    }
    handle->callBoxed(&stack);
    if (stack.size() == 1) {
      values_.push_back(std::move(stack[0]));
    } else {
      values_.push_back(c10::ivalue::Tuple::create(std::move(stack)));
    }
    return true;
  }

  std::vector<c10::IValue> values_;
};

}  // namespace

std::optional<bool> rerun_region_fp32(std::string_view program,
                                      const std::vector<c10::IValue>& inputs) {
  if (program.empty() || !all_readable(inputs)) return std::nullopt;
  try {
    OwnWork own;
    at::NoGradGuard no_grad;
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    RngGuard rng(inputs);
    RegionRunner runner(inputs);
    auto out = runner.run(program);
    if (!out || rng.consumed()) return std::nullopt;
    if (out->isTuple()) return any_nonfinite(out->toTupleRef().elements().vec());
    return any_nonfinite({*out});
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace ampscope::detail
