// Is a CUDA device usable? False when the library was built without GG_CUDA or no GPU is present.
#pragma once

namespace gg::cuda {

bool is_available();
int device_count();

}  // namespace gg::cuda
