// The JSON plumbing of the report files: a path-tracking reader (Obj: every error names the
// JSON path of the offending value, "layers[2].ops[0].calls", under a stable ReportError id) and
// the two field visitors that let each report type list its fields once (report_fields.h):
// FieldWriter puts them into an ordered_json in the listed order, FieldReader reads them back
// with their presence rules and defaults. Internal to reports/.
#pragma once

#include <ampscope/reports/report_json.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>
#include <vector>

namespace ampscope::reports::json_io {

using ojson = nlohmann::ordered_json;
using json = nlohmann::json;

/// Like one_line, but also replaces non-ASCII bytes: for text quoted from a corrupt file.
inline std::string printable(const std::string& s, std::size_t max_len = 200) {
  std::string out;
  for (unsigned char c : s) {
    if (out.size() >= max_len) {
      out += "...";
      break;
    }
    out.push_back(c >= 0x20 && c < 0x7f ? static_cast<char>(c) : '?');
  }
  return out;
}

/// "integer", "number", "string", ... as a reader would say it.
inline std::string kind_of(const json& j) {
  if (j.is_number_integer()) return "integer";  // also true for unsigned
  if (j.is_number_float()) return "number";
  return j.type_name();
}

[[noreturn]] inline void type_error(const std::string& where, const std::string& expected, const json& got) {
  throw ReportError("report.type", where + ": expected " + expected + ", got " + kind_of(got));
}

[[noreturn]] inline void value_error(const std::string& where, const std::string& what) {
  throw ReportError("report.value", where + ": " + what);
}

inline std::string child(const std::string& where, const std::string& key) {
  return where.empty() ? key : where + "." + key;
}

inline std::string index(const std::string& where, std::size_t i) {
  return where + "[" + std::to_string(i) + "]";
}

/// An object-typed value's fields, looked up with presence checks.
class Obj {
 public:
  Obj(const json& j, std::string where) : j_(j), where_(std::move(where)) {
    if (!j_.is_object()) type_error(where_.empty() ? "(top level)" : where_, "object", j_);
  }
  const std::string& where() const { return where_; }
  std::string path(const std::string& key) const { return child(where_, key); }
  /// The field, or nullptr when absent.
  const json* find(const std::string& key) const {
    auto it = j_.find(key);
    return it == j_.end() ? nullptr : &*it;
  }
  const json& need(const std::string& key) const {
    const json* v = find(key);
    if (!v)
      throw ReportError("report.type", (where_.empty() ? std::string("(top level)") : where_) +
                                           ": missing required field \"" + key + "\"");
    return *v;
  }

  std::int64_t int64(const std::string& key) const { return as_int64(need(key), path(key)); }
  std::int64_t int64_or(const std::string& key, std::int64_t def) const {
    const json* v = find(key);
    return v && !v->is_null() ? as_int64(*v, path(key)) : def;
  }
  int int32(const std::string& key) const { return narrow(int64(key), path(key)); }
  int int32_or(const std::string& key, int def) const { return narrow(int64_or(key, def), path(key)); }
  /// A number; null reads as `if_null` (writers put null for NaN/inf).
  double number(const std::string& key, double if_null) const {
    return as_number(need(key), path(key), if_null);
  }
  double number_or(const std::string& key, double def, double if_null) const {
    const json* v = find(key);
    return v ? as_number(*v, path(key), if_null) : def;
  }
  std::string str(const std::string& key) const { return as_string(need(key), path(key)); }
  std::string str_or(const std::string& key, const std::string& def) const {
    const json* v = find(key);
    return v && !v->is_null() ? as_string(*v, path(key)) : def;
  }
  bool boolean(const std::string& key) const {
    const json& v = need(key);
    if (!v.is_boolean()) type_error(path(key), "boolean", v);
    return v.get<bool>();
  }
  bool boolean_or(const std::string& key, bool def) const {
    const json* v = find(key);
    if (!v || v->is_null()) return def;
    if (!v->is_boolean()) type_error(path(key), "boolean", *v);
    return v->get<bool>();
  }
  const json& array(const std::string& key) const {
    const json& v = need(key);
    if (!v.is_array()) type_error(path(key), "array", v);
    return v;
  }
  /// The array, or nullptr when absent or null.
  const json* array_or_null(const std::string& key) const {
    const json* v = find(key);
    if (!v || v->is_null()) return nullptr;
    if (!v->is_array()) type_error(path(key), "array", *v);
    return v;
  }

