// The phase of a training step an op ran in, and what autocast did to it: the enums the
// observer keys its entries by, and their names in report.json, in one table each. Plain C++.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace ampscope {

/// Phase of the training step an op call belongs to.
/// kSetup: before the first forward of the run (model construction, initialisation);
/// kBetween: after a backward pass and before the optimizer step (clipping, unscaling).
enum class Phase : std::uint8_t { kForward = 0, kBackward, kOptimizer, kSetup, kBetween };
inline constexpr std::array<std::string_view, 5> kPhaseNames{"forward", "backward", "optimizer", "setup",
                                                             "between"};
/// "forward" | "backward" | "optimizer" | "setup" | "between".
constexpr std::string_view phase_name(Phase p) { return kPhaseNames[static_cast<std::size_t>(p)]; }

/// What autocast did to an op call.
enum class AutocastClass : std::uint8_t { kNone = 0, kLowerPrecision, kFp32, kPromote };
inline constexpr std::array<std::string_view, 4> kAutocastClassNames{"none", "lower_precision", "fp32", "promote"};
/// "none" | "lower_precision" | "fp32" | "promote".
constexpr std::string_view autocast_class_name(AutocastClass c) {
  return kAutocastClassNames[static_cast<std::size_t>(c)];
}

/// Whether `name` is one of `names`.
template <std::size_t N>
constexpr bool is_one_of(const std::array<std::string_view, N>& names, std::string_view name) {
  for (std::string_view n : names)
    if (n == name) return true;
  return false;
}

}  // namespace ampscope
