// gg::cuda::StreamGuard: while it lives, the library's kernels, copies and stream-ordered
// allocations on the device go to a stream someone else owns; nested guards restore what they found.
#include <cuda_runtime.h>

#include "../test_util.h"
#include "core/cuda_runtime.h"
#include "gpu_util.h"

namespace gg::test {
namespace {

TEST(CudaStreamGuard, RunsTheLibraryOnAnExternalStream) {
  GG_REQUIRE_GPU_OR_SKIP();
  manual_seed(3);
  const Tensor x = randn({96, 80}, DType::f32, Device::cuda(0)), w = randn({80, 64}, DType::f32, Device::cuda(0));
  const Values want = relu(matmul(x, w)).to_vector<double>();  // on the library stream; waits for it
  void* const own = cuda::runtime::stream();
  cudaStream_t external = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&external, cudaStreamNonBlocking), cudaSuccess);
  {
    cuda::StreamGuard guard(Device::cuda(0), external);
    EXPECT_EQ(cuda::runtime::stream(), static_cast<void*>(external));
    {
      cuda::StreamGuard legacy(Device::cuda(0), nullptr);  // 0: CUDA's legacy default stream
      EXPECT_EQ(cuda::runtime::stream(), nullptr);
    }
    EXPECT_EQ(cuda::runtime::stream(), static_cast<void*>(external));
    const MemoryStats before = cuda::memory_stats(0);
    Tensor y = relu(matmul(x, w));  // allocated, computed and (below) freed on `external`
    EXPECT_GT(cuda::memory_stats(0).current_bytes, before.current_bytes);
    expect_close(y.to_vector<double>(), want, 1e-6, 1e-6, "relu(x w) on the external stream");
    y = Tensor();
    EXPECT_EQ(cuda::memory_stats(0).current_bytes, before.current_bytes);
  }
  EXPECT_EQ(cuda::runtime::stream(), own);
  ASSERT_EQ(cudaStreamSynchronize(external), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(external), cudaSuccess);
  EXPECT_THROW(cuda::StreamGuard(Device::cpu(), nullptr), DeviceError);
}

}  // namespace
}  // namespace gg::test
