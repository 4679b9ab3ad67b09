// atomic_rate: how fast can the key blocks of a fused BoB sweep add their query-side parts into
// global buffers, by the kind of addition? The access pattern is the fused BoB's (d = 64): one
// block of 256 threads per SM (two warpgroups; warpgroup w adds into output w), H·N/128 blocks,
// each going over all N/32 query tiles of its head from its own starting tile and adding a 32 x 64
// tile per output per step, 16 values per thread (4 groups of 4 consecutive floats). Only the
// additions run: no MMA, no loads of inputs, so the time is a lower bound for that traffic.
//
// Kinds:
//   f32x4  atomicAdd(float4*): red.global.add.v4.f32, what the kernels issue now (any order)
//   f32    four atomicAdd(float*): red.global.add.f32
//   u64    four atomicAdd(unsigned long long*) of fixed-point values (integer sums: the result
//          does not depend on the order of the additions, so it is reproducible without turns)
//   store  st.global.v4.f32, no addition: the traffic's bandwidth without read-modify-write
// Question it answers: what would deterministic integer accumulation cost against the f32 vector
// atomics? (kernel notes v29, next step 1.) Prints one JSON line per kind.
// Usage: bench_atomic_rate [N [H [repetitions]]]   (defaults 16384 16 5; compute capability 9.x)
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <vector>

#include "kernels/cuda/check.cuh"

namespace {

enum Kind { kF32x4, kF32, kU64, kStore };
const char* const kNames[] = {"f32x4", "f32", "u64", "store"};

constexpr int kRows = 32, kD = 64, kTile = kRows * kD;  // one query tile of one output
constexpr int kKeysPerBlock = 128;

// Block b: head b / (N / 128), key block b % (N / 128); it starts at query tile (its key block)
// mod tiles, so that neighbouring blocks add into different tiles at a time, as the kernels do.
template <Kind kKind>
__global__ void __launch_bounds__(256, 1) add_tiles_kernel(void* buf, int N) {
  const int key_blocks = N / kKeysPerBlock, tiles = N / kRows;
  const int head = blockIdx.x / key_blocks, kb = blockIdx.x % key_blocks;
  const int w = threadIdx.x / 128, t = threadIdx.x % 128;  // warpgroup = output
  const int64_t out_base = (int64_t{head} * 2 + w) * int64_t{N} * kD;
  const float v = 1.0f + 1e-3f * static_cast<float>(t);  // a value per thread, the same every tile
  for (int s = 0; s < tiles; ++s) {
    const int qt = (kb + s) % tiles;
    const int64_t tile = out_base + int64_t{qt} * kTile;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t e = tile + (j * 128 + t) * 4;  // 4 consecutive values
      if constexpr (kKind == kF32x4) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        atomicAdd(reinterpret_cast<float4*>(static_cast<float*>(buf) + e), make_float4(v, v, v, v));
#else
        __trap();  // the vector atomic needs compute capability 9.0
#endif
      } else if constexpr (kKind == kF32) {
        float* p = static_cast<float*>(buf) + e;
        for (int c = 0; c < 4; ++c) atomicAdd(p + c, v);
      } else if constexpr (kKind == kU64) {
        // fixed point with 2^40 per unit: the kernels would take the scale from a bound per row
        const auto q = static_cast<unsigned long long>(static_cast<long long>(v * 0x1p40f));
        unsigned long long* p = static_cast<unsigned long long*>(buf) + e;
        for (int c = 0; c < 4; ++c) atomicAdd(p + c, q);
      } else {
        *reinterpret_cast<float4*>(static_cast<float*>(buf) + e) = make_float4(v, v, v, v);
      }
    }
  }
}

