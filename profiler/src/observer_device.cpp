// The observer's device side (see observer_device.h). Each (thread table, key) entry that sees a
// CUDA tensor gets an entry id: the index of its device stats slot and the id the kernel tracer
// aggregates under. Results reach the tables only at device_flush(), i.e. once per step.
#include "observer_device.h"

#include <ampscope/profiler/cuda_stats.h>
#include <ampscope/profiler/kernel_trace.h>
#include <ampscope/profiler/tensor_stats.h>
#include <c10/cuda/CUDAStream.h>

#include <deque>
#include <limits>
#include <mutex>

#include "observer_state.h"

namespace ampscope::detail {
namespace {

/// The entry behind an entry id: an op entry (table, key), or a queue_device_stats target.
struct EntryOwner {
  ThreadTable* table = nullptr;  ///< tables are never destroyed (GlobalState keeps them)
  OpKey key;
  std::shared_ptr<DeviceStatsTarget> target;
  std::atomic<std::int64_t> step{0};  ///< step of its latest CUDA stats call
};

/// Results read back for an entry that was not in its table yet (a concurrent flush).
struct Deferred {
  int entry = 0;
  DeviceStatsBuffer::SlotResult stats;
  KernelSummary kernels;
};

struct DeviceSide {
  DeviceStatsBuffer stats;
  KernelTracer tracer;
  /// The current run's source. Sources are never destroyed (a callback still in flight on
  /// another thread may hold one): replaced ones move to `retired`.
  std::atomic<ActivitySource*> source{nullptr};
  std::vector<std::unique_ptr<ActivitySource>> retired;
  std::atomic<bool> tracing{false};
  std::atomic<bool> traced{false};  ///< tracing ran in this run (it stops at device_stop)
  std::atomic<bool> cuda_used{false};
  std::atomic<std::uint64_t> next_id{1};  ///< external ids and stats call order, one counter
  std::atomic<std::uint64_t> generation{1};
  std::mutex mu;                  ///< owners, deferred, notes
  std::deque<EntryOwner> owners;  ///< index = entry id; a deque keeps addresses stable
  std::unordered_map<const DeviceStatsTarget*, int> target_ids;
  std::vector<Deferred> deferred;
  std::string tracer_note;
  bool cuda_origin = false;
  std::mutex flush_mu;  ///< one flush at a time
};

DeviceSide& side() {
  static auto* s = new DeviceSide();  // never destroyed: callbacks may outlive main
  return *s;
}

struct EntryRef {
  int id = -1;
  EntryOwner* owner = nullptr;
};

/// The entry id of (table, key), cached per thread (each table belongs to one thread).
EntryRef entry_of(ThreadTable& table, const OpKey& key) {
  struct Cache {
    std::uint64_t generation = 0;
    ThreadTable* table = nullptr;
    std::unordered_map<OpKey, EntryRef, OpKeyHash> refs;
  };
  thread_local Cache cache;
  auto& d = side();
  const auto gen = d.generation.load(std::memory_order_acquire);
  if (cache.generation != gen || cache.table != &table) {
    cache.refs.clear();
    cache.generation = gen;
    cache.table = &table;
  }
  auto it = cache.refs.find(key);
  if (it != cache.refs.end()) return it->second;
  std::lock_guard<std::mutex> lock(d.mu);
  EntryOwner& owner = d.owners.emplace_back();
  owner.table = &table;
  owner.key = key;
  EntryRef ref{static_cast<int>(d.owners.size() - 1), &owner};
  cache.refs.emplace(key, ref);
  return ref;
}

/// Runs `f` with ampscope's own CUDA calls marked, so CUPTI counts neither its kernels nor its
/// syncs as the user's.
template <typename F>
auto as_own_work(F&& f) {
  auto& d = side();
  const bool tracing = d.tracing.load(std::memory_order_acquire);
  if (tracing) d.source.load()->push_external_id(KernelTracer::kOwnExternalId);
  auto result = f();
  if (tracing) d.source.load()->pop_external_id();
  return result;
}

void record_cuda_origin(const OpKey& key, std::int64_t step, const Stats& stats) {
  auto& g = global();
  NonFiniteRecord rec;
  rec.step = step;
  rec.phase = key.phase;
  rec.layer = key.layer;
  rec.op = g.ops.name(key.op);
  rec.nan = stats.nan > 0;
  rec.inputs_finite = true;  // the earliest non-finite launch of its step: its inputs were
                             // outputs of earlier (finite) launches, parameters or data
  rec.compute_dtype = key.compute_dtype;
  rec.output_stats = stats;
  std::lock_guard<std::mutex> lock(g.records_mu);
  if (g.first_nonfinite) return;
  g.first_nonfinite = std::move(rec);
  g.have_first_nonfinite.store(true, std::memory_order_release);
  side().cuda_origin = true;
}

/// Folds one entry's read-back into its table entry; false when the entry is not there yet.
bool apply(const EntryOwner& owner, const Deferred& r, std::uint64_t origin_seq) {
  if (owner.target) {
    if (r.stats.stats.count > 0) owner.target->add(r.stats.stats);
    return true;
  }
  const std::int64_t step = owner.step.load(std::memory_order_relaxed);
  bool origin = false;
  {
    std::lock_guard<std::mutex> lock(owner.table->mu);
    auto it = owner.table->entries.find(owner.key);
    if (it == owner.table->entries.end() || it->second.calls == 0) return false;
    OpAggregate& e = it->second;
    e.kernels.merge(r.kernels);
    const Stats& s = r.stats.stats;
    if (s.count == 0) return true;
    e.stats.merge(s);
    if (s.finite() > 0) add_series_point(e.absmax_by_step, step, s.absmax);
    if (origin_seq != 0 && r.stats.first_nonfinite_seq == origin_seq) {
      ++e.nonfinite_from_finite;
      if (e.first_nonfinite_step < 0 || step < e.first_nonfinite_step)
        e.first_nonfinite_step = step;
      origin = true;
    }
  }
  if (origin) record_cuda_origin(owner.key, step, r.stats.stats);
  return true;
}

/// Device stats and kernel summaries of this flush, by entry, plus what was deferred before.
std::vector<Deferred> gather(DeviceSide& d, bool with_stats) {
  std::vector<Deferred> all;
  {
    std::lock_guard<std::mutex> lock(d.mu);
    all.swap(d.deferred);
  }
  if (with_stats) {
    for (auto& r : as_own_work([&] { return d.stats.read_and_reset(); })) {
      Deferred x;
      x.entry = r.slot;
      x.stats = std::move(r);
      all.push_back(std::move(x));
    }
  }
  for (auto& [entry, summary] : d.tracer.take()) {
    Deferred x;
    x.entry = entry;
    x.kernels = std::move(summary);
    all.push_back(std::move(x));
  }
  return all;
}

void apply_all(DeviceSide& d, std::vector<Deferred>&& all) {
  std::vector<EntryOwner*> owners(all.size(), nullptr);
  {
    std::lock_guard<std::mutex> lock(d.mu);
    for (std::size_t i = 0; i < all.size(); ++i) {
      const int e = all[i].entry;
      if (e >= 0 && static_cast<std::size_t>(e) < d.owners.size()) owners[i] = &d.owners[e];
    }
  }
  // The run's first non-finite value on CUDA: the earliest op call (launch order) whose output
  // held NaN/Inf, among the calls of this flush (one step).
  std::uint64_t origin = 0;
  if (!global().have_first_nonfinite.load(std::memory_order_acquire)) {
    for (std::size_t i = 0; i < all.size(); ++i) {
      const auto s = all[i].stats.first_nonfinite_seq;
      if (owners[i] && !owners[i]->target && s != 0 && (origin == 0 || s < origin)) origin = s;
    }
  }
  std::vector<Deferred> later;
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (owners[i] && !apply(*owners[i], all[i], origin)) later.push_back(std::move(all[i]));
  }
  std::lock_guard<std::mutex> lock(d.mu);
  for (auto& r : later) d.deferred.push_back(std::move(r));
}

}  // namespace

