// Include/exclude filters by name pattern, for layers and ops (what a run records).
// Plain C++ (no torch): the observer, the CLI and tests share it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ampscope {

/// True when `name` matches the glob `pattern` ('*' any run of characters, '?' one character).
bool glob_match(std::string_view pattern, std::string_view name);

/// Which names a run records. A name is allowed when the include list is empty or one of its
/// patterns matches, and no exclude pattern matches. With `hierarchical` (layer names), a
/// pattern that matches a dotted prefix of the name matches the name too, so "blocks.1"
/// covers "blocks.1.ffn.wo".
struct NameFilter {
  std::vector<std::string> include;
  std::vector<std::string> exclude;
  bool hierarchical = false;

  /// True when the filter lets every name through.
  bool empty() const { return include.empty() && exclude.empty(); }
  /// True when `name` is recorded under this filter.
  bool allows(std::string_view name) const;
};

/// Splits "a,b,c" into patterns (empty items dropped).
std::vector<std::string> split_patterns(std::string_view list);

}  // namespace ampscope
