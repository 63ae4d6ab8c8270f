// The bridge the Python package uses: ampscope's core as torch.ops.ampscope.* (TORCH_LIBRARY),
// loaded into the user's torch process with torch.ops.load_library. No pybind11: every value
// crossing is a str, int or Tensor, and structured data travels as JSON text.
#include <ampscope/hooks/layers.h>
#include <ampscope/hooks/param_watch.h>
#include <ampscope/hooks/session.h>
#include <ampscope/profiler/observer.h>
#include <ampscope/profiler/tensor_stats.h>
#include <ampscope/reports/html.h>
#include <ampscope/reports/precision_map.h>
#include <ampscope/reports/recommend.h>
#include <ampscope/reports/report_json.h>

#include <torch/library.h>

#include <memory>
#include <mutex>

namespace ampscope {
namespace {

std::mutex g_mu;

/// Run fields the Python side knows better (rank, world size, command, notes...).
void apply_run_overrides(reports::Report& r, const std::string& run_json) {
  if (run_json.empty()) return;
  auto j = nlohmann::json::parse(run_json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return;
  auto& run = r.run;
  if (j.contains("rank") && j["rank"].is_number_integer()) {
    run.rank = j["rank"].get<int>();
    if (r.first_nonfinite) r.first_nonfinite->rank = run.rank;  // this rank's own events
    if (r.scaler_caught) r.scaler_caught->first.rank = run.rank;
  }
  if (j.contains("world_size") && j["world_size"].is_number_integer())
    run.world_size = j["world_size"].get<int>();
  if (j.contains("command") && j["command"].is_string()) run.command = j["command"];
  if (j.contains("device") && j["device"].is_string()) run.device = j["device"];
  if (j.contains("autocast_dtype") && j["autocast_dtype"].is_string())
    run.autocast_dtype = j["autocast_dtype"];
  if (j.contains("stopped") && j["stopped"].is_string()) run.stopped = j["stopped"];
  if (j.contains("torch_version") && j["torch_version"].is_string())
    run.torch_version = j["torch_version"];
  if (j.contains("notes") && j["notes"].is_array()) {
    for (const auto& n : j["notes"]) {
      if (n.is_string()) run.notes.push_back(n);
    }
  }
}
std::unique_ptr<Session> g_session;

Phase parse_phase(const std::string& p) {
  Phase phase = Phase::kForward;  // (an unknown name: forward)
  from_name(p, &phase);
  return phase;
}

/// A list of patterns from the options JSON (absent or not a list of strings: none).
std::vector<std::string> patterns(const nlohmann::json& j, const char* key) {
  std::vector<std::string> out;
  if (!j.contains(key) || !j[key].is_array()) return out;
  for (const auto& p : j[key]) {
    if (p.is_string()) out.push_back(p.get<std::string>());
  }
  return out;
}

/// What to record: {"include_layers": [...], "exclude_layers": [...], "include_ops": [...],
/// "exclude_ops": [...], "input_stats": bool}; every key optional.
void apply_record_options(SessionOptions& o, const std::string& options_json) {
  auto j = nlohmann::json::parse(options_json.empty() ? "{}" : options_json, nullptr, false);
  TORCH_CHECK(j.is_object(), "ampscope: start options must be a JSON object");
  o.layers.include = patterns(j, "include_layers");
  o.layers.exclude = patterns(j, "exclude_layers");
  o.ops.include = patterns(j, "include_ops");
  o.ops.exclude = patterns(j, "exclude_ops");
  o.input_stats = j.contains("input_stats") && j["input_stats"].is_boolean() && j["input_stats"].get<bool>();
  // The Python front end watches unsampled steps (module outputs, replays) unless told to run
  // the per-op sentinel ("sentinel": "ops").
  o.watch_unsampled = !(j.contains("sentinel") && j["sentinel"] == "ops");
}

void start(int64_t every, bool shadow, std::string device, std::string autocast_dtype,
           std::string command, std::string options_json) {
  std::lock_guard<std::mutex> lock(g_mu);
  SessionOptions o;
  apply_record_options(o, options_json);
  o.every = static_cast<int>(every);
  o.shadow = shadow;
  o.device = device;
  o.autocast_dtype = autocast_dtype;
  o.command = command;
  if (g_session && g_session->running()) g_session->stop();
  g_session = std::make_unique<Session>(o);
  g_session->start();
}

void stop() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_session) g_session->stop();
}

void push_layer(std::string name, std::string type) { Observer::push_layer(layer_for_name(name, type)); }
/// The id of a layer name (registered with `type` when new), for push_layer_id.
int64_t layer_id(std::string name, std::string type) { return layer_for_name(name, type); }
void push_layer_id(int64_t id) { Observer::push_layer(static_cast<LayerId>(id)); }
int64_t watch_mode() { return Observer::watch_mode(); }
/// A C++ gradient hook on a parameter (no Python, no GIL per gradient).
void hook_param_op(const at::Tensor& param, std::string name, int64_t layer) {
  hook_param(param, name, static_cast<LayerId>(layer));
}
void unhook_params_op() { unhook_params(); }

/// Pops the layer; true while some live tensor may hold NaN/Inf an op created (then the
/// module's outputs are worth checking, see module_outputs).
bool pop_layer() {
  Observer::pop_layer();
  return Observer::nonfinite_pending();
}
void module_outputs(const std::vector<at::Tensor>& outputs) { Observer::check_module_outputs(outputs); }
void optimizer_step_begins() {
  Observer::optimizer_step_begins();
  rehook_params();
}
bool any_nonfinite(const std::vector<at::Tensor>& tensors) { return Observer::any_nonfinite(tensors); }
std::vector<int64_t> read_counts() {
  const auto c = Observer::read_counts();
  return {c.begin(), c.end()};
}
void begin_replay() { Observer::begin_replay(); }
void end_replay() { Observer::end_replay(); }
/// A watched step's NaN/Inf that no op could be named for (see Observer::note_unattributed).
void note_unattributed(std::string layer, std::string type, std::string what, std::string phase,
                       std::optional<at::ScalarType> dtype, bool nan, int64_t step,
                       bool inputs_finite) {
  const LayerId id = layer.empty() && type.empty() ? kOutsideLayerId : layer_for_name(layer, type);
  Observer::note_unattributed(id, what, parse_phase(phase),
                              dtype ? static_cast<std::int8_t>(*dtype) : std::int8_t{-1}, nan, step,
                              inputs_finite);
}
bool blame_model_inputs(const std::vector<at::Tensor>& tensors, std::string what) {
  return Observer::blame_model_inputs(tensors, what);
}
/// A parameter's owning layer, for AccumulateGrad attribution (Python front end).
void name_param(const at::Tensor& param, std::string layer, std::string type) {
  Observer::name_param(param, layer_for_name(layer, type));
}
void push_phase(std::string phase) { Observer::push_phase(parse_phase(phase)); }
void pop_phase() { Observer::pop_phase(); }
bool nonfinite_seen() { return Observer::nonfinite_seen(); }

/// The session's report with the Python side's run fields applied, recommendations recomputed
/// (they depend on run.autocast_dtype). Caller holds g_mu.
reports::Report current_report(const std::string& run_json) {
  TORCH_CHECK(g_session, "ampscope: no profiling session was started");
  reports::Report r = g_session->report();
  apply_run_overrides(r, run_json);
  r.recommendations = reports::recommend(r);
  return r;
}

/// The report as JSON; `run_json` overrides run fields (rank, world_size, notes, ...).
std::string report_json(std::string run_json) {
  std::lock_guard<std::mutex> lock(g_mu);
  return reports::report_to_json(current_report(run_json)).dump();
}

/// Writes <stem>.json, <stem>.html and the precision map into dir.
std::string write_reports(std::string dir, std::string stem, std::string run_json) {
  std::lock_guard<std::mutex> lock(g_mu);
  return write_report_files(current_report(run_json), dir, stem);
}

std::string tensor_stats_json(const at::Tensor& t) {
  return reports::stats_to_json(tensor_stats(t)).dump();
}

/// The stats kernel build reading each dtype, and why (benchmark headers).
std::string stats_builds() { return stats_isa_summary(); }

void reset_layers() { detach_all_modules(); }

/// `alias` reaches the parameter named `name` (tied weights): one record, aliases listed.
void param_alias(std::string name, std::string alias) { record_param_alias(name, alias); }

void param_grad(std::string name, std::string layer, std::string layer_type, const at::Tensor& g) {
  record_param_grad(name, layer, layer_type, g);
}

/// The optimizer is about to step (Python's step pre-hook): tensors[i] is parameter params[i]
/// (or its optimizer state roles[i]) with gradient grads[i]; see updates_before().
void updates_before_py(std::vector<std::string> params, std::vector<std::string> layers,
                       std::vector<std::string> types, std::vector<std::string> roles,
                       std::vector<at::Tensor> tensors, std::vector<at::Tensor> grads) {
  const std::size_t n = tensors.size();
  TORCH_CHECK(params.size() == n && layers.size() == n && types.size() == n && roles.size() == n &&
                  grads.size() == n,
              "ampscope: updates_before: lists of different lengths");
  std::vector<WatchedTensor> ws(n);
  for (std::size_t i = 0; i < n; ++i)
    ws[i] = {params[i], layers[i], types[i], roles[i], tensors[i], grads[i]};
  updates_before(std::move(ws));
}

void updates_after_py() { updates_after(); }
bool sampling_now() { return Observer::sampling_now(); }
int64_t current_step() { return Observer::current_step(); }

}  // namespace
}  // namespace ampscope

