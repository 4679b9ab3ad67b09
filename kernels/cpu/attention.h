// CPU kernels for fused softmax attention: forward, backward, and backward-over-backward (BoB).
//
// The math is in docs/attention.md; each .cpp restates its part in its header.
// Kernels see raw pointers and an AttentionShape, never tensors: the op layer (ops/) checks
// shapes, dtypes and contiguity and resolves the scale before calling in.
//
// Layout: every tensor is contiguous row-major. Q, O, dO and the gradients of Q and dO are
// (B, H, N, d) (N = Nq, the query length); K, V and their gradients are (B, Hkv, Nk, d); L and
// the internal row scalars D, E, F are (B, H, N). Query head h reads key/value head h / (H / Hkv)
// (grouped-query attention); the gradients of K and V sum over the query heads of their group
// inside the kernels, one task per (b, kv head, key block), so no expanded copy of K or V exists.
//
// Masking (kernels/params.h): query i sees the keys [lo(i), hi(i)] of detail::Visibility, a
// window around its bottom-right aligned position i' = i + Nk - Nq. A query block visits only
// the key blocks that meet its rows' windows and a key block only the query blocks that see it,
// so the work grows with N·window, not N². Rows that see no key get O = 0, L = -inf (whatever
// the data) and zero gradients. NaN and ±inf propagate as in the composite (ops.h); the forward's
// epilogue is where they are told apart from masking (attention_fwd.cpp).
//
// Tiling (the same schedule the GPU kernels use): a query block is kBlockM rows of Q, a key
// block kBlockN rows of K and V. Work is split over (b, h, block); scratch is a few
// kBlockM x kBlockN tiles per thread plus per-row vectors of length N per head. No N x N buffer.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include <Eigen/Core>
#if defined(_OPENMP)
#include <omp.h>
#endif

#include "../params.h"
#include "vec_math.h"

namespace gg::kernels::cpu {

// Tile sizes, shared by all three kernels.
inline constexpr int64_t kBlockM = 64;  // query rows per block
inline constexpr int64_t kBlockN = 64;  // key rows per block

using kernels::AttentionShape;  // kernels/params.h

// Scratch memory of the kernels, aligned to Eigen's packet size. Eigen handles an unaligned head
// of a buffer with scalar code before its packets, so with buffers wherever malloc put them the
// summation order, and the last bits of every result, would change from call to call.
template <typename T>
using Scratch = std::vector<T, Eigen::aligned_allocator<T>>;

// O = softmax(s*Q*K^T + mask) * V, L = row logsumexp of the masked scaled scores (natural log;
// -inf and O = 0 for a row that sees no key). In the comments below K-shaped means (B, Hkv, Nk, d).
template <typename T>
void attention_fwd(const AttentionShape& p,
                   const T* Q,  // (B, H, N, d)
                   const T* K,  // K-shaped
                   const T* V,  // K-shaped
                   T* O,        // (B, H, N, d) out
                   T* L);       // (B, H, N)    out

// dQ, dK, dV given dO and the saved O, L (D = rowsum(dO*O) computed inside), and the cotangent dL
// of L (nullptr: none): dS = P∘(dP - (D - dL)).
template <typename T>
void attention_bwd(const AttentionShape& p,
                   const T* Q,   // (B, H, N, d)
                   const T* K,   // K-shaped
                   const T* V,   // K-shaped
                   const T* O,   // (B, H, N, d) saved by the forward
                   const T* L,   // (B, H, N)    saved by the forward
                   const T* dO,  // (B, H, N, d)
                   const T* dL,  // (B, H, N)    cotangent of L, or nullptr
                   T* dQ,        // (B, H, N, d) out
                   T* dK,        // K-shaped out
                   T* dV);       // K-shaped out

// BoB: given cotangents Qt, Kt, Vt of dQ, dK, dV (each may be nullptr = absent, skip its terms,
// do not multiply zeros), write grad_Q, grad_K, grad_V, grad_dO (all four always written, fully
// overwritten) and, when gdL is not nullptr, grad_dL = E. dL as for attention_bwd. O and L are
// saved values: no gradient flows into them. stage (kernels/params.h): kWhole as above;
// kRowSums writes only E and F (the row scalars of this call's keys, (B, H, N) each);
// kFromRowSums reads the whole row's E and F and writes this call's parts of the four gradients.
template <typename T>
void attention_bwd_bwd(const AttentionShape& p,
                       const T* Q,   // (B, H, N, d)
                       const T* K,   // K-shaped
                       const T* V,   // K-shaped
                       const T* O,   // (B, H, N, d) saved by the forward
                       const T* L,   // (B, H, N)    saved by the forward
                       const T* dO,  // (B, H, N, d)
                       const T* dL,  // (B, H, N)    cotangent of L, or nullptr
                       const T* Qt,  // (B, H, N, d) cotangent of dQ, or nullptr
                       const T* Kt,  // K-shaped cotangent of dK, or nullptr
                       const T* Vt,  // K-shaped cotangent of dV, or nullptr
                       T* gQ,        // (B, H, N, d) out
                       T* gK,        // K-shaped out
                       T* gV,        // K-shaped out
                       T* gdO,       // (B, H, N, d) out
                       T* gdL,       // (B, H, N)    out (= E), or nullptr
                       BobStage stage = BobStage::kWhole,
                       T* E = nullptr,   // (B, H, N)    the stages' row scalars
                       T* F = nullptr);

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
  return static_cast<double>(p.B * p.H) * static_cast<double>(p.N) * static_cast<double>(p.keys()) *
             static_cast<double>(p.d) > 4e6;
}

