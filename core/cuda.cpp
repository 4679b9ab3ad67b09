#include "core/cuda.h"

#ifdef GG_HAS_CUDA
#include "kernels/cuda/runtime.h"
#endif

namespace gg::cuda {

int device_count() {
#ifdef GG_HAS_CUDA
  return kernels::cuda::device_count();
#else
  return 0;
#endif
}

bool is_available() { return device_count() > 0; }

}  // namespace gg::cuda