template <Kind kKind>
void measure(int N, int H, int reps, void* buf, size_t bytes) {
  const int blocks = H * (N / kKeysPerBlock);
  const int smem = 160 * 1024;  // one block per SM, as the warp-specialised sweeps
  CUDA_CHECK(cudaFuncSetAttribute(add_tiles_kernel<kKind>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  std::vector<float> ms;
  for (int r = 0; r <= reps; ++r) {  // r = 0: warm-up, not kept
    CUDA_CHECK(cudaMemset(buf, 0, bytes));
    CUDA_CHECK(cudaEventRecord(a));
    add_tiles_kernel<kKind><<<blocks, 256, smem>>>(buf, N);
    CUDA_CHECK(cudaEventRecord(b));
    CUDA_CHECK(cudaEventSynchronize(b));
    CUDA_CHECK(cudaGetLastError());
    float t = 0.f;
    CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    if (r > 0) ms.push_back(t);
  }
  float best = ms[0], sum = 0.f;
  for (float t : ms) {
    best = t < best ? t : best;
    sum += t;
  }
  // every output value receives one addition per key block of its head
  const double adds = static_cast<double>(blocks) * N * kD * 2;
  const int elem = kKind == kU64 ? 8 : 4;
  // check: each buffer element is (key blocks) x its thread's value
  const double expect = (N / kKeysPerBlock) * (1.0 + 1e-3 * 5);  // thread t = 5 writes element 20..23 of tile 0
  double got = 0.0;
  if (kKind == kU64) {
    unsigned long long q = 0;
    CUDA_CHECK(cudaMemcpy(&q, static_cast<unsigned long long*>(buf) + 20, sizeof q, cudaMemcpyDeviceToHost));
    got = static_cast<double>(q) / 0x1p40;
  } else {
    float f = 0.f;
    CUDA_CHECK(cudaMemcpy(&f, static_cast<float*>(buf) + 20, sizeof f, cudaMemcpyDeviceToHost));
    got = f;
  }
  const bool ok = kKind == kStore || (got > expect * 0.999 && got < expect * 1.001);
  std::printf(
      "{\"bench\": \"atomic_rate\", \"kind\": \"%s\", \"N\": %d, \"H\": %d, \"blocks\": %d, \"best_ms\": %.4f, "
      "\"mean_ms\": %.4f, \"G_adds_per_s\": %.1f, \"GB_per_s\": %.1f, \"check\": \"%s\", \"value\": %.6g, "
      "\"expected\": %.6g}\n",
      kNames[kKind], N, H, blocks, best, sum / ms.size(), adds / best / 1e6, adds * elem / best / 1e6, ok ? "ok" : "FAIL",
      got, kKind == kStore ? got : expect);
  CUDA_CHECK(cudaEventDestroy(a));
  CUDA_CHECK(cudaEventDestroy(b));
}

}  // namespace

int main(int argc, char** argv) {
  const int N = argc > 1 ? std::atoi(argv[1]) : 16384;
  const int H = argc > 2 ? std::atoi(argv[2]) : 16;
  const int reps = argc > 3 ? std::atoi(argv[3]) : 5;
  if (N <= 0 || N % kKeysPerBlock != 0 || H <= 0 || reps <= 0) {
    std::fprintf(stderr, "bench_atomic_rate: N must be a positive multiple of %d, H and repetitions positive (got N=%d H=%d reps=%d)\n",
                 kKeysPerBlock, N, H, reps);
    return 2;
  }
  try {
    const size_t bytes = static_cast<size_t>(H) * 2 * N * kD * 8;  // room for the u64 kind
    void* buf = nullptr;
    CUDA_CHECK(cudaMalloc(&buf, bytes));
    measure<kF32x4>(N, H, reps, buf, bytes);
    measure<kF32>(N, H, reps, buf, bytes);
    measure<kU64>(N, H, reps, buf, bytes);
    measure<kStore>(N, H, reps, buf, bytes);
    CUDA_CHECK(cudaFree(buf));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_atomic_rate: %s\n", e.what());
    return 1;
  }
  return 0;
}
