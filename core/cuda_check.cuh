// Error checks for CUDA and cuBLAS calls: every failure becomes a gg::DeviceError naming the
// call, the error and file:line. Included by .cu files only.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "core/cuda_runtime.h"
#include "core/error.h"

namespace gg::cuda::runtime::detail {

[[noreturn]] inline void throw_cuda(cudaError_t e, const char* what, const char* file, int line) {
  throw DeviceError(std::string("CUDA error: ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ") in " +
                    what + " at " + file + ":" + std::to_string(line));
}
[[noreturn]] inline void throw_cublas(cublasStatus_t s, const char* what, const char* file, int line) {
  throw DeviceError(std::string("cuBLAS error: ") + cublasGetStatusName(s) + " in " + what + " at " + file + ":" +
                    std::to_string(line));
}

}  // namespace gg::cuda::runtime::detail

#define CUDA_CHECK(call)                                                                   \
  do {                                                                                     \
    cudaError_t gg_err_ = (call);                                                          \
    if (gg_err_ != cudaSuccess) ::gg::cuda::runtime::detail::throw_cuda(gg_err_, #call, __FILE__, __LINE__); \
  } while (0)

#define CUBLAS_CHECK(call)                                                                 \
  do {                                                                                     \
    cublasStatus_t gg_st_ = (call);                                                        \
    if (gg_st_ != CUBLAS_STATUS_SUCCESS) ::gg::cuda::runtime::detail::throw_cublas(gg_st_, #call, __FILE__, __LINE__); \
  } while (0)

// After every kernel launch: catches bad launch configurations at the launch site.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

namespace gg::cuda::runtime {
inline cudaStream_t cuda_stream() { return static_cast<cudaStream_t>(stream()); }
}  // namespace gg::cuda::runtime
