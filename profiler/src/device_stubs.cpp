// Builds without a CUDA compiler or CUPTI: the device layer reports itself unavailable.
#include <ampscope/profiler/cuda_stats.h>
#include <ampscope/profiler/kernel_trace.h>

#include <stdexcept>

namespace ampscope {
namespace {
constexpr const char* kNoCuda = "ampscope was built without CUDA (no nvcc or CUPTI found)";
}  // namespace

bool cuda_stats_available() { return false; }
std::string cuda_unavailable_reason() { return kNoCuda; }

struct DeviceStatsBuffer::Impl {};
DeviceStatsBuffer::DeviceStatsBuffer() : impl_(std::make_unique<Impl>()) {}
DeviceStatsBuffer::~DeviceStatsBuffer() = default;
bool DeviceStatsBuffer::accumulate(const TensorView&, int, int, void*, std::uint64_t) {
  return false;
}
std::vector<DeviceStatsBuffer::SlotResult> DeviceStatsBuffer::read_and_reset() { return {}; }
std::int64_t DeviceStatsBuffer::skipped_captures() const { return 0; }
std::int64_t DeviceStatsBuffer::errors() const { return 0; }
std::int64_t DeviceStatsBuffer::own_syncs() const { return 0; }
std::string DeviceStatsBuffer::last_error() const { return ""; }
void DeviceStatsBuffer::reset() {}

Stats compute_stats_cuda(const TensorView&, int, void*) {
  throw std::runtime_error(std::string("ampscope: ") + kNoCuda);
}

namespace {
class NoSource final : public ActivitySource {
 public:
  bool start(ActivitySink) override { return false; }
  void stop() override {}
  void flush() override {}
  void push_external_id(std::uint64_t) override {}
  void pop_external_id() override {}
  std::string note() const override { return std::string("kernel tracing off: ") + kNoCuda; }
};
}  // namespace

std::unique_ptr<ActivitySource> make_cupti_source() { return std::make_unique<NoSource>(); }

}  // namespace ampscope
