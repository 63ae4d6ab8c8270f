// report.json and stats blocks <-> the report model. Readers validate schema and types and throw
// ReportError with a stable id and a message that says what is wrong and where.
#pragma once

#include <ampscope/reports/report.h>

#include <stdexcept>
#include <string>

namespace ampscope::reports {

/// A report or precision-map file that cannot be used. `id()` is a stable identifier such as
/// "report.missing", "report.empty", "report.parse", "report.schema", "report.type",
/// "report.directory"; what() is one line naming the file and the place in it.
class ReportError : public std::runtime_error {
 public:
  ReportError(std::string id, const std::string& message);
  const std::string& id() const { return id_; }

 private:
  std::string id_;
};

/// The SPEC stats object (mean and rms derived; exp_hist as {"<exp>": count}).
nlohmann::json stats_to_json(const Stats& s);
/// Parses a stats object; `where` names it in error messages (e.g. "layers[3].ops[0].stats").
Stats stats_from_json(const nlohmann::json& j, const std::string& where);

/// The whole report as JSON (schema ampscope.report/1).
nlohmann::json report_to_json(const Report& r);
/// Parses and validates a report; throws ReportError.
Report report_from_json(const nlohmann::json& j);

/// Reads and validates a report file; throws ReportError (missing, directory, empty, truncated,
/// not JSON, wrong schema, wrong types).
Report read_report(const std::string& path);
/// The report file's text (compact JSON and a newline).
std::string report_text(const Report& r);
/// Writes the report as JSON, atomically (temp file in the same folder + rename).
void write_report(const Report& r, const std::string& path);
/// Writes `content` to `path` atomically; throws std::runtime_error naming the path on failure.
void write_file_atomic(const std::string& path, const std::string& content);
/// Reads a whole file as JSON, with the same error ids as read_report (prefix `what`, e.g.
/// "report" or "precision_map"). Only regular files are read (a FIFO or device is refused, never
/// waited on); a UTF-8 byte-order mark is skipped; nesting deeper than kMaxJsonDepth is refused.
nlohmann::json read_json_file(const std::string& path, const std::string& what);
/// Parses JSON text under the same rules as read_json_file; `where` (a file name) starts every
/// message.
nlohmann::json parse_json_text(const std::string& text, const std::string& where, const std::string& what);
/// Deepest nesting of arrays/objects a report or map may have (reports need about 8).
inline constexpr int kMaxJsonDepth = 64;

}  // namespace ampscope::reports
