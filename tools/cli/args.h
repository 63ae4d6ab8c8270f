// A small command-line parser for the ampscope CLI: options with values, flags, positionals,
// and one error type that main() turns into "ampscope: error: ..." with exit code 2.
#pragma once

#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace ampscope::cli {

/// Bad usage or unusable input: printed as one line, exit code 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Args {
 public:
  /// Parses `argv` against the options that take a value and the flags a command accepts.
  /// "--" ends option parsing; everything after it lands in rest().
  Args(const std::vector<std::string>& argv, const std::set<std::string>& valued,
       const std::set<std::string>& flags, const std::string& command) {
    for (std::size_t i = 0; i < argv.size(); ++i) {
      const std::string& a = argv[i];
      if (a == "--") {
        rest_.assign(argv.begin() + static_cast<long>(i) + 1, argv.end());
        break;
      }
      if (a == "-h" || a == "--help") {
        help_ = true;
      } else if (valued.count(a)) {
        if (i + 1 >= argv.size()) throw UsageError(command + ": " + a + " needs a value");
        values_[a] = argv[++i];
      } else if (flags.count(a)) {
        flags_.insert(a);
      } else if (a.size() > 1 && a[0] == '-') {
        throw UsageError(command + ": unknown option '" + a + "' (see ampscope " + command +
                         " --help)");
      } else {
        positional_.push_back(a);
      }
    }
  }
  bool help() const { return help_; }
  bool flag(const std::string& f) const { return flags_.count(f) > 0; }
  bool has(const std::string& o) const { return values_.count(o) > 0; }
  std::string value(const std::string& o, const std::string& fallback = "") const {
    auto it = values_.find(o);
    return it == values_.end() ? fallback : it->second;
  }
  /// An integer option in [lo, hi].
  int int_value(const std::string& o, int fallback, int lo, int hi) const {
    if (!has(o)) return fallback;
    const std::string& v = values_.at(o);
    std::size_t used = 0;
    long n = 0;
    try {
      n = std::stol(v, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != v.size() || v.empty() || n < lo || n > hi) {
      throw UsageError(o + " must be an integer in [" + std::to_string(lo) + ", " +
                       std::to_string(hi) + "], got '" + v + "'");
    }
    return static_cast<int>(n);
  }
  const std::vector<std::string>& positional() const { return positional_; }
  const std::vector<std::string>& rest() const { return rest_; }
  /// Exactly `n` positionals, or a usage error naming what is expected.
  void expect_positional(std::size_t n, const std::string& what) const {
    if (positional_.size() != n) throw UsageError("expected " + what);
  }

 private:
  bool help_ = false;
  std::map<std::string, std::string> values_;
  std::set<std::string> flags_;
  std::vector<std::string> positional_;
  std::vector<std::string> rest_;
};

}  // namespace ampscope::cli
