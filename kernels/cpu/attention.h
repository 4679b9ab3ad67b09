// CPU kernels for fused softmax attention: forward, backward, and backward-over-backward (BoB).
//
// The math is in docs/attention.md; each .cpp restates its part in its header.
// Kernels see raw pointers and an AttentionShape, never tensors: the op layer (ops/) checks
// shapes, dtypes and contiguity and resolves the scale before calling in.
//
// Layout: Q, K, V, O, dO and every gradient are contiguous row-major (B, H, N, d); L and the
// internal row scalars D, E, F are contiguous (B, H, N). Nq = Nk = N.
//
// Tiling (the same schedule the GPU kernels use): a query block is kBlockM rows of Q, a key
// block kBlockN rows of K and V. Work is split over (b, h, block); scratch is a few
// kBlockM x kBlockN tiles per thread plus per-row vectors of length N per head. No N x N buffer.
#pragma once
#include <cmath>
#include <cstdint>

#include <Eigen/Core>
#if defined(_OPENMP)
#include <omp.h>
#endif

#include "kernels/params.h"

namespace gg::kernels::cpu {

// Tile sizes, shared by all three kernels.
inline constexpr int64_t kBlockM = 64;  // query rows per block
inline constexpr int64_t kBlockN = 64;  // key rows per block

using kernels::AttentionShape;  // kernels/params.h

// O = softmax(s*Q*K^T + mask) * V, L = row logsumexp of the masked scaled scores (natural log).
template <typename T>
void attention_fwd(const AttentionShape& p,
                   const T* Q,  // (B, H, N, d)
                   const T* K,  // (B, H, N, d)
                   const T* V,  // (B, H, N, d)
                   T* O,        // (B, H, N, d) out
                   T* L);       // (B, H, N)    out

// dQ, dK, dV given dO and the saved O, L (D = rowsum(dO*O) computed inside).
template <typename T>
void attention_bwd(const AttentionShape& p,
                   const T* Q,   // (B, H, N, d)
                   const T* K,   // (B, H, N, d)
                   const T* V,   // (B, H, N, d)
                   const T* O,   // (B, H, N, d) saved by the forward
                   const T* L,   // (B, H, N)    saved by the forward
                   const T* dO,  // (B, H, N, d)
                   T* dQ,        // (B, H, N, d) out
                   T* dK,        // (B, H, N, d) out
                   T* dV);       // (B, H, N, d) out

// BoB: given cotangents Qt, Kt, Vt of dQ, dK, dV (each may be nullptr = absent, skip its terms,
// do not multiply zeros), write grad_Q, grad_K, grad_V, grad_dO (all four always written, fully
// overwritten). O and L are saved values: no gradient flows into them.
template <typename T>
void attention_bwd_bwd(const AttentionShape& p,
                       const T* Q,   // (B, H, N, d)
                       const T* K,   // (B, H, N, d)
                       const T* V,   // (B, H, N, d)
                       const T* O,   // (B, H, N, d) saved by the forward
                       const T* L,   // (B, H, N)    saved by the forward
                       const T* dO,  // (B, H, N, d)
                       const T* Qt,  // (B, H, N, d) cotangent of dQ, or nullptr
                       const T* Kt,  // (B, H, N, d) cotangent of dK, or nullptr
                       const T* Vt,  // (B, H, N, d) cotangent of dV, or nullptr
                       T* gQ,        // (B, H, N, d) out
                       T* gK,        // (B, H, N, d) out
                       T* gV,        // (B, H, N, d) out
                       T* gdO);      // (B, H, N, d) out

// ---------------------------------------------------------------------------------------------
// Internal: tile helpers shared by the three attention .cpp files. Not part of the interface.
//
// A tile is a row-major kBlockM x kBlockN array; entry (i, j) (local query row i, local key
// row j) lives at [i * kBlockN + j]. "Rows" are d-long rows of a (N, d) matrix, row stride d.
// ---------------------------------------------------------------------------------------------

// GG_OMP(directive) emits `#pragma omp directive` when compiled with OpenMP, nothing otherwise
// (so a build without -fopenmp is serial, correct, and free of unknown-pragma warnings).
#ifndef GG_OMP
#define GG_OMP_STR(x) #x
#if defined(_OPENMP)
#define GG_OMP(directive) _Pragma(GG_OMP_STR(omp directive))
#else
#define GG_OMP(directive)
#endif
#endif

namespace detail {

inline int64_t num_blocks(int64_t n, int64_t block) { return (n + block - 1) / block; }

// Threads only pay when there is real work: below ~4M multiply-adds a parallel region costs
// more than it saves, and far more when the machine is busy (spinning OpenMP workers).
inline bool worth_threads(const AttentionShape& p) {
  return static_cast<double>(p.B * p.H) * static_cast<double>(p.N) * static_cast<double>(p.N) *
             static_cast<double>(p.d) > 4e6;
}

// Causal masking at tile granularity, for query rows [i0, i0 + mi) and key rows [j0, j0 + nj).
inline bool tile_fully_masked(bool causal, int64_t i0, int64_t mi, int64_t j0) {
  return causal && j0 > i0 + mi - 1;  // every key is after every query
}
inline bool tile_partly_masked(bool causal, int64_t i0, int64_t j0, int64_t nj) {
  return causal && j0 + nj - 1 > i0;  // some key is after some query
}

// <a, b> over d.
template <typename T>
inline T dot(const T* a, const T* b, int64_t d) {
  T acc = 0;
  GG_OMP(simd reduction(+ : acc))
  for (int64_t k = 0; k < d; ++k) acc += a[k] * b[k];
  return acc;
}

// y += alpha * x over d.
template <typename T>
inline void axpy(T alpha, const T* x, T* y, int64_t d) {
  GG_OMP(simd)
  for (int64_t k = 0; k < d; ++k) y[k] += alpha * x[k];
}

// The tile products below are small GEMMs done by Eigen over maps of the row-major buffers: a
// tile is (mi, nj) with outer stride kBlockN, a block of rows is (rows, d) with outer stride d.
// Inside the kernels' (active) parallel regions Eigen's GEMM runs single-threaded. Outside one
// (a small problem, see worth_threads) Eigen's GEMM would fork its own OpenMP team for every
// 64x64 tile, which costs far more than the tile; there the products are lazy (coefficient-
// based, never threaded) instead.
inline bool tile_gemm_ok() {
#if defined(_OPENMP)
  return omp_get_num_threads() > 1 || omp_get_max_threads() == 1;  // Eigen would not fork
#else
  return true;
#endif
}

template <typename T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using ConstRowsMap = Eigen::Map<const RowMat<T>>;  // (rows, d), row stride d
template <typename T>
using RowsMap = Eigen::Map<RowMat<T>>;
template <typename T>
using ConstTileMap = Eigen::Map<const RowMat<T>, 0, Eigen::OuterStride<kBlockN>>;  // (mi, nj)
template <typename T>
using TileMap = Eigen::Map<RowMat<T>, 0, Eigen::OuterStride<kBlockN>>;

// C(i, j) = alpha * <A_i, B_j>   (or += when accumulate): a score-like tile A·Bᵀ.
template <typename T>
inline void tile_abt(int64_t mi, int64_t nj, int64_t d, T alpha, const T* A, const T* B, T* C,
                     bool accumulate) {
  const ConstRowsMap<T> a(A, mi, d);
  const ConstRowsMap<T> b(B, nj, d);
  TileMap<T> c(C, mi, nj);
  if (!tile_gemm_ok()) {
    if (accumulate)
      c.noalias() += alpha * a.lazyProduct(b.transpose());
    else
      c.noalias() = alpha * a.lazyProduct(b.transpose());
  } else if (accumulate) {
    c.noalias() += alpha * a * b.transpose();
  } else {
    c.noalias() = alpha * a * b.transpose();
  }
}

// Out_i += sum_j C(i, j) * B_j   (tile times key rows: Out is mi x d).
template <typename T>
inline void tile_ab_acc(int64_t mi, int64_t nj, int64_t d, const T* C, const T* B, T* Out) {
  const ConstTileMap<T> c(C, mi, nj);
  const ConstRowsMap<T> b(B, nj, d);
  RowsMap<T> out(Out, mi, d);
  if (tile_gemm_ok())
    out.noalias() += c * b;
  else
    out.noalias() += c.lazyProduct(b);
}

// Out_j += sum_i C(i, j) * A_i   (tile transposed times query rows: Out is nj x d).
template <typename T>
inline void tile_atb_acc(int64_t mi, int64_t nj, int64_t d, const T* C, const T* A, T* Out) {
  const ConstTileMap<T> c(C, mi, nj);
  const ConstRowsMap<T> a(A, mi, d);
  RowsMap<T> out(Out, nj, d);
  if (tile_gemm_ok())
    out.noalias() += c.transpose() * a;
  else
    out.noalias() += c.transpose().lazyProduct(a);
}

// P(i, j) = exp(S(i, j) - L_i), and 0 where key j0 + j is after query i0 + i (causal).
// S and P may alias. L points at the block's first row.
template <typename T>
inline void tile_probs(int64_t mi, int64_t nj, int64_t i0, int64_t j0, bool causal, const T* S,
                       const T* L, T* P) {
  const bool masked = tile_partly_masked(causal, i0, j0, nj);
  for (int64_t i = 0; i < mi; ++i)
    for (int64_t j = 0; j < nj; ++j) {
      const int64_t ij = i * kBlockN + j;
      P[ij] = (masked && j0 + j > i0 + i) ? T(0) : std::exp(S[ij] - L[i]);
    }
}

}  // namespace detail
}  // namespace gg::kernels::cpu
