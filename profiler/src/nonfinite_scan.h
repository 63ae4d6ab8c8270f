// The sentinel's check: does a tensor hold NaN or +-inf? One read of the data, no histogram, no
// moments; used on every op output of the steps that carry no full stats.
#pragma once

#include <ATen/core/Tensor.h>

namespace ampscope::detail {

/// True when a CPU floating tensor holds a NaN or an infinity. False for tensors the stats
/// kernels do not read (CUDA tensors are checked on the device, others have no floats).
bool has_nonfinite(const at::Tensor& t);

}  // namespace ampscope::detail