  static std::int64_t as_int64(const json& v, const std::string& where) {
    if (v.is_number_unsigned()) {
      if (v.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        value_error(where, "integer out of range");
      return static_cast<std::int64_t>(v.get<std::uint64_t>());
    }
    if (!v.is_number_integer()) type_error(where, "integer", v);
    return v.get<std::int64_t>();
  }
  static double as_number(const json& v, const std::string& where, double if_null) {
    if (v.is_null()) return if_null;
    if (!v.is_number()) type_error(where, "number", v);
    return v.get<double>();
  }
  static std::string as_string(const json& v, const std::string& where) {
    if (!v.is_string()) type_error(where, "string", v);
    return v.get<std::string>();
  }

 private:
  static int narrow(std::int64_t v, const std::string& where) {
    if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
      value_error(where, "integer out of range");
    return static_cast<int>(v);
  }

  const json& j_;
  std::string where_;
};

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
inline constexpr double kInf = std::numeric_limits<double>::infinity();

inline void check_one_of(const std::string& value, std::initializer_list<const char*> allowed,
                  const std::string& where) {
  for (const char* a : allowed)
    if (value == a) return;
  std::string list;
  for (const char* a : allowed) list += (list.empty() ? "" : "|") + std::string(a);
  value_error(where, "expected one of " + list + ", got \"" + printable(value, 60) + "\"");
}

/// A negative count is a corrupt file.
inline void check_counts(std::initializer_list<std::int64_t> counts, const std::string& where) {
  for (std::int64_t c : counts)
    if (c < 0) value_error(where, "negative count");
}

/// A double as JSON: null when it is NaN or infinite (JSON has no such numbers).
inline ojson num(double v) { return std::isfinite(v) ? ojson(v) : ojson(nullptr); }

// A record as an ordered JSON object / the record at a JSON path (report_fields.h).
template <typename T>
ojson to_ojson(const T& v);
template <typename T>
T from_json_at(const json& j, const std::string& where);

/// When a field whose value is empty is written: always, as null, or not at all.
enum class Empty { kWrite, kNull, kOmit };

/// Writes the fields a type lists, in that order.
class FieldWriter {
 public:
  explicit FieldWriter(ojson& out) : out_(out) {}
  template <typename T>
  void req(const char* key, const T& v) { out_[key] = v; }
  template <typename T, typename D>
  void opt(const char* key, const T& v, const D&) { out_[key] = v; }
  /// A number written as null when not finite; read back as `if_null`.
  void number(const char* key, double v, double /*def*/, double /*if_null*/) { out_[key] = num(v); }
  void number_req(const char* key, double v, double /*if_null*/) { out_[key] = num(v); }
  /// Written only (derived again on reading): `make()` gives its value.
  template <typename Make>
  void derived(const char* key, Make make) { out_[key] = make(); }
  /// A field written only when `write` (host_syncs when traced, aliases when any); read like opt().
  template <typename T, typename D>
  void opt_if(const char* key, const T& v, const D&, bool write) {
    if (write) out_[key] = v;
  }
  /// A nested record, required.
  template <typename T>
  void record(const char* key, const T& v) { out_[key] = to_ojson(v); }
  /// A nested record written only when `write`; read when present and not null.
  template <typename T>
  void record_if(const char* key, const T& v, bool write) {
    if (write) out_[key] = to_ojson(v);
  }
  /// An optional record: absent as null or omitted (`empty`).
  template <typename T>
  void maybe(const char* key, const std::optional<T>& v, Empty empty) {
    if (v) out_[key] = to_ojson(*v);
    else if (empty == Empty::kNull) out_[key] = nullptr;
  }
  /// An optional record that is always written (null when absent) and must be there on reading.
  template <typename T>
  void maybe_req(const char* key, const std::optional<T>& v) { out_[key] = v ? to_ojson(*v) : ojson(nullptr); }
  /// A list that must be there on reading.
  template <typename Item>
  void list_req(const char* key, const std::vector<Item>& items) { list(key, items); }
  /// Free-form JSON (an object), written as it is.
  void object(const char* key, const json& v) { out_[key] = ojson(v); }
  /// An enum written as its name (name_of).
  template <typename E>
  void named(const char* key, E v) { out_[key] = std::string(name_of(v)); }
  /// An enum that falls back to `def` on reading when absent.
  template <typename E>
  void named_or(const char* key, E v, E /*def*/) { named(key, v); }
  /// A required boolean that may be null (not known).
  void maybe_bool(const char* key, const std::optional<bool>& v) { out_[key] = v ? ojson(*v) : ojson(nullptr); }
  /// An optional value (a number as number()): written only when present; read when present and
  /// not null.
  template <typename T>
  void maybe_value(const char* key, const std::optional<T>& v) {
    if (v) out_[key] = value(*v);
  }
  /// An optional value written as null when absent; read as maybe_value().
  template <typename T>
  void nullable(const char* key, const std::optional<T>& v) { out_[key] = v ? value(*v) : ojson(nullptr); }
  template <typename Item>
  void list(const char* key, const std::vector<Item>& items, Empty empty = Empty::kWrite) {
    if (items.empty() && empty == Empty::kOmit) return;
    ojson a = ojson::array();
    for (const Item& i : items) a.push_back(to_ojson(i));
    out_[key] = std::move(a);
  }
  /// [[step, value], ...] with values as number().
  void series(const char* key, const std::vector<std::pair<std::int64_t, double>>& v) {
    ojson a = ojson::array();
    for (const auto& [step, value] : v) a.push_back(ojson::array({step, num(value)}));
    out_[key] = std::move(a);
  }

