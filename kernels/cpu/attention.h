// CPU kernels for fused softmax attention: forward, backward, backward-over-backward (BoB), and
// the forward-mode derivative (JVP).
//
// The math is in docs/attention.md; each .cpp restates its part in its header.
// Kernels see raw pointers and an AttentionShape, never tensors: the op layer (ops/) checks
// shapes, dtypes and contiguity and resolves the scale before calling in.
//
// Layout: every tensor is contiguous row-major. Q, O, dO, the gradients of Q and dO and the
// tangents of Q and O are (B, H, N, d) (N = Nq, the query length); K, V, their gradients and
// tangents are (B, Hkv, Nk, d); L, its tangent and the internal row scalars D, E, F are (B, H, N). Query head h reads key/value head h / (H / Hkv)
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
// Tiling: a query block is kBlockM rows of Q, a key block kBlockN rows of K and V. Work is split
// over (b, h, query block) or (b, kv head, run of key blocks); scratch is a few kBlockM x kBlockN
// tiles per thread, per-row vectors of length N per head, K-shaped transposed copies of the score
// products' key-side operands (KeyBlocksT) and, in the key sweeps that also sum over keys, a few
// partial sums of Q's shape (KeyChunks). No N x N buffer.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kernels/cpu/eigen.h"

#include "../params.h"
#include "vec_math.h"

