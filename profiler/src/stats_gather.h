// Strided views for the CPU stats kernel: walks elements of a TensorView in row-major order,
// copying runs into a block buffer. Not a public header.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "ampscope/profiler/stats.h"

namespace ampscope::detail {

/// Walks elements [begin, end) of a view in row-major order, copying them into small buffers.
class Gather {
 public:
  Gather(const TensorView& v, std::int64_t begin, std::size_t elem) : elem_(elem) {
    base_ = static_cast<const char*>(v.data);
    for (std::size_t d = 0; d < v.sizes.size(); ++d) {
      if (v.sizes[d] == 1) continue;  // size-1 dims never move
      sizes_.push_back(v.sizes[d]);
      strides_.push_back(v.strides[d]);
    }
    if (sizes_.empty()) {  // zero-dim or all-ones: one element at the base
      sizes_.push_back(1);
      strides_.push_back(0);
    }
    idx_.assign(sizes_.size(), 0);
    std::int64_t rem = begin;
    offset_ = 0;
    for (std::size_t d = sizes_.size(); d-- > 0;) {
      idx_[d] = rem % sizes_[d];
      rem /= sizes_[d];
      offset_ += idx_[d] * strides_[d];
    }
  }

  /// Copies the next `n` elements into `dst`.
  template <typename T>
  void next(int n, T* __restrict dst) {
    const std::size_t last = sizes_.size() - 1;
    const std::int64_t s = strides_[last];
    int done = 0;
    while (done < n) {
      const std::int64_t run = std::min<std::int64_t>(n - done, sizes_[last] - idx_[last]);
      const T* p = reinterpret_cast<const T*>(base_ + offset_ * static_cast<std::int64_t>(elem_));
      if (s == 1) {
        std::memcpy(dst + done, p, static_cast<std::size_t>(run) * sizeof(T));
      } else {
        for (std::int64_t j = 0; j < run; ++j) dst[done + j] = p[j * s];
      }
      done += static_cast<int>(run);
      idx_[last] += run;
      offset_ += run * s;
      // Carry into the outer dimensions.
      for (std::size_t d = last; idx_[d] == sizes_[d] && d > 0; --d) {
        offset_ -= idx_[d] * strides_[d];
        idx_[d] = 0;
        ++idx_[d - 1];
        offset_ += strides_[d - 1];
      }
    }
  }

 private:
  const char* base_;
  std::size_t elem_;
  std::vector<std::int64_t> sizes_, strides_, idx_;
  std::int64_t offset_ = 0;
};

}  // namespace ampscope::detail
