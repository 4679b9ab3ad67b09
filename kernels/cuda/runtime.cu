#include <cuda_runtime.h>

#include "kernels/cuda/runtime.h"

namespace gg::kernels::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

}  // namespace gg::kernels::cuda