namespace gg::kernels::cpu {

// Tile sizes, shared by all the kernels.
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

// JVP (forward mode): given tangents Qd, Kd, Vd of Q, K, V (each may be nullptr = a zero tangent:
// its terms are skipped, not multiplied by zeros), write O and L (attention_fwd's, bit for bit)
// and their tangents Od = Ȯ and Ld = L̇ (all four always written, fully overwritten), in one
// sweep over the key blocks per query block: Ṡ = s·(Q̇·Kᵀ + Q·K̇ᵀ), L̇ = rowsum(P∘Ṡ),
// Ȯ = (P∘(Ṡ − L̇))·V + P·V̇ (attention_jvp.cpp). A row that sees no key gets Ȯ = 0 and L̇ = 0.
template <typename T>
void attention_jvp(const AttentionShape& p,
                   const T* Q,   // (B, H, N, d)
                   const T* K,   // K-shaped
                   const T* V,   // K-shaped
                   const T* Qd,  // (B, H, N, d) tangent of Q, or nullptr
                   const T* Kd,  // K-shaped tangent of K, or nullptr
                   const T* Vd,  // K-shaped tangent of V, or nullptr
                   T* O,         // (B, H, N, d) out
                   T* L,         // (B, H, N)    out
                   T* Od,        // (B, H, N, d) out: tangent of O
                   T* Ld);       // (B, H, N)    out: tangent of L

// x_j = exp(x_j - shift) for j < n as the probability tiles compute it (detail::row_exp, built with
// the library's instruction set), for tests of its accuracy and edges.
template <typename T>
void attention_row_exp(T* x, int64_t n, T shift);
// Whether the library was built with AVX-512, so that its f32 tiles exponentiate with
// exp_tile_ps (vec_math.h) rather than Eigen's packet exp: the tests' error bound depends on it.
bool attention_exp_tile_ps();

// ---------------------------------------------------------------------------------------------
// Internal: tile helpers shared by the attention .cpp files. Not part of the interface.
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

// Tasks a key-parallel sweep that also sums over keys (the backward's dQ) aims for, over all kv
// heads: with fewer kv heads than this, each head's key blocks are cut into chunks, each with its
// own partial sum. A constant, not the thread count, so results do not depend on the threads.
inline constexpr int64_t kChunkTasks = 4;

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

// A key-parallel sweep that also sums over keys (the backward's dQ, BoB's grad_Q and grad_dO) cuts
// each kv head's key blocks into `count` chunks, contiguous runs of about equal work (visible
// tiles), each with its own partial sums, added in chunk order at the end. The cut depends on the
// shape only (kChunkTasks), never on the thread count.
struct KeyChunks {
  int64_t count;
  std::vector<int64_t> begin;  // chunk c is the key blocks [begin[c], begin[c + 1])
  KeyChunks(const Visibility& vis, int64_t kv_heads, int64_t num_k_blocks) {
    std::vector<int64_t> work(num_k_blocks + 1, 0);  // prefix sums of the visible query blocks
    for (int64_t kb = 0; kb < num_k_blocks; ++kb) {
      int64_t qb_first, qb_last;
      vis.query_blocks(kb * kBlockN, std::min(kBlockN, vis.nk - kb * kBlockN), kBlockM, &qb_first, &qb_last);
      work[kb + 1] = work[kb] + (qb_last - qb_first);
    }
    count = std::max<int64_t>(1, std::min(num_k_blocks, (kChunkTasks + kv_heads - 1) / std::max<int64_t>(kv_heads, 1)));
    begin.assign(count + 1, num_k_blocks);
    begin[0] = 0;
    for (int64_t c = 1; c < count; ++c)  // the first block whose work before it reaches c/count of the total
      begin[c] = std::lower_bound(work.begin(), work.end() - 1, (work[num_k_blocks] * c + count - 1) / count) -
                 work.begin();
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

// The tile products below are small GEMMs, written out with Eigen's packet primitives instead of
// calling Eigen's GEMM: at 64 x 64 x d, Eigen packs both operands for every product (a fifth of
// BoB's time went to gemm_pack_lhs/rhs) and its 48-row kernel leaves a 16-row remainder. Here no
// operand is packed per product: the output tile's rows are vectorised, the other operand is
// broadcast one scalar at a time, and the one operand that would need a transpose (Kᵀ in S =
// Q·Kᵀ) is transposed once per key block (KeyBlocksT) and reused by every query block. Each output
// entry is summed in the same order (the inner index from 0 up, one fused multiply-add per term
// where the ISA has them) whatever its position, the tile's size or the thread, so results do not
// depend on masks, tails, alignment or the thread count.
//
// Register blocking: R output rows x CW packets of columns per micro-kernel call (24 accumulators
// with 32 vector registers, 12 with 16), and rows left over in groups of kTileRTail, then one by one.
namespace ei = Eigen::internal;
template <typename T, bool kVector = ei::packet_traits<T>::Vectorizable>
struct Vec {  // T's packet (T itself where Eigen has none)
  using P = typename ei::packet_traits<T>::type;
  static constexpr int kLanes = ei::packet_traits<T>::size;
};
template <typename T>
struct Vec<T, false> {
  using P = T;
  static constexpr int kLanes = 1;
};
#if defined(__AVX512F__)
inline constexpr int kTileR = 6, kTileCW = 4;
#else
inline constexpr int kTileR = 6, kTileCW = 2;
#endif
inline constexpr int kTileRTail = 4;  // 64-row tiles: ten groups of 6, one of 4

// How a product meets its output: kSet  Out = alpha·Σ;  kAdd  Out += alpha·Σ;  kAccumulate  the sum
// goes on from Out (Out + a_0·b_0 + a_1·b_1 + ..., no alpha).
enum class Into { kSet, kAdd, kAccumulate };

// Out[r, c] (into) Σ_{t < n} a(r, t)·B[t·ldb + c] for r < R, c < CW·lanes; Out has row stride ldo.
// a(r, t) = A[r·sar + t·sat].
template <typename T, int R, int CW>
inline void micro_kernel(int64_t n, const T* A, int64_t sar, int64_t sat, const T* B, int64_t ldb, T* Out,
                         int64_t ldo, Into into, T alpha) {
  const bool acc = into == Into::kAccumulate;
  using V = Vec<T>;
  using P = typename V::P;
  constexpr int Ln = V::kLanes;
  P c[R][CW];
  for (int r = 0; r < R; ++r)
    for (int w = 0; w < CW; ++w) c[r][w] = acc ? ei::ploadu<P>(Out + r * ldo + w * Ln) : ei::pset1<P>(T(0));
  for (int64_t t = 0; t < n; ++t) {
    P b[CW];
    for (int w = 0; w < CW; ++w) b[w] = ei::ploadu<P>(B + t * ldb + w * Ln);
    for (int r = 0; r < R; ++r) {
      const P a = ei::pset1<P>(A[r * sar + t * sat]);
      for (int w = 0; w < CW; ++w) c[r][w] = ei::pmadd(a, b[w], c[r][w]);
    }
  }
  const P al = ei::pset1<P>(alpha);
  for (int r = 0; r < R; ++r)
    for (int w = 0; w < CW; ++w) {
      T* o = Out + r * ldo + w * Ln;
      if (into == Into::kSet) ei::pstoreu(o, ei::pmul(al, c[r][w]));
      else if (into == Into::kAdd) ei::pstoreu(o, ei::padd(ei::ploadu<P>(o), ei::pmul(al, c[r][w])));
      else ei::pstoreu(o, c[r][w]);
    }
}

// The same for one row and the columns [c0, cols) left over by the packets, scalar.
template <typename T>
inline void micro_kernel_tail(int64_t n, const T* A, int64_t sat, const T* B, int64_t ldb, T* Out, int64_t c0,
                              int64_t cols, Into into, T alpha) {
  for (int64_t c = c0; c < cols; ++c) {
    T x = into == Into::kAccumulate ? Out[c] : T(0);
    for (int64_t t = 0; t < n; ++t) x = ei::pmadd(A[t * sat], B[t * ldb + c], x);
    Out[c] = into == Into::kAccumulate ? x : into == Into::kAdd ? Out[c] + alpha * x : alpha * x;
  }
}

// Out (m x cols, row stride ldo) (+)= a·B, a(r, t) = A[r·sar + t·sat] (m x n), B (n x cols, row
// stride ldb): the micro-kernel over row groups and column chunks.
template <typename T>
inline void tile_product(int64_t m, int64_t n, int64_t cols, const T* A, int64_t sar, int64_t sat, const T* B,
                         int64_t ldb, T* Out, int64_t ldo, Into acc, T alpha) {
  constexpr int Ln = Vec<T>::kLanes;
  auto row_block = [&](auto rows, int64_t r0) {
    constexpr int R = decltype(rows)::value;
    const T* a = A + r0 * sar;
    T* o = Out + r0 * ldo;
    int64_t c = 0;
    for (; c + kTileCW * Ln <= cols; c += kTileCW * Ln)
      micro_kernel<T, R, kTileCW>(n, a, sar, sat, B + c, ldb, o + c, ldo, acc, alpha);
    for (; c + Ln <= cols; c += Ln) micro_kernel<T, R, 1>(n, a, sar, sat, B + c, ldb, o + c, ldo, acc, alpha);
    if (c < cols)
      for (int r = 0; r < R; ++r) micro_kernel_tail(n, a + r * sar, sat, B, ldb, o + r * ldo, c, cols, acc, alpha);
  };
  int64_t r0 = 0;
  for (; r0 + kTileR <= m; r0 += kTileR) row_block(std::integral_constant<int, kTileR>{}, r0);
  for (; r0 + kTileRTail <= m; r0 += kTileRTail) row_block(std::integral_constant<int, kTileRTail>{}, r0);
  for (; r0 < m; ++r0) row_block(std::integral_constant<int, 1>{}, r0);
}

// Key blocks of a K-shaped tensor, transposed: block kb of kv head `head` is a d x kBlockN
// row-major array, entry (k, j) = X[key j0 + j, k], zero for keys past the end. Used as the B
// operand of tile_abt; O(N·d) memory, built once per kernel call.
template <typename T>
struct KeyBlocksT {
  int64_t nk = 0, nkb = 0, d = 0;
  Scratch<T> data;
  KeyBlocksT() = default;
  KeyBlocksT(const AttentionShape& p, const T* X, bool par) : nk(p.keys()), nkb(num_blocks(p.keys(), kBlockN)), d(p.d) {
    if (!X) return;
    const int64_t heads = p.B * p.kv_heads();
    data.assign(heads * nkb * d * kBlockN, T(0));
    GG_OMP(parallel for if (par))
    for (int64_t hb = 0; hb < heads * nkb; ++hb) {
      const int64_t head = hb / nkb, j0 = (hb % nkb) * kBlockN;
      transpose_rows(X + (head * nk + j0) * d, std::min(kBlockN, nk - j0), d, data.data() + hb * d * kBlockN);
    }
  }
  // kh: the kv head's first row (Heads::kv_row); j0: the block's first key.
  const T* block(int64_t kh, int64_t j0) const { return data.data() + ((kh / nk) * nkb + j0 / kBlockN) * d * kBlockN; }
  // Xt (d x kBlockN) = the nj rows of X (nj x d, row stride d), transposed; columns >= nj untouched.
  static void transpose_rows(const T* X, int64_t nj, int64_t d, T* Xt) {
    for (int64_t j = 0; j < nj; ++j)
      for (int64_t k = 0; k < d; ++k) Xt[k * kBlockN + j] = X[j * d + k];
  }
};

// C(i, j) = alpha * <A_i, B_j>   (or += when accumulate): a score-like tile A·Bᵀ, with B given
// transposed (Bt: d x kBlockN, KeyBlocksT). Writes all kBlockN columns of the mi rows (the
// padding columns of Bt are zero).
template <typename T>
inline void tile_abt(int64_t mi, int64_t d, T alpha, const T* A, const T* Bt, T* C, bool accumulate) {
  tile_product(mi, d, kBlockN, A, d, int64_t{1}, Bt, kBlockN, C, kBlockN, accumulate ? Into::kAdd : Into::kSet, alpha);
}

// Out_i += sum_j C(i, j) * B_j   (tile times key rows: Out is mi x d).
template <typename T>
inline void tile_ab_acc(int64_t mi, int64_t nj, int64_t d, const T* C, const T* B, T* Out) {
  tile_product(mi, nj, d, C, kBlockN, int64_t{1}, B, d, Out, d, Into::kAccumulate, T(1));
}

// Out_j += sum_i C(i, j) * A_i   (tile transposed times query rows: Out is nj x d).
template <typename T>
inline void tile_atb_acc(int64_t mi, int64_t nj, int64_t d, const T* C, const T* A, T* Out) {
  tile_product(nj, mi, d, C, int64_t{1}, kBlockN, A, d, Out, d, Into::kAccumulate, T(1));
}

// x_j = exp(x_j - shift) for j < n, vectorised: for f32 on AVX-512 exp_tile_ps (vec_math.h), else
// ExpOp's packet exp (vec_math.h); both IEEE at the edges, so a masked -inf score gives exactly 0.
// Every entry goes through the packet code (the tail through a padded packet), so an
// entry's value depends neither on its column nor on the buffer's alignment (equivalent masks
// give bitwise equal results). Returns the sum of the new x_j: the full packets added lane by
// lane, the lanes added as a tree, then the tail's entries in column order (one order for each
// n; a masked entry adds an exact 0). Callers that drop the sum pay nothing for it.
template <typename T>
inline T row_exp_sum(T* x, int64_t n, T shift) {
  namespace ei = Eigen::internal;
  using Packet = typename ei::packet_traits<T>::type;
  T sum = 0;
  if constexpr (!ei::packet_traits<T>::Vectorizable || !ei::packet_traits<T>::HasExp) {
    for (int64_t j = 0; j < n; ++j) sum += (x[j] = std::exp(x[j] - shift));
  } else {
    constexpr int64_t kLanes = ei::packet_traits<T>::size;
    const Packet c = ei::pset1<Packet>(shift);
    auto exp_packet = [](const Packet& v) {
#if defined(__AVX512F__)
      if constexpr (std::is_same_v<T, float>) return exp_tile_ps(v);
#endif
      return ExpOp<T>().packetOp(v);
    };
    Packet acc = ei::pset1<Packet>(T(0));
    int64_t j = 0;
    for (; j + kLanes <= n; j += kLanes) {
      const Packet e = exp_packet(ei::psub(ei::ploadu<Packet>(x + j), c));
      ei::pstoreu(x + j, e);
      acc = ei::padd(acc, e);
    }
    if (j > 0) sum = ei::predux(acc);
    if (j < n) {
      T tail[kLanes] = {};
      std::copy(x + j, x + n, tail);
      ei::pstoreu(tail, exp_packet(ei::psub(ei::ploadu<Packet>(tail), c)));
      std::copy(tail, tail + (n - j), x + j);
      for (int64_t t = 0; t < n - j; ++t) sum += tail[t];
    }
  }
  return sum;
}

// row_exp_sum without the sum.
template <typename T>
inline void row_exp(T* x, int64_t n, T shift) {
  (void)row_exp_sum(x, n, shift);
}

// std::max(init, x_0, ..., x_{n-1}) as a left fold of std::max (a < b ? b : a), vectorised: a NaN
// x_j is skipped, as std::max(m, NaN) = m. Each lane folds its own columns with the same rule
// (init, which is never NaN, in every lane), then the lanes are reduced as a tree; max is exact,
// so only the sign of a zero maximum can differ.
template <typename T>
inline T row_max(const T* x, int64_t n, T init) {
  using V = Vec<T>;
  using P = typename V::P;
  constexpr int Ln = V::kLanes;
  T m = init;
  int64_t j = 0;
  if constexpr (Ln > 1) {
    if (n >= Ln) {
      P acc = ei::pset1<P>(init);
      for (; j + Ln <= n; j += Ln) {
        const P v = ei::ploadu<P>(x + j);
        acc = ei::pselect(ei::pcmp_lt(acc, v), v, acc);
      }
      m = ei::predux_max(acc);  // no lane is NaN (init is not), so any order gives the same maximum
    }
  }
  for (; j < n; ++j) m = std::max(m, x[j]);
  return m;
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
