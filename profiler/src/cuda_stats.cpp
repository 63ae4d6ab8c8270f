// Host side of the CUDA stats kernel: device slots, view collapsing, the once-per-step read-back.
#include <ampscope/profiler/cuda_stats.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <stdexcept>

#include "cuda_check.h"
#include "stats_cuda_kernel.h"

namespace ampscope {
namespace detail {

bool cuda_ok(int code, const char* what, std::string& err) {
  if (code == 0) return true;
  err = std::string(what) + ": " + cudaGetErrorString(static_cast<cudaError_t>(code));
  (void)cudaGetLastError();  // clear a non-sticky error so later calls are not blamed for it
  return false;
}

void slot_to_stats(const DeviceSlot& s, std::int64_t count, Stats& out) {
  Stats r;
  r.count = count;
  r.nan = static_cast<std::int64_t>(s.nan);
  r.posinf = static_cast<std::int64_t>(s.posinf);
  r.neginf = static_cast<std::int64_t>(s.neginf);
  r.zeros = static_cast<std::int64_t>(s.zeros);
  r.sum = s.sum;
  r.sum_sq = s.sum_sq;
  auto f32 = [](unsigned long long bits) {
    const auto b = static_cast<std::uint32_t>(bits);
    return static_cast<double>(__builtin_bit_cast(float, b));
  };
  r.absmax = f32(s.amax);
  if (s.amin_inv != 0) r.absmin_nonzero = f32(~s.amin_inv);
  // "|x| < T_k" = zeros + every nonzero finite value of a lower binade + those of T_k's binade
  // below T_k (the same decomposition as the CPU kernel's fast path).
  std::int64_t lt[kNumThresholds];
  for (int k = 0; k < kNumThresholds; ++k) {
    std::int64_t n = r.zeros;
    const int top = threshold_binade(k) + kExpOffset32;
    for (int b = 0; b < top; ++b) n += static_cast<std::int64_t>(s.hist[b]);
    lt[k] = n + static_cast<std::int64_t>(s.below_in_binade[k]);
  }
  const std::int64_t nonfinite = r.nan + r.posinf + r.neginf;
  for (int f = 0; f < kNumFormats; ++f) {
    r.underflow[f] = lt[3 * f] - r.zeros;
    r.subnormal[f] = lt[3 * f + 1] - lt[3 * f];
    r.overflow[f] = (count - lt[3 * f + 2]) - nonfinite;
  }
  for (int b = 0; b < kExpBins32; ++b)
    if (s.hist[b] != 0) r.exp_hist.add(b - kExpOffset32, static_cast<std::int64_t>(s.hist[b]));
  out.merge(r);
}

namespace {

using i64 = std::int64_t;
constexpr int kChunkSlots = 64;

struct Availability {
  bool ok = false;
  std::string why;
};

const Availability& availability() {
  static const Availability a = [] {
    Availability r;
    int n = 0;
    std::string err;
    if (!AMPSCOPE_CHECK_CUDA(cudaGetDeviceCount(&n), err)) {
      r.why = "no usable CUDA driver or device (" + err + ")";
    } else if (n <= 0) {
      r.why = "no CUDA device";
    } else {
      r.ok = true;
    }
    return r;
  }();
  return a;
}

std::size_t elem_size(DType d) { return d == DType::kFloat32 ? 4 : d == DType::kFloat64 ? 8 : 2; }

/// Drops size-1 dimensions and merges neighbours that are contiguous with each other.
void collapse(const TensorView& v, std::vector<i64>& sizes, std::vector<i64>& strides) {
  for (std::size_t d = 0; d < v.sizes.size(); ++d) {
    if (v.sizes[d] == 1) continue;
    if (!sizes.empty() && strides.back() == v.sizes[d] * v.strides[d]) {
      sizes.back() *= v.sizes[d];
      strides.back() = v.strides[d];
    } else {
      sizes.push_back(v.sizes[d]);
      strides.push_back(v.strides[d]);
    }
  }
}

}  // namespace

std::vector<StatsLaunch> plan_launches(const TensorView& v, std::uint64_t seq) {
  std::vector<StatsLaunch> out;
  if (v.numel() <= 0 || v.data == nullptr) return out;
  std::vector<i64> sizes, strides;
  collapse(v, sizes, strides);
  const auto esize = static_cast<i64>(elem_size(v.dtype));
  std::vector<std::pair<const char*, std::size_t>> todo{{static_cast<const char*>(v.data), 0}};
  while (!todo.empty()) {
    auto [base, first] = todo.back();
    todo.pop_back();
    const std::size_t ndim = sizes.size() - first;
    if (ndim > static_cast<std::size_t>(kMaxKernelDims)) {
      // Reverse order keeps the launches in row-major order of their elements.
      for (i64 i = sizes[first]; i-- > 0;)
        todo.emplace_back(base + i * strides[first] * esize, first + 1);
      continue;
    }
    StatsLaunch l;
    l.data = base;
    l.dtype = v.dtype;
    l.seq = seq;
    l.ndim = static_cast<int>(ndim);
    l.numel = 1;
    for (std::size_t k = 0; k < ndim; ++k) {
      l.sizes[k] = sizes[first + k];
      l.strides[k] = strides[first + k];
      l.numel *= l.sizes[k];
    }
    l.contiguous = ndim == 0 || (ndim == 1 && l.strides[0] == 1);
    out.push_back(l);
  }
  return out;
}

namespace {

/// Sets the calling thread's current device for one scope (restores the previous one).
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&prev_) == cudaSuccess && prev_ != device && device >= 0) {
      switched_ = cudaSetDevice(device) == cudaSuccess;
    }
  }
  ~DeviceScope() {
    if (switched_) (void)cudaSetDevice(prev_);
  }

 private:
  int prev_ = -1;
  bool switched_ = false;
};

