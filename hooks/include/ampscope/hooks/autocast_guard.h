// An RAII autocast region for LibTorch, with the semantics of Python's torch.autocast.
#pragma once

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

namespace ampscope {

/// Enables (or disables) autocast for `device` with `dtype` while alive. Like torch.autocast:
/// nests, restores the previous state on exit, and clears the cast cache when the outermost
/// region exits. Thread-local, as autocast itself is.
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
