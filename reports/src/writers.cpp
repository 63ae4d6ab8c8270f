// The registry of the files a run writes (writers.h).
#include <ampscope/reports/files.h>
#include <ampscope/reports/html.h>
#include <ampscope/reports/out_dir.h>
#include <ampscope/reports/precision_map.h>
#include <ampscope/reports/report_json.h>
#include <ampscope/reports/writers.h>

#include <algorithm>

namespace ampscope::reports {
namespace {

std::string html_file(std::string_view stem) { return std::string(stem) + ".html"; }

std::string html_text(const Report& r) { return render_html(r); }

/// precision_map.json for "report", precision_map<rest>.json for "report<rest>" (report.rank1 ->
/// precision_map.rank1.json), precision_map.<stem>.json otherwise.
std::string map_file(std::string_view stem) {
  const std::string s(stem);
  const std::string rest = s.rfind("report", 0) == 0 ? s.substr(6) : "." + s;
  return "precision_map" + rest + ".json";
}

std::string map_text(const Report& r) { return precision_map_text(precision_map_from(r.recommendations)); }

std::string json_file(std::string_view stem) { return std::string(stem) + ".json"; }

}  // namespace

const std::vector<Writer>& writers() {
  static const std::vector<Writer> all{
      {"html", html_file, html_text},
      {"precision_map", map_file, map_text},
      {"report", json_file, report_text},
  };
  return all;
}

const Writer* find_writer(std::string_view name) {
  for (const Writer& w : writers())
    if (w.name == name) return &w;
  return nullptr;
}

std::string write_report_set(const Report& report, const std::string& dir, const std::string& stem,
                             const std::vector<std::string>& skip) {
  std::vector<FileContent> files;
  std::string json_path;
  for (const Writer& w : writers()) {
    if (std::find(skip.begin(), skip.end(), w.name) != skip.end()) continue;
    files.push_back({join_path(dir, w.file(stem)), w.write(report)});
    if (w.name == "report") json_path = files.back().path;
  }
  write_files_atomic(files);
  return json_path;
}

}  // namespace ampscope::reports
