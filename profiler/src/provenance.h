// Non-finite provenance: which op created the NaN/Inf values that tensors carry, and whether they
// ever reached something that matters (a module output, a gradient, a parameter or optimizer
// state) or were consumed harmlessly (an -inf mask through softmax, log(0) discarded by where).
//
// Every observed op output is checked for NaN/Inf, so a tensor holding non-finite values was
// produced by an observed op: its storage is "tainted" with the id of the origin (the op call that
// first made non-finite values from finite inputs, or the first op to see values of unknown
// source). Taints are held through weak references, so a freed storage's address is never
// mistaken for a new one's. Only the rare non-finite paths take the lock.
#pragma once

#include <ATen/core/ivalue.h>
#include <ampscope/profiler/observer.h>
#include <c10/core/StorageImpl.h>
#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/autograd/function.h>

#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "observer_state.h"

namespace ampscope::detail {

/// One creation of non-finite values.
struct Origin {
  OpKey key;             ///< the entry of the op call that made them
  NonFiniteRecord rec;   ///< what the report's first_nonfinite says if it turns out harmful
  bool harmful = false;  ///< reached a module output, a gradient, a parameter or optimizer state
};

class Provenance {
 public:
  /// Forgets every origin and taint (start of a run).
  void reset();
  /// True while some storage may carry non-finite values (one relaxed load).
  bool any_tainted() const { return tainted_.load(std::memory_order_relaxed) > 0; }

  /// Registers a creation; returns its id.
  std::int64_t add(Origin origin);
  /// Marks the storages of the tensors in `values` as carrying values of origin `id`.
  void taint(const std::vector<c10::IValue>& values, std::int64_t id);
  /// Clears the taint of the storages of the tensors in `values` (they were rewritten finite).
  void untaint(const std::vector<c10::IValue>& values);
  /// The origin of the first tainted tensor in `values` (-1 when none).
  std::int64_t origin_of(const std::vector<c10::IValue>& values);
  /// The origin of one tensor's storage (-1 when untainted).
  std::int64_t origin_of(const at::Tensor& t);
  /// Remembers the autograd nodes (grad_fn) of the tensors in `values` as made by origin `id`:
  /// a backward pass that starts from one of them differentiates a non-finite loss.
  void taint_nodes(const std::vector<c10::IValue>& values, std::int64_t id);
  /// The origin whose values a node's forward output held (-1 when none).
  std::int64_t origin_of_node(const torch::autograd::Node* node);
  /// The latest forward origin of `step` whose values are still alive somewhere (held by a
  /// tensor, e.g. saved for backward): a gradient going non-finite then most likely carries it.
  std::int64_t live_forward_origin(std::int64_t step);

  /// Marks origin `id` harmful and returns its record (nullopt for an unknown id).
  std::optional<NonFiniteRecord> make_harmful(std::int64_t id);
  /// The record of origin `id`.
  std::optional<NonFiniteRecord> record(std::int64_t id);
  /// Per entry key: creations never found harmful (benign), and creations from finite inputs
  /// that were (harmful).
  struct Counts {
    std::int64_t benign = 0;
    std::int64_t harmful = 0;
  };
  std::vector<std::pair<OpKey, Counts>> counts();

 private:
  struct Taint {
    c10::weak_intrusive_ptr<c10::StorageImpl> storage;
    std::int64_t origin = -1;
  };
  /// Keeps the origin list bounded: non-harmful origins whose values are all gone are folded
  /// into per-key benign counts. Caller holds mu_.
  void compact();
  void drop_expired();
  std::mutex mu_;
  std::atomic<std::int64_t> tainted_{0};
  std::unordered_map<const c10::StorageImpl*, Taint> taints_;
  struct NodeTaint {
    std::weak_ptr<torch::autograd::Node> node;
    std::int64_t origin = -1;
  };
  std::unordered_map<const torch::autograd::Node*, NodeTaint> nodes_;
  std::map<std::int64_t, Origin> origins_;  ///< by id, in creation order
  std::int64_t next_id_ = 0;
  std::unordered_map<OpKey, Counts, OpKeyHash> folded_;
};

/// The process-wide provenance tracker.
Provenance& provenance();

}  // namespace ampscope::detail
