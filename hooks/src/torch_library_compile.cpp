// torch.ops.ampscope.observe: the observation point python/ampscope/_compile.py inserts into
// graphs inductor compiles. It returns nothing and is registered as side-effecting on the Python
// side (torch.fx.node.has_side_effect), so neither FX nor inductor removes it; inductor calls it
// as a fallback kernel with the node's materialised value.
#include <ATen/ATen.h>
#include <ampscope/hooks/layers.h>
#include <ampscope/profiler/observer.h>
#include <torch/library.h>

#include <optional>
#include <string>

namespace ampscope {
namespace {

AutocastClass autocast_class(int64_t code) {
  switch (code) {
    case 1:
      return AutocastClass::kLowerPrecision;
    case 2:
      return AutocastClass::kFp32;
    case 3:
      return AutocastClass::kPromote;
    default:
      return AutocastClass::kNone;
  }
}

/// One observed node: `out` is its value, `deps` the nearest observed values or graph inputs it
/// came from. Names and dtypes are the graph's metadata (nn_module_stack, fwd_nn_module_stack).
/// `region`, when not empty, is the program of ATen calls computing `out` from `deps` (see
/// python/ampscope/_compile_region.py): the float32 re-check of a NaN/Inf made here runs it.
void observe(const at::Tensor& out, const std::vector<at::Tensor>& deps, std::string layer,
             std::string layer_type, std::string op, std::optional<at::ScalarType> input_dtype,
             int64_t autocast, bool module_output, const std::string& region) {
  if (!Observer::running()) return;  // a graph compiled while profiling, run after it
  CompiledPoint p;
  p.layer = layer_for_name(layer, layer_type);
  p.op = std::move(op);
  p.input_dtype = input_dtype ? static_cast<std::int8_t>(*input_dtype) : std::int8_t{-1};
  p.autocast = autocast_class(autocast);
  p.module_output = module_output;
  p.region = region;
  Observer::record_compiled(p, out, deps);
}

/// Fake and meta tensors (inductor's compile-time tracing): nothing to observe.
void observe_meta(const at::Tensor&, const std::vector<at::Tensor>&, std::string, std::string,
                  std::string, std::optional<at::ScalarType>, int64_t, bool, const std::string&) {}

}  // namespace
}  // namespace ampscope

TORCH_LIBRARY_FRAGMENT(ampscope, m) {
  m.def(
      "observe(Tensor out, Tensor[] deps, str layer, str layer_type, str op, "
      "ScalarType? input_dtype, int autocast, bool module_output, str region=\"\") -> ()");
}

TORCH_LIBRARY_IMPL(ampscope, CompositeExplicitAutograd, m) {
  m.impl("observe", &ampscope::observe);
}

TORCH_LIBRARY_IMPL(ampscope, Meta, m) { m.impl("observe", &ampscope::observe_meta); }
