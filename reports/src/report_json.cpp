// report.json <-> the report model, and the file helpers every reader and writer shares.
//
// Writing builds an nlohmann::ordered_json so the file keeps the SPEC's key order; the API type
// (nlohmann::json) is produced from it. Reading validates every field's presence and type and
// throws ReportError with the JSON path of the offending value ("layers[2].ops[0].calls").

#include <ampscope/reports/report_json.h>
#include <ampscope/reports/report_validate.h>
#include <ampscope/reports/what_if.h>

#include "json_fields.h"
#include "report_fields.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ampscope/reports/files.h>

#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <system_error>
#include <unistd.h>

namespace ampscope::reports {

using ojson = nlohmann::ordered_json;
using json = nlohmann::json;
using namespace json_io;

namespace {

/// Makes a message safe to print on one line: newlines and other control bytes become spaces.
std::string one_line(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) out.push_back(c < 0x20 || c == 0x7f ? ' ' : static_cast<char>(c));
  return out;
}

}  // namespace

ReportError::ReportError(std::string id, const std::string& message)
    : std::runtime_error(one_line(message)), id_(std::move(id)) {}

const Layer* Report::find_layer(const std::string& name) const {
  for (const Layer& l : layers)
    if (l.name == name) return &l;
  return nullptr;
}

// ---------------------------------------------------------------------------------------------
// Writing

namespace {

ojson format_counts(const std::array<std::int64_t, kNumFormats>& a) {
  ojson o = ojson::object();
  for (int i = 0; i < kNumFormats; ++i)
    o[std::string(format_name(static_cast<Format>(i)))] = a[static_cast<std::size_t>(i)];
  return o;
}

}  // namespace

namespace json_io {

namespace {

ojson what_if_counts(const WhatIfCounts& c) {
  ojson o = ojson::object();
  o["values"] = c.values;
  o["overflow"] = c.overflow;
  o["underflow"] = c.underflow;
  o["subnormal"] = c.subnormal;
  o["absmax"] = num(c.absmax);
  return o;
}

}  // namespace

ojson what_if_to_ojson(const Report& r) {
  ojson o = ojson::object();
  ojson formats = ojson::array();
  for (Format f : kWhatIfFormats) formats.push_back(std::string(format_name(f)));
  o["formats"] = std::move(formats);
  ojson rows = ojson::array();
  for (const WhatIfRow& row : what_if(r)) {
    ojson ro = ojson::object();
    ro["layer"] = row.layer;
    for (std::size_t i = 0; i < kWhatIfFormats.size(); ++i) {
      ojson fo = ojson::object();
      fo["verdict"] = what_if_verdict(row, i);
      fo["activations"] = what_if_counts(row.activations[i]);
      fo["gradients"] = what_if_counts(row.gradients[i]);
      fo["weights"] = what_if_counts(row.weights[i]);
      ro[std::string(format_name(kWhatIfFormats[i]))] = std::move(fo);
    }
    rows.push_back(std::move(ro));
  }
  o["layers"] = std::move(rows);
  return o;
}

template <>
ojson to_ojson<Stats>(const Stats& s) {
  ojson o = ojson::object();
  o["count"] = s.count;
  o["nan"] = s.nan;
  o["posinf"] = s.posinf;
  o["neginf"] = s.neginf;
  o["zeros"] = s.zeros;
  o["absmax"] = num(s.absmax);
  o["absmin_nonzero"] = num(s.absmin_nonzero);  // inf (no finite nonzero value) -> null
  o["mean"] = num(s.mean());
  o["rms"] = num(s.rms());
  ojson h = ojson::object();
  if (!s.exp_hist.empty())
    for (int e = s.exp_hist.lo(); e < s.exp_hist.hi(); ++e)
      if (std::int64_t n = s.exp_hist.at(e); n != 0) h[std::to_string(e)] = n;
  o["exp_hist"] = std::move(h);
  o["overflow"] = format_counts(s.overflow);
  o["underflow"] = format_counts(s.underflow);
  o["subnormal"] = format_counts(s.subnormal);
  return o;
}

}  // namespace json_io

json stats_to_json(const Stats& s) { return json(to_ojson(s)); }

json report_to_json(const Report& r) { return json(to_ojson(r)); }

// ---------------------------------------------------------------------------------------------
// Reading

namespace {

void read_format_counts(const Obj& parent, const std::string& key,
                        std::array<std::int64_t, kNumFormats>& out) {
  Obj o(parent.need(key), parent.path(key));
  out.fill(0);
  // Formats this version does not know are ignored; formats missing from the file count 0.
  for (int i = 0; i < kNumFormats; ++i) {
    const std::string name(format_name(static_cast<Format>(i)));
    out[static_cast<std::size_t>(i)] = o.int64_or(name, 0);
    if (out[static_cast<std::size_t>(i)] < 0) value_error(o.path(name), "negative count");
  }
}

}  // namespace