// Which keys each query row sees. Query i sits at i' = i + off, off = Nk - Nq, and sees the keys
// j with lo(i) <= j <= hi(i) (an empty range when hi(i) < lo(i)). Both ends grow with i, which
// is what lets whole tiles be skipped or taken unmasked.
struct Visibility {
  AttentionShape p;
  int64_t nq, nk, off;
  bool left, right;  // is the window bounded on that side
  int64_t wl, wr;

  explicit Visibility(const AttentionShape& shape)
      : p(shape), nq(shape.N), nk(shape.keys()), off(shape.keys() - shape.N), left(shape.window_left >= 0),
        right(shape.causal || shape.window_right >= 0), wl(shape.window_left),
        wr(shape.causal ? 0 : shape.window_right) {}

  int64_t lo(int64_t i) const { return p.first_key(i); }
  int64_t hi(int64_t i) const { return p.last_key(i); }
  bool visible(int64_t i, int64_t j) const { return j >= lo(i) && j <= hi(i); }
  // Key blocks (of `block` keys) that some row of [i0, i0 + mi) sees: [*first, *last), maybe empty.
  void key_blocks(int64_t i0, int64_t mi, int64_t block, int64_t* first, int64_t* last) const {
    const int64_t a = lo(i0), b = hi(i0 + mi - 1);
    *first = a / block;
    *last = b < a ? *first : b / block + 1;
  }
  // Query blocks (of `block` rows) that some key of [j0, j0 + nj) is seen by: [*first, *last).
  void query_blocks(int64_t j0, int64_t nj, int64_t block, int64_t* first, int64_t* last) const {
    const int64_t a = right ? std::max<int64_t>(0, j0 - wr - off) : 0;          // first i with hi(i) >= j0
    const int64_t b = left ? std::min(nq - 1, j0 + nj - 1 + wl - off) : nq - 1;  // last i with lo(i) <= j end
    *first = a / block;
    *last = (b < a || a >= nq) ? *first : b / block + 1;
  }
  // Does the tile (rows [i0, i0 + mi), keys [j0, j0 + nj)) hold a masked entry?
  bool partly_masked(int64_t i0, int64_t mi, int64_t j0, int64_t nj) const {
    return lo(i0 + mi - 1) > j0 || hi(i0) < j0 + nj - 1;
  }
};

// Head offsets for grouped heads, as the first row of a head: q_row for query head h of batch b,
// kv_row_of_q for the key/value head that query head reads (h / group), kv_row for kv head hk.
struct Heads {
  int64_t B, H, Hkv, group, nq, nk;
  explicit Heads(const AttentionShape& p)
      : B(p.B), H(p.H), Hkv(p.kv_heads()), group(p.H / p.kv_heads()), nq(p.N), nk(p.keys()) {}
  int64_t q_row(int64_t b, int64_t h) const { return (b * H + h) * nq; }
  int64_t kv_row_of_q(int64_t b, int64_t h) const { return (b * Hkv + h / group) * nk; }
  int64_t kv_row(int64_t b, int64_t hk) const { return (b * Hkv + hk) * nk; }
};

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

// x_j = exp(x_j - shift) for j < n, vectorised: ExpOp's packet exp (vec_math.h: IEEE at the
// edges, so a masked -inf score gives exactly 0), for every entry (the tail through a padded
// packet), so an entry's value depends neither on its column nor on the buffer's alignment
// (equivalent masks give bitwise equal results).
template <typename T>
inline void row_exp(T* x, int64_t n, T shift) {
  namespace ei = Eigen::internal;
  using Packet = typename ei::packet_traits<T>::type;
  if constexpr (!ei::packet_traits<T>::Vectorizable || !ei::packet_traits<T>::HasExp) {
    for (int64_t j = 0; j < n; ++j) x[j] = std::exp(x[j] - shift);
  } else {
    constexpr int64_t kLanes = ei::packet_traits<T>::size;
    const Packet c = ei::pset1<Packet>(shift);
    int64_t j = 0;
    const ExpOp<T> exp_op;
    for (; j + kLanes <= n; j += kLanes) ei::pstoreu(x + j, exp_op.packetOp(ei::psub(ei::ploadu<Packet>(x + j), c)));
    if (j < n) {
      T tail[kLanes] = {};
      std::copy(x + j, x + n, tail);
      ei::pstoreu(tail, exp_op.packetOp(ei::psub(ei::ploadu<Packet>(tail), c)));
      std::copy(tail, tail + (n - j), x + j);
    }
  }
}

// P(i, j) = exp(S(i, j) - L_i), and 0 where query i0 + i does not see key j0 + j. S and P may
// alias. L points at the block's first row. A row that sees no key has L = -inf but all its
// entries masked, so whatever exp(S - L) gives there is overwritten with 0.
template <typename T>
inline void tile_probs(const Visibility& vis, int64_t mi, int64_t nj, int64_t i0, int64_t j0,
                       const T* S, const T* L, T* P) {
  const bool masked = vis.partly_masked(i0, mi, j0, nj);
  for (int64_t i = 0; i < mi; ++i) {
    T* Prow = P + i * kBlockN;
    if (Prow != S + i * kBlockN) std::copy(S + i * kBlockN, S + i * kBlockN + nj, Prow);
    row_exp(Prow, nj, L[i]);
    if (!masked) continue;
    const int64_t lo = vis.lo(i0 + i) - j0, hi = vis.hi(i0 + i) - j0;
    for (int64_t j = 0; j < nj; ++j)
      if (j < lo || j > hi) Prow[j] = T(0);
  }
}

}  // namespace detail
}  // namespace gg::kernels::cpu
