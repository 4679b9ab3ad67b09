// Shared pieces of the Hopper (sm_90a) attention kernels: descriptor steps over the swizzled
// tiles of common.cuh and the two warpgroup tile products every kernel is built from
// (a score product Own·Otherᵀ with both operands in shared memory, and a coefficient product
// Coef·Other with the coefficient tile in registers). The wgmma wrappers are in wgmma.cuh.
#pragma once
#include "kernels/cuda/attention/common.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace gg::kernels::cuda::attn {

// Descriptor offset (16-byte units) of the k16 slice k of a K-major swizzled tile of `rows` rows.
__device__ __forceinline__ uint64_t k_major_step(int k, int rows) {
  return uint64_t((k / 4) * rows * 128 / 16 + (k % 4) * 2);
}
// Descriptor offset of rows [16·q, 16·q + 16) of column half h of an MN-major swizzled tile.
__device__ __forceinline__ uint64_t mn_major_step(int q, int h, int rows) {
  return uint64_t((h * rows * 128 + q * 2048) / 16);
}

// acc (64 x kD) += A (64 x kBN, register fragments a[kBN / 16]) · B (kBN x kD, MN-major smem desc),
// issued 64 output columns at a time.
template <typename T, int kD, int kBN>
__device__ __forceinline__ void wgmma_coef_product(float (&acc)[kD / 8][4], const uint32_t (&a)[kBN / 16][4],
                                                   uint64_t db) {
#pragma unroll
  for (int h = 0; h < kD / 64; ++h) {
    float(&acc_h)[8][4] = *reinterpret_cast<float(*)[8][4]>(&acc[8 * h][0]);
#pragma unroll
    for (int q = 0; q < kBN / 16; ++q) wgmma_rs<T, 64>(acc_h, a[q], db + mn_major_step(q, h, kBN), true);
  }
}

// s (64 x kBN) (+)= A (64 own rows, smem) · B (kBN other rows, smem)ᵀ, both K-major swizzled.
// kAccumulate = false overwrites s: the first k-step is the output-only wgmma_ss_over, so the
// compiler keeps no earlier value of s alive (see wgmma.cuh). kRowsB: rows of the tile B's
// descriptor points into (B may be a 16-row slice of a larger tile).
template <typename T, int kD, int kBN, bool kAccumulate = false, int kRowsB = kBN>
__device__ __forceinline__ void wgmma_score_product(float (&s)[kBN / 8][4], uint64_t da, uint64_t db) {
#pragma unroll
  for (int k = 0; k < kD / 16; ++k) {
    if (k == 0 && !kAccumulate)
      wgmma_ss_over<T, kBN>(s, da, db);
    else
      wgmma_ss<T, kBN>(s, da + k_major_step(k, 64), db + k_major_step(k, kRowsB), true);
  }
}

// s (64 x kBN) (+)= A (64 own rows, register fragments a[k] per k16 step, from load_a_frags) ·
// B (kBN other rows, smem)ᵀ, B K-major swizzled: wgmma_score_product with the own rows in registers,
// so that only B is read from shared memory (with N = 16 or 32 columns, an SS product is limited
// by shared-memory reads of A: bench/wgmma_rate.cu).
template <typename T, int kD, int kBN, bool kAccumulate = false, int kRowsB = kBN>
__device__ __forceinline__ void wgmma_score_product_rs(float (&s)[kBN / 8][4], const uint32_t (&a)[kD / 16][4],
                                                       uint64_t db) {
#pragma unroll
  for (int k = 0; k < kD / 16; ++k) {
    if (k == 0 && !kAccumulate)
      wgmma_rs_kb_over<T, kBN>(s, a[0], db);
    else
      wgmma_rs_kb<T, kBN>(s, a[k], db + k_major_step(k, kRowsB), true);
  }
}

// The A operands (mma.sync m16n8k16 A fragments, one per k16 step) of this warp's rows
// [iw, iw + 16) of a head's (N, kD) row-major matrix g, read from global memory; rows at or past N
// are zero.
template <typename T, int kD>
__device__ __forceinline__ void load_a_frags(uint32_t (&a)[kD / 16][4], const T* g, int iw, int N, int lane) {
  const int r0 = iw + lane / 4, r1 = r0 + 8, c = 2 * (lane % 4);
  auto at = [&](int r, int col) {
    return r < N ? *reinterpret_cast<const uint32_t*>(g + static_cast<int64_t>(r) * kD + col) : 0u;
  };
#pragma unroll
  for (int k = 0; k < kD / 16; ++k) {
    a[k][0] = at(r0, 16 * k + c);  // row g,     k 2t..2t+1
    a[k][1] = at(r1, 16 * k + c);  // row g + 8
    a[k][2] = at(r0, 16 * k + c + 8);
    a[k][3] = at(r1, 16 * k + c + 8);
  }
}

// The 16 x kBN tile c (mma.sync layout) as kBN / 16 register A operands.
template <typename T, int kBN>
__device__ __forceinline__ void tile_to_a_frags(uint32_t (&a)[kBN / 16][4], const float (&c)[kBN / 8][4]) {
#pragma unroll
  for (int q = 0; q < kBN / 16; ++q) to_a_frag<T>(a[q], *reinterpret_cast<const float(*)[2][4]>(&c[2 * q][0]));
}

}  // namespace gg::kernels::cuda::attn
