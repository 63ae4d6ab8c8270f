// GPU kernel tracing behind a small interface: an ActivitySource (CUPTI, or a mock in tests)
// delivers plain records; the KernelTracer ties them to op entries through external correlation
// ids and aggregates per entry. No CUDA or CUPTI headers here.
//
// How records meet ops: around each recorded top-level op the observer pushes an external id
// (one per call); CUPTI then emits, for every CUDA API call made inside, an external-correlation
// record {correlation_id, external_id}; kernels and memcpys carry the same correlation_id. The
// observer binds each external id to its entry when the op ends. Records arrive late, in any
// order, split over several flushes: unmatched ones wait a few rounds, then count as unattributed.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ampscope {

/// A kernel execution.
struct KernelActivity {
  std::string name;  ///< mangled or demangled kernel name, as CUPTI gives it
  std::uint64_t start_ns = 0;
  std::uint64_t end_ns = 0;
  std::uint32_t correlation_id = 0;
  std::uint32_t stream = 0;
  std::uint32_t device = 0;
};

/// A memory copy.
struct MemcpyActivity {
  std::uint64_t bytes = 0;
  std::uint8_t kind = 0;  ///< CUpti_ActivityMemcpyKind (1: HtoD, 2: DtoH, 8: DtoD, ...)
  std::uint64_t start_ns = 0;
  std::uint64_t end_ns = 0;
  std::uint32_t correlation_id = 0;
};

/// Ties a CUDA API call (and the kernels/memcpys it launched) to an external id.
struct ExternalCorrelation {
  std::uint32_t correlation_id = 0;
  std::uint64_t external_id = 0;
};

/// A CUDA runtime call that blocks the host until device work finishes.
struct SyncCall {
  std::string name;  ///< "cudaStreamSynchronize", "cudaDeviceSynchronize", ...
  std::uint32_t correlation_id = 0;
};

/// Records delivered together (one CUPTI buffer, or one mock flush).
struct ActivityBatch {
  std::vector<KernelActivity> kernels;
  std::vector<MemcpyActivity> memcpys;
  std::vector<ExternalCorrelation> correlations;
  std::vector<SyncCall> syncs;
};

/// Receives batches; may be called from any thread (CUPTI calls it from its own).
using ActivitySink = std::function<void(ActivityBatch&&)>;

/// A source of activity records. Implementations never throw.
class ActivitySource {
 public:
  virtual ~ActivitySource() = default;
  /// Starts tracing into `sink`. False when tracing is unavailable; note() says why.
  virtual bool start(ActivitySink sink) = 0;
  /// Flushes what is left and stops tracing.
  virtual void stop() = 0;
  /// Delivers every completed record to the sink (before returning, for CUPTI's forced flush).
  virtual void flush() = 0;
  /// Marks the calling thread's CUDA calls with `external_id` until the matching pop.
  virtual void push_external_id(std::uint64_t external_id) = 0;
  virtual void pop_external_id() = 0;
  /// Why the source is off ("" while it traces).
  virtual std::string note() const = 0;
};

/// The CUPTI source. Off (with a note, never an exception) with no GPU, no driver, another CUPTI
/// subscriber in the process (e.g. torch.profiler), missing privileges, or AMPSCOPE_CUPTI=0.
std::unique_ptr<ActivitySource> make_cupti_source();

/// Makes the source each observer run traces with: CUPTI, unless a factory was installed.
std::unique_ptr<ActivitySource> make_activity_source();
/// Installs the factory make_activity_source() uses (tests: a mock source; nullptr: CUPTI).
/// Takes effect at the next Observer::start().
void set_activity_source_factory(std::function<std::unique_ptr<ActivitySource>()> factory);

/// What kind of kernel a name denotes, by name heuristics (see classify_kernel).
struct KernelClass {
  bool matrix = false;       ///< a GEMM / convolution / attention (matrix-multiply) kernel
  bool tensor_core = false;  ///< its name says it runs on tensor cores
};

