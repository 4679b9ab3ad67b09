// CUDA runtime queries used by the host side. No CUDA headers leak through this file.
#pragma once

namespace gg::kernels::cuda {

// Number of usable CUDA devices; 0 when the driver reports none (e.g. a CI machine without a GPU).
int device_count();

}  // namespace gg::kernels::cuda
