// What the rules of the recommendation engine share (internal to reports/src).
#pragma once

#include <ampscope/reports/evidence.h>
#include <ampscope/reports/report.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace ampscope::reports {

/// What one rule proposes; the engine merges findings that share (layer, action).
struct Finding {
  std::string layer;
  Action action = Action::kWatch;
  Severity severity = Severity::kLow;
  std::vector<std::string> reasons;
  nlohmann::json evidence = nlohmann::json::object();
};

using Findings = std::vector<Finding>;

/// One rule of the recommendation engine: what it looks for (run) and how the summary says
/// what it found in one line (one_line, given a recommendation's evidence: lines_of()).
struct Rule {
  const char* id;
  void (*run)(const Report& r, Findings& out);
  void (*one_line)(const nlohmann::json& evidence, std::vector<std::string>& lines);
};

/// A rule's one_line: `line` for each item of its evidence type Ev.
template <typename Ev, void (*line)(const Ev&, std::vector<std::string>&)>
void lines_of(const nlohmann::json& evidence, std::vector<std::string>& lines) {
  for (const Ev& ev : evidence_of<Ev>(evidence)) line(ev, lines);
}

/// Every rule, in the order the engine runs them (recommend.cpp).
const std::vector<Rule>& rules();

/// The largest finite value of a named low-precision format, or none when it is none of them.
std::optional<double> format_max_of(const std::string& dtype);

// NaN/Inf and where they came from (recommend_nonfinite.cpp).
/// The origin of the run's first harmful NaN/Inf (and of gradients a GradScaler caught).
void origin_rule(const Report& r, Findings& out);
void origin_line(const OriginEvidence& e, std::vector<std::string>& lines);
/// Ops computing in the run's low-precision dtype that made harmful NaN/Inf from finite inputs.
void lowp_op_rule(const Report& r, Findings& out);
void nonfinite_op_line(const NonfiniteOpEvidence& e, std::vector<std::string>& lines);

// Silent precision loss (recommend_silent.cpp).
/// Narrowing casts that turned a material share of finite values into 0 or inf.
void cast_loss_rule(const Report& r, Findings& out);
void cast_loss_line(const CastLossEvidence& ev, std::vector<std::string>& lines);
/// Low-precision ops whose output was (almost) all zeros where float32 was not.
void degenerate_output_rule(const Report& r, Findings& out);
void degenerate_output_line(const DegenerateEvidence& ev, std::vector<std::string>& lines);
/// float16/bfloat16 parameters whose updates rounding swallowed.
void stale_updates_rule(const Report& r, Findings& out);
void stale_updates_line(const StaleUpdateEvidence& ev, std::vector<std::string>& lines);

}  // namespace ampscope::reports
