// The C++ watch of unsampled steps (detail::WatchFrame in layers.h): ampscope::forward calls
// check their outputs for NaN/Inf and replay the call that made them under the per-op
// sentinel. The Python front end does the same from module hooks (python/ampscope/_watch.py).
#include <ampscope/hooks/layers.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/module.h>

#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace ampscope::detail {
namespace {

thread_local WatchFrame* t_top = nullptr;  // the innermost ampscope::forward call on this thread

at::Tensor cpu_rng_state() {
  at::Generator g = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(g.mutex());
  return g.get_state();
}

void set_cpu_rng_state(const at::Tensor& state) {
  at::Generator g = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(g.mutex());
  g.set_state(state);
}

bool any_nan(const at::Tensor& t) {
  return t.defined() && t.is_floating_point() && at::isnan(t).any().item<bool>();
}

/// The registered type of a layer ("Linear"), or "module".
std::string type_of(LayerId id) {
  const auto layers = known_layers();
  const auto i = static_cast<std::size_t>(id);
  return id >= 0 && i < layers.size() ? layers[i].type : "module";
}

/// A module's buffers and their values before a replay: those the replay changed are put back
/// (found by value: batch_norm writes its running stats without a version bump).
class BufferValues {
 public:
  explicit BufferValues(torch::nn::Module& module) {
    for (const at::Tensor& b : module.buffers(/*recurse=*/true)) {
      if (b.defined()) kept_.push_back({b, b.detach().clone()});
    }
  }
  void restore_changed() {
    at::NoGradGuard no_grad;
    for (auto& k : kept_) {
      at::Tensor now = k.buffer.detach();  // shares the buffer's version counter
      if (at::equal(now, k.value)) continue;  // (NaN differs from itself: copied back as it was)
      // Autograd may have saved the buffer (batch_norm saves its running stats): the
      // training's own forward has not changed, so its version must not either.
      c10::VariableVersion version = now.unsafeGetTensorImpl()->version_counter();
      const auto before = version.current_version();
      now.copy_(k.value);
      if (version.enabled()) version.set_version(before);
    }
  }

 private:
  struct Kept {
    at::Tensor buffer;
    at::Tensor value;
  };
  std::vector<Kept> kept_;
};

}  // namespace

struct WatchFrame::Saved {
  at::Tensor rng;    // the CPU generator's state at the call's start
  bool nan = false;  // the output went NaN (not only Inf): for a replay that names no op
};

WatchFrame::WatchFrame(const torch::nn::Module& module, bool checkable) : parent_(t_top) {
  t_top = this;
  if (!checkable || !Observer::watching_now()) return;
  const WatchFrame* up = parent_;
  while (up != nullptr && !up->checked_) up = up->parent_;
  if (up != nullptr && module.children().empty()) return;  // a leaf under a checked call
  checked_ = true;
  enclosing_layer_ = Observer::current_layer();
  saved_ = std::make_unique<Saved>(Saved{cpu_rng_state()});
}

WatchFrame::~WatchFrame() { t_top = parent_; }

bool WatchFrame::tripped(const at::Tensor& output, const std::vector<at::Tensor>& inputs) {
  if (!checked_ || Observer::nonfinite_seen()) return false;  // unchecked, or origin known
  if (!child_trip_ && !Observer::any_nonfinite({output})) return false;
  if (!Observer::any_nonfinite(inputs)) {  // this call's own ops made them: replay it
    saved_->nan = any_nan(output);
    return true;
  }
  WatchFrame* up = parent_;
  while (up != nullptr && !up->checked_) up = up->parent_;
  if (up != nullptr) {
    up->child_trip_ = true;  // made before this call, by the enclosing call's own ops
  } else {
    Observer::note_unattributed(
        enclosing_layer_, "ops outside its ampscope::forward calls (not replayable from C++)",
        Phase::kForward, -1, any_nan(output));
  }
  return false;
}

void WatchFrame::replay(torch::nn::Module& module, const std::function<at::Tensor()>& again) {
  const at::Tensor after = cpu_rng_state();
  BufferValues buffers(module);
  const LayerId layer = find_layer(module);
  bool failed = false;
  Observer::begin_replay();
  try {
    set_cpu_rng_state(saved_->rng);
    const at::Tensor out = again();
    if (out.defined()) Observer::check_module_outputs({out});
  } catch (const std::exception&) {  // never disturb the training loop
    failed = true;
  }
  Observer::end_replay();
  set_cpu_rng_state(after);
  buffers.restore_changed();
  if (!Observer::nonfinite_seen()) {
    const std::string why = failed ? "the replay failed" : "not reproduced by a replay";
    Observer::note_unattributed(layer >= 0 ? layer : enclosing_layer_,
                                type_of(layer) + " output (" + why + ")", Phase::kForward, -1,
                                saved_->nan);
  }
}

at::Tensor replay_copy(const at::Tensor& t) { return t.defined() ? t.detach().clone() : t; }

}  // namespace ampscope::detail
