// The report model: what one profiled run saw, per layer and op. Built by the session from the
// aggregated events, read back from report.json, consumed by the recommendation engine and the
// writers. No torch types here.
#pragma once

#include <ampscope/profiler/entry_stats.h>
#include <ampscope/profiler/fp32_check.h>
#include <ampscope/profiler/kernel_trace.h>
#include <ampscope/profiler/loss_counts.h>
#include <ampscope/profiler/named_enum.h>
#include <ampscope/profiler/phases.h>
#include <ampscope/profiler/stats.h>

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ampscope::reports {

inline constexpr const char* kReportSchema = "ampscope.report/1";
inline constexpr const char* kPrecisionMapSchema = "ampscope.precision_map/1";
/// Layer name for ops that ran outside every attached module.
inline constexpr const char* kOutsideLayer = "<outside>";

/// Values that narrowing casts of one argument of an op destroyed (JSON "cast_loss"): which
/// argument and cast, and the tally (counted on the casts' sources as torch rounds them;
/// recorded steps only, a parameter once per step).
struct CastLossRecord : CastLossTally {
  std::string argument;       ///< schema name ("input", "weight", "bias", "self", ...)
  int arg_index = -1;         ///< its position in the op's schema; -1: the op is the cast itself
  bool parameter = false;     ///< the source was a parameter
  std::string source_dtype;   ///< e.g. "float32"
  std::string target_dtype;   ///< e.g. "float16"
  /// Whether `o` counts the same argument and cast (then add() merges them).
  bool same_cast(const CastLossRecord& o) const {
    return argument == o.argument && arg_index == o.arg_index && source_dtype == o.source_dtype &&
           target_dtype == o.target_dtype;
  }
  /// Adds the record of the same cast on another rank.
  void add(const CastLossRecord& o) {
    CastLossTally::add(o);
    parameter = parameter || o.parameter;
  }
};

/// Low-precision calls whose output was (almost) all zeros (JSON "degenerate_output"), re-run
/// in float32 (the first few): degenerate when the float32 result was not.
using DegenerateRecord = DegenerateCounts;

/// Updates of a float16/bfloat16 parameter (or of its optimizer state) lost to rounding.
struct StaleUpdateRecord {
  std::string tensor = "value";  ///< "value" or the optimizer state key ("exp_avg", ...)
  std::string dtype;
  std::int64_t steps = 0;    ///< optimizer steps compared
  std::int64_t updated = 0;  ///< elements with a nonzero gradient
  std::int64_t stale = 0;    ///< ... whose stored value did not change
  std::int64_t worst_step = -1;
  double worst_share = 0.0;  ///< largest stale / updated of one step
  /// Adds the record of the same tensor on another rank.
  void add(const StaleUpdateRecord& o);
};

/// One aggregated op entry of a layer, keyed by (op, phase, input, compute, output dtype,
/// autocast class); its counts and blocks are EntryStats (one merge with the observer's).
struct OpRecord : EntryStats {
  std::string op;             ///< "aten::linear", or an autograd node name such as "AddmmBackward0"
  Phase phase = Phase::kForward;
  std::string input_dtype;    ///< dtype of the floating inputs as written ("" when none)
  std::string compute_dtype;  ///< dtype the op computed in
  std::string output_dtype;   ///< dtype it returned ("" when no tensor)
  AutocastClass autocast = AutocastClass::kNone;  ///< what autocast did to it
  std::vector<CastLossRecord> cast_loss;       ///< casts of its arguments that lost values
  std::optional<DegenerateRecord> degenerate;  ///< near-zero low-precision outputs seen
};

/// Gradient stats of one parameter, owned by the layer that registers it.
struct ParamRecord {
  std::string name;   ///< qualified name, e.g. "blocks.0.ffn.wo.weight"
  std::string dtype;  ///< the parameter's dtype
  std::int64_t updates = 0;  ///< backward passes that produced a gradient
  Stats grad;
  /// Other names that reach the same parameter (tied weights): counted once, under `name`.
  std::vector<std::string> aliases;
  /// Stats of its values at the last recorded optimizer step (representability per format).
  std::optional<Stats> values;
  std::vector<StaleUpdateRecord> stale_updates;  ///< float16/bfloat16 storage only
};

struct Layer {
  std::string name;  ///< qualified named_modules() name; "" is the root; "<outside>"
  std::string type;  ///< module type name, e.g. "Linear"
  std::vector<OpRecord> ops;
  std::vector<ParamRecord> params;
};

/// What a run recorded (issue 7): sampling period, filters, and which tensors got stats.
struct Sampling {
  int every = 1;                              ///< steps 0, N, 2N, ... recorded
  std::string stats_on = "outputs";           ///< "outputs" | "inputs_and_outputs"
  std::vector<std::string> include_layers;    ///< glob patterns (a match covers sub-layers)
  std::vector<std::string> exclude_layers;
  std::vector<std::string> include_ops;       ///< glob patterns on op / autograd node names
  std::vector<std::string> exclude_ops;
  std::int64_t loss_scale_updates = 0;        ///< GradScaler updates seen (loss_scale may be thinned)
};

struct RunInfo {
  std::string torch_version;
  std::string device;          ///< "cpu" | "cuda"
  std::string autocast_dtype;  ///< low-precision dtype of the run ("" when autocast was off)
  std::int64_t steps = 0;
  std::string started;         ///< ISO 8601 UTC
  double duration_s = 0.0;
  std::string command;
  int rank = 0;
  int world_size = 1;
  int every = 1;               ///< stats taken every N steps
  bool shadow = false;         ///< low-precision ops were re-checked in float32 (--shadow)
  /// Why the run ended early: "" (it did not), "nonfinite" (--stop-on-nonfinite), "signal".
  std::string stopped;
  std::vector<std::string> notes;  ///< what the run could not see, and why
  /// Synchronising CUDA calls (device/stream/event syncs, blocking copies) CUPTI saw, ampscope's
  /// own excluded; -1 when kernels were not traced.
  std::int64_t host_syncs = -1;
  Sampling sampling;
};

/// The first op whose output held a non-finite value.
struct NonFiniteEvent {
  std::int64_t step = 0;
  Phase phase = Phase::kForward;
  std::string layer;
  std::string op;
  std::string kind;            ///< "nan" | "inf"
  bool inputs_finite = true;
  std::optional<bool> fp32_also_nonfinite;  ///< null until re-checked
  std::optional<Fp32Check> fp32_check;      ///< the re-run against the call's own output
  std::string compute_dtype;
  std::optional<Stats> output_stats;
  int rank = 0;                ///< the rank that saw it (merged reports)
  /// A scalar argument was NaN/inf (masked_fill(mask, -inf)): the model's own constant.
  bool nonfinite_scalar = false;
  /// Backward only: the node met NaN/Inf its own forward op made from finite inputs (consumed
  /// in forward, e.g. pow(x, 3) overflowing float16 into tanh).
  bool forward_nonfinite = false;
  /// What the values reached first: "module_output" | "gradient" | "parameter_gradient" |
  /// "optimizer" ("" in reports of older versions).
  std::string reached;
  std::int64_t reached_step = -1;
};

/// Non-finite gradients a GradScaler caught (found inf, optimizer step skipped, scale backed
/// off): the scaler doing its job, information rather than a failure.
struct ScalerCaught {
  std::int64_t steps = 0;  ///< steps whose non-finite gradients it caught
  NonFiniteEvent first;    ///< where the first of them came from
};

struct LossScalePoint {
  std::int64_t step = 0;
  double scale = 0.0;
  bool found_inf = false;
};

/// What a recommendation asks for; JSON: its name in kActionNames.
enum class Action : std::uint8_t { kPinFp32, kLossScaling, kFixModel, kWatch, kFp32MasterWeights };
inline constexpr std::array<std::string_view, 5> kActionNames{"pin_fp32", "loss_scaling", "fix_model", "watch",
                                                              "fp32_master_weights"};
/// How urgent a recommendation is, most severe first; JSON: its name in kSeverityNames.
enum class Severity : std::uint8_t { kCritical, kHigh, kMedium, kLow };
inline constexpr std::array<std::string_view, 4> kSeverityNames{"critical", "high", "medium", "low"};

constexpr const auto& enum_names(Action) { return kActionNames; }
constexpr const auto& enum_names(Severity) { return kSeverityNames; }
/// critical 3, high 2, medium 1, low 0.
constexpr int severity_rank(Severity s) { return 3 - static_cast<int>(s); }
/// nlohmann's hook (json j = action;): the name, never the number.
template <typename BasicJson>
void to_json(BasicJson& j, Action a) { j = std::string(name_of(a)); }
template <typename BasicJson>
void to_json(BasicJson& j, Severity s) { j = std::string(name_of(s)); }

struct Recommendation {
  std::string layer;
  Action action = Action::kWatch;
  Severity severity = Severity::kLow;
  std::vector<std::string> reasons;  ///< stable codes, see README
  nlohmann::json evidence = nlohmann::json::object();
};

struct Report {
  RunInfo run;
  std::vector<Layer> layers;
  std::optional<NonFiniteEvent> first_nonfinite;
  /// Merged reports: every rank's own first non-finite event (empty for one process).
  std::vector<NonFiniteEvent> first_nonfinite_by_rank;
  std::vector<LossScalePoint> loss_scale;
  std::optional<ScalerCaught> scaler_caught;  ///< JSON "nonfinite_caught_by_scaler"
  std::vector<Recommendation> recommendations;

  /// The layer called `name`, or nullptr.
  const Layer* find_layer(const std::string& name) const;
};

}  // namespace ampscope::reports
