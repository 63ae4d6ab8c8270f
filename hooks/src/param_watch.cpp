#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <ATen/record_function.h>
#include <ampscope/hooks/layers.h>
#include <ampscope/hooks/param_watch.h>
#include <ampscope/profiler/tensor_stats.h>
#include <torch/optim/optimizer.h>

#include <mutex>
#include <unordered_map>

namespace ampscope {
namespace {

struct Copy {
  WatchedTensor w;
  at::Tensor before;
  at::Tensor due;  ///< elements with a nonzero gradient
};

struct WatchStore {
  std::mutex mu;
  std::vector<ParamWatchInfo> params;
  std::unordered_map<std::string, std::size_t> by_name;
  std::vector<Copy> pending;
  std::int64_t pending_step = -1;
};

WatchStore& store() {
  static auto* s = new WatchStore();  // never destroyed: hooks may run during shutdown
  return *s;
}

/// The record of `w`'s parameter, created on first use. Caller holds mu.
ParamWatchInfo& info_locked(WatchStore& s, const WatchedTensor& w) {
  auto it = s.by_name.find(w.param);
  if (it != s.by_name.end()) return s.params[it->second];
  s.by_name.emplace(w.param, s.params.size());
  const std::string dtype =
      w.tensor.defined() ? dtype_name(static_cast<std::int8_t>(w.tensor.scalar_type())) : "";
  s.params.push_back({w.param, w.layer, w.layer_type, dtype, std::nullopt, {}});
  return s.params.back();
}

bool low_precision(const at::Tensor& t) {
  return t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16;
}

/// Whether `w` gets a copy: a float16/bfloat16 tensor with a gradient of its shape.
bool comparable(const WatchedTensor& w) {
  return w.tensor.defined() && w.grad.defined() && low_precision(w.tensor) &&
         w.grad.sizes() == w.tensor.sizes() && !w.grad.is_sparse();
}

void add_stale(ParamWatchInfo& info, const Copy& c, std::int64_t updated, std::int64_t stale,
               std::int64_t step) {
  reports::StaleUpdateRecord* rec = nullptr;
  for (auto& s : info.stale)
    if (s.tensor == c.w.role) rec = &s;
  if (!rec) {
    info.stale.push_back({});
    rec = &info.stale.back();
    rec->tensor = c.w.role;
    rec->dtype = dtype_name(static_cast<std::int8_t>(c.w.tensor.scalar_type()));
  }
  ++rec->steps;
  rec->updated += updated;
  rec->stale += stale;
  const double share =
      updated > 0 ? static_cast<double>(stale) / static_cast<double>(updated) : 0.0;
  if (rec->worst_step < 0 || share > rec->worst_share) {
    rec->worst_share = share;
    rec->worst_step = step;
  }
}

}  // namespace

void updates_before(std::vector<WatchedTensor> tensors) {
  if (!Observer::sampling_now()) return;
  at::DisableRecordFunctionGuard no_observe;  // ampscope's own copies are not the user's ops
  at::NoGradGuard no_grad;
  std::vector<Copy> copies;
  std::vector<std::pair<std::size_t, Stats>> values;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    auto& w = tensors[i];
    if (w.role == "value" && w.tensor.defined() && !w.tensor.is_cuda() && stats_supported(w.tensor))
      values.emplace_back(i, Observer::stats_once(w.tensor));  // read for its cast already?
    if (comparable(w)) copies.push_back({w, w.tensor.detach().clone(), w.grad.detach().ne(0)});
  }
  auto& s = store();
  std::lock_guard<std::mutex> lock(s.mu);
  for (auto& [i, st] : values) info_locked(s, tensors[i]).values = std::move(st);
  s.pending = std::move(copies);
  s.pending_step = Observer::current_step();
}

void updates_after() {
  auto& s = store();
  std::vector<Copy> pending;
  std::int64_t step;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    pending.swap(s.pending);
    step = s.pending_step;
  }
  if (pending.empty()) return;
  at::DisableRecordFunctionGuard no_observe;
  at::NoGradGuard no_grad;
  for (auto& c : pending) {
    if (c.w.tensor.sizes() != c.before.sizes()) continue;  // replaced by the step: not comparable
    const std::int64_t updated = c.due.sum().item<std::int64_t>();
    const std::int64_t stale =
        c.due.logical_and(c.w.tensor.detach().eq(c.before)).sum().item<std::int64_t>();
    std::lock_guard<std::mutex> lock(s.mu);
    add_stale(info_locked(s, c.w), c, updated, stale, step);
  }
}

std::vector<WatchedTensor> watched_params(torch::optim::Optimizer& optimizer) {
  std::vector<WatchedTensor> out;
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) {
      WatchedTensor w;
      if (!attached_param(p, &w.param, &w.layer, &w.layer_type)) continue;
      w.tensor = p;
      w.grad = p.grad();
      out.push_back(std::move(w));
    }
  }
  return out;
}

std::vector<ParamWatchInfo> param_watch_snapshot() {
  auto& s = store();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.params;
}

void reset_param_watch() {
  auto& s = store();
  std::lock_guard<std::mutex> lock(s.mu);
  s.params.clear();
  s.by_name.clear();
  s.pending.clear();
  s.pending_step = -1;
}

}  // namespace ampscope
