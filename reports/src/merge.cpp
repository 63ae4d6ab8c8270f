#include <ampscope/reports/merge.h>
#include <ampscope/reports/recommend.h>

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>
#include <tuple>

namespace ampscope::reports {
namespace {

using OpKey = std::tuple<std::string, std::string, std::string, std::string, std::string>;

OpKey key_of(const OpRecord& op) {
  return {op.op, op.phase, op.input_dtype, op.compute_dtype, op.output_dtype};
}

void merge_op(OpRecord& into, const OpRecord& op) {
  into.calls += op.calls;
  into.casts += op.casts;
  into.first_step = std::min(into.first_step, op.first_step);
  into.last_step = std::max(into.last_step, op.last_step);
  into.nonfinite_from_finite += op.nonfinite_from_finite;
  if (op.first_nonfinite_step >= 0 &&
      (into.first_nonfinite_step < 0 || op.first_nonfinite_step < into.first_nonfinite_step)) {
    into.first_nonfinite_step = op.first_nonfinite_step;
  }
  into.stats.merge(op.stats);
  into.shadow.merge(op.shadow);
  into.kernels.merge(op.kernels);
  // Per step, the maximum over ranks.
  std::map<std::int64_t, double> series(into.absmax_by_step.begin(), into.absmax_by_step.end());
  for (const auto& [step, v] : op.absmax_by_step) series[step] = std::max(series[step], v);
  into.absmax_by_step.assign(series.begin(), series.end());
  while (into.absmax_by_step.size() > kMaxSeries) halve_series(into.absmax_by_step);
}

void merge_layer(Layer& into, const Layer& layer) {
  std::map<OpKey, std::size_t> ops;
  for (std::size_t i = 0; i < into.ops.size(); ++i) ops[key_of(into.ops[i])] = i;
  for (const OpRecord& op : layer.ops) {
    auto it = ops.find(key_of(op));
    if (it == ops.end()) {
      ops[key_of(op)] = into.ops.size();
      into.ops.push_back(op);
    } else {
      merge_op(into.ops[it->second], op);
    }
  }
  for (const ParamRecord& p : layer.params) {
    auto it = std::find_if(into.params.begin(), into.params.end(),
                           [&](const ParamRecord& q) { return q.name == p.name; });
    if (it == into.params.end()) {
      into.params.push_back(p);
    } else {
      it->updates += p.updates;
      it->grad.merge(p.grad);
    }
  }
}

}  // namespace

Report merge_reports(const std::vector<Report>& reports) {
  if (reports.empty()) throw std::invalid_argument("merge needs at least one report");
  std::vector<const Report*> by_rank;
  for (const Report& r : reports) by_rank.push_back(&r);
  std::sort(by_rank.begin(), by_rank.end(),
            [](const Report* a, const Report* b) { return a->run.rank < b->run.rank; });
  std::set<int> ranks;
  for (const Report* r : by_rank) {
    if (!ranks.insert(r->run.rank).second) {
      throw std::invalid_argument("two reports of rank " + std::to_string(r->run.rank));
    }
  }

  Report out;
  out.run = by_rank.front()->run;
  out.run.rank = 0;  // the merged report speaks for all ranks (see notes)
  out.run.world_size = std::max<int>(out.run.world_size, static_cast<int>(by_rank.size()));
  out.loss_scale = by_rank.front()->loss_scale;
  std::map<std::string, std::size_t> layers;
  for (const Report* r : by_rank) {
    out.run.steps = std::max(out.run.steps, r->run.steps);
    out.run.duration_s = std::max(out.run.duration_s, r->run.duration_s);
    if (r != by_rank.front() && r->run.host_syncs >= 0) {  // summed over the traced ranks
      out.run.host_syncs = std::max<std::int64_t>(out.run.host_syncs, 0) + r->run.host_syncs;
    }
    for (const Layer& l : r->layers) {
      auto it = layers.find(l.name);
      if (it == layers.end()) {
        layers[l.name] = out.layers.size();
        out.layers.push_back(Layer{l.name, l.type, {}, {}});
        it = layers.find(l.name);
      }
      merge_layer(out.layers[it->second], l);
    }
    if (r->first_nonfinite) {
      NonFiniteEvent e = *r->first_nonfinite;
      e.rank = r->run.rank;
      out.first_nonfinite_by_rank.push_back(e);
    }
  }
  out.run.notes.push_back("merged from " + std::to_string(by_rank.size()) + " rank reports");
  out.run.notes.push_back(
      "merged stats: count, nan, posinf, neginf, zeros, overflow/underflow/subnormal and "
      "exp_hist are exact sums, absmax and absmin_nonzero exact extrema over the ranks; mean and "
      "rms are count-weighted (exact up to rounding). A sharded parameter's (FSDP2/DTensor) "
      "shards add up to the whole gradient; a replicated one (DDP) is counted once per rank, and "
      "updates add over the ranks");
  for (const NonFiniteEvent& e : out.first_nonfinite_by_rank) {
    if (!out.first_nonfinite || e.step < out.first_nonfinite->step) out.first_nonfinite = e;
  }
  out.recommendations = recommend(out);
  return out;
}

}  // namespace ampscope::reports