/// Name heuristics: matrix kernels contain gemm/conv/matmul/mma/attention markers; tensor-core
/// ones contain hmma/imma/wgmma/xmma/tensorop/mma instruction shapes (16816, 1688, 884...), or
/// are sm80+/cutlass/cuBLASLt GEMMs whose name carries f16/bf16/tf32/e4m3/e5m2 operand types.
/// Limits: names are not a contract; a kernel named without these markers (JIT, Triton, custom
/// CUDA) is "matrix, no tensor cores" or not matrix at all. Reports show the names used.
KernelClass classify_kernel(std::string_view name);

/// Time spent in one kernel name within an entry.
struct KernelName {
  std::string name;
  std::int64_t launches = 0;
  std::int64_t time_ns = 0;
};

/// Kernels and copies attributed to one op entry.
struct KernelSummary {
  std::int64_t launches = 0;
  std::int64_t time_ns = 0;
  std::int64_t matrix_launches = 0;       ///< classify_kernel(...).matrix
  std::int64_t tensor_core_launches = 0;  ///< classify_kernel(...).tensor_core
  std::int64_t memcpys = 0;
  std::int64_t memcpy_bytes = 0;
  std::int64_t memcpy_time_ns = 0;
  std::vector<KernelName> top;  ///< by time, at most kMaxKernelNames
  static constexpr std::size_t kMaxKernelNames = 8;
  bool empty() const { return launches == 0 && memcpys == 0; }
  void merge(const KernelSummary& other);
};

/// Correlates activity records with op entries and aggregates them per entry. Thread-safe.
class KernelTracer {
 public:
  /// Entries are small non-negative ints chosen by the caller (the observer's entry ids).
  using EntryId = std::int32_t;
  /// Rounds (finish_round calls) an unmatched record waits before it counts as unattributed.
  static constexpr int kMaxAge = 3;
  /// Waiting records and correlations past which consume() ends a round itself (runs that never
  /// mark a step stay bounded in memory).
  static constexpr std::size_t kMaxWaiting = std::size_t{1} << 20;

  /// Binds an external id (one op call) to its entry. Call before or after its records arrive.
  void bind(std::uint64_t external_id, EntryId entry);
  /// External id whose CUDA calls are ampscope's own (its syncs are not counted).
  static constexpr std::uint64_t kOwnExternalId = ~std::uint64_t{0};
  /// Takes a batch of records (any order, any thread).
  void consume(ActivityBatch&& batch);
  /// Ends a round: resolves what can be, ages the rest, drops what is too old.
  void finish_round();
  /// The per-entry summaries gathered since the last take, and forgets them.
  std::vector<std::pair<EntryId, KernelSummary>> take();

  /// Kernels / memcpys never tied to an op (launched outside every recorded op, or too late).
  std::int64_t unattributed_kernels() const;
  /// Synchronising CUDA calls seen, ampscope's own excluded.
  std::int64_t host_syncs() const;
  /// Forgets everything.
  void reset();

 private:
  template <typename T>
  struct Aged {
    T value;
    int age = 0;
  };
  /// The entry of a correlation id: 1 found (entry set), 0 not yet known, -1 ampscope's own.
  int lookup_locked(std::uint32_t correlation_id, EntryId* entry) const;
  void resolve_locked(bool age_out);
  void round_locked();

  mutable std::mutex mu_;
  std::unordered_map<std::uint64_t, Aged<EntryId>> bound_;           ///< external id -> entry
  std::unordered_map<std::uint32_t, Aged<std::uint64_t>> external_;  ///< correlation -> external
  std::vector<Aged<KernelActivity>> kernels_;                        ///< waiting for their entry
  std::vector<Aged<MemcpyActivity>> memcpys_;
  std::vector<Aged<SyncCall>> syncs_;
  std::unordered_map<EntryId, KernelSummary> summaries_;
  std::int64_t unattributed_ = 0;
  std::int64_t host_syncs_ = 0;
};

}  // namespace ampscope
