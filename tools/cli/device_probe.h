// Whether a CUDA device is usable, without making the CLI fail on machines with no driver.
#pragma once

namespace ampscope::cli {

/// Number of CUDA devices torch can use (0 without a GPU or driver).
int cuda_device_count();

}  // namespace ampscope::cli