Stats stats_from_json(const json& j, const std::string& where) {
  Obj o(j, where);
  Stats s;
  s.count = o.int64("count");
  s.nan = o.int64("nan");
  s.posinf = o.int64("posinf");
  s.neginf = o.int64("neginf");
  s.zeros = o.int64("zeros");
  for (const char* k : {"count", "nan", "posinf", "neginf", "zeros"})
    if (o.int64(k) < 0) value_error(o.path(k), "negative count");
  if (s.nan + s.posinf + s.neginf > s.count)
    value_error(where, "nan + posinf + neginf exceeds count");
  s.absmax = o.number("absmax", kNaN);
  s.absmin_nonzero = o.number("absmin_nonzero", kInf);  // null: no finite nonzero value
  const double mean = o.number("mean", kNaN);
  const double rms = o.number("rms", kInf);  // rms only goes non-finite by overflowing
  const auto finite = static_cast<double>(s.finite());
  s.sum = mean * finite;
  s.sum_sq = rms * rms * finite;
  if (s.finite() == 0) s.sum = s.sum_sq = 0.0;
  {
    const std::string hw = o.path("exp_hist");
    Obj h(o.need("exp_hist"), hw);
    for (const auto& [key, value] : o.need("exp_hist").items()) {
      const std::string kw = hw + "." + printable(key, 40);
      char* end = nullptr;
      errno = 0;
      const long e = std::strtol(key.c_str(), &end, 10);
      // Canonical integers only ("-3", "12"): "+3", "03" or " 3" are not what a writer makes.
      if (key.empty() || *end != '\0' || errno != 0 || e < -100000 || e > 100000 ||
          std::to_string(e) != key)
        value_error(hw, "key \"" + printable(key, 40) + "\" is not an integer exponent");
      const std::int64_t n = Obj::as_int64(value, kw);
      if (n < 0) value_error(kw, "negative count");
      if (n > 0) s.exp_hist.add(static_cast<int>(e), n);
    }
  }
  read_format_counts(o, "overflow", s.overflow);
  read_format_counts(o, "underflow", s.underflow);
  read_format_counts(o, "subnormal", s.subnormal);
  return s;
}

Report report_from_json(const json& j) {
  if (!j.is_object())
    throw ReportError("report.schema", std::string("expected a JSON object with \"schema\": \"") +
                                           kReportSchema + "\", got " + kind_of(j));
  auto sit = j.find("schema");
  if (sit == j.end())
    throw ReportError("report.schema",
                      std::string("missing \"schema\" (expected \"") + kReportSchema + "\")");
  if (!sit->is_string() || sit->get<std::string>() != kReportSchema)
    throw ReportError("report.schema",
                      "schema is " + printable(sit->dump(-1, ' ', true, json::error_handler_t::replace), 80) +
                          ", expected \"" + kReportSchema + "\"");
  Report r = from_json_at<Report>(j, "");
  validate_report(r);  // values, not just types (report_validate.cpp)
  return r;
}

// ---------------------------------------------------------------------------------------------
// Files

Report read_report(const std::string& path) {
  const json j = read_json_file(path, "report");
  try {
    return report_from_json(j);
  } catch (const ReportError& e) {
    throw ReportError(e.id(), path + ": " + e.what());
  }
}

std::string report_text(const Report& r) {
  return to_ojson(r).dump(-1, ' ', false, ojson::error_handler_t::replace) + "\n";
}

void write_report(const Report& r, const std::string& path) { write_file_atomic(path, report_text(r)); }

void write_file_atomic(const std::string& path, const std::string& content) {
  const std::string dir = parent_dir(path);
  try {
    make_directories(dir);
  } catch (const std::runtime_error& e) {
    throw std::runtime_error("cannot write " + path + ": " + e.what());
  }
  static std::atomic<unsigned> counter{0};
  const std::string tmp = join_path(dir, "." + base_name(path) + ".tmp." +
                                             std::to_string(::getpid()) + "." +
                                             std::to_string(counter++));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error("cannot write " + path + ": cannot create " + tmp + ": " +
                                       std::strerror(errno));
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    out.close();
    if (!out) {
      const std::string err = std::strerror(errno);
      std::remove(tmp.c_str());
      throw std::runtime_error("cannot write " + path + ": write to " + tmp + " failed: " + err);
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string err = std::strerror(errno);
    std::remove(tmp.c_str());
    throw std::runtime_error("cannot write " + path + ": rename failed: " + err);
  }
}

}  // namespace ampscope::reports