TORCH_LIBRARY(ampscope, m) {
  m.def("start(int every, bool shadow, str device, str autocast_dtype, str command, "
        "str options=\"{}\") -> ()",
        &ampscope::start);
  m.def("nonfinite_seen() -> bool", &ampscope::nonfinite_seen);
  m.def("stop() -> ()", &ampscope::stop);
  m.def("push_layer(str name, str type) -> ()", &ampscope::push_layer);
  m.def("layer_id(str name, str type) -> int", &ampscope::layer_id);
  m.def("push_layer_id(int id) -> ()", &ampscope::push_layer_id);
  m.def("watch_mode() -> int", &ampscope::watch_mode);
  m.def("hook_param(Tensor param, str name, int layer) -> ()", &ampscope::hook_param_op);
  m.def("unhook_params() -> ()", &ampscope::unhook_params_op);
  m.def("any_nonfinite(Tensor[] tensors) -> bool", &ampscope::any_nonfinite);
  m.def("begin_replay() -> ()", &ampscope::begin_replay);
  m.def("end_replay() -> ()", &ampscope::end_replay);
  m.def("note_unattributed(str layer, str layer_type, str what, str phase, ScalarType? dtype, "
        "bool nan, int step=-1, bool inputs_finite=True) -> ()",
        &ampscope::note_unattributed);
  m.def("blame_model_inputs(Tensor[] tensors, str what) -> bool", &ampscope::blame_model_inputs);
  m.def("pop_layer() -> bool", &ampscope::pop_layer);
  m.def("module_outputs(Tensor[] outputs) -> ()", &ampscope::module_outputs);
  m.def("optimizer_step_begins() -> ()", &ampscope::optimizer_step_begins);
  m.def("name_param(Tensor param, str layer, str type) -> ()", &ampscope::name_param);
  m.def("push_phase(str phase) -> ()", &ampscope::push_phase);
  m.def("pop_phase() -> ()", &ampscope::pop_phase);
  m.def("mark_step() -> ()", &ampscope::mark_step);
  m.def("report_json(str run_json) -> str", &ampscope::report_json);
  m.def("write_reports(str dir, str stem, str run_json) -> str", &ampscope::write_reports);
  m.def("tensor_stats(Tensor t) -> str", &ampscope::tensor_stats_json);
  m.def("stats_builds() -> str", &ampscope::stats_builds);
  m.def("read_counts() -> int[]", &ampscope::read_counts);
  m.def("reset_layers() -> ()", &ampscope::reset_layers);
  m.def("param_alias(str name, str alias) -> ()", &ampscope::param_alias);
  m.def("param_grad(str name, str layer, str layer_type, Tensor grad) -> ()", &ampscope::param_grad);
  m.def("updates_before(str[] params, str[] layers, str[] layer_types, str[] roles, "
        "Tensor[] tensors, Tensor[] grads) -> ()",
        &ampscope::updates_before_py);
  m.def("updates_after() -> ()", &ampscope::updates_after_py);
  m.def("sampling_now() -> bool", &ampscope::sampling_now);
  m.def("current_step() -> int", &ampscope::current_step);
}
