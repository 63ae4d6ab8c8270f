// Error checks for CUDA runtime and CUPTI calls. Internal; include only where cuda_runtime.h /
// cupti.h are already needed. Neither macro throws: the observer runs inside the user's training
// loop, where a CUDA problem must degrade ampscope (a note in the report), never the run.
#pragma once

#include <string>

/// Evaluates a cudaError_t expression; on failure stores "<expr>: <error string>" into the
/// std::string `err_out` and evaluates to false.
#define AMPSCOPE_CHECK_CUDA(expr, err_out) \
  ::ampscope::detail::cuda_ok(static_cast<int>(expr), #expr, (err_out))

/// Evaluates a CUptiResult expression; on failure stores "<expr>: <CUPTI error>" into `err_out`
/// and evaluates to false.
#define AMPSCOPE_CHECK_CUPTI(expr, err_out) \
  ::ampscope::detail::cupti_ok(static_cast<int>(expr), #expr, (err_out))

namespace ampscope::detail {

/// True when `code` is cudaSuccess; otherwise describes the failure in `err`.
bool cuda_ok(int code, const char* what, std::string& err);
/// True when `code` is CUPTI_SUCCESS; otherwise describes the failure in `err`.
bool cupti_ok(int code, const char* what, std::string& err);

}  // namespace ampscope::detail
