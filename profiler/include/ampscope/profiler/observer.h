// The op observer: global RecordFunction callbacks that turn every top-level ATen op call (and
// every autograd node) into one aggregated entry per (layer, op, phase, dtypes).
//
// Thread model: callbacks run on any thread (the user's, autograd workers). Each thread
// aggregates into its own table, locked only by itself and by snapshot(). The layer and phase
// stacks are per thread and set by the hooks/ component; the observer knows layers only as ids.
#pragma once

#include <ampscope/profiler/fp32_check.h>
#include <ampscope/profiler/kernel_trace.h>
#include <ampscope/profiler/name_filter.h>
#include <ampscope/profiler/stats.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ampscope {

/// Layer ids are issued by the layer registry (hooks/). 0 is "<outside>".
using LayerId = std::int32_t;
inline constexpr LayerId kOutsideLayerId = 0;

enum class Phase : std::uint8_t { kForward = 0, kBackward, kOptimizer };
/// "forward" | "backward" | "optimizer".
std::string_view phase_name(Phase p);

/// What autocast did to an op call.
enum class AutocastClass : std::uint8_t { kNone = 0, kLowerPrecision, kFp32, kPromote };
/// "none" | "lower_precision" | "fp32" | "promote".
std::string_view autocast_class_name(AutocastClass c);

/// Most points an op's per-step series keeps; longer runs are down-sampled (maxima kept).
inline constexpr std::size_t kMaxSeriesPoints = 256;

struct ObserverOptions {
  /// Record steps 0, N, 2N, ... only. On the others the recording callbacks are switched off
  /// (a light callback without inputs only watches for GradScaler updates).
  int every = 1;
  /// Re-run the first call of each low-precision (layer, op) entry of every recorded step in
  /// float32 and keep the worst error (ShadowSummary). Costs about one extra float32 forward.
  bool shadow = false;
  /// Layers recorded (hierarchical: "blocks.1" covers "blocks.1.ffn.wo"); ops in other layers
  /// are not recorded at all (their NaN/Inf go unseen).
  NameFilter layers;
  /// Ops (and autograd nodes, e.g. "AddmmBackward0") recorded, by name ("aten::matmul").
  NameFilter ops;
  /// Also take a stats block of every recorded op's floating inputs (OpAggregate::input_stats).
  bool input_stats = false;
};

/// Aggregation key of an entry. Dtypes are c10::ScalarType values as int8 (-1: none).
struct OpKey {
  LayerId layer = kOutsideLayerId;
  std::uint32_t op = 0;  ///< interned op name, see Observer::op_name
  Phase phase = Phase::kForward;
  std::int8_t input_dtype = -1;
  std::int8_t compute_dtype = -1;
  std::int8_t output_dtype = -1;
  AutocastClass autocast = AutocastClass::kNone;
  bool operator==(const OpKey& o) const;
};

/// Aggregated calls of one key. Memory is bounded: no per-call storage.
struct OpAggregate {
  std::int64_t calls = 0;
  std::int64_t casts = 0;
  std::int64_t first_step = 0;
  std::int64_t last_step = 0;
  std::int64_t nonfinite_from_finite = 0;
  std::int64_t first_nonfinite_step = -1;
  Stats stats;
  Stats input_stats;  ///< the calls' floating inputs (ObserverOptions::input_stats only)
  std::vector<std::pair<std::int64_t, double>> absmax_by_step;  ///< bounded, down-sampled
  ShadowSummary shadow;              ///< --shadow re-checks (checks == 0: none)
  KernelSummary kernels;             ///< CUDA kernels/copies of its calls (CUPTI; empty: none)
  std::int64_t shadow_step = -1;     ///< last step a shadow re-check ran for this entry
  void merge(const OpAggregate& other);
};

/// The first op call whose outputs held a non-finite value.
struct NonFiniteRecord {
  std::int64_t step = 0;
  Phase phase = Phase::kForward;
  LayerId layer = kOutsideLayerId;
  std::string op;
  bool nan = false;  ///< true: NaN, false: inf
  bool inputs_finite = true;
  std::optional<bool> fp32_also_nonfinite;
  std::optional<Fp32Check> fp32_check;  ///< the re-run's comparison, when it ran
  std::int8_t compute_dtype = -1;
  Stats output_stats;
};

struct LossScaleRecord {
  std::int64_t step = 0;
  double scale = 0.0;
  bool found_inf = false;
};

/// Everything the observer has aggregated, merged over threads.
struct ObserverSnapshot {
  std::vector<std::pair<OpKey, OpAggregate>> entries;
  std::vector<std::string> op_names;  ///< index = OpKey::op
  std::optional<NonFiniteRecord> first_nonfinite;
  std::vector<LossScaleRecord> loss_scale;  ///< bounded: older points thinned past kMaxLossScale
  std::int64_t loss_scale_updates = 0;      ///< every update seen, kept or thinned
  std::int64_t steps = 0;  ///< completed steps
  std::vector<std::string> notes;  ///< what the device side could not see, and why
  std::int64_t host_syncs = -1;    ///< synchronising CUDA calls CUPTI saw (-1: not traced)
};

/// Most loss-scale points a run keeps; older clean updates are thinned beyond it.
inline constexpr std::size_t kMaxLossScale = 1024;

/// Process-wide observer. All functions are thread-safe.
class Observer {
 public:
  /// Clears previous data and installs the callbacks. Throws if already running.
  static void start(const ObserverOptions& options = {});
  /// Removes the callbacks (data stays until the next start).
  static void stop();
  static bool running();

  /// Ends the current step (optimizer step detected or marked by the user).
  static void mark_step();
  static std::int64_t current_step();
  /// True while running and the current step is one that `every` samples.
  static bool sampling_now();
  /// True once some op has produced a NaN/Inf in this run (the first one is recorded).
  static bool nonfinite_seen();

  /// Tells the observer the name of a layer id (for ObserverOptions::layers); the layer
  /// registry calls it for every id it issues. Ids may be renamed (registry reset).
  static void name_layer(LayerId id, std::string_view name);

  /// Pushes/pops the layer that ops on this thread are attributed to (forward attribution).
  static void push_layer(LayerId id);
  static void pop_layer();
  /// Pushes/pops a phase override on this thread (e.g. optimizer).
  static void push_phase(Phase p);
  static void pop_phase();

  /// Merged copy of everything recorded so far.
  static ObserverSnapshot snapshot();
  /// Name of an interned op id.
  static std::string op_name(std::uint32_t id);
};

/// Python-style name of a c10::ScalarType given as int8 ("float32", "bfloat16", "int64", ...);
/// "" for -1.
std::string dtype_name(std::int8_t scalar_type);

}  // namespace ampscope