/// One device's slots and read-back machinery.
struct DeviceState {
  bool ready = false;
  int sm_count = 1;
  cudaStream_t copy_stream = nullptr;
  cudaEvent_t event = nullptr;
  std::vector<DeviceSlot*> chunks;
  std::vector<void*> streams;  ///< streams used since the last read-back
  std::vector<i64> counts;     ///< per slot: elements enqueued since the last read-back
  std::vector<int> dirty;      ///< slots used since the last read-back
};

}  // namespace
}  // namespace detail

bool cuda_stats_available() { return detail::availability().ok; }
std::string cuda_unavailable_reason() { return detail::availability().why; }

struct DeviceStatsBuffer::Impl {
  std::mutex mu;
  std::map<int, detail::DeviceState> devices;
  std::int64_t skipped_captures = 0;
  std::int64_t errors = 0;
  std::int64_t syncs = 0;
  std::string last_error;

  bool fail(const std::string& err) {
    ++errors;
    last_error = err;
    return false;
  }
  bool prepare(detail::DeviceState& d, int device);
  bool ensure_slot(detail::DeviceState& d, int slot);
  bool launch(const TensorView& v, detail::DeviceState& d, int slot, void* stream,
              std::uint64_t seq);
  void read_device(detail::DeviceState& d, std::map<int, SlotResult>& out);
};

bool DeviceStatsBuffer::Impl::prepare(detail::DeviceState& d, int device) {
  if (d.ready) return true;
  std::string err;
  if (!AMPSCOPE_CHECK_CUDA(
          cudaDeviceGetAttribute(&d.sm_count, cudaDevAttrMultiProcessorCount, device), err) ||
      !AMPSCOPE_CHECK_CUDA(cudaStreamCreateWithFlags(&d.copy_stream, cudaStreamNonBlocking), err) ||
      !AMPSCOPE_CHECK_CUDA(cudaEventCreateWithFlags(&d.event, cudaEventDisableTiming), err)) {
    return fail(err);
  }
  d.ready = true;
  return true;
}

bool DeviceStatsBuffer::Impl::ensure_slot(detail::DeviceState& d, int slot) {
  while (static_cast<int>(d.chunks.size()) * detail::kChunkSlots <= slot) {
    detail::DeviceSlot* chunk = nullptr;
    const std::size_t bytes = sizeof(detail::DeviceSlot) * detail::kChunkSlots;
    std::string err;
    if (!AMPSCOPE_CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&chunk), bytes), err))
      return fail(err);
    // Zeroed before any stream can use it: the one sync of a growth step.
    ++syncs;
    if (!AMPSCOPE_CHECK_CUDA(cudaMemsetAsync(chunk, 0, bytes, d.copy_stream), err) ||
        !AMPSCOPE_CHECK_CUDA(cudaStreamSynchronize(d.copy_stream), err)) {
      (void)cudaFree(chunk);
      return fail(err);
    }
    d.chunks.push_back(chunk);
  }
  if (static_cast<int>(d.counts.size()) <= slot)
    d.counts.resize(static_cast<std::size_t>(slot) + 1, -1);
  return true;
}

bool DeviceStatsBuffer::Impl::launch(const TensorView& v, detail::DeviceState& d, int slot,
                                     void* stream, std::uint64_t seq) {
  detail::DeviceSlot* target =
      d.chunks[static_cast<std::size_t>(slot / detail::kChunkSlots)] + slot % detail::kChunkSlots;
  for (const detail::StatsLaunch& l : detail::plan_launches(v, seq)) {
    std::string err;
    if (!AMPSCOPE_CHECK_CUDA(detail::launch_stats_kernel(l, target, d.sm_count, stream), err))
      return fail(err);
  }
  return true;
}

DeviceStatsBuffer::DeviceStatsBuffer() : impl_(std::make_unique<Impl>()) {}

DeviceStatsBuffer::~DeviceStatsBuffer() {
  // Device memory is left to the driver at process exit: the buffers live as long as the
  // observer (a process-wide singleton), and freeing during static destruction can fail.
}

