// Internal state behind the Observer: interned op names, per-thread aggregation tables, the
// forward (thread, sequence number) -> layer ring used to attribute backward nodes, and the
// run-wide records (first non-finite, loss scale). No torch headers.
#pragma once

#include <ampscope/profiler/observer.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace ampscope::detail {

/// Op name <-> small id. Ids are never reused within a process.
class InternTable {
 public:
  std::uint32_t intern(std::string_view name);
  std::string name(std::uint32_t id) const;
  std::vector<std::string> names() const;

 private:
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::uint32_t> ids_;
  std::vector<std::string> names_;
};

/// One thread's aggregation table. Locked by its owner per record and by snapshots.
struct ThreadTable {
  std::mutex mu;
  std::unordered_map<OpKey, OpAggregate, OpKeyHash> entries;
};

/// Maps forward sequence numbers of one forward thread to the layer that created the node.
/// A fixed ring (old entries are overwritten), written by the forward thread, read by autograd
/// threads; entries are packed atomics so reads never tear.
class SeqRing {
 public:
  static constexpr std::size_t kSize = std::size_t{1} << 18;
  void put(std::int64_t seq, LayerId layer);
  /// The layer recorded for `seq`, or -1 when unknown or overwritten.
  LayerId get(std::int64_t seq) const;

 private:
  std::unique_ptr<std::atomic<std::uint64_t>[]> slots_{new std::atomic<std::uint64_t>[kSize]()};
};

/// Appends a GradScaler update to a bounded series (at most about kMaxLossScale points): past
/// the bound the older half is thinned, keeping every found-inf update.
void append_loss_scale(std::vector<LossScaleRecord>& series, const LossScaleRecord& rec);

/// Which layer ids ObserverOptions::layers lets through. Decisions are cached per id in
/// atomics, so the hot path is one relaxed load; names arrive from the layer registry.
class LayerFilter {
 public:
  /// Installs a filter (start of a run); forgets cached decisions.
  void configure(const NameFilter& filter);
  /// Records the name of an id (and forgets its cached decision).
  void name(LayerId id, std::string_view name);
  /// True when ops of layer `id` are recorded.
  bool included(LayerId id) {
    if (!active_.load(std::memory_order_acquire)) return true;
    if (id >= 0 && static_cast<std::size_t>(id) < kSlots) {
      auto f = flags_[static_cast<std::size_t>(id)].load(std::memory_order_relaxed);
      if (f != kUnknown) return f == kIn;
    }
    return included_slow(id);
  }

 private:
  static constexpr std::size_t kSlots = 1 << 16;
  static constexpr std::uint8_t kUnknown = 0, kIn = 1, kOut = 2;
  bool included_slow(LayerId id);
  std::atomic<bool> active_{false};
  std::mutex mu_;
  NameFilter filter_;
  std::vector<std::string> names_;
  std::unique_ptr<std::atomic<std::uint8_t>[]> flags_{new std::atomic<std::uint8_t>[kSlots]()};
};

/// Run-wide state shared by all threads.
struct GlobalState {
  std::atomic<bool> running{false};
  std::atomic<std::uint64_t> generation{0};  ///< bumped by every start(): stale thread state resets
  std::atomic<std::int64_t> step{0};
  int every = 1;
  bool watch = false;              ///< ObserverOptions::watch_unsampled
  /// The per-op sentinel replaces the watch from this step on (-1: not armed); see arm().
  std::atomic<std::int64_t> armed_from{-1};
  bool shadow = false;
  bool input_stats = false;
  NameFilter op_filter;
  LayerFilter layer_filter;
  /// Some ops or layers are left out: NaN/Inf may come from what the observer never saw.
  bool filtered = false;
  /// The autograd nodes forward calls made while creating NaN/Inf from finite inputs: their
  /// thread and sequence numbers [lo, hi). A backward node among them meets its own forward's
  /// values. The last kMaxCreations, guarded by creations_mu (touched only where NaN/Inf are).
  struct CreationSeqs {
    std::uint64_t thread = 0;
    std::int64_t lo = 0, hi = 0;
  };
  static constexpr std::size_t kMaxCreations = 256;
  std::mutex creations_mu;
  std::vector<CreationSeqs> creations;
  InternTable ops;

  std::mutex tables_mu;
  std::vector<std::shared_ptr<ThreadTable>> tables;

  std::mutex rings_mu;
  std::unordered_map<std::uint64_t, std::shared_ptr<SeqRing>> rings;  ///< by logical thread id

  std::atomic<bool> have_first_nonfinite{false};
  std::mutex records_mu;
  std::optional<NonFiniteRecord> first_nonfinite;  ///< origin of the first harmful NaN/Inf
  /// Non-finite gradients of the current step, harmful unless a GradScaler catches them
  /// (found inf, step skipped); decided when the step's fate is known.
  std::optional<NonFiniteRecord> pending_gradient;
  std::atomic<bool> have_pending{false};
  std::optional<NonFiniteRecord> scaler_caught;  ///< first non-finite gradients a scaler caught
  std::int64_t scaler_caught_steps = 0;
  std::atomic<bool> scaler_seen{false};  ///< a GradScaler unscaled or updated in this run
  std::atomic<bool> scaler_open{false};  ///< a GradScaler unscaled, its update still to come
  std::atomic<bool> forward_seen{false};  ///< a layer was entered: setup is over
  std::atomic<bool> optimizer_stepped{false};  ///< an optimizer step ran in this run
  std::atomic<bool> after_backward{false};  ///< a backward ran since the last forward/step
  std::vector<LossScaleRecord> loss_scale;  ///< bounded, see append_loss_scale
  std::int64_t loss_scale_updates = 0;
  std::int64_t step_at_last_update = 0;  ///< step counter after the last GradScaler update

  /// Registers a new table for the calling thread.
  std::shared_ptr<ThreadTable> new_table();
  /// The ring of a forward thread, created on first use.
  std::shared_ptr<SeqRing> ring(std::uint64_t thread_id);
  /// The ring of a forward thread, or nullptr.
  std::shared_ptr<SeqRing> find_ring(std::uint64_t thread_id);
  /// Clears every table and record (tables stay registered).
  void reset();
};

GlobalState& global();

}  // namespace ampscope::detail
