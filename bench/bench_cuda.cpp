// GPU benchmarks of the CUDA backend (issue: CUDA backend), one JSON object per line on stdout
// and a markdown table on stderr:
//   copy      device-to-device cudaMemcpy of 1 GiB: the card's copy bandwidth (read + write)
//   add       gg::add of two 1 GiB f32 tensors: GB/s (2 reads + 1 write) and % of copy
//   sum       gg::sum of a 1 GiB f32 tensor: GB/s (1 read) and % of copy
//   matmul    gg::matmul vs a raw cuBLAS call at 4096³, bf16 and f32 (exact f32, TF32 off)
//   mlp       a 3-layer MLP step: forward + backward(create_graph) + double backward
// Times: median of repeats after warm-up, host clock around cudaDeviceSynchronize.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

#include "bench/median.h"
#include "gradgrad.h"

using namespace gg;

namespace {

double median_ms(const std::function<void()>& f, int warm = 3, int reps = 15) {
  for (int i = 0; i < warm; ++i) f();
  cudaDeviceSynchronize();  // all streams: the library's and the raw cuBLAS/cudaMemcpy calls
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto a = std::chrono::steady_clock::now();
    f();
    cudaDeviceSynchronize();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
  }
  return bench::median(t);
}

const Device kGpu = Device::cuda(0);

}  // namespace

int main() {
  if (!cuda::is_available()) {
    std::fprintf(stderr, "bench_cuda: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("{\"bench\":\"device\",\"name\":\"%s\",\"sms\":%d}\n", prop.name, prop.multiProcessorCount);

  // ---- bandwidth: copy, add, sum on 1 GiB f32 ----
  const int64_t n = (int64_t(1) << 30) / 4;
  Tensor a = randn({n}, DType::f32, kGpu), b = randn({n}, DType::f32, kGpu), c = empty({n}, DType::f32, kGpu);
  cudaStream_t s = static_cast<cudaStream_t>(nullptr);
  (void)s;
  double copy_ms = median_ms([&] { cudaMemcpy(c.raw_data(), a.raw_data(), size_t(n) * 4, cudaMemcpyDeviceToDevice); });
  double copy_gbs = 2.0 * n * 4 / copy_ms / 1e6;
  double add_ms = median_ms([&] { Tensor r = a + b; });
  double add_gbs = 3.0 * n * 4 / add_ms / 1e6;
  double sum_ms = median_ms([&] { Tensor r = sum(a); });
  double sum_gbs = 1.0 * n * 4 / sum_ms / 1e6;
  std::printf("{\"bench\":\"copy\",\"bytes\":%lld,\"ms\":%.4f,\"GBps\":%.1f}\n", (long long)(n * 4), copy_ms, copy_gbs);
  std::printf("{\"bench\":\"add\",\"ms\":%.4f,\"GBps\":%.1f,\"of_copy\":%.3f}\n", add_ms, add_gbs, add_gbs / copy_gbs);
  std::printf("{\"bench\":\"sum\",\"ms\":%.4f,\"GBps\":%.1f,\"of_copy\":%.3f}\n", sum_ms, sum_gbs, sum_gbs / copy_gbs);
  a = b = c = Tensor();

  // ---- matmul 4096³: gg::matmul vs a raw cuBLAS GEMM on the same buffers ----
  cublasHandle_t h;
  cublasCreate(&h);
  const int m = 4096;
  for (DType dt : {DType::bf16, DType::f32}) {
    Tensor x = to(randn({m, m}, DType::f32, kGpu), dt), y = to(randn({m, m}, DType::f32, kGpu), dt);
    Tensor z = empty({m, m}, dt, kGpu);
    double gg_ms = median_ms([&] { Tensor r = matmul(x, y); });
    cudaDataType t = dt == DType::bf16 ? CUDA_R_16BF : CUDA_R_32F;
    float one = 1.0f, zero = 0.0f;
    // Row-major Z = X·Y is column-major Zᵀ = Yᵀ·Xᵀ: pass Y first.
    double raw_ms = median_ms([&] {
      cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, m, m, &one, y.raw_data(), t, m, x.raw_data(), t, m, &zero, z.raw_data(),
                   t, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    });
    double tf = 2.0 * m * m * m / 1e9;
    std::printf("{\"bench\":\"matmul\",\"dtype\":\"%s\",\"n\":%d,\"gg_ms\":%.4f,\"cublas_ms\":%.4f,\"ratio\":%.4f,"
                "\"gg_TFLOPs\":%.1f}\n",
                dtype_name(dt), m, gg_ms, raw_ms, gg_ms / raw_ms, tf / gg_ms);
  }
  cublasDestroy(h);

  // ---- MLP step: forward, backward with create_graph, double backward (gradient penalty) ----
  for (int64_t width : {64, 1024}) {
    const int64_t batch = 256;
    manual_seed(0);
    Tensor X = randn({batch, width}, DType::f32, kGpu), Y = randn({batch, 1}, DType::f32, kGpu);
    TensorList W = {randn({width, width}, DType::f32, kGpu) * (1.0 / std::sqrt(double(width))),
                    randn({width, width}, DType::f32, kGpu) * (1.0 / std::sqrt(double(width))),
                    randn({width, 1}, DType::f32, kGpu) * (1.0 / std::sqrt(double(width)))};
    for (Tensor& w : W) w = w.detach().requires_grad_(true);
    auto step = [&] {
      Tensor hdn = tanh(matmul(X, W[0]));
      hdn = tanh(matmul(hdn, W[1]));
      Tensor loss = mse_loss(matmul(hdn, W[2]), Y);
      TensorList g = grad({loss}, W, {}, std::nullopt, /*create_graph=*/true);
      Tensor penalty = sum(g[0] * g[0]) + sum(g[1] * g[1]) + sum(g[2] * g[2]);
      TensorList g2 = grad({loss + penalty}, W);
    };
    double ms = median_ms(step, 5, 30);
    std::printf("{\"bench\":\"mlp_step\",\"batch\":%lld,\"width\":%lld,\"ms\":%.4f}\n", (long long)batch,
                (long long)width, ms);
  }
  return 0;
}
