// precision_map.json (schema ampscope.precision_map/1): the layers to pin to float32 and why.
#pragma once

#include <ampscope/reports/report.h>

#include <map>
#include <string>
#include <vector>

namespace ampscope::reports {

struct PrecisionMap {
  std::vector<std::string> pin_fp32;                       ///< layer names, in rank order
  std::map<std::string, std::vector<std::string>> why;     ///< layer -> reason codes
};

/// The pins of every `pin_fp32` recommendation at or above `min_severity`.
PrecisionMap precision_map_from(const std::vector<Recommendation>& recs,
                                const std::string& min_severity = "low");
nlohmann::json precision_map_to_json(const PrecisionMap& m);
/// Parses and validates; throws ReportError with ids "precision_map.*".
PrecisionMap precision_map_from_json(const nlohmann::json& j);
/// Reads a precision-map file; throws ReportError.
PrecisionMap read_precision_map(const std::string& path);
/// The map file's text (indented JSON and a newline).
std::string precision_map_text(const PrecisionMap& m);
/// Writes atomically.
void write_precision_map(const PrecisionMap& m, const std::string& path);

}  // namespace ampscope::reports