void device_start() {
  auto& d = side();
  std::lock_guard<std::mutex> flush(d.flush_mu);
  d.stats.reset();
  d.tracer.reset();
  d.cuda_used.store(false);
  {
    std::lock_guard<std::mutex> lock(d.mu);
    d.owners.clear();
    d.target_ids.clear();
    d.deferred.clear();
    d.cuda_origin = false;
    d.tracer_note.clear();
  }
  d.generation.fetch_add(1, std::memory_order_acq_rel);
  d.retired.push_back(make_activity_source());
  d.source.store(d.retired.back().get());
  const bool ok =
      d.source.load()->start([](ActivityBatch&& b) { side().tracer.consume(std::move(b)); });
  if (!ok) {
    std::lock_guard<std::mutex> lock(d.mu);
    d.tracer_note = d.source.load()->note();
  }
  d.traced.store(ok);
  d.tracing.store(ok, std::memory_order_release);
}

void device_stop() {
  auto& d = side();
  if (d.tracing.exchange(false)) {
    d.source.load()->stop();  // forced flush: every record is in the tracer now
    // Resolve what can be; anything still unmatched now counts as unattributed.
    for (int i = 0; i <= KernelTracer::kMaxAge; ++i) d.tracer.finish_round();
  }
  device_flush();
}

bool device_tracing() { return side().tracing.load(std::memory_order_relaxed); }

