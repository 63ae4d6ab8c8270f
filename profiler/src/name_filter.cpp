#include <ampscope/profiler/name_filter.h>

namespace ampscope {

bool glob_match(std::string_view pattern, std::string_view name) {
  // Iterative matcher with one backtrack point: linear in practice, no recursion.
  std::size_t p = 0, n = 0, star = std::string_view::npos, mark = 0;
  while (n < name.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == name[n])) {
      ++p;
      ++n;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = n;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      n = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

namespace {

bool matches(const std::string& pattern, std::string_view name, bool hierarchical) {
  if (glob_match(pattern, name)) return true;
  if (!hierarchical) return false;
  for (std::size_t dot = name.find('.'); dot != std::string_view::npos;
       dot = name.find('.', dot + 1)) {
    if (glob_match(pattern, name.substr(0, dot))) return true;
  }
  return false;
}

bool any_matches(const std::vector<std::string>& patterns, std::string_view name, bool hier) {
  for (const auto& p : patterns) {
    if (matches(p, name, hier)) return true;
  }
  return false;
}

}  // namespace

bool NameFilter::allows(std::string_view name) const {
  if (!include.empty() && !any_matches(include, name, hierarchical)) return false;
  return !any_matches(exclude, name, hierarchical);
}

std::vector<std::string> split_patterns(std::string_view list) {
  std::vector<std::string> out;
  std::size_t p = 0;
  while (p <= list.size()) {
    auto q = list.find(',', p);
    if (q == std::string_view::npos) q = list.size();
    if (q > p) out.emplace_back(list.substr(p, q - p));
    p = q + 1;
  }
  return out;
}

}  // namespace ampscope
