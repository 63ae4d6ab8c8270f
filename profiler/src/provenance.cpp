#include "provenance.h"

#include <ATen/core/Tensor.h>

#include <unordered_set>

#include "ivalue_tensors.h"

namespace ampscope::detail {
namespace {

/// Origins kept one by one; past this, finished benign ones are folded into counts.
constexpr std::size_t kMaxOrigins = 4096;

/// The storage of a tensor that has one of its own (wrapper subclasses, meta or sparse
/// tensors have none), or nullptr.
const c10::StorageImpl* storage_of(const at::Tensor& t) {
  if (!t.defined() || !t.has_storage()) return nullptr;
  return t.storage().unsafeGetStorageImpl();
}

template <typename F>
void for_each_stored(const std::vector<c10::IValue>& values, F&& f) {
  for (const c10::IValue& v : values) {
    for_each_tensor(v, [&](const at::Tensor& t) {
      if (const auto* s = storage_of(t)) f(t, s);
    });
  }
}

}  // namespace

void Provenance::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  taints_.clear();
  nodes_.clear();
  origins_.clear();
  folded_.clear();
  next_id_ = 0;
  tainted_.store(0, std::memory_order_relaxed);
}

std::int64_t Provenance::add(Origin origin) {
  std::lock_guard<std::mutex> lock(mu_);
  if (origins_.size() >= kMaxOrigins) compact();
  const std::int64_t id = next_id_++;
  origins_.emplace(id, std::move(origin));
  return id;
}

void Provenance::taint(const std::vector<c10::IValue>& values, std::int64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  for_each_stored(values, [&](const at::Tensor& t, const c10::StorageImpl* s) {
    taints_.insert_or_assign(s, Taint{t.storage().getWeakStorageImpl(), id});
  });
  tainted_.store(static_cast<std::int64_t>(taints_.size()), std::memory_order_relaxed);
}

void Provenance::untaint(const std::vector<c10::IValue>& values) {
  if (!any_tainted()) return;
  std::lock_guard<std::mutex> lock(mu_);
  for_each_stored(values, [&](const at::Tensor&, const c10::StorageImpl* s) { taints_.erase(s); });
  tainted_.store(static_cast<std::int64_t>(taints_.size()), std::memory_order_relaxed);
}

std::int64_t Provenance::origin_of(const std::vector<c10::IValue>& values) {
  if (!any_tainted()) return -1;
  std::lock_guard<std::mutex> lock(mu_);
  std::int64_t found = -1;
  for_each_stored(values, [&](const at::Tensor&, const c10::StorageImpl* s) {
    if (found >= 0) return;
    auto it = taints_.find(s);
    if (it != taints_.end() && !it->second.storage.expired()) found = it->second.origin;
  });
  return found;
}

void Provenance::taint_nodes(const std::vector<c10::IValue>& values, std::int64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = nodes_.begin(); it != nodes_.end();)
    it = it->second.node.expired() ? nodes_.erase(it) : std::next(it);
  for_each_stored(values, [&](const at::Tensor& t, const c10::StorageImpl*) {
    if (auto fn = t.grad_fn()) nodes_.insert_or_assign(fn.get(), NodeTaint{fn, id});
  });
}

std::int64_t Provenance::origin_of_node(const torch::autograd::Node* node) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = nodes_.find(node);
  return it != nodes_.end() && !it->second.node.expired() ? it->second.origin : -1;
}

std::int64_t Provenance::origin_of(const at::Tensor& t) {
  if (!any_tainted()) return -1;
  const auto* s = storage_of(t);
  if (!s) return -1;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = taints_.find(s);
  return it != taints_.end() && !it->second.storage.expired() ? it->second.origin : -1;
}

void Provenance::drop_expired() {
  for (auto it = taints_.begin(); it != taints_.end();) {
    it = it->second.storage.expired() ? taints_.erase(it) : std::next(it);
  }
  tainted_.store(static_cast<std::int64_t>(taints_.size()), std::memory_order_relaxed);
}

std::int64_t Provenance::live_forward_origin(std::int64_t step) {
  if (!any_tainted()) return -1;
  std::lock_guard<std::mutex> lock(mu_);
  drop_expired();
  std::int64_t best = -1;
  for (const auto& [s, taint] : taints_) {
    auto it = origins_.find(taint.origin);
    if (it == origins_.end() || it->second.rec.step != step ||
        it->second.rec.phase != Phase::kForward) {
      continue;
    }
    best = std::max(best, taint.origin);
  }
  return best;
}

std::optional<NonFiniteRecord> Provenance::make_harmful(std::int64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = origins_.find(id);
  if (it == origins_.end()) return std::nullopt;
  it->second.harmful = true;
  return it->second.rec;
}

std::optional<NonFiniteRecord> Provenance::record(std::int64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = origins_.find(id);
  if (it == origins_.end()) return std::nullopt;
  return it->second.rec;
}

void Provenance::compact() {
  drop_expired();
  std::unordered_set<std::int64_t> live;
  for (const auto& [s, taint] : taints_) live.insert(taint.origin);
  for (auto it = origins_.begin(); it != origins_.end();) {
    if (!it->second.harmful && live.count(it->first) == 0) {
      ++folded_[it->second.key].benign;
      it = origins_.erase(it);
    } else {
      ++it;
    }
  }
}

std::vector<std::pair<OpKey, Provenance::Counts>> Provenance::counts() {
  std::lock_guard<std::mutex> lock(mu_);
  std::unordered_map<OpKey, Counts, OpKeyHash> counts = folded_;
  for (const auto& [id, o] : origins_) {
    if (!o.harmful) {
      ++counts[o.key].benign;
    } else if (o.rec.inputs_finite) {
      ++counts[o.key].harmful;
    }
  }
  return {counts.begin(), counts.end()};
}

Provenance& provenance() {
  static auto* p = new Provenance();  // never destroyed: callbacks may outlive main
  return *p;
}

}  // namespace ampscope::detail