 private:
  static ojson value(double v) { return num(v); }
  template <typename T>
  static ojson value(const T& v) { return ojson(v); }
  ojson& out_;
};

/// Reads the fields a type lists: req() must be there, opt() falls back to its default when
/// absent (or null), number() reads null as `if_null`.
class FieldReader {
 public:
  explicit FieldReader(const Obj& o) : o_(o) {}
  void req(const char* key, std::string& v) { v = o_.str(key); }
  void req(const char* key, std::int64_t& v) { v = o_.int64(key); }
  void req(const char* key, int& v) { v = o_.int32(key); }
  void req(const char* key, bool& v) { v = o_.boolean(key); }
  void req(const char* key, std::vector<std::string>& v) { v = string_list(o_.array(key), o_.path(key)); }
  void opt(const char* key, std::string& v, const std::string& def) { v = o_.str_or(key, def); }
  void opt(const char* key, std::int64_t& v, std::int64_t def) { v = o_.int64_or(key, def); }
  void opt(const char* key, int& v, int def) { v = o_.int32_or(key, def); }
  void opt(const char* key, bool& v, bool def) { v = o_.boolean_or(key, def); }
  void opt(const char* key, std::vector<std::string>& v, const std::vector<std::string>& def) {
    const json* a = o_.array_or_null(key);
    v = a ? string_list(*a, o_.path(key)) : def;
  }
  void number(const char* key, double& v, double def, double if_null) { v = o_.number_or(key, def, if_null); }
  void number_req(const char* key, double& v, double if_null) { v = o_.number(key, if_null); }
  template <typename Make>
  void derived(const char*, Make) {}
  template <typename T, typename D>
  void opt_if(const char* key, T& v, const D& def, bool) { opt(key, v, def); }
  template <typename T>
  void record(const char* key, T& v) { v = from_json_at<T>(o_.need(key), o_.path(key)); }
  template <typename T>
  void record_if(const char* key, T& v, bool) {
    if (const json* j = o_.find(key); j && !j->is_null()) v = from_json_at<T>(*j, o_.path(key));
  }
  template <typename T>
  void maybe(const char* key, std::optional<T>& v, Empty) {
    v.reset();
    if (const json* j = o_.find(key); j && !j->is_null()) v = from_json_at<T>(*j, o_.path(key));
  }
  template <typename T>
  void maybe_req(const char* key, std::optional<T>& v) {
    const json& j = o_.need(key);
    v.reset();
    if (!j.is_null()) v = from_json_at<T>(j, o_.path(key));
  }
  template <typename Item>
  void list_req(const char* key, std::vector<Item>& items) {
    o_.array(key);  // there, and an array
    list(key, items);
  }
  void object(const char* key, json& v) {
    const json* j = o_.find(key);
    if (!j || j->is_null()) return;
    if (!j->is_object()) type_error(o_.path(key), "object", *j);
    v = *j;
  }
  template <typename E>
  void named(const char* key, E& v) {
    const std::string s = o_.str(key);
    if (!from_name(s, &v))
      value_error(o_.path(key), "expected one of " + names_of(v) + ", got \"" + printable(s, 60) + "\"");
  }
  template <typename T>
  void maybe_value(const char* key, std::optional<T>& v) {
    v.reset();
    if (const json* j = o_.find(key); j && !j->is_null()) v = value<T>(key);
  }
  template <typename T>
  void nullable(const char* key, std::optional<T>& v) { maybe_value(key, v); }
  template <typename E>
  void named_or(const char* key, E& v, E def) {
    v = def;
    if (const json* j = o_.find(key); j && !j->is_null()) named(key, v);
  }
  void maybe_bool(const char* key, std::optional<bool>& v) {
    const json& j = o_.need(key);
    v.reset();
    if (j.is_boolean()) v = j.get<bool>();
    else if (!j.is_null()) type_error(o_.path(key), "boolean or null", j);
  }
  template <typename Item>
  void list(const char* key, std::vector<Item>& items, Empty = Empty::kWrite) {
    items.clear();
    const json* a = o_.array_or_null(key);
    if (!a) return;
    for (std::size_t i = 0; i < a->size(); ++i) items.push_back(from_json_at<Item>((*a)[i], index(o_.path(key), i)));
  }
  void series(const char* key, std::vector<std::pair<std::int64_t, double>>& v) {
    v.clear();
    const json* a = o_.array_or_null(key);
    if (!a) return;
    const std::string where = o_.path(key);
    for (std::size_t i = 0; i < a->size(); ++i) {
      const json& pt = (*a)[i];
      const std::string pw = index(where, i);
      if (!pt.is_array() || pt.size() != 2) type_error(pw, "[step, absmax] pair", pt);
      v.emplace_back(Obj::as_int64(pt[0], pw + "[0]"), Obj::as_number(pt[1], pw + "[1]", kNaN));
    }
  }

 private:
  /// The value at `key`, which is there and not null.
  template <typename T>
  T value(const char* key) const {
    if constexpr (std::is_same_v<T, double>) return o_.number(key, kNaN);
    else if constexpr (std::is_same_v<T, bool>) return o_.boolean(key);
    else if constexpr (std::is_same_v<T, std::string>) return o_.str(key);
    else if constexpr (std::is_same_v<T, int>) return o_.int32(key);
    else return o_.int64(key);
  }
  static std::vector<std::string> string_list(const json& arr, const std::string& where) {
    std::vector<std::string> out;
    out.reserve(arr.size());
    for (std::size_t i = 0; i < arr.size(); ++i) out.push_back(Obj::as_string(arr[i], index(where, i)));
    return out;
  }
  const Obj& o_;
};

}  // namespace ampscope::reports::json_io
