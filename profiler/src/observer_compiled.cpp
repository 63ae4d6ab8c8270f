// Observation points of compiled graphs: each one is recorded as a call of its node's op through
// a RecordFunction of its own, so the observer's callbacks treat it like a dispatcher op.
#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <ampscope/profiler/observer.h>

#include <mutex>
#include <string>
#include <unordered_set>

#include "compiled_point.h"

namespace ampscope {
namespace detail {
namespace {

/// A stable C string per op name: the observer caches op facts by name pointer.
const char* interned(const std::string& name) {
  static std::mutex mu;
  static auto* names = new std::unordered_set<std::string>();
  std::lock_guard<std::mutex> lock(mu);
  return names->insert(name).first->c_str();
}

/// Sets the thread's current point for a scope (restored on exit, also on exceptions).
struct PointScope {
  explicit PointScope(const CompiledPoint* p) : previous(current_point()) { current_point() = p; }
  ~PointScope() { current_point() = previous; }
  const CompiledPoint* previous;
};

/// Pushes the point's layer for a scope.
struct LayerPush {
  explicit LayerPush(LayerId id) { Observer::push_layer(id); }
  ~LayerPush() { Observer::pop_layer(); }
};

}  // namespace

const CompiledPoint*& current_point() {
  thread_local const CompiledPoint* point = nullptr;
  return point;
}

int& compiled_regions() {
  thread_local int depth = 0;
  return depth;
}

}  // namespace detail

void Observer::record_compiled(const CompiledPoint& point, const at::Tensor& output,
                               const std::vector<at::Tensor>& deps) {
  if (!running() || !output.defined()) return;
  {
    detail::LayerPush layer(point.layer);
    detail::PointScope scope(&point);
    std::vector<c10::IValue> inputs(deps.begin(), deps.end());  // outlives the record
    at::RecordFunction rf(at::RecordScope::FUNCTION);
    if (rf.isActive()) {
      rf.before(std::string_view(detail::interned(point.op)),
                c10::ArrayRef<const c10::IValue>(inputs.data(), inputs.size()));
      rf.setOutputs(std::vector<c10::IValue>{output});
    }
  }  // the record ends here: the observer folds the call into its entry
  if (point.module_output) check_module_outputs({output});
}

}  // namespace ampscope
