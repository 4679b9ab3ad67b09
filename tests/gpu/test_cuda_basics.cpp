// Device transfers, mixed-device errors, memory statistics, RNG parity with the CPU.
#include "../test_util.h"
#include "gpu_util.h"

namespace gg::test {
namespace {

TEST(Cuda, RoundTripAndStrides) {
  GG_REQUIRE_GPU_OR_SKIP();
  Tensor x = from_vector({0, 1, 2, 3, 4, 5}, {2, 3}, DType::f64);
  Tensor g = to(x, Device::cuda(0));
  EXPECT_TRUE(g.device().is_cuda());
  EXPECT_EQ(g.to_vector<double>(), x.to_vector<double>());
  EXPECT_EQ(transpose(g, 0, 1).to_vector<double>(), (Values{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(to(transpose(g, 0, 1), Device::cpu()).to_vector<double>(), (Values{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(to(g, DType::bf16).to_vector<double>(), x.to_vector<double>());
  EXPECT_EQ(to(g, DType::f16).to_vector<double>(), x.to_vector<double>());
  EXPECT_TRUE(x.cuda().device().is_cuda());
  EXPECT_EQ(x.cuda().cpu().to_vector<double>(), x.to_vector<double>());
}

TEST(Cuda, GradientFlowsBackAcrossDevices) {
  GG_REQUIRE_GPU_OR_SKIP();
  Tensor x = from_vector({1, 2, 3}, {3}, DType::f64).requires_grad_(true);
  Tensor y = sum(exp(to(x, Device::cuda(0))));
  Tensor g = grad(y, x);
  EXPECT_TRUE(g.device().is_cpu());
  Values want = {std::exp(1.0), std::exp(2.0), std::exp(3.0)};
  expect_close(g.to_vector<double>(), want, 1e-14, 0, "d/dx sum exp");
}

TEST(Cuda, MixedDevicesNameBoth) {
  GG_REQUIRE_GPU_OR_SKIP();
  Tensor a = zeros({2}), b = zeros({2}, DType::f32, Device::cuda(0));
  try {
    add(a, b);
    FAIL() << "expected DeviceError";
  } catch (const DeviceError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("cpu"), std::string::npos) << m;
    EXPECT_NE(m.find("cuda:0"), std::string::npos) << m;
  }
}

TEST(Cuda, MemoryStatsTrackTensors) {
  GG_REQUIRE_GPU_OR_SKIP();
  MemoryStats before = cuda::memory_stats(0);
  {
    Tensor t = zeros({256, 1024}, DType::f32, Device::cuda(0));
    EXPECT_EQ(cuda::memory_stats(0).current_bytes - before.current_bytes, 256 * 1024 * 4);
  }
  EXPECT_EQ(cuda::memory_stats(0).current_bytes, before.current_bytes);
}

TEST(Cuda, RandomNumbersMatchTheCpu) {
  GG_REQUIRE_GPU_OR_SKIP();
  // Same counter-based stream on both: uniforms and f32 normals are bitwise equal; f64 normals
  // can differ in the last bit (CUDA's log/cos vs glibc's).
  manual_seed(5);
  Values cpu_u = rand({1000}, DType::f64).to_vector<double>(), cpu_n = randn({1000}, DType::f32).to_vector<double>();
  Values cpu_n64 = randn({1000}, DType::f64).to_vector<double>();
  manual_seed(5);
  Values gpu_u = rand({1000}, DType::f64, Device::cuda(0)).to_vector<double>();
  Values gpu_n = randn({1000}, DType::f32, Device::cuda(0)).to_vector<double>();
  Values gpu_n64 = randn({1000}, DType::f64, Device::cuda(0)).to_vector<double>();
  EXPECT_EQ(cpu_u, gpu_u);
  EXPECT_EQ(cpu_n, gpu_n);
  EXPECT_LE(rel_error(gpu_n64, cpu_n64), 1e-15);
}

TEST(Cuda, LargeReductionAndBroadcast) {
  GG_REQUIRE_GPU_OR_SKIP();
  // Sizes that exercise multi-block paths: sums of ones are exact.
  Tensor ones_gpu = ones({3, 1 << 20}, DType::f32, Device::cuda(0));
  Values s = sum(ones_gpu, {1}).to_vector<double>();
  EXPECT_EQ(s, (Values{1 << 20, 1 << 20, 1 << 20}));
  EXPECT_EQ(sum(ones({1 << 24}, DType::f64, Device::cuda(0))).item(), double(1 << 24));
  EXPECT_EQ(max(arange(0, 1 << 22, 1, DType::f32, Device::cuda(0))).item(), double((1 << 22) - 1));
  Tensor col = sum(ones({1000, 7}, DType::f64, Device::cuda(0)), {0});
  EXPECT_EQ(col.to_vector<double>(), Values(7, 1000.0));
}

TEST(Cuda, MatmulAgainstCpuAtSize) {
  GG_REQUIRE_GPU_OR_SKIP();
  manual_seed(6);
  Tensor a = randn({3, 130, 70}, DType::f64), b = randn({70, 90}, DType::f64);
  Values cpu = matmul(a, b).to_vector<double>();
  Values gpu = matmul(to(a, Device::cuda(0)), to(b, Device::cuda(0))).to_vector<double>();
  EXPECT_LE(rel_error(gpu, cpu), 1e-13);
  Values gpu_t = matmul(transpose(to(b, Device::cuda(0)), 0, 1), transpose(to(a, Device::cuda(0)), 1, 2)).to_vector<double>();
  Values cpu_t = matmul(transpose(b, 0, 1), transpose(a, 1, 2)).to_vector<double>();
  EXPECT_LE(rel_error(gpu_t, cpu_t), 1e-13);
}

}  // namespace
}  // namespace gg::test
