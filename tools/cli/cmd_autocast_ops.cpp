// ampscope autocast-ops: the ops that have an autocast kernel for a device in the linked torch,
// read from the dispatcher (not from a list of ours).
#include <ATen/autocast_mode.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/version.h>
#include <fmt/core.h>

#include <algorithm>
#include <map>

#include "args.h"
#include "commands.h"

namespace ampscope::cli {
namespace {

constexpr const char* kHelp = R"(usage: ampscope autocast-ops [--device cpu|cuda]

Lists the ops that have an autocast kernel for the device in the linked torch, read from its
dispatcher: the ops autocast may cast. Ops not listed run in the dtype of their inputs.
For cuda, the policy column comes from the linked torch's autocast_mode.h lists:
  lower_precision    cast to the autocast dtype (float16/bfloat16)
  fp32               cast to float32
  fp32_set_opt_dtype run in float32 through the op's dtype argument
  promote            run in the widest dtype of the inputs
CPU's policy lists are not exported by torch's headers: what each op did on CPU is recorded
per call in ampscope's report (the autocast field of each op).

  --device cpu|cuda   the autocast dispatch key to read (default: cpu)
)";

/// op base name (e.g. "aten::softmax") -> CUDA policy, from torch's own macro lists.
std::map<std::string, std::string> cuda_policies() {
  std::map<std::string, std::string> p;
#define AMPSCOPE_POLICY(name, policy) p.emplace(std::string("aten::") + #name, policy);
#define AMPSCOPE_LOWER(op, ...) AMPSCOPE_POLICY(op, "lower_precision")
#define AMPSCOPE_FP32(op, ...) AMPSCOPE_POLICY(op, "fp32")
#define AMPSCOPE_SET_OPT(op, ...) AMPSCOPE_POLICY(op, "fp32_set_opt_dtype")
#define AMPSCOPE_PROMOTE(op, ...) AMPSCOPE_POLICY(op, "promote")
  AT_FORALL_LOWER_PRECISION_FP(AMPSCOPE_LOWER)
  AT_FORALL_FP32(AMPSCOPE_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(AMPSCOPE_SET_OPT)
  AT_FORALL_PROMOTE(AMPSCOPE_PROMOTE)
#undef AMPSCOPE_LOWER
#undef AMPSCOPE_FP32
#undef AMPSCOPE_SET_OPT
#undef AMPSCOPE_PROMOTE
#undef AMPSCOPE_POLICY
  p.emplace("aten::norm", "fp32_append_dtype");
  return p;
}

}  // namespace

int cmd_autocast_ops(const Argv& argv) {
  Args a(argv, {"--device"}, {}, "autocast-ops");
  if (a.help()) return fmt::print("{}", kHelp), 0;
  if (!a.positional().empty()) throw UsageError("autocast-ops takes no positional arguments");
  std::string device = a.value("--device", "cpu");
  if (device != "cpu" && device != "cuda") {
    throw UsageError("--device must be cpu or cuda, got '" + device + "'");
  }
  auto key = device == "cuda" ? c10::DispatchKey::AutocastCUDA : c10::DispatchKey::AutocastCPU;
  auto& dispatcher = c10::Dispatcher::singleton();
  std::vector<std::pair<std::string, std::string>> ops;  // (name, overload)
  for (const auto& name : dispatcher.getAllOpNames()) {
    auto handle = dispatcher.findOp(name);
    if (handle && handle->hasKernelForDispatchKey(key)) ops.emplace_back(name.name, name.overload_name);
  }
  std::sort(ops.begin(), ops.end());
  auto policies = device == "cuda" ? cuda_policies() : std::map<std::string, std::string>{};
  fmt::print("{:<44} {:<24} {}\n", "op", "overload", device == "cuda" ? "policy" : "");
  for (const auto& [name, overload] : ops) {
    std::string policy;
    if (auto it = policies.find(name); it != policies.end()) policy = it->second;
    fmt::print("{:<44} {:<24} {}\n", name, overload.empty() ? "-" : overload, policy);
  }
  fmt::print("{} op overloads with an Autocast{} kernel in torch {}\n", ops.size(),
             device == "cuda" ? "CUDA" : "CPU", TORCH_VERSION);
  return 0;
}

}  // namespace ampscope::cli
