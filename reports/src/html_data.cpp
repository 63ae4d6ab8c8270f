// The trimmed data block the HTML report's script reads (see html_detail.h for its schema), and
// the escaping that keeps it inside its <script> element.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "dtypes.h"
#include "html_detail.h"

namespace ampscope::reports::detail {
namespace {

using json = nlohmann::json;


/// A number that is only drawn: 6 significant digits keep the page small; null when not finite.
json drawn(double v) {
  if (!std::isfinite(v)) return nullptr;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return std::strtod(buf, nullptr);
}

/// Interns the short strings that repeat across ops (op names, phases, dtypes, autocast classes).
class Strings {
 public:
  int operator()(const std::string& s) {
    auto [it, fresh] = index_.emplace(s, static_cast<int>(list_.size()));
    if (fresh) list_.push_back(s);
    return it->second;
  }
  template <typename E, typename = if_named_enum<E>>
  int operator()(E v) { return (*this)(std::string(name_of(v))); }
  json table() const { return list_; }

 private:
  std::map<std::string, int> index_;
  std::vector<std::string> list_;
};

/// Per-format counts; 0 instead of [0, 0, 0, 0] (most tensors fit every format).
json per_format(const std::array<std::int64_t, kNumFormats>& a) {
  if (std::all_of(a.begin(), a.end(), [](std::int64_t v) { return v == 0; })) return 0;
  json out = json::array();
  for (std::int64_t v : a) out.push_back(v);
  return out;
}

json stats_json(const Stats& s) {
  json counts = json::array();
  const int lo = s.exp_hist.empty() ? 0 : s.exp_hist.lo();
  for (int e = lo; !s.exp_hist.empty() && e < s.exp_hist.hi(); ++e)
    counts.push_back(s.exp_hist.at(e));
  return json::array({s.count, s.nan, s.posinf, s.neginf, s.zeros, drawn(s.absmax),
                      per_format(s.overflow), per_format(s.underflow), per_format(s.subnormal), lo,
                      std::move(counts)});
}

json op_json(const OpRecord& op, Strings& str) {
  std::int64_t cast_lost = 0;
  for (const CastLossRecord& c : op.cast_loss) cast_lost += c.underflow + c.overflow;
  return json::array({str(op.op), str(op.phase), op.calls, str(op.input_dtype),
                      str(op.compute_dtype), str(op.output_dtype), str(op.autocast), op.casts,
                      op.first_step, op.last_step, op.nonfinite_from_finite, stats_json(op.stats),
                      cast_lost});
}

json layer_json(const Layer& l, Strings& str) {
  json ops = json::array(), params = json::array();
  for (const OpRecord& op : l.ops) ops.push_back(op_json(op, str));
  for (const ParamRecord& p : l.params)
    params.push_back(json::array({p.name, str(p.dtype), p.updates, stats_json(p.grad),
                                  p.values ? stats_json(*p.values) : json(nullptr)}));
  return {
      {"name", l.name}, {"type", l.type}, {"ops", std::move(ops)}, {"params", std::move(params)}};
}

json formats_json() {
  json out = json::array();
  for (const FormatTraits& f : kFormats) {
    out.push_back({{"name", std::string(f.name)},
                   {"short", std::string(f.label)},
                   {"min_sub", min_subnormal_exp(f.format)},
                   {"min_normal", f.min_normal_exp},
                   {"max_exp", f.max_exp},
                   {"max", f.max}});
  }
  return out;
}

json event_json(const NonFiniteEvent& e) {
  return {{"rank", e.rank},
          {"step", e.step},
          {"phase", e.phase},
          {"layer", e.layer},
          {"op", e.op},
          {"kind", e.kind},
          {"inputs_finite", e.inputs_finite},
          {"fp32", e.fp32_also_nonfinite ? json(*e.fp32_also_nonfinite) : json(nullptr)}};
}

/// Model-wide stats: forward outputs, incoming activation gradients, parameter gradients.
json aggregates_json(const Report& r) {
  Stats act, act_grads, param_grads;
  for (const Layer& l : r.layers) {
    for (const OpRecord& op : l.ops) (op.phase == Phase::kBackward ? act_grads : act).merge(op.stats);
    for (const ParamRecord& p : l.params) param_grads.merge(p.grad);
  }
  return {{"activations", stats_json(act)},
          {"act_grads", stats_json(act_grads)},
          {"param_grads", stats_json(param_grads)}};
}

json recs_json(const Report& r) {
  json out = json::object();
  for (const Recommendation& rec : r.recommendations) out[rec.layer].push_back(std::string(name_of(rec.action)));
  return out;
}

}  // namespace

json html_data(const Report& r) {
  Strings str;
  json layers = json::array();
  for (const Layer& l : r.layers) layers.push_back(layer_json(l, str));
  json by_rank = json::array();
  for (const NonFiniteEvent& e : r.first_nonfinite_by_rank) by_rank.push_back(event_json(e));
  return {{"schema", "ampscope.html-data/1"},
          {"autocast_dtype", dtypes::bare(r.run.autocast_dtype)},
          {"world_size", r.run.world_size},
          {"formats", formats_json()},
          {"strs", str.table()},
          {"layers", std::move(layers)},
          {"agg", aggregates_json(r)},
          {"recs", recs_json(r)},
          {"first_nonfinite", r.first_nonfinite ? event_json(*r.first_nonfinite) : json(nullptr)},
          {"by_rank", std::move(by_rank)}};
}

std::string script_safe_json(const json& j) {
  const std::string text = j.dump(-1, ' ', false, json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size() + 64);
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '<')
      out += "\\u003c";
    else if (c == '>')
      out += "\\u003e";
    else if (c == '&')
      out += "\\u0026";
    else if (c == '\xE2' && i + 2 < text.size() && text[i + 1] == '\x80' &&
             (text[i + 2] == '\xA8' || text[i + 2] == '\xA9')) {
      out += text[i + 2] == '\xA8' ? "\\u2028" : "\\u2029";
      i += 2;
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string make_nonce() {
  std::random_device rd;
  std::string out;
  for (int i = 0; i < 4; ++i) {
    char buf[9];
    std::snprintf(buf, sizeof buf, "%08x", static_cast<unsigned>(rd()));
    out += buf;
  }
  return out;
}

}  // namespace ampscope::reports::detail
