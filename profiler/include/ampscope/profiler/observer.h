// The op observer: global RecordFunction callbacks that turn every top-level ATen op call (and
// every autograd node) into one aggregated entry per (layer, op, phase, dtypes).
//
// Thread model: callbacks run on any thread (the user's, autograd workers). Each thread
// aggregates into its own table, locked only by itself and by snapshot(). The layer and phase
// stacks are per thread and set by the hooks/ component; the observer knows layers only as ids.
#pragma once

#include <ampscope/profiler/entry_stats.h>
#include <ampscope/profiler/fp32_check.h>
#include <ampscope/profiler/kernel_trace.h>
#include <ampscope/profiler/name_filter.h>
#include <ampscope/profiler/phases.h>
#include <ampscope/profiler/stats.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace at {
class Tensor;
}

namespace ampscope {

/// Layer ids are issued by the layer registry (hooks/). 0 is "<outside>".
using LayerId = std::int32_t;
inline constexpr LayerId kOutsideLayerId = 0;

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
  /// How unsampled steps are watched for NaN/Inf. false: the per-op sentinel (every op output
  /// and incoming gradient is checked). true (a front end with module hooks, the Python one):
  /// the front end checks module outputs and parameter gradients (any_nonfinite) and replays a
  /// module whose output went non-finite under the per-op sentinel (begin_replay) to find the op;
  /// ops outside every module (a loss computed in the training loop) keep the per-op sentinel.
  /// A NaN/Inf the watch cannot attribute to an op arms the per-op sentinel for the rest of the
  /// run (ObserverSnapshot::notes says from which step).
  bool watch_unsampled = false;
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

/// Hash of an OpKey, for maps keyed by entry.
struct OpKeyHash {
  std::size_t operator()(const OpKey& k) const noexcept;
};

/// Aggregated calls of one key. Memory is bounded: no per-call storage.
struct OpAggregate : EntryStats {
  std::int64_t shadow_step = -1;  ///< last step a shadow re-check ran for this entry
  /// Adds another aggregate of the same key (EntryStats::merge).
  void merge(const OpAggregate& other);
};

/// The op call that created non-finite values (the origin of the first harmful ones, in a
/// snapshot's first_nonfinite).
struct NonFiniteRecord {
  std::int64_t step = 0;
  Phase phase = Phase::kForward;
  LayerId layer = kOutsideLayerId;
  std::string op;
  bool nan = false;  ///< true: NaN, false: inf
  bool inputs_finite = true;
  /// A scalar argument was NaN/inf (e.g. masked_fill(mask, -inf)): the values came from the
  /// model's own constant, not from arithmetic.
  bool nonfinite_scalar = false;
  /// A backward node met NaN/Inf that its own forward op had made from finite inputs and that
  /// were consumed in forward (GELU's pow(x, 3) overflowing into tanh): the forward's precision
  /// made them, not the gradients' scale.
  bool forward_nonfinite = false;
  /// What the values reached first: "module_output" | "gradient" | "parameter_gradient" |
  /// "optimizer" | "end_of_run" ("" while not known to be harmful).
  std::string reached;
  std::int64_t reached_step = -1;  ///< the step at which they reached it
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
  std::optional<NonFiniteRecord> first_nonfinite;  ///< origin of the first harmful NaN/Inf
  /// Non-finite gradients a GradScaler caught (found inf, step skipped): the first one's origin.
  std::optional<NonFiniteRecord> scaler_caught;
  std::int64_t scaler_caught_steps = 0;  ///< steps whose non-finite gradients the scaler caught
  std::vector<LossScaleRecord> loss_scale;  ///< bounded: older points thinned past kMaxLossScale
  std::int64_t loss_scale_updates = 0;      ///< every update seen, kept or thinned
  std::int64_t steps = 0;  ///< completed steps
  std::vector<std::string> notes;  ///< what the device side could not see, and why
  std::int64_t host_syncs = -1;    ///< synchronising CUDA calls CUPTI saw (-1: not traced)
};

/// One observation point of a graph that torch.compile's inductor compiled (python/ampscope/
/// _compile.py inserts them): the node's op and layer, and what autocast did, from the graph.
struct CompiledPoint {
  LayerId layer = kOutsideLayerId;
  std::string op;                ///< the graph node's op, e.g. "aten::addmm"
  std::int8_t input_dtype = -1;  ///< dtype its floating inputs had before autocast's casts
  AutocastClass autocast = AutocastClass::kNone;
  bool module_output = false;    ///< the value leaves its module (a harm check, as eager's)
  std::string_view region;       ///< ATen calls computing it from its deps (float32 re-check)
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
  /// True once a harmful NaN/Inf was seen in this run (its origin is recorded): one that reached
  /// a module output, a gradient, a parameter or optimizer state. NaN/Inf consumed harmlessly
  /// (benign) never count.
  static bool nonfinite_seen();
  /// Checks tensors a module returned: tainted ones holding NaN/Inf make their origin harmful.
  /// Cheap when nothing is tainted (one atomic load).
  static void check_module_outputs(const std::vector<at::Tensor>& outputs);
  /// True while some live tensor may hold NaN/Inf created by an observed op.
  static bool nonfinite_pending();
  /// A parameter gradient held NaN/Inf (gradient hooks). `layer` owns the parameter.
  static void note_nonfinite_param_grad(LayerId layer, const std::string& param, bool nan);
  /// The sentinel on a parameter gradient of an unsampled step: checks it for NaN/Inf (CPU
  /// tensors; one read) and notes it as above.
  static void check_param_grad(LayerId layer, const std::string& param, const at::Tensor& grad);
  /// The stats of a tensor the observer may have read already in this step (a parameter
  /// gradient its AccumulateGrad node received): the same elements at the same version are read
  /// once per step and thread.
  static Stats stats_once(const at::Tensor& t);
  /// The optimizer is about to use the gradients: a non-finite gradient seen in this step is
  /// harmful (a GradScaler that found inf would not have called the optimizer).
  static void optimizer_step_begins();
  /// Registers a parameter with its layer: its AccumulateGrad node's work is attributed to the
  /// layer that owns it. Held weakly (a parameter freed is forgotten).
  static void name_param(const at::Tensor& param, LayerId layer);
  /// Forgets every parameter named (the layer registry was reset: their layer ids are gone).
  static void forget_params();

