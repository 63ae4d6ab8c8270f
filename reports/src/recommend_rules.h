// What the rules of the recommendation engine share (internal to reports/src).
#pragma once

#include <ampscope/reports/report.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ampscope::reports {

/// What one rule proposes; the engine merges findings that share (layer, action).
struct Finding {
  std::string layer;
  std::string action;
  std::string severity;
  std::vector<std::string> reasons;
  nlohmann::json evidence = nlohmann::json::object();
};

using Findings = std::vector<Finding>;

namespace detail {
/// A double for evidence: null when not finite.
nlohmann::json num(double v);
}  // namespace detail

// Silent precision loss (recommend_silent.cpp).
/// Narrowing casts that turned a material share of finite values into 0 or inf.
void cast_loss_rule(const Report& r, Findings& out);
/// Low-precision ops whose output was (almost) all zeros where float32 was not.
void degenerate_output_rule(const Report& r, Findings& out);
/// float16/bfloat16 parameters whose updates rounding swallowed.
void stale_updates_rule(const Report& r, Findings& out);

}  // namespace ampscope::reports