std::uint64_t device_call_begin() {
  auto& d = side();
  if (!d.tracing.load(std::memory_order_acquire)) return 0;
  const std::uint64_t id = d.next_id.fetch_add(1, std::memory_order_relaxed);
  d.source.load()->push_external_id(id);
  return id;
}

void device_call_end() {
  auto& d = side();
  if (d.tracing.load(std::memory_order_acquire)) d.source.load()->pop_external_id();
}

void device_bind(std::uint64_t external_id, ThreadTable& table, const OpKey& key) {
  if (external_id == 0) return;
  side().tracer.bind(external_id, entry_of(table, key).id);
}

namespace {

bool device_readable(const at::Tensor& t) {
  if (!t.defined() || !t.is_cuda() || t.layout() != c10::kStrided) return false;
  if (!has_readable_storage(t)) return false;  // a CUDA DTensor/fake/functorch wrapper
  const auto dt = to_dtype(t.scalar_type());
  return dt && *dt != DType::kFloat64;
}

/// Enqueues the stats of a readable CUDA tensor into slot `id` (no sync).
bool enqueue(const at::Tensor& t, int id) {
  auto& d = side();
  d.cuda_used.store(true, std::memory_order_relaxed);
  const at::Tensor src = t.is_neg() ? t.resolve_neg() : t;
  const TensorView view = make_view(src);
  const int device = src.device().index();
  void* stream = c10::cuda::getCurrentCUDAStream(device).stream();
  const std::uint64_t seq = d.next_id.fetch_add(1, std::memory_order_relaxed);
  return as_own_work([&] { return d.stats.accumulate(view, device, id, stream, seq); });
}

}  // namespace

bool device_record_tensor(const at::Tensor& t, ThreadTable& table, const OpKey& key,
                          std::int64_t step) {
  if (!device_readable(t)) return false;
  const EntryRef ref = entry_of(table, key);
  ref.owner->step.store(step, std::memory_order_relaxed);
  return enqueue(t, ref.id);
}

void device_flush() {
  auto& d = side();
  std::lock_guard<std::mutex> flush(d.flush_mu);
  if (d.tracing.load(std::memory_order_acquire)) {
    d.source.load()->flush();
    d.tracer.finish_round();
  }
  apply_all(d, gather(d, d.cuda_used.load(std::memory_order_relaxed)));
}

void device_report(ObserverSnapshot& snap) {
  auto& d = side();
  const bool cuda = d.cuda_used.load();
  const bool traced = d.traced.load();
  if (traced) snap.host_syncs = d.tracer.host_syncs();
  std::lock_guard<std::mutex> lock(d.mu);
  // Tracing off is worth a note, except on a machine without CUDA in a run that used none
  // (there was nothing to trace).
  const bool no_cuda_note =
      !cuda_stats_available() && d.tracer_note.find(cuda_unavailable_reason()) != std::string::npos;
  if (!d.tracer_note.empty() && (cuda || !no_cuda_note)) snap.notes.push_back(d.tracer_note);
  if (cuda) {
    snap.notes.push_back(
        "CUDA: output stats are accumulated on the device and read back once per step (no host "
        "sync per op); backward nodes' incoming gradients are recorded the same way");
  }
  if (d.cuda_origin) {
    snap.notes.push_back(
        "CUDA: the first non-finite origin is the earliest launch of its step whose output held "
        "NaN/Inf (found at step granularity: its inputs were not re-checked and no float32 "
        "re-run was possible)");
  }
  if (auto n = d.stats.skipped_captures(); n > 0) {
    snap.notes.push_back("CUDA: " + std::to_string(n) +
                         " op outputs made during CUDA graph capture were not measured");
  }
  if (auto n = d.stats.errors(); n > 0) {
    snap.notes.push_back("CUDA stats: " + std::to_string(n) +
                         " calls failed and were left out (last: " + d.stats.last_error() + ")");
  }
  if (auto n = d.tracer.unattributed_kernels(); traced && n > 0) {
    snap.notes.push_back("kernel tracing: " + std::to_string(n) +
                         " kernels/copies ran outside every recorded op");
  }
}

}  // namespace ampscope::detail

namespace ampscope {

bool queue_device_stats(const at::Tensor& t, const std::shared_ptr<DeviceStatsTarget>& target) {
  if (!target || !detail::global().running.load() || !detail::device_readable(t)) return false;
  auto& d = detail::side();
  int id = -1;
  {
    std::lock_guard<std::mutex> lock(d.mu);
    auto it = d.target_ids.find(target.get());
    if (it != d.target_ids.end()) {
      id = it->second;
    } else {
      d.owners.emplace_back().target = target;
      id = static_cast<int>(d.owners.size() - 1);
      d.target_ids.emplace(target.get(), id);
    }
  }
  return detail::enqueue(t, id);
}

}  // namespace ampscope
