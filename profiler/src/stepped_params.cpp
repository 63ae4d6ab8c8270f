#include "stepped_params.h"

#include "read_cache.h"

namespace ampscope::detail {
namespace {

const void* storage_of(const at::Tensor& t) { return t.storage().unsafeGetStorageImpl(); }

}  // namespace

void SteppedParams::begin(std::vector<at::Tensor> params) {
  forget();
  params_.reserve(params.size());
  std::unordered_map<const void*, int> last;  // storage -> its last parameter so far
  for (at::Tensor& p : params) {
    const int i = static_cast<int>(params_.size());
    const void* storage = storage_of(p);
    const auto [it, first] = last.try_emplace(storage, i);
    if (first) {
      by_storage_.emplace(storage, i);
    } else {
      params_[static_cast<std::size_t>(it->second)].same_storage = i;
      it->second = i;
    }
    const std::uint32_t v = p._version();
    params_.push_back(Param{std::move(p), v});
  }
}

void SteppedParams::forget() {
  params_.clear();
  by_storage_.clear();
  order_.clear();
  op_param_ = last_param_ = -1;
}

void SteppedParams::note_write(const at::Tensor& x) {
  if (!x.defined() || !x.has_storage()) return;
  const auto it = by_storage_.find(storage_of(x));
  if (it == by_storage_.end()) return;  // optimizer state, not a parameter
  const int first = it->second;
  for (int i = first; i >= 0; i = params_[static_cast<std::size_t>(i)].same_storage) {
    Param& p = params_[static_cast<std::size_t>(i)];
    // what a read of it found is stale, whatever part of its storage `x` covers (the op's own
    // forget_read dropped x's span only)
    forget_read(p.t);
    if (!p.written) {
      p.written = true;
      order_.push_back(i);
    }
  }
  const bool alone = params_[static_cast<std::size_t>(first)].same_storage < 0;
  op_param_ = alone && (op_param_ == -1 || op_param_ == first) ? first : -2;
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
  std::vector<int> order;
  order.swap(order_);
  forget();
  for (int i : order)
    if (cached_has_nonfinite(params[static_cast<std::size_t>(i)].t, step))
      return params[static_cast<std::size_t>(i)].t;
  for (const Param& p : params)
    if (!p.written && p.t._version() != p.version_before && cached_has_nonfinite(p.t, step))
      return p.t;
  return {};
}

}  // namespace ampscope::detail
