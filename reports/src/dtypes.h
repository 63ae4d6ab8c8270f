// Dtype names and the target formats' ranges, as the report code needs them.
#pragma once

#include <ampscope/profiler/stats.h>

#include <string>

namespace ampscope::reports::dtypes {

/// "torch.float16" and "float16" name the same dtype.
inline std::string bare(const std::string& d) {
  return d.rfind("torch.", 0) == 0 ? d.substr(6) : d;
}

/// The target format a dtype name is (float16, bfloat16, float8_*); false for others.
inline bool as_format(const std::string& dtype, Format* f) {
  return format_from_name(bare(dtype), f);
}

/// True when tensors of `dtype` can hold values that `f` cannot represent, so that their
/// overflow/underflow counts for `f` are informative (a float16 tensor's float16 counts are 0
/// by construction: what overflowed is already inf).
inline bool wider_than(const std::string& dtype, Format f) {
  const std::string d = bare(dtype);
  if (d == "float32" || d == "float64") return true;
  Format g;
  if (!format_from_name(d, &g) || g == f) return false;
  return traits(g).max > traits(f).max || min_subnormal_exp(g) < min_subnormal_exp(f);
}

}  // namespace ampscope::reports::dtypes
