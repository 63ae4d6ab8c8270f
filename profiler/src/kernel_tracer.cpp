// KernelTracer: activity records -> external ids -> op entries, and the kernel-name heuristics.
// Plain C++ (no CUDA): the CPU tests drive it with a mock source.
#include <ampscope/profiler/kernel_trace.h>

#include <algorithm>
#include <cctype>

namespace ampscope {

// ---------------------------------------------------------------- kernel names

namespace {

bool has(std::string_view hay, std::string_view needle) {
  return hay.find(needle) != std::string_view::npos;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

/// Markers of a matrix-multiply kernel (lower case).
// (Plain "conv" or "mma" would also match "convert" and "gamma".)
constexpr std::string_view kMatrixMarkers[] = {
    "gemm",      "matmul", "convolution",   "conv1d",  "conv2d", "conv3d", "_conv_",    "cudnn",
    "hmma",      "wgmma",  "_mma",          "cutlass", "cublas", "fmha",   "flash_fwd", "flash_bwd",
    "attention", "xmma",   "implicit_gemm", "wgrad",   "dgrad",  "fprop"};
/// Markers that say the kernel uses tensor-core instructions (lower case).
constexpr std::string_view kTensorCoreMarkers[] = {
    "hmma", "imma", "bmma",  "wgmma", "xmma",  "tensorop", "tensor_op", "mma_sync",  "16816",
    "1688", "884",  "16832", "gmma",  "tcgen", "umma",     "flash_fwd", "flash_bwd", "fmha"};
/// Operand types of tensor-core GEMMs in sm80+/cuBLASLt/cutlass names (lower case).
constexpr std::string_view kLowPrecisionOperands[] = {"f16",  "bf16", "fp16", "tf32", "e4m3",
                                                      "e5m2", "fp8",  "half", "s8"};

}  // namespace

KernelClass classify_kernel(std::string_view name) {
  const std::string n = lower(name);
  KernelClass c;
  for (auto m : kMatrixMarkers) c.matrix = c.matrix || has(n, m);
  if (!c.matrix) return c;
  // GEMV and reductions of split-K GEMMs are matrix-adjacent but never tensor-core work.
  if (has(n, "gemv") || has(n, "splitkreduce") || has(n, "splitk_reduce")) return c;
  for (auto m : kTensorCoreMarkers) c.tensor_core = c.tensor_core || has(n, m);
  const bool arch_gemm =
      (has(n, "sm80") || has(n, "sm86") || has(n, "sm89") || has(n, "sm90") || has(n, "sm100") ||
       has(n, "cutlass") || has(n, "ampere") || has(n, "hopper") || has(n, "cublaslt")) &&
      has(n, "gemm");
  if (!c.tensor_core && arch_gemm) {
    for (auto t : kLowPrecisionOperands) c.tensor_core = c.tensor_core || has(n, t);
  }
  // "sgemm"/"dgemm" without a tensor-op marker are SIMT float32/float64 GEMMs.
  return c;
}

// ---------------------------------------------------------------- source factory

namespace {
std::mutex g_factory_mu;
std::function<std::unique_ptr<ActivitySource>()> g_factory;
}  // namespace

std::unique_ptr<ActivitySource> make_activity_source() {
  std::function<std::unique_ptr<ActivitySource>()> f;
  {
    std::lock_guard<std::mutex> lock(g_factory_mu);
    f = g_factory;
  }
  if (f) {
    if (auto s = f()) return s;
  }
  return make_cupti_source();
}

void set_activity_source_factory(std::function<std::unique_ptr<ActivitySource>()> factory) {
  std::lock_guard<std::mutex> lock(g_factory_mu);
  g_factory = std::move(factory);
}

// ---------------------------------------------------------------- KernelTracer

namespace {

std::int64_t duration(std::uint64_t start, std::uint64_t end) {
  return end > start ? static_cast<std::int64_t>(end - start) : 0;
}

KernelSummary summary_of(const KernelActivity& k) {
  KernelSummary s;
  const KernelClass c = classify_kernel(k.name);
  s.launches = 1;
  s.time_ns = duration(k.start_ns, k.end_ns);
  s.matrix_launches = c.matrix;
  s.tensor_core_launches = c.tensor_core;
  s.top.push_back({k.name, 1, s.time_ns});
  return s;
}

KernelSummary summary_of(const MemcpyActivity& m) {
  KernelSummary s;
  s.memcpys = 1;
  s.memcpy_bytes = static_cast<std::int64_t>(m.bytes);
  s.memcpy_time_ns = duration(m.start_ns, m.end_ns);
  return s;
}

}  // namespace

void KernelTracer::bind(std::uint64_t external_id, EntryId entry) {
  std::lock_guard<std::mutex> lock(mu_);
  bound_[external_id] = {entry, 0};
}

void KernelTracer::consume(ActivityBatch&& b) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& c : b.correlations) external_[c.correlation_id] = {c.external_id, 0};
  for (auto& k : b.kernels) kernels_.push_back({std::move(k), 0});
  for (auto& m : b.memcpys) memcpys_.push_back({m, 0});
  for (auto& s : b.syncs) syncs_.push_back({std::move(s), 0});
  resolve_locked(false);
  // A run that never ends a step still gets rounds: memory stays bounded.
  if (external_.size() + bound_.size() + kernels_.size() + memcpys_.size() > kMaxWaiting)
    round_locked();
}

