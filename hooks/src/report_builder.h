// Observer snapshot + layer registry + parameter records -> the report model.
#pragma once

#include <ampscope/hooks/layers.h>
#include <ampscope/hooks/param_watch.h>
#include <ampscope/profiler/observer.h>
#include <ampscope/profiler/silent_loss.h>
#include <ampscope/reports/report.h>

namespace ampscope {

/// Run facts the snapshot does not carry.
struct RunContext {
  std::string torch_version;
  std::string device;
  std::string autocast_dtype;
  std::string command;
  std::string started;
  double duration_s = 0.0;
  int every = 1;
  bool shadow = false;
  std::string stopped;
  reports::Sampling sampling;  ///< what was recorded (every, filters, stats on inputs)
};

/// What the run recorded besides the observer's entries.
struct RunRecords {
  std::vector<LayerInfo> layers;
  std::vector<ParamGradInfo> params;
  std::vector<SilentLossEntry> silent_loss;  ///< cast loss and degenerate outputs by entry
  std::vector<ParamWatchInfo> param_watch;   ///< parameter values and stale updates
};

/// Groups entries by layer (attached layers in tree order, "<outside>" last, layers with nothing
/// recorded kept so the tree is whole), ops sorted by phase then name. No recommendations.
reports::Report build_report(const ObserverSnapshot& snap, const RunRecords& records,
                             const RunContext& ctx);

}  // namespace ampscope
