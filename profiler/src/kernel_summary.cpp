// KernelSummary::merge: plain C++ in ampscope_stats, since the report code (merge of per-rank
// reports) needs it without the device layer.
#include <ampscope/profiler/kernel_trace.h>

#include <algorithm>

namespace ampscope {

void KernelSummary::merge(const KernelSummary& o) {
  launches += o.launches;
  time_ns += o.time_ns;
  matrix_launches += o.matrix_launches;
  tensor_core_launches += o.tensor_core_launches;
  memcpys += o.memcpys;
  memcpy_bytes += o.memcpy_bytes;
  memcpy_time_ns += o.memcpy_time_ns;
  for (const auto& k : o.top) {
    auto it =
        std::find_if(top.begin(), top.end(), [&](const KernelName& x) { return x.name == k.name; });
    if (it == top.end()) {
      top.push_back(k);
    } else {
      it->launches += k.launches;
      it->time_ns += k.time_ns;
    }
  }
  std::stable_sort(top.begin(), top.end(),
                   [](const KernelName& a, const KernelName& b) { return a.time_ns > b.time_ns; });
  if (top.size() > kMaxKernelNames) top.resize(kMaxKernelNames);
}

}  // namespace ampscope
