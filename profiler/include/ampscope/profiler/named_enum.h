// Enums that are written as names (report.json, the summary, the HTML). Each such enum keeps
// its one table of names beside it and says so with an overload found by ADL:
//   inline constexpr std::array<std::string_view, 2> kColourNames{"red", "green"};
//   constexpr const auto& enum_names(Colour) { return kColourNames; }
// and gets name_of, from_name and names_of from here. Plain C++.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>

namespace ampscope {

/// E is an enum with an enum_names() table.
template <typename E>
using if_named_enum = std::enable_if_t<std::is_enum_v<E>, decltype(enum_names(E{}), void())>;

/// The name of `v` in its table.
template <typename E, typename = if_named_enum<E>>
constexpr std::string_view name_of(E v) {
  return enum_names(v)[static_cast<std::size_t>(v)];
}

/// The value called `name`; false (and *out unchanged) when there is none.
template <typename E, typename = if_named_enum<E>>
constexpr bool from_name(std::string_view name, E* out) {
  const auto& names = enum_names(E{});
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) {
      *out = static_cast<E>(i);
      return true;
    }
  }
  return false;
}

/// The names an enum's JSON may hold, "|"-joined ("critical|high|medium|low").
template <typename E, typename = if_named_enum<E>>
std::string names_of(E) {
  std::string s;
  for (std::string_view n : enum_names(E{})) s += (s.empty() ? "" : "|") + std::string(n);
  return s;
}

}  // namespace ampscope
