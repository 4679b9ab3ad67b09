// wgmma_rate: throughput of the Hopper warpgroup MMA shapes the attention kernels issue, with A in
// shared memory (SS: what the score products use) or in registers (RS: the coefficient products),
// for N = 16, 32, 64, 128 output columns. Each warpgroup issues chains of 16 m64nNk16 products
// into one accumulator, 4 warpgroups per SM, operands in 128-byte-swizzled shared memory.
// Question it answers: is a score product with few key columns (N = 16) limited by shared-memory
// reads of the A operand (64 x 16 per instruction)? Prints one JSON line per (mode, N).
// Usage: bench_wgmma_rate [iterations]   (needs an sm_90a build and a compute capability 9.x GPU)
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "kernels/cuda/attention/common.cuh"
#include "kernels/cuda/wgmma.cuh"

using namespace gg::kernels::cuda::attn;
using T = __nv_bfloat16;

template <int N, bool kRs>
__global__ void __launch_bounds__(128) wgmma_rate_kernel(int iters, float* sink) {
#if defined(GG_WGMMA_AVAILABLE)
  extern __shared__ __align__(1024) unsigned char smem[];
  for (int i = threadIdx.x; i < (64 + 128) * 64 / 8; i += 128) reinterpret_cast<int4*>(smem)[i] = int4{0, 0, 0, 0};
  fence_proxy_async();
  __syncthreads();
  const uint64_t da = make_desc_sw128(smem), db = make_desc_sw128(smem + 64 * 64 * 2);
  uint32_t a[4] = {0u, 0u, 0u, 0u};
  float d[N / 8][4];
  zero(d);
  for (int it = 0; it < iters; ++it) {
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < 16; ++k) {
      if constexpr (kRs)
        wgmma_rs<T, N>(d, a, db + (k % 4) * 2, true);
      else
        wgmma_ss<T, N>(d, da + (k % 4) * 2, db + (k % 4) * 2, true);
    }
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_regs(d);
  }
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < N / 8; ++j) s += d[j][0] + d[j][1] + d[j][2] + d[j][3];
  if (s == 1.f) sink[threadIdx.x] = s;  // never true (zero operands): keeps d alive
#else
  (void)iters;
  (void)sink;
  __trap();
#endif
}

template <int N, bool kRs>
void measure(int iters, int sms, float* sink) {
  auto kernel = wgmma_rate_kernel<N, kRs>;
  const int smem = (64 + 128) * 64 * 2;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  const int blocks = 4 * sms;
  kernel<<<blocks, 128, smem>>>(iters / 10, sink);  // warm-up
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  cudaEventRecord(e0);
  kernel<<<blocks, 128, smem>>>(iters, sink);
  cudaEventRecord(e1);
  cudaEventSynchronize(e1);
  float ms = 0.f;
  cudaEventElapsedTime(&ms, e0, e1);
  const cudaError_t err = cudaGetLastError();
  const double flops = double(blocks) * iters * 16 * 64.0 * N * 16 * 2;
  std::printf("{\"bench\":\"wgmma_rate\",\"mode\":\"%s\",\"N\":%d,\"blocks\":%d,\"ms\":%.3f,\"TFLOPs\":%.1f,"
              "\"smem_bytes_per_clk_needed_at_peak\":%.0f,\"error\":\"%s\"}\n",
              kRs ? "rs" : "ss", N, blocks, ms, flops / (ms * 1e-3) / 1e12,
              // bytes read per instruction / cycles per instruction at 4096 dense flop/clk/SM
              (kRs ? 16.0 * N * 2 : (64.0 * 16 + 16.0 * N) * 2) / (64.0 * N * 16 * 2 / 4096), cudaGetErrorString(err));
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
}

int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::atoi(argv[1]) : 20000;
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  if (prop.major != 9) {
    std::printf("{\"bench\":\"wgmma_rate\",\"error\":\"needs a compute capability 9.x GPU\"}\n");
    return 0;
  }
  float* sink = nullptr;
  cudaMalloc(&sink, 128 * sizeof(float));
  measure<16, false>(iters, prop.multiProcessorCount, sink);
  measure<32, false>(iters, prop.multiProcessorCount, sink);
  measure<64, false>(iters, prop.multiProcessorCount, sink);
  measure<128, false>(iters, prop.multiProcessorCount, sink);
  measure<16, true>(iters, prop.multiProcessorCount, sink);
  measure<32, true>(iters, prop.multiProcessorCount, sink);
  measure<64, true>(iters, prop.multiProcessorCount, sink);
  measure<128, true>(iters, prop.multiProcessorCount, sink);
  cudaFree(sink);
  return 0;
}
