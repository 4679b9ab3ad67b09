// Hopper (sm_90) bulk tensor copies and shared-memory barriers, for warp-specialised kernels: one
// producer thread copies tiles from global to shared memory with the copy engine (TMA), and the
// consumers wait on an mbarrier that completes when the bytes have landed; the consumers release
// a stage by arriving on a second mbarrier that the producer waits on before reusing it.
//
//   mbar_init(bar, count)           once, by one thread, then mbar_fence_init() and a block barrier
//   mbar_expect_tx(bar, bytes)      producer: one arrival that also expects `bytes` of copies
//   tma_load_3d(dst, map, bar, ...) producer: copy one box of a 3D tensor map into dst
//   mbar_arrive(bar)                consumer: one arrival
//   mbar_wait(bar, parity)          wait until the phase with this parity has completed
//
// A barrier's k-th completion (k = 0, 1, ...) is waited for with parity k % 2. Tensor maps
// (CUtensorMap, made on the host by cuTensorMapEncodeTiled) are passed to the kernel by value as
// __grid_constant__ parameters. setmaxnreg moves registers between warpgroups (sm_90a only).
#pragma once
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "core/error.h"
#include "core/cuda_check.cuh"

namespace gg::kernels::cuda::attn {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define GG_TMA_AVAILABLE 1
#endif

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
#ifdef GG_TMA_AVAILABLE
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count) : "memory");
#endif
}
// Makes initialised barriers visible to the copy engine (and the other threads, after a barrier).
__device__ __forceinline__ void mbar_fence_init() {
#ifdef GG_TMA_AVAILABLE
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
#ifdef GG_TMA_AVAILABLE
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes)
               : "memory");
#endif
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
#ifdef GG_TMA_AVAILABLE
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory");
#endif
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
#ifdef GG_TMA_AVAILABLE
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n"
      "}\n" ::"r"(smem_u32(bar)),
      "r"(parity)
      : "memory");
#endif
}

// Copies the box of a 3D tensor map whose first element is at coordinates (c0, c1, c2) (innermost
// first) into shared memory at dst (1024-byte aligned for the 128-byte swizzle); completes on bar.
// Rows outside the tensor read as zeros.
__device__ __forceinline__ void tma_load_3d(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1, int c2) {
#ifdef GG_TMA_AVAILABLE
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], "
      "[%2];\n" ::"r"(smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
#endif
}

// Registers per thread of the calling warpgroup (a multiple of 8 in [24, 256]); the kernel needs a
// register cap at entry (__launch_bounds__(threads, 1)) and each role in one branch of an if/else.
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#endif
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#endif
}

// ---------------------------------------------------------------- host: tensor maps

// A (BH, N, d) tensor as a 3D tensor map {d, N, BH} (innermost first) with boxes of 64 columns x
// `rows` rows of one head, 128-byte swizzled: rows past N read as zeros, never another head's.
template <typename T>
inline CUtensorMap make_tensor_map(const T* base, int64_t BH, int N, int d, int rows) {
  using Encode = PFN_cuTensorMapEncodeTiled_v12000;
  static Encode encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
    CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
    GG_CHECK(fn != nullptr && q == cudaDriverEntryPointSuccess, DeviceError,
             "gg::attention (CUDA): cuTensorMapEncodeTiled is not available in this driver");
    return reinterpret_cast<Encode>(fn);
  }();
  CUtensorMap map;
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(d), static_cast<cuuint64_t>(N), static_cast<cuuint64_t>(BH)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(d) * sizeof(T), static_cast<cuuint64_t>(N) * d * sizeof(T)};
  const cuuint32_t box[3] = {64, static_cast<cuuint32_t>(rows), 1};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  const CUtensorMapDataType type =
      std::is_same_v<T, __half> ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  const CUresult r = encode(&map, type, 3, const_cast<T*>(base), dims, strides, box,
                            elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  GG_CHECK(r == CUDA_SUCCESS, DeviceError, "gg::attention (CUDA): cuTensorMapEncodeTiled failed (", int(r), ")");
  return map;
}

// v of lane 0, through a shuffle, so that the compiler knows it is the same in every thread of the
// warp: what is computed from it (wgmma descriptors, shared-memory offsets) then lives in uniform
// registers, instead of being moved into them (R2UR) and recomputed in every thread before each
// warpgroup MMA. For values that are warp-uniform but derived from threadIdx.
__device__ __forceinline__ int warp_uniform(int v) { return __shfl_sync(0xffffffffu, v, 0); }
// The warpgroup of this thread (threadIdx.x / 128), warp-uniform.
__device__ __forceinline__ int warpgroup_index() { return warp_uniform(static_cast<int>(threadIdx.x) / 128); }

// Named barriers (ids 1-15; 0 is __syncthreads) of n threads, n a multiple of 32.
__device__ __forceinline__ void named_bar_sync(int id, int n) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void named_bar_arrive(int id, int n) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}

// Ping-pong of the two consumer warpgroups of a warp-specialised block: each issues its groups of
// tensor-core products in turns, consumer 0, consumer 1, consumer 0, ..., so that the products of
// one can run while the other does its elementwise work instead of both consumers reaching their
// products, and then their elementwise work, at the same time. Barrier 1 (256 threads)
// lets consumer 0 go, barrier 2 consumer 1: consumer w syncs on 1 + w before issuing and arrives
// on 2 - w after. Consumer 1 opens with an arrival on barrier 1; both must then take the same
// number of turns, and consumer 0 absorbs consumer 1's last arrival when it closes.
struct PingPong {
  int turn_w = 0;  // this consumer, 0 or 1
  bool turn_on = false;
  __device__ void ping_pong_open(int w, bool on) {
    turn_w = w;
    turn_on = on;
    if (on && w == 1) named_bar_arrive(1, 256);
  }
  __device__ void turn_begin() const {
    if (turn_on) named_bar_sync(1 + turn_w, 256);
  }
  __device__ void turn_end() const {
    if (turn_on) named_bar_arrive(2 - turn_w, 256);
  }
  __device__ void skip_turns(int n) const {
    for (int i = 0; i < n; ++i) {
      turn_begin();
      turn_end();
    }
  }
  __device__ void ping_pong_close() const {
    if (turn_on && turn_w == 0) named_bar_sync(1, 256);
  }
};

}  // namespace gg::kernels::cuda::attn
