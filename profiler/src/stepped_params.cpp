#include "stepped_params.h"

#include <algorithm>

#include "read_cache.h"

namespace ampscope::detail {
namespace {

const void* storage_of(const at::Tensor& t) { return t.storage().unsafeGetStorageImpl(); }

}  // namespace

void SteppedParams::begin(std::vector<at::Tensor> params) {
  forget();
  params_.reserve(params.size());
  for (at::Tensor& p : params) {
    by_storage_.emplace(storage_of(p), static_cast<int>(params_.size()));
    const std::uint32_t v = p._version();
    params_.push_back(Param{std::move(p), v});
  }
}

void SteppedParams::forget() {
  params_.clear();
  by_storage_.clear();
  writes_.clear();
  op_param_ = last_param_ = -1;
}

void SteppedParams::note_write(const at::Tensor& x) {
  if (!x.defined() || !x.has_storage()) return;
  const void* storage = storage_of(x);
  writes_.push_back(storage);
  const auto it = by_storage_.find(storage);
  if (it == by_storage_.end()) return;  // optimizer state, not a parameter
  op_param_ = op_param_ == -1 || op_param_ == it->second ? it->second : -2;
}

void SteppedParams::end_op(std::int64_t step) {
  const int now = op_param_;
  op_param_ = -1;
  if (now == -1) return;  // no parameter written
  if (now >= 0 && last_param_ >= 0 && last_param_ != now) {
    const at::Tensor& done = params_[static_cast<std::size_t>(last_param_)].t;
    if (done.numel() >= kMinCachedElements) cached_has_nonfinite(done, step);  // (else not kept)
  }
  last_param_ = now >= 0 ? now : -1;  // several at once: all left to the end
}

at::Tensor SteppedParams::end(std::int64_t step) {
  std::vector<Param> params;
  params.swap(params_);
  std::vector<const void*> writes;
  writes.swap(writes_);
  forget();
  std::sort(writes.begin(), writes.end());
  for (const Param& p : params) {
    // Written: its version moved, or an op wrote its storage through an alias with a version
    // counter of its own (libtorch's optimizers update `p.data()`, old Python ones `p.data`;
    // the observer dropped the reads such a write made stale).
    if (p.t._version() == p.version_before &&
        !std::binary_search(writes.begin(), writes.end(), storage_of(p.t)))
      continue;
    if (cached_has_nonfinite(p.t, step)) return p.t;
  }
  return {};
}

}  // namespace ampscope::detail
