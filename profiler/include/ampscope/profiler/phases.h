// The phase of a training step an op ran in, and what autocast did to it: the enums the
// observer keys its entries by and the report model stores, and their names in report.json, in
// one table each (name_of / from_name: named_enum.h). Plain C++.
#pragma once

#include <ampscope/profiler/named_enum.h>

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
constexpr const auto& enum_names(Phase) { return kPhaseNames; }

/// What autocast did to an op call.
enum class AutocastClass : std::uint8_t { kNone = 0, kLowerPrecision, kFp32, kPromote };
inline constexpr std::array<std::string_view, 4> kAutocastClassNames{"none", "lower_precision", "fp32", "promote"};
constexpr const auto& enum_names(AutocastClass) { return kAutocastClassNames; }

/// nlohmann's hook (json j = phase;): the name, never the number.
template <typename BasicJson>
void to_json(BasicJson& j, Phase p) { j = std::string(name_of(p)); }
template <typename BasicJson>
void to_json(BasicJson& j, AutocastClass c) { j = std::string(name_of(c)); }

}  // namespace ampscope