int KernelTracer::lookup_locked(std::uint32_t correlation_id, EntryId* entry) const {
  auto ext = external_.find(correlation_id);
  if (ext == external_.end()) return 0;
  if (ext->second.value == kOwnExternalId) return -1;
  auto b = bound_.find(ext->second.value);
  if (b == bound_.end()) return 0;
  *entry = b->second.value;
  return 1;
}

void KernelTracer::resolve_locked(bool age_out) {
  // Kernels and memcpys: to their entry when known; after kMaxAge rounds, unattributed.
  auto settle = [&](auto& waiting, auto&& add) {
    std::size_t keep = 0;
    for (auto& w : waiting) {
      EntryId e = -1;
      const int found = lookup_locked(w.value.correlation_id, &e);
      if (found == 1) {
        summaries_[e].merge(summary_of(w.value));
      } else if (found == 0 && age_out && ++w.age > kMaxAge) {
        add();
      } else if (found == 0) {
        if (&waiting[keep] != &w) waiting[keep] = std::move(w);  // never self-move
        ++keep;
      }
    }
    waiting.resize(keep);
  };
  settle(kernels_, [&] { ++unattributed_; });
  settle(memcpys_, [&] { ++unattributed_; });
  // Syncs: ampscope's own are dropped; the rest count once their correlation is known or they
  // waited a round without one (a call outside every op, e.g. torch.cuda.synchronize()).
  std::size_t keep = 0;
  for (auto& s : syncs_) {
    EntryId e = -1;
    const int found = lookup_locked(s.value.correlation_id, &e);
    const bool known = external_.count(s.value.correlation_id) > 0;
    if (found == -1) continue;
    if (known || (age_out && ++s.age > 1)) {
      ++host_syncs_;
      continue;
    }
    if (&syncs_[keep] != &s) syncs_[keep] = std::move(s);
    ++keep;
  }
  syncs_.resize(keep);
}

void KernelTracer::finish_round() {
  std::lock_guard<std::mutex> lock(mu_);
  round_locked();
}

void KernelTracer::round_locked() {
  resolve_locked(true);
  // Bindings and correlations are kept a few rounds for records still in flight.
  for (auto it = bound_.begin(); it != bound_.end();) {
    it = ++it->second.age > kMaxAge ? bound_.erase(it) : std::next(it);
  }
  for (auto it = external_.begin(); it != external_.end();) {
    it = ++it->second.age > kMaxAge ? external_.erase(it) : std::next(it);
  }
}

std::vector<std::pair<KernelTracer::EntryId, KernelSummary>> KernelTracer::take() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<EntryId, KernelSummary>> out(summaries_.begin(), summaries_.end());
  summaries_.clear();
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

std::int64_t KernelTracer::unattributed_kernels() const {
  std::lock_guard<std::mutex> lock(mu_);
  return unattributed_;
}

std::int64_t KernelTracer::host_syncs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return host_syncs_;
}

void KernelTracer::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  bound_.clear();
  external_.clear();
  kernels_.clear();
  memcpys_.clear();
  syncs_.clear();
  summaries_.clear();
  unattributed_ = 0;
  host_syncs_ = 0;
}

}  // namespace ampscope