  /// Tells the observer the name of a layer id (for ObserverOptions::layers); the layer
  /// registry calls it for every id it issues. Ids may be renamed (registry reset).
  static void name_layer(LayerId id, std::string_view name);

  /// Pushes/pops the layer that ops on this thread are attributed to (forward attribution).
  static void push_layer(LayerId id);
  static void pop_layer();
  /// The innermost layer pushed on this thread (kOutsideLayerId when none).
  static LayerId current_layer();
  /// Pushes/pops a phase override on this thread (e.g. optimizer).
  static void push_phase(Phase p);
  static void pop_phase();

  /// A compiled graph's observation point: `output` recorded as one call of the point's op in
  /// its layer, through the same path as a dispatcher op (stats, sentinel, provenance, every).
  /// `deps` are the nearest observed values (or graph inputs) it was computed from: they stand
  /// for the op's inputs in the non-finite origin check. Thread-safe; no-op when not running.
  static void record_compiled(const CompiledPoint& point, const at::Tensor& output,
                              const std::vector<at::Tensor>& deps);

  /// True while the current step is watched by the front end (ObserverOptions::watch_unsampled,
  /// an unsampled step, the per-op sentinel not armed, no replay running on this thread).
  static bool watching_now();
  /// How the current step is watched on this thread: 0 not watched (ops are observed: the
  /// front end pushes layers); 1 watched with the op callbacks on (a GradScaler is in use: they
  /// watch its updates and the ops outside every module, which needs the layer stack); 2
  /// watched with the op callbacks off (the layer stack is not used).
  static int watch_mode();
  /// True when a CPU floating tensor among `tensors` holds NaN/Inf (other tensors are not
  /// read). Reads each buffer once per step and version (shared with the per-op paths).
  static bool any_nonfinite(const std::vector<at::Tensor>& tensors);
  /// Elements the observer's reads asked for since start(), all threads: {read by a stats pass,
  /// scanned for NaN/Inf only, answered from an earlier read of the same elements and version
  /// in the step}. What a benchmark divides by its steps to see what a step reads.
  static std::array<std::int64_t, 3> read_counts();
  /// Brackets a replay on this thread: a module whose output went non-finite on a watched step
  /// runs its forward again from the same inputs and RNG state, observed by the per-op sentinel,
  /// so the op that made the values is found (at the current step and layer).
  static void begin_replay();
  static void end_replay();
  /// A watched step saw NaN/Inf that no op can be named for (`what`: e.g. the module output a
  /// replay did not reproduce, or a parameter the optimizer wrote): recorded as the origin in
  /// `layer` at `step` (-1: the current one; phase `phase`, computed in `dtype`) unless one is
  /// known, and the per-op sentinel is armed from the current step on. `inputs_finite` false:
  /// the values came in from outside (the model's inputs, e.g. the data).
  static void note_unattributed(LayerId layer, const std::string& what, Phase phase,
                                std::int8_t dtype, bool nan, std::int64_t step = -1,
                                bool inputs_finite = true);
  /// The outermost module's inputs (`tensors`) ended its call holding NaN/Inf: when the run's
  /// first harmful origin is an op of this step handed non-finite inputs of unknown source,
  /// they were the model's inputs (the data): it becomes `<outside>`, op `what`. Returns true
  /// when it did.
  static bool blame_model_inputs(const std::vector<at::Tensor>& tensors, const std::string& what);
  /// Merged copy of everything recorded so far.
  static ObserverSnapshot snapshot();
  /// Name of an interned op id.
  static std::string op_name(std::uint32_t id);
};

/// Python-style name of a c10::ScalarType given as int8 ("float32", "bfloat16", "int64", ...);
/// "" for -1.
std::string dtype_name(std::int8_t scalar_type);

}  // namespace ampscope
