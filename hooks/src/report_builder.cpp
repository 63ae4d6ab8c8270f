#include "report_builder.h"

#include <algorithm>
#include <unordered_map>

namespace ampscope {
namespace {

reports::OpRecord to_record(const OpKey& key, const OpAggregate& agg,
                            const std::vector<std::string>& op_names) {
  reports::OpRecord r;
  r.op = key.op < op_names.size() ? op_names[key.op] : "?";
  r.phase = key.phase;
  static_cast<EntryStats&>(r) = agg;
  r.input_dtype = dtype_name(key.input_dtype);
  r.compute_dtype = dtype_name(key.compute_dtype);
  r.output_dtype = dtype_name(key.output_dtype);
  r.autocast = key.autocast;
  return r;
}

/// The run's low-precision dtype when the caller did not say: what lower_precision ops
/// computed in most often ("" when autocast never lowered an op).
std::string infer_autocast_dtype(const std::vector<reports::Layer>& layers) {
  std::int64_t f16 = 0, bf16 = 0;
  for (const auto& l : layers) {
    for (const auto& o : l.ops) {
      if (o.autocast != AutocastClass::kLowerPrecision) continue;
      if (o.compute_dtype == "float16") f16 += o.calls;
      if (o.compute_dtype == "bfloat16") bf16 += o.calls;
    }
  }
  if (f16 == 0 && bf16 == 0) return "";
  return f16 >= bf16 ? "float16" : "bfloat16";
}

reports::NonFiniteEvent to_event(const NonFiniteRecord& f, const std::vector<LayerInfo>& layers) {
  reports::NonFiniteEvent e;
  e.step = f.step;
  e.phase = f.phase;
  auto id = static_cast<std::size_t>(f.layer);
  e.layer = id < layers.size() ? layers[id].name : reports::kOutsideLayer;
  e.op = f.op;
  e.kind = f.nan ? "nan" : "inf";
  e.inputs_finite = f.inputs_finite;
  e.fp32_also_nonfinite = f.fp32_also_nonfinite;
  e.fp32_check = f.fp32_check;
  e.compute_dtype = dtype_name(f.compute_dtype);
  e.output_stats = f.output_stats;
  e.nonfinite_scalar = f.nonfinite_scalar;
  e.forward_nonfinite = f.forward_nonfinite;
  e.reached = f.reached;
  e.reached_step = f.reached_step;
  return e;
}

reports::CastLossRecord to_cast_loss(const CastLossCounts& c) {
  reports::CastLossRecord r;
  static_cast<CastLossTally&>(r) = c;
  r.argument = c.argument;
  r.arg_index = c.arg_index;
  r.parameter = c.parameter;
  r.source_dtype = dtype_name(c.source_dtype);
  r.target_dtype = dtype_name(c.target_dtype);
  return r;
}

/// The cast-loss and degenerate-output records of `e` onto its op record.
void add_silent_loss(const SilentLossEntry& e, reports::OpRecord& r) {
  for (const auto& c : e.casts)
    if (c.underflow + c.overflow + c.subnormal > 0) r.cast_loss.push_back(to_cast_loss(c));
  const DegenerateCounts& d = e.degenerate;
  if (d.zero_outputs > 0) {
    r.degenerate = d;
  }
}

/// Parameter values and stale updates onto the parameter records of the same name; a watched
/// parameter without a gradient record gets one in the layer that owns it.
void add_param_watch(const std::vector<ParamWatchInfo>& watch,
                     std::vector<reports::Layer>& layers) {
  std::unordered_map<std::string, reports::ParamRecord*> by_name;
  for (auto& l : layers)
    for (auto& p : l.params) by_name.emplace(p.name, &p);
  for (const auto& w : watch) {
    reports::ParamRecord* p = by_name.count(w.name) ? by_name[w.name] : nullptr;
    if (!p) {
      auto it = std::find_if(layers.begin(), layers.end(),
                             [&](const auto& l) { return l.name == w.layer; });
      if (it == layers.end()) continue;  // not an attached layer's parameter
      reports::ParamRecord rec;
      rec.name = w.name;
      rec.dtype = w.dtype;
      it->params.push_back(std::move(rec));
      p = &it->params.back();
      by_name[w.name] = p;
    }
    p->values = w.values;
    p->stale_updates = w.stale;
  }
}

int phase_order(Phase phase) {
  switch (phase) {
    case Phase::kSetup: return 0;
    case Phase::kForward: return 1;
    case Phase::kBackward: return 2;
    case Phase::kBetween: return 3;
    case Phase::kOptimizer: return 4;
  }
  return 5;
}

}  // namespace

reports::Report build_report(const ObserverSnapshot& snap, const RunRecords& records,
                             const RunContext& ctx) {
  const auto& layers = records.layers;
  const auto& params = records.params;
  reports::Report report;
  auto& run = report.run;
  run.torch_version = ctx.torch_version;
  run.device = ctx.device;
  run.autocast_dtype = ctx.autocast_dtype;
  run.steps = snap.steps;
  run.started = ctx.started;
  run.duration_s = ctx.duration_s;
  run.command = ctx.command;
  run.every = ctx.every;
  run.shadow = ctx.shadow;
  run.stopped = ctx.stopped;
  run.sampling = ctx.sampling;
  run.sampling.every = ctx.every;
  run.sampling.loss_scale_updates = snap.loss_scale_updates;
  if (snap.loss_scale_updates > static_cast<std::int64_t>(snap.loss_scale.size())) {
    run.notes.push_back("loss-scale history thinned to " + std::to_string(snap.loss_scale.size()) +
                        " of " + std::to_string(snap.loss_scale_updates) +
                        " updates (every update that found inf/NaN is kept)");
  }
  run.notes.insert(run.notes.end(), snap.notes.begin(), snap.notes.end());  // device side
  run.host_syncs = snap.host_syncs;

  std::vector<reports::Layer> by_id(layers.size());
  for (std::size_t i = 0; i < layers.size(); ++i) {
    by_id[i].name = layers[i].name;
    by_id[i].type = layers[i].type;
  }
  std::unordered_map<OpKey, const SilentLossEntry*, OpKeyHash> silent;
  for (const auto& e : records.silent_loss) silent.emplace(e.key, &e);
  for (const auto& [key, agg] : snap.entries) {
    auto id = static_cast<std::size_t>(key.layer);
    if (id >= by_id.size()) id = kOutsideLayerId;
    by_id[id].ops.push_back(to_record(key, agg, snap.op_names));
    if (auto it = silent.find(key); it != silent.end())
      add_silent_loss(*it->second, by_id[id].ops.back());
  }
  for (const auto& p : params) {
    auto id = static_cast<std::size_t>(p.layer) < by_id.size() ? p.layer : kOutsideLayerId;
    reports::ParamRecord rec;
    rec.name = p.name;
    rec.dtype = p.dtype;
    rec.updates = p.updates;
    rec.grad = p.grad;
    rec.aliases = p.aliases;
    by_id[id].params.push_back(std::move(rec));
  }
  add_param_watch(records.param_watch, by_id);
  for (auto& layer : by_id) {
    std::sort(layer.ops.begin(), layer.ops.end(), [](const auto& a, const auto& b) {
      int pa = phase_order(a.phase), pb = phase_order(b.phase);
      if (pa != pb) return pa < pb;
      if (a.op != b.op) return a.op < b.op;
      return a.compute_dtype < b.compute_dtype;
    });
  }
  for (std::size_t i = 1; i < by_id.size(); ++i) report.layers.push_back(std::move(by_id[i]));
  if (!by_id.empty() && (!by_id[0].ops.empty() || !by_id[0].params.empty())) {
    report.layers.push_back(std::move(by_id[0]));
  }

  if (run.autocast_dtype.empty()) run.autocast_dtype = infer_autocast_dtype(report.layers);

  if (snap.first_nonfinite) report.first_nonfinite = to_event(*snap.first_nonfinite, layers);
  if (snap.scaler_caught) {
    report.scaler_caught =
        reports::ScalerCaught{snap.scaler_caught_steps, to_event(*snap.scaler_caught, layers)};
  }
  for (const auto& ls : snap.loss_scale)
    report.loss_scale.push_back({ls.step, ls.scale, ls.found_inf});
  return report;
}

}  // namespace ampscope
