// precision_map.json (schema ampscope.precision_map/1): which layers to pin to float32, and why.

#include <ampscope/reports/precision_map.h>

#include <ampscope/reports/recommend.h>
#include <ampscope/reports/report_json.h>

#include <algorithm>
#include <stdexcept>

namespace ampscope::reports {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

PrecisionMap precision_map_from(const std::vector<Recommendation>& recs,
                                const std::string& min_severity) {
  const int min_rank = severity_rank(min_severity);
  if (min_rank < 0)
    throw std::invalid_argument("unknown severity \"" + min_severity +
                                "\" (expected critical, high, medium or low)");
  PrecisionMap m;
  for (const Recommendation& r : recs) {
    if (r.action != Action::kPinFp32 || severity_rank(r.severity) < min_rank) continue;
    // "<outside>" collects ops that ran outside every attached module: the report shows its
    // recommendation to the user, but there is no module to pin, so it never enters the map.
    if (r.layer == kOutsideLayer) continue;
    if (std::find(m.pin_fp32.begin(), m.pin_fp32.end(), r.layer) == m.pin_fp32.end())
      m.pin_fp32.push_back(r.layer);
    auto& why = m.why[r.layer];
    for (const std::string& reason : r.reasons)
      if (std::find(why.begin(), why.end(), reason) == why.end()) why.push_back(reason);
  }
  return m;
}

namespace {

ojson to_ojson(const PrecisionMap& m) {
  ojson o = ojson::object();
  o["schema"] = kPrecisionMapSchema;
  o["pin_fp32"] = m.pin_fp32;
  ojson why = ojson::object();
  for (const auto& [layer, codes] : m.why) why[layer] = codes;
  o["why"] = std::move(why);
  return o;
}

std::string kind_of(const json& j) {
  if (j.is_number_integer()) return "integer";
  if (j.is_number_float()) return "number";
  return j.type_name();
}

[[noreturn]] void type_error(const std::string& where, const std::string& expected,
                             const json& got) {
  throw ReportError("precision_map.type", where + ": expected " + expected + ", got " + kind_of(got));
}

std::vector<std::string> strings(const json& arr, const std::string& where) {
  if (!arr.is_array()) type_error(where, "array of strings", arr);
  std::vector<std::string> out;
  for (std::size_t i = 0; i < arr.size(); ++i) {
    if (!arr[i].is_string()) type_error(where + "[" + std::to_string(i) + "]", "string", arr[i]);
    out.push_back(arr[i].get<std::string>());
  }
  return out;
}

/// A map key quoted for a message, kept printable.
std::string quoted(const std::string& key) {
  std::string out = "\"";
  for (unsigned char c : key.substr(0, 80)) out.push_back(c >= 0x20 && c < 0x7f ? static_cast<char>(c) : '?');
  return out + "\"";
}

}  // namespace

json precision_map_to_json(const PrecisionMap& m) { return json(to_ojson(m)); }

PrecisionMap precision_map_from_json(const json& j) {
  if (!j.is_object())
    throw ReportError("precision_map.schema",
                      std::string("expected a JSON object with \"schema\": \"") +
                          kPrecisionMapSchema + "\", got " + kind_of(j));
  auto sit = j.find("schema");
  if (sit == j.end())
    throw ReportError("precision_map.schema", std::string("missing \"schema\" (expected \"") +
                                                  kPrecisionMapSchema + "\")");
  if (!sit->is_string() || sit->get<std::string>() != kPrecisionMapSchema)
    throw ReportError("precision_map.schema",
                      "schema is " + sit->dump(-1, ' ', true, json::error_handler_t::replace).substr(0, 80) +
                          ", expected \"" + kPrecisionMapSchema + "\"");
  PrecisionMap m;
  auto pit = j.find("pin_fp32");
  if (pit == j.end())
    throw ReportError("precision_map.type", "(top level): missing required field \"pin_fp32\"");
  m.pin_fp32 = strings(*pit, "pin_fp32");
  // "why" is explanatory: absent reads as no reasons.
  if (auto wit = j.find("why"); wit != j.end() && !wit->is_null()) {
    if (!wit->is_object()) type_error("why", "object", *wit);
    for (auto it = wit->begin(); it != wit->end(); ++it)
      m.why[it.key()] = strings(it.value(), "why." + quoted(it.key()));
  }
  return m;
}

PrecisionMap read_precision_map(const std::string& path) {
  const json j = read_json_file(path, "precision_map");
  try {
    return precision_map_from_json(j);
  } catch (const ReportError& e) {
    throw ReportError(e.id(), path + ": " + e.what());
  }
}

std::string precision_map_text(const PrecisionMap& m) {
  return to_ojson(m).dump(2, ' ', false, ojson::error_handler_t::replace) + "\n";
}

void write_precision_map(const PrecisionMap& m, const std::string& path) {
  write_file_atomic(path, precision_map_text(m));
}

}  // namespace ampscope::reports