bool DeviceStatsBuffer::accumulate(const TensorView& view, int device, int slot, void* stream,
                                   std::uint64_t seq) {
  if (!cuda_stats_available() || slot < 0 || view.dtype == DType::kFloat64) return false;
  const std::int64_t n = view.numel();
  auto st = static_cast<cudaStream_t>(stream);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (cudaStreamIsCapturing(st, &capture) != cudaSuccess ||
      capture != cudaStreamCaptureStatusNone) {
    (void)cudaGetLastError();
    ++impl_->skipped_captures;
    return false;
  }
  detail::DeviceScope scope(device);
  auto& d = impl_->devices[device];
  if (!impl_->prepare(d, device) || !impl_->ensure_slot(d, slot)) return false;
  if (n > 0 && view.data != nullptr && !impl_->launch(view, d, slot, stream, seq)) return false;
  auto& count = d.counts[static_cast<std::size_t>(slot)];
  if (count < 0) {
    count = 0;
    d.dirty.push_back(slot);
  }
  count += n;
  if (std::find(d.streams.begin(), d.streams.end(), stream) == d.streams.end())
    d.streams.push_back(stream);
  return true;
}

void DeviceStatsBuffer::Impl::read_device(detail::DeviceState& d, std::map<int, SlotResult>& out) {
  std::string err;
  bool ok = true;
  // The copy stream waits for every stream that enqueued work since the last read-back.
  for (void* s : d.streams) {
    ok = ok && AMPSCOPE_CHECK_CUDA(cudaEventRecord(d.event, static_cast<cudaStream_t>(s)), err) &&
         AMPSCOPE_CHECK_CUDA(cudaStreamWaitEvent(d.copy_stream, d.event, 0), err);
  }
  std::vector<detail::DeviceSlot> host(d.chunks.size() * detail::kChunkSlots);
  std::vector<bool> chunk_used(d.chunks.size(), false);
  for (int s : d.dirty) chunk_used[static_cast<std::size_t>(s / detail::kChunkSlots)] = true;
  const std::size_t chunk_bytes = sizeof(detail::DeviceSlot) * detail::kChunkSlots;
  for (std::size_t c = 0; ok && c < d.chunks.size(); ++c) {
    if (!chunk_used[c]) continue;
    ok = AMPSCOPE_CHECK_CUDA(cudaMemcpyAsync(&host[c * detail::kChunkSlots], d.chunks[c],
                                             chunk_bytes, cudaMemcpyDeviceToHost, d.copy_stream),
                             err) &&
         AMPSCOPE_CHECK_CUDA(cudaMemsetAsync(d.chunks[c], 0, chunk_bytes, d.copy_stream), err);
  }
  ++syncs;
  ok = ok && AMPSCOPE_CHECK_CUDA(cudaStreamSynchronize(d.copy_stream), err);
  if (!ok) fail(err);
  for (int s : d.dirty) {
    auto& count = d.counts[static_cast<std::size_t>(s)];
    if (ok) {
      const auto& slot = host[static_cast<std::size_t>(s)];
      SlotResult& r = out[s];
      r.slot = s;
      detail::slot_to_stats(slot, count, r.stats);
      const std::uint64_t seq = slot.seq_inv != 0 ? ~slot.seq_inv : 0;
      if (seq != 0 && (r.first_nonfinite_seq == 0 || seq < r.first_nonfinite_seq))
        r.first_nonfinite_seq = seq;
    }
    count = -1;
  }
  d.dirty.clear();
  d.streams.clear();
}

std::vector<DeviceStatsBuffer::SlotResult> DeviceStatsBuffer::read_and_reset() {
  std::map<int, SlotResult> merged;
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (auto& [device, d] : impl_->devices) {
    if (d.dirty.empty()) continue;
    detail::DeviceScope scope(device);
    impl_->read_device(d, merged);
  }
  std::vector<SlotResult> out;
  out.reserve(merged.size());
  for (auto& [slot, r] : merged) out.push_back(std::move(r));
  return out;
}

std::int64_t DeviceStatsBuffer::skipped_captures() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->skipped_captures;
}

std::int64_t DeviceStatsBuffer::errors() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->errors;
}

std::int64_t DeviceStatsBuffer::own_syncs() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->syncs;
}

std::string DeviceStatsBuffer::last_error() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->last_error;
}

void DeviceStatsBuffer::reset() {
  (void)read_and_reset();  // drains pending work and zeroes the slots it used
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->skipped_captures = 0;
  impl_->errors = 0;
  impl_->last_error.clear();
}

Stats compute_stats_cuda(const TensorView& view, int device, void* stream) {
  static DeviceStatsBuffer* buffer =
      new DeviceStatsBuffer();  // never destroyed (see ~DeviceStatsBuffer)
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (!cuda_stats_available()) throw std::runtime_error("ampscope: " + cuda_unavailable_reason());
  if (view.numel() == 0) return Stats{};
  if (!buffer->accumulate(view, device, 0, stream, 1)) {
    if (buffer->errors() > 0) {
      std::string err = buffer->last_error();
      buffer->reset();
      throw std::runtime_error("ampscope: CUDA stats failed: " + err);
    }
    throw std::runtime_error(
        "ampscope: cannot compute stats on a stream that is capturing a CUDA graph");
  }
  auto results = buffer->read_and_reset();
  if (results.empty())
    throw std::runtime_error("ampscope: CUDA stats failed: " + buffer->last_error());
  return results.front().stats;
}

}  // namespace ampscope
