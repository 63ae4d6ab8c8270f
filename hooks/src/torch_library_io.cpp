// torch.ops.ampscope.* for files and text: the Python front end reads precision maps through the
// same reader as the CLI, claims its output folder like the C++ Session does, and escapes names
// for the terminal with the same helper as summary/diff (one implementation of each).
#include <ampscope/reports/out_dir.h>
#include <ampscope/reports/precision_map.h>
#include <ampscope/reports/report_json.h>
#include <ampscope/reports/terminal.h>

#include <torch/library.h>

#include <map>
#include <memory>
#include <mutex>

namespace ampscope {
namespace {

std::mutex g_claims_mu;
std::map<std::string, std::unique_ptr<reports::OutLock>> g_claims;  ///< "dir\n stem" -> lock

/// Checks `dir` and claims <stem>.* in it until release_out (errors: one line, RuntimeError).
void claim_out(std::string dir, std::string stem) {
  std::lock_guard<std::mutex> lock(g_claims_mu);
  auto& slot = g_claims[dir + "\n" + stem];
  if (!slot) slot = reports::claim_out_dir(dir, stem);
}

void release_out(std::string dir, std::string stem) {
  std::lock_guard<std::mutex> lock(g_claims_mu);
  g_claims.erase(dir + "\n" + stem);
}

/// A validated precision map as JSON text: from the file `path`, or (path "") from `text`
/// (`where` names it in messages). Errors are ReportError lines: "<file>: <json path>: ...".
std::string read_precision_map_json(std::string path, std::string text, std::string where) {
  if (!path.empty()) return reports::precision_map_to_json(reports::read_precision_map(path)).dump();
  try {
    const auto j = reports::parse_json_text(text, where, "precision_map");
    return reports::precision_map_to_json(reports::precision_map_from_json(j)).dump();
  } catch (const reports::ReportError& e) {
    const std::string msg = e.what();
    if (msg.rfind(where + ":", 0) == 0) throw;
    throw reports::ReportError(e.id(), where + ": " + msg);
  }
}

std::string terminal_safe_op(std::string s) { return reports::terminal_safe(s); }

}  // namespace
}  // namespace ampscope

TORCH_LIBRARY_FRAGMENT(ampscope, m) {
  m.def("claim_out(str dir, str stem) -> ()", &ampscope::claim_out);
  m.def("release_out(str dir, str stem) -> ()", &ampscope::release_out);
  m.def("read_precision_map(str path, str text, str where) -> str", &ampscope::read_precision_map_json);
  m.def("terminal_safe(str s) -> str", &ampscope::terminal_safe_op);
}
