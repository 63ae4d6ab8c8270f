// Merging per-rank reports: ops keyed as the observer keys them (op, phase, the three dtypes and
// the autocast class), every count summed with an int64 overflow check, input stats kept, and
// reports of different runs refused unless forced.
#include <ampscope/reports/merge.h>
#include <ampscope/reports/recommend.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <stdexcept>
#include <tuple>

namespace ampscope::reports {

void StaleUpdateRecord::add(const StaleUpdateRecord& o) {
  if (o.worst_share > worst_share || worst_step < 0) {
    worst_share = o.worst_share;
    worst_step = o.worst_step;
  }
  steps = std::max(steps, o.steps);  // ranks step together
  updated += o.updated;
  stale += o.stale;
}

namespace {

using OpKey = std::tuple<std::string, Phase, std::string, std::string, std::string, AutocastClass>;

OpKey key_of(const OpRecord& op) {
  return {op.op, op.phase, op.input_dtype, op.compute_dtype, op.output_dtype, op.autocast};
}

/// Matching records added, the others appended.
template <typename Rec, typename Same>
void merge_records(std::vector<Rec>& into, const std::vector<Rec>& from, Same same) {
  for (const Rec& r : from) {
    auto it = std::find_if(into.begin(), into.end(), [&](const Rec& q) { return same(q, r); });
    if (it == into.end()) into.push_back(r);
    else it->add(r);
  }
}

void merge_silent_loss(OpRecord& into, const OpRecord& op) {
  merge_records(into.cast_loss, op.cast_loss, [](const auto& a, const auto& b) { return a.same_cast(b); });
  if (op.degenerate) {
    if (into.degenerate) into.degenerate->add(*op.degenerate);
    else into.degenerate = op.degenerate;
  }
}

void merge_op(OpRecord& into, const OpRecord& op, const std::string& w) {
  try {
    into.merge(op);
  } catch (const std::overflow_error& e) {
    throw std::overflow_error(w + " " + e.what());
  }
  merge_silent_loss(into, op);
}

void merge_params(Layer& into, const Layer& layer) {
  for (const ParamRecord& p : layer.params) {
    auto it = std::find_if(into.params.begin(), into.params.end(),
                           [&](const ParamRecord& q) { return q.name == p.name; });
    if (it == into.params.end()) {
      into.params.push_back(p);
    } else {
      add_count(it->updates, p.updates, "parameter " + p.name + " updates");
      merge_stats_checked(it->grad, p.grad, "parameter " + p.name + " grad stats");
      if (p.values) {
        if (it->values) merge_stats_checked(*it->values, *p.values, "parameter " + p.name + " values stats");
        else it->values = p.values;
      }
      merge_records(it->stale_updates, p.stale_updates,
                    [](const auto& a, const auto& b) { return a.tensor == b.tensor; });
    }
  }
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
      merge_op(into.ops[it->second], op, "layer " + layer.name + " op " + op.op);
    }
  }
  merge_params(into, layer);
}

std::set<std::string> model_layers(const Report& r) {
  std::set<std::string> names;
  for (const Layer& l : r.layers)
    if (l.name != kOutsideLayer) names.insert(l.name);
  return names;
}

}  // namespace

std::string run_mismatch(const Report& a, const Report& b) {
  if (a.run.autocast_dtype != b.run.autocast_dtype)
    return "autocast dtype \"" + a.run.autocast_dtype + "\" vs \"" + b.run.autocast_dtype + "\"";
  if (a.run.world_size != b.run.world_size)
    return "world size " + std::to_string(a.run.world_size) + " vs " + std::to_string(b.run.world_size);
  const auto la = model_layers(a), lb = model_layers(b);
  if (la != lb) {
    std::vector<std::string> only;
    std::set_symmetric_difference(la.begin(), la.end(), lb.begin(), lb.end(), std::back_inserter(only));
    return "different models (" + std::to_string(only.size()) + " layer name(s) in one only, e.g. \"" +
           only.front().substr(0, 60) + "\")";
  }
  return "";
}

Report merge_reports(const std::vector<Report>& reports, const MergeOptions& options) {
  if (reports.empty()) throw std::invalid_argument("merge needs at least one report");
  std::vector<const Report*> by_rank;
  for (const Report& r : reports) by_rank.push_back(&r);
  std::sort(by_rank.begin(), by_rank.end(),
            [](const Report* a, const Report* b) { return a->run.rank < b->run.rank; });
  std::set<int> ranks;
  std::vector<std::string> forced;
  for (const Report* r : by_rank) {
    if (!ranks.insert(r->run.rank).second) {
      throw std::invalid_argument("two reports of rank " + std::to_string(r->run.rank));
    }
    const std::string why = run_mismatch(*by_rank.front(), *r);
    if (why.empty()) continue;
    const std::string what = "rank " + std::to_string(r->run.rank) + " is not of the same run as rank " +
                             std::to_string(by_rank.front()->run.rank) + ": " + why;
    if (!options.force) throw std::invalid_argument(what + " (--force merges anyway)");
    forced.push_back("merged with --force: " + what);
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
  out.run.notes.push_back(std::string(kMergedNote) + std::to_string(by_rank.size()) + " rank reports");
  out.run.notes.push_back(
      "merged stats: count, nan, posinf, neginf, zeros, overflow/underflow/subnormal and "
      "exp_hist are exact sums, absmax and absmin_nonzero exact extrema over the ranks; mean and "
      "rms are count-weighted (exact up to rounding). A sharded parameter's (FSDP2/DTensor) "
      "shards add up to the whole gradient; a replicated one (DDP) is counted once per rank, and "
      "updates add over the ranks");
  out.run.notes.insert(out.run.notes.end(), forced.begin(), forced.end());
  for (const NonFiniteEvent& e : out.first_nonfinite_by_rank) {
    if (!out.first_nonfinite || e.step < out.first_nonfinite->step) out.first_nonfinite = e;
  }
  out.recommendations = recommend(out);
  return out;
}

bool is_merged(const Report& r) {
  return std::any_of(r.run.notes.begin(), r.run.notes.end(),
                     [](const std::string& n) { return n.rfind(kMergedNote, 0) == 0; });
}

}  // namespace ampscope::reports
