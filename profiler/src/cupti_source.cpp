// The CUPTI activity source: kernels, memcpys, external correlations and synchronising runtime
// calls, delivered as plain records. Off with a note (never an exception) when CUPTI cannot run.
#include <ampscope/profiler/cuda_stats.h>
#include <ampscope/profiler/kernel_trace.h>
#include <cupti.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "cuda_check.h"

namespace ampscope {
namespace detail {

bool cupti_ok(int code, const char* what, std::string& err) {
  if (code == CUPTI_SUCCESS) return true;
  const char* text = nullptr;
  if (cuptiGetResultString(static_cast<CUptiResult>(code), &text) != CUPTI_SUCCESS || !text) {
    text = "unknown CUPTI error";
  }
  err = std::string(what) + ": " + text;
  return false;
}

}  // namespace detail

namespace {

constexpr std::size_t kBufferBytes = std::size_t{8} << 20;
constexpr std::size_t kBufferAlign = 8;
constexpr CUpti_ActivityKind kKinds[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
    CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION, CUPTI_ACTIVITY_KIND_RUNTIME};

// CUPTI's buffer callbacks are plain functions: the running source's sink lives here.
std::mutex g_sink_mu;
ActivitySink g_sink;
bool g_active = false;

/// The synchronising runtime calls counted as host syncs (name; nullptr for any other call).
const char* sync_name(CUpti_CallbackId cbid) {
  switch (cbid) {
    case CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020:
      return "cudaDeviceSynchronize";
    case CUPTI_RUNTIME_TRACE_CBID_cudaThreadSynchronize_v3020:
      return "cudaThreadSynchronize";
    case CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_ptsz_v7000:
      return "cudaStreamSynchronize";
    case CUPTI_RUNTIME_TRACE_CBID_cudaEventSynchronize_v3020:
      return "cudaEventSynchronize";
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020:
      return "cudaMemcpy";
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2D_v3020:
      return "cudaMemcpy2D";
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyFromSymbol_v3020:
      return "cudaMemcpyFromSymbol";
    default:
      return nullptr;
  }
}

void add_record(const CUpti_Activity* r, ActivityBatch& b) {
  switch (r->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(r);
      b.kernels.push_back(
          {k->name ? k->name : "?", k->start, k->end, k->correlationId, k->streamId, k->deviceId});
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(r);
      b.memcpys.push_back({m->bytes, m->copyKind, m->start, m->end, m->correlationId});
      break;
    }
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
      const auto* e = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(r);
      if (e->externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) {
        b.correlations.push_back({e->correlationId, e->externalId});
      }
      break;
    }
    case CUPTI_ACTIVITY_KIND_RUNTIME: {
      const auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(r);
      if (const char* name = sync_name(a->cbid)) b.syncs.push_back({name, a->correlationId});
      break;
    }
    default:
      break;
  }
}

void CUPTIAPI buffer_requested(std::uint8_t** buffer, std::size_t* size, std::size_t* max_records) {
  *buffer = static_cast<std::uint8_t*>(std::aligned_alloc(kBufferAlign, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, std::uint32_t, std::uint8_t* buffer, std::size_t,
                               std::size_t valid) {
  ActivityBatch batch;
  CUpti_Activity* record = nullptr;
  while (valid > 0 && cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    add_record(record, batch);
  }
  std::free(buffer);
  ActivitySink sink;
  {
    std::lock_guard<std::mutex> lock(g_sink_mu);
    sink = g_sink;
  }
  if (sink) {
    try {
      sink(std::move(batch));
    } catch (...) {
      // Never let an exception cross into CUPTI's thread.
    }
  }
}

void CUPTIAPI no_callback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}

/// A note for a CUPTI start failure, naming the usual causes.
std::string start_failure_note(CUptiResult code, const std::string& err) {
  switch (code) {
    case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
      return "kernel tracing off: another CUPTI client is subscribed in this process (e.g. "
             "torch.profiler, Nsight Systems); only one is allowed";
    case CUPTI_ERROR_INSUFFICIENT_PRIVILEGES:
      return "kernel tracing off: insufficient privileges for CUPTI (" + err + ")";
    case CUPTI_ERROR_NOT_INITIALIZED:
      return "kernel tracing off: CUDA driver not initialised or no device (" + err + ")";
    default:
      return "kernel tracing off: " + err;
  }
}

class CuptiSource final : public ActivitySource {
 public:
  ~CuptiSource() override { stop(); }

  bool start(ActivitySink sink) override {
    if (const char* env = std::getenv("AMPSCOPE_CUPTI"); env && std::strcmp(env, "0") == 0) {
      note_ = "kernel tracing off: AMPSCOPE_CUPTI=0";
      return false;
    }
    if (!cuda_stats_available()) {
      note_ = "kernel tracing off: " + cuda_unavailable_reason();
      return false;
    }
    std::lock_guard<std::mutex> lock(g_sink_mu);
    if (g_active) {
      note_ = "kernel tracing off: another ampscope tracer is running";
      return false;
    }
    std::string err;
    const CUptiResult sub = cuptiSubscribe(&subscriber_, &no_callback, nullptr);
    if (!AMPSCOPE_CHECK_CUPTI(sub, err)) {
      note_ = start_failure_note(sub, err);
      return false;
    }
    CUptiResult code = cuptiActivityRegisterCallbacks(&buffer_requested, &buffer_completed);
    bool ok = AMPSCOPE_CHECK_CUPTI(code, err);
    for (std::size_t i = 0; ok && i < std::size(kKinds); ++i) {
      code = cuptiActivityEnable(kKinds[i]);
      ok = AMPSCOPE_CHECK_CUPTI(code, err);
    }
    if (!ok) {
      for (auto k : kKinds) (void)cuptiActivityDisable(k);
      (void)cuptiUnsubscribe(subscriber_);
      note_ = start_failure_note(code, err);
      return false;
    }
    g_sink = std::move(sink);
    g_active = true;
    running_ = true;
    note_.clear();
    return true;
  }

  void stop() override {
    if (!running_) return;
    (void)cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    for (auto k : kKinds) (void)cuptiActivityDisable(k);
    (void)cuptiUnsubscribe(subscriber_);
    std::lock_guard<std::mutex> lock(g_sink_mu);
    g_sink = nullptr;
    g_active = false;
    running_ = false;
  }

  void flush() override {
    if (running_) (void)cuptiActivityFlushAll(0);
  }

  void push_external_id(std::uint64_t id) override {
    if (running_)
      (void)cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, id);
  }

  void pop_external_id() override {
    std::uint64_t last = 0;
    if (running_)
      (void)cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last);
  }

  std::string note() const override { return note_; }

 private:
  CUpti_SubscriberHandle subscriber_ = nullptr;
  bool running_ = false;
  std::string note_;
};

}  // namespace

std::unique_ptr<ActivitySource> make_cupti_source() { return std::make_unique<CuptiSource>(); }

}  // namespace ampscope
