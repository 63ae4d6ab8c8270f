// An RAII autocast region for LibTorch, with the semantics of Python's torch.autocast.
#pragma once

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

namespace ampscope {

/// Enables (or disables) autocast for `device` with `dtype` while alive. Like torch.autocast:
/// nests, restores the previous state on exit, and clears the cast cache when the outermost
/// region exits. Thread-local, as autocast itself is. Works for any device type autocast has
/// (kCPU, kCUDA, ...): each has its own enabled flag and dtype, so a kCUDA guard leaves CPU ops
/// alone and vice versa. Throws std::invalid_argument (enabled only) for a device type without
/// autocast or a dtype other than float16/bfloat16 (CUDA: also float32).
class AutocastGuard {
 public:
  AutocastGuard(c10::DeviceType device, c10::ScalarType dtype, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  c10::DeviceType device_;
  bool prev_enabled_;
  c10::ScalarType prev_dtype_;
};

}  // namespace ampscope
