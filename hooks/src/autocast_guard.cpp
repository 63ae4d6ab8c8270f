#include <ampscope/hooks/autocast_guard.h>

#include <ATen/autocast_mode.h>

#include <stdexcept>
#include <string>

namespace ampscope {
namespace {

/// torch.autocast's checks, as errors: autocast exists for the device type, and the dtype is
/// float16 or bfloat16 (CUDA also takes float32).
c10::DeviceType checked(c10::DeviceType device, c10::ScalarType dtype, bool enabled) {
  if (!enabled) return device;
  if (!at::autocast::is_autocast_available(device)) {
    throw std::invalid_argument("ampscope::AutocastGuard: autocast is not available for device "
                                "type " + c10::DeviceTypeName(device, /*lower_case=*/true));
  }
  bool ok = dtype == at::kHalf || dtype == at::kBFloat16 ||
            (device == c10::DeviceType::CUDA && dtype == at::kFloat);
  if (!ok) {
    throw std::invalid_argument(std::string("ampscope::AutocastGuard: ") +
                                c10::DeviceTypeName(device, true) + " autocast supports float16 "
                                "and bfloat16, not " + c10::toString(dtype));
  }
  return device;
}

}  // namespace

AutocastGuard::AutocastGuard(c10::DeviceType device, c10::ScalarType dtype, bool enabled)
    : device_(checked(device, dtype, enabled)),
      prev_enabled_(at::autocast::is_autocast_enabled(device)),
      prev_dtype_(at::autocast::get_autocast_dtype(device)) {
  at::autocast::set_autocast_enabled(device_, enabled);
  at::autocast::set_autocast_dtype(device_, dtype);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(device_, prev_enabled_);
  at::autocast::set_autocast_dtype(device_, prev_dtype_);
}

}  // namespace ampscope
