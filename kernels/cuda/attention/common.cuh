// Shared pieces of the CUDA attention kernels (every level and path in this folder): the kernel
// parameter struct, element types, scratch memory, the row dot D = rowsum(dO∘O), the generic
// kernels' staging and products, PTX wrappers (cp.async, ldmatrix, mma.sync) and the warp-level
// tile products the sm_80 kernels are built from, and the swizzled shared-memory tiles of the
// sm_90a kernels. Which path a call takes and every tile constant:
// traits.cuh.
//
//   sm_80 path    mma.sync.m16n8k16 (bf16/f16 operands, f32 accumulators), operands read from
//                 padded shared-memory tiles with ldmatrix, tiles brought in by cp.async (two
//                 stages). A block has kWarps warps; each warp owns 16 "own" rows (query rows in a
//                 query-parallel kernel, key rows in a key-parallel one) and sweeps the "other"
//                 side 16 rows at a time: it computes 16x16 score tiles (Own·Otherᵀ), turns them
//                 into coefficient tiles in registers, and multiplies those into the other side's
//                 rows (Coef·Other) into f32 accumulators.
//   generic path  scalar FMA: kRows own rows per block, kLanes threads per own row, score dots
//                 from shared-memory chunks of kChunk columns, output products reading the other
//                 side's rows from global memory (L1). d is split over the grid's y dimension in
//                 kCols-column slices (score tiles are recomputed per slice).
//
// Row scalars (L, D, E, F) and all accumulators are "Acc": float, or double for f64.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "core/cuda_check.cuh"
#include "core/cuda_runtime.h"
#include "core/error.h"
#include "kernels/cuda/attention/mask.h"
#include "kernels/cuda/attention/traits.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/params.h"

namespace gg::kernels::cuda::attn {
using namespace ::gg::cuda::runtime;  // the stream, allocation and device queries

// ------------------------------------------------------------------------ element types

template <typename T>
struct Elem;
template <>
struct Elem<double> {
  using Acc = double;
  static __device__ __forceinline__ double to_acc(double x) { return x; }
  static __device__ __forceinline__ double from_acc(double v) { return v; }
};
template <>
struct Elem<float> {
  using Acc = float;
  static __device__ __forceinline__ float to_acc(float x) { return x; }
  static __device__ __forceinline__ float from_acc(float v) { return v; }
};
template <>
struct Elem<__nv_bfloat16> {
  using Acc = float;
  static __device__ __forceinline__ float to_acc(__nv_bfloat16 x) { return __bfloat162float(x); }
  static __device__ __forceinline__ __nv_bfloat16 from_acc(float v) { return __float2bfloat16_rn(v); }
  // Two floats as one 32-bit mma operand register (lo in the low half).
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  // The two values of a packed register, exactly (a bf16 is the top half of its float).
  static __device__ __forceinline__ float2 unpack(uint32_t u) {
    return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u));
  }
};
template <>
struct Elem<__half> {
  using Acc = float;
  static __device__ __forceinline__ float to_acc(__half x) { return __half2float(x); }
  static __device__ __forceinline__ __half from_acc(float v) { return __float2half_rn(v); }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  static __device__ __forceinline__ float2 unpack(uint32_t u) {
    return __half22float2(*reinterpret_cast<const __half2*>(&u));
  }
};

__device__ __forceinline__ float acc_exp(float x) { return expf(x); }
__device__ __forceinline__ double acc_exp(double x) { return ::exp(x); }
__device__ __forceinline__ float acc_log(float x) { return logf(x); }
__device__ __forceinline__ double acc_log(double x) { return ::log(x); }

template <typename Acc>
__device__ __forceinline__ Acc neg_inf() {
  return -static_cast<Acc>(INFINITY);
}

// ------------------------------------------------------------------------ parameters

// What every attention kernel sees. Tensors are contiguous: query-side tensors (Q, O, dO, Qt and
// the gradients of Q and dO) are X[(bh * N + i) * d + c] for bh < BH = B·H, row i < N, column
// c < d; key-side tensors (K, V, Kt, Vt and their gradients) X[(bh_kv * Nk + j) * d + c] with
// bh_kv < B·Hkv, Hkv = H / group (query head h reads key/value head h / group); row scalars
// R[bh * N + i]. Every path takes every shape and mask: opts selects the kernels' general-mask
// (kOpts) instances where the plain ones (group 1, Nk = N, the full or causal mask) do not apply.
template <typename T>
struct Params {
  using Acc = typename Elem<T>::Acc;
  const T *Q, *K, *V;     // (BH, N, d), (BHkv, Nk, d) x 2
  const T *O, *dO;        // (BH, N, d) saved output, output cotangent
  const T *Qt, *Kt, *Vt;  // BoB cotangents of dQ, dK, dV (shaped like Q, K, V); nullptr = absent
  const Acc* L;           // (BH, N) saved row log-sum-exp (natural log; -inf for a row without keys)
  Acc *D, *E, *F;         // (BH, N) row scalars, stream-ordered scratch
  // The outputs, named by level (a call is of one level, so each slot has one meaning per call):
  union {
    T* O_out;  // (BH, N, d) fwd: O
    T* dQ;     // bwd: dQ
    T* gQ;     // BoB: grad_Q
  };
  union {
    T* dK;  // (BHkv, Nk, d) bwd: dK
    T* gK;  // BoB: grad_K
  };
  union {
    T* dV;  // (BHkv, Nk, d) bwd: dV
    T* gV;  // BoB: grad_V
  };
  T* gdO;                 // (BH, N, d) BoB: grad_dO
  Acc* L_out;             // (BH, N) fwd: L
  Acc* PV;                // (BH, N, d) three-pass BoB, all cotangents: P·Vt, pass 0 to pass 1
  float* fused_acc;       // fused BoB: its f32 buffers (sweeps.cuh), which pass 0 fills
  int* head_done;         // fused BoB: per head, pass 0's finished blocks (launch_bob_sm90_fused)
  int* add_order;         // fused sweeps: counters of ordered additions (sweeps.cuh), or
                          // nullptr: atomic additions in any order
  int add_segments_log2;  // fused kOpts sweeps, ordered: key block b adds into segment
                          // b mod 2^add_segments_log2 (plan.h: ordered_add_segments), whose
  int add_counters;       // counters start add_counters ints and whose buffers start
  int64_t add_floats;     // add_floats floats after the previous segment's
  int64_t BH;
  int N, d;
  Acc scale;
  bool causal;
  int Nk;         // keys per head
  int H, group;   // query heads per batch entry; query heads per key/value head
  int wl, wr;     // window (kernels/params.h; -1: unbounded); with causal, wr is -1 and causal rules
  bool opts;      // grouped heads, Nk != N or a window: the kernels' general mask (kOpts) applies
  bool deterministic;  // the fused sweeps' additions in a fixed order (launchers: add_order, tail split)
  const Acc* dL;  // (BH, N) cotangent of L or nullptr: D holds D - dL (docs/attention.md)

  // The mask (attention/mask.h MaskBand, AttentionShape::first_key / last_key on 32-bit
  // indices): query i sees keys [key_lo(i), key_hi(i)), key j is seen by queries
  // [query_lo(j), query_hi(j)).
  __host__ __device__ int right() const { return causal ? 0 : wr; }
  __host__ __device__ MaskBand mask() const { return {N, Nk, wl, right()}; }
  __host__ __device__ int key_lo(int i) const { return mask().key_lo(i); }
  __host__ __device__ int key_hi(int i) const { return mask().key_hi(i); }
  __host__ __device__ int query_lo(int j) const { return mask().query_lo(j); }
  __host__ __device__ int query_hi(int j) const { return mask().query_hi(j); }
  __host__ __device__ bool sees(int i, int j) const { return mask().sees(i, j); }
  // The cotangent of L of row `row` of the query head starting at row `head` (0 without dL, or
  // for a row past N).
  __device__ Acc row_dL(int64_t head, int row) const { return dL && row < N ? dL[head + row] : Acc(0); }
  // The key/value head of query head bh, and the first query head of key/value head bh_kv.
  __host__ __device__ int64_t kv_head(int64_t bh) const { return (bh / H) * (H / group) + (bh % H) / group; }
  __host__ __device__ int64_t first_query_head(int64_t bh_kv) const {
    const int hkv = H / group;
    return (bh_kv / hkv) * H + (bh_kv % hkv) * group;
  }
  int64_t BHkv() const { return BH / group; }
};

template <typename T>
Params<T> make_params(const AttentionInputs& a) {
  using Acc = typename Elem<T>::Acc;
  const AttentionShape& s = a.shape;
  GG_CHECK(s.N + s.keys() < (int64_t{1} << 31) && s.N * s.d < (int64_t{1} << 31) &&
               s.keys() * s.d < (int64_t{1} << 31),
           ValueError, "gg::attention (CUDA): Nq = ", s.N, ", Nk = ", s.keys(), ", d = ", s.d,
           ": Nq + Nk and N·d per head must stay below 2^31");
  Params<T> p{};
  p.Q = static_cast<const T*>(a.Q);
  p.K = static_cast<const T*>(a.K);
  p.V = static_cast<const T*>(a.V);
  p.BH = s.B * s.H;
  p.N = static_cast<int>(s.N);
  p.d = static_cast<int>(s.d);
  p.scale = static_cast<Acc>(s.scale);
  p.causal = s.causal;
  p.Nk = static_cast<int>(s.keys());
  p.H = static_cast<int>(s.H);
  p.group = s.H > 0 ? static_cast<int>(s.H / s.kv_heads()) : 1;
  p.wl = static_cast<int>(s.window_left);    // below Nk after resolve_mask (ops/attention.cpp)
  p.wr = static_cast<int>(s.window_right);   // below Nq
  p.opts = p.group != 1 || p.Nk != p.N || p.wl >= 0 || p.wr >= 0;
  return p;
}
template <typename T>
Params<T> make_params(const AttentionFwdArgs& a) {
  Params<T> p = make_params<T>(static_cast<const AttentionInputs&>(a));
  p.O_out = static_cast<T*>(a.O);
  p.L_out = static_cast<typename Elem<T>::Acc*>(a.L);
  return p;
}
template <typename T>
Params<T> make_params(const AttentionSavedArgs& a) {
  using Acc = typename Elem<T>::Acc;
  Params<T> p = make_params<T>(static_cast<const AttentionInputs&>(a));
  p.O = static_cast<const T*>(a.O);
  p.dO = static_cast<const T*>(a.dO);
  p.L = static_cast<const Acc*>(a.L);
  p.dL = static_cast<const Acc*>(a.dL);
  p.deterministic = a.deterministic;
  return p;
}
template <typename T>
Params<T> make_params(const AttentionBwdArgs& a) {
  Params<T> p = make_params<T>(static_cast<const AttentionSavedArgs&>(a));
  p.dQ = static_cast<T*>(a.dQ);
  p.dK = static_cast<T*>(a.dK);
  p.dV = static_cast<T*>(a.dV);
  return p;
}
template <typename T>
Params<T> make_params(const AttentionBobArgs& a) {
  Params<T> p = make_params<T>(static_cast<const AttentionSavedArgs&>(a));
  p.Qt = static_cast<const T*>(a.Qt);
  p.Kt = static_cast<const T*>(a.Kt);
  p.Vt = static_cast<const T*>(a.Vt);
  p.gQ = static_cast<T*>(a.gQ);
  p.gK = static_cast<T*>(a.gK);
  p.gV = static_cast<T*>(a.gV);
  p.gdO = static_cast<T*>(a.gdO);
  return p;
}

__host__ __device__ inline int cdiv(int a, int b) { return (a + b - 1) / b; }

// Grid x = BH · blocks_per_head, with the check that it fits.
inline unsigned grid_x(int64_t BH, int blocks_per_head) {
  const int64_t n = BH * blocks_per_head;
  GG_CHECK(n < (int64_t{1} << 31), ValueError, "gg::attention (CUDA): grid of ", n, " blocks is too large");
  return static_cast<unsigned>(n);
}

// Block index -> (bh, block within the head). Blocks run in reverse order within a head, so that
// in causal query-parallel kernels the longest sweeps start first.
struct BlockCoord {
  int64_t bh;
  int blk;
};
__device__ __forceinline__ BlockCoord block_coord(int blocks_per_head) {
  BlockCoord c;
  c.bh = blockIdx.x / blocks_per_head;
  c.blk = blocks_per_head - 1 - static_cast<int>(blockIdx.x % blocks_per_head);
  return c;
}
// The same for a unit index u past 32 bits' reach of blockIdx (the tail split's units).
__device__ __forceinline__ BlockCoord unit_coord(int64_t u, int blocks_per_head) {
  return {u / blocks_per_head, blocks_per_head - 1 - static_cast<int>(u % blocks_per_head)};
}

// Scratch memory (row scalars, the fused backward's f32 dQ buffer) from the stream-ordered
// allocator; freed (stream-ordered) on scope exit.
class Scratch {
 public:
  explicit Scratch(size_t nbytes) : nbytes_(nbytes), device_(current_device()), ptr_(allocate(nbytes, device_)) {}
  ~Scratch() { deallocate(ptr_, nbytes_, device_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <typename U>
  U* as() const { return static_cast<U*>(ptr_); }
  size_t bytes() const { return nbytes_; }

 private:
  size_t nbytes_;
  int device_;
  void* ptr_;
};

template <typename Kernel>
void set_smem(Kernel kernel, size_t bytes) {
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

// ------------------------------------------------------------------------ D = rowsum(dO∘O)

// One warp per row. D is Acc (f32 for bf16/f16/f32, f64 for f64); minus sub[row] (the cotangent
// of L) where sub is not nullptr.
template <typename T>
__global__ void __launch_bounds__(256) row_dot_kernel(const T* __restrict__ a, const T* __restrict__ b,
                                                      typename Elem<T>::Acc* __restrict__ out,
                                                      const typename Elem<T>::Acc* __restrict__ sub, int64_t rows,
                                                      int d) {
  using Acc = typename Elem<T>::Acc;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * 8 + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const T* ar = a + row * d;
  const T* br = b + row * d;
  Acc sum = 0;
  for (int c = lane; c < d; c += 32) sum += Elem<T>::to_acc(ar[c]) * Elem<T>::to_acc(br[c]);
  for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (lane == 0) out[row] = sub ? sum - sub[row] : sum;
}

template <typename T>
constexpr bool is_half_type() {
  return std::is_same<T, __nv_bfloat16>::value || std::is_same<T, __half>::value;
}

// The same for 16-bit T and d = 8·kLanes (32, 64, 128): kLanes lanes per row, one 16-byte load of
// each operand per lane, 256 / kLanes rows per block (the kernel above, one warp per row and 2-byte
// loads, is slower: docs/kernels.md §2, Backward).
template <typename T, int kLanes>
__global__ void __launch_bounds__(256) row_dot_vec_kernel(const T* __restrict__ a, const T* __restrict__ b,
                                                          float* __restrict__ out, const float* __restrict__ sub,
                                                          int64_t rows) {
  static_assert(32 % kLanes == 0, "a row's lanes within one warp");
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (256 / kLanes) + threadIdx.x / kLanes;
  const int l = threadIdx.x % kLanes;
  float sum = 0.f;
  if (row < rows) {
    const uint4 x = reinterpret_cast<const uint4*>(a + row * 8 * kLanes)[l];
    const uint4 y = reinterpret_cast<const uint4*>(b + row * 8 * kLanes)[l];
    const uint32_t xs[4] = {x.x, x.y, x.z, x.w}, ys[4] = {y.x, y.y, y.z, y.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 u = Elem<T>::unpack(xs[k]), v = Elem<T>::unpack(ys[k]);
      sum = fmaf(u.x, v.x, sum);
      sum = fmaf(u.y, v.y, sum);
    }
  }
#pragma unroll
  for (int off = kLanes / 2; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (row < rows && l == 0) out[row] = sub ? sum - sub[row] : sum;
}

template <typename T>
void launch_row_dot(const T* a, const T* b, typename Elem<T>::Acc* out, int64_t rows, int d,
                    const typename Elem<T>::Acc* sub = nullptr) {
  bool vec = false;  // row_dot_vec_kernel: 16-bit, d = 32 / 64 / 128, 16-byte aligned rows
  if constexpr (is_half_type<T>())
    vec = (d == 32 || d == 64 || d == 128) &&
          ((reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b)) % 16) == 0;
  if (rows == 0) return;
  const int per_block = vec ? 256 / (d / 8) : 8;  // rows
  const int64_t blocks = (rows + per_block - 1) / per_block;
  GG_CHECK(blocks < (int64_t{1} << 31), ValueError, "gg::attention (CUDA): too many rows");
  const unsigned grid = static_cast<unsigned>(blocks);
  if constexpr (is_half_type<T>()) {
    if (vec) {
      if (d == 32)
        row_dot_vec_kernel<T, 4><<<grid, 256, 0, cuda_stream()>>>(a, b, out, sub, rows);
      else if (d == 64)
        row_dot_vec_kernel<T, 8><<<grid, 256, 0, cuda_stream()>>>(a, b, out, sub, rows);
      else
        row_dot_vec_kernel<T, 16><<<grid, 256, 0, cuda_stream()>>>(a, b, out, sub, rows);
      CUDA_CHECK_LAUNCH();
      return;
    }
  }
  row_dot_kernel<T><<<grid, 256, 0, cuda_stream()>>>(a, b, out, sub, rows, d);
  CUDA_CHECK_LAUNCH();
}

// ======================================================================== generic path


// Thread -> (own row o, lane r within the row). Thread (o, r) owns score entries (o, r + 8k),
// k < kPerThread, and output columns c0 + r + 8k, k < kColsPerThread.
struct GenThread {
  int o, r;
};
__device__ __forceinline__ GenThread gen_thread() { return {static_cast<int>(threadIdx.x) / 8, static_cast<int>(threadIdx.x) % 8}; }

// What every generic kernel starts from: this thread's place th, the block's own rows
// [r0, r0 + kRows) (blocks reversed within a head, block_coord), its output columns
// [c0, c0 + kCols) (grid.y), and the rows of every tensor (nullptr where absent). A query-side
// block (kKeySide false) owns query rows of query head bh; its Q, dO, Qt, O start at that head
// (qhead = bh·N) and its K, V, Kt, Vt at its key/value head (khead). A key-side block owns key
// rows of key/value head bh; K, V, Kt, Vt start there and Q, dO, Qt, O at the first query head
// of its group (the next ones follow N rows apart: group_rows). Shared memory is carved in the
// order of the calls: stage() one staged operand chunk, tile() one coefficient tile (`stages`,
// `tiles` of them: the kernel's GenericTraits::Smem, from which launch_generic sizes the memory).
template <typename T, bool kKeySide = false>
struct GenBlock {
  using Acc = typename Elem<T>::Acc;
  GenThread th;
  int r0, c0;
  int64_t qhead, khead;  // first row of the query-side and of the key-side tensors
  const T *Q, *K, *V, *dO, *Qt, *Kt, *Vt, *O;
  Acc* next;
  __device__ explicit GenBlock(const Params<T>& p) : th(gen_thread()) {
    extern __shared__ __align__(1024) unsigned char gen_smem[];  // the kernel's dynamic shared memory
    next = reinterpret_cast<Acc*>(gen_smem);
    const BlockCoord bc = block_coord(cdiv(kKeySide ? p.Nk : p.N, GenericTraits::kRows));
    r0 = bc.blk * GenericTraits::kRows;
    c0 = blockIdx.y * GenericTraits::kCols;
    qhead = (kKeySide ? p.first_query_head(bc.bh) : bc.bh) * p.N;
    khead = (kKeySide ? bc.bh : p.kv_head(bc.bh)) * p.Nk;
    auto rows = [&](const T* x, int64_t head) { return x != nullptr ? x + head * p.d : nullptr; };
    Q = rows(p.Q, qhead), dO = rows(p.dO, qhead), Qt = rows(p.Qt, qhead), O = rows(p.O, qhead);
    K = rows(p.K, khead), V = rows(p.V, khead), Kt = rows(p.Kt, khead), Vt = rows(p.Vt, khead);
  }
  // A key-side block's query-side rows for query head g of its group (g < p.group).
  __device__ const T* group_rows(const T* x, const Params<T>& p, int g) const {
    return x != nullptr ? x + static_cast<int64_t>(g) * p.N * p.d : nullptr;
  }
  __device__ Acc* stage() { return take(GenericTraits::kStage); }
  __device__ Acc* tile() { return take(GenericTraits::kTile); }
  __device__ Acc* take(int n) {
    Acc* s = next;
    next += n;
    return s;
  }
};

// The other side's tiles of kOther rows that hold a visible entry for own rows [r0, r_end) (clipped
// to the side's length n_own): key tiles of a query block, query tiles of a key block.
struct TileRange {
  int begin, end;
};
template <bool kKeySide, typename P>
__device__ __forceinline__ TileRange gen_tiles(const P& p, int r0) {
  const int last = min(r0 + GenericTraits::kRows, kKeySide ? p.Nk : p.N) - 1;
  const int lo = kKeySide ? p.query_lo(r0) : p.key_lo(r0);
  const int hi = kKeySide ? p.query_hi(last) : p.key_hi(last);
  const int begin = lo / GenericTraits::kOther;
  return {begin, hi > lo ? cdiv(hi, GenericTraits::kOther) : begin};
}
// The key tiles (kTile keys each) that hold a key some query of rows [r0, r_end) sees (r_end
// clipped to N): the band a query block of the tensor-core kernels sweeps. Where no query of the
// rows sees a key the range is empty, or with kAtLeastOne the one tile at begin, all of it masked
// (the kernels that give every block a tile).
template <int kTile, bool kAtLeastOne, typename P>
__device__ __forceinline__ TileRange key_tiles(const P& p, int r0, int r_end) {
  const int lo = p.key_lo(r0), hi = p.key_hi(min(r_end, p.N) - 1);
  const int begin = lo / kTile;
  return {begin, hi > lo ? cdiv(hi, kTile) : begin + (kAtLeastOne ? 1 : 0)};
}

// Sum / max over the 8 lanes of a row group.
template <typename Acc>
__device__ __forceinline__ Acc group_sum(Acc v) {
  for (int off = 1; off < 8; off *= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}
template <typename Acc>
__device__ __forceinline__ Acc group_max(Acc v) {
  for (int off = 1; off < 8; off *= 2) v = max(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// s[r0 .. r0+32) x [c0 .. c0+32) of the head's (N, d) matrix g into sdst[32][kStride], converted
// to Acc; zeros outside the matrix. No-op when g is null (absent operand).
template <typename T>
__device__ __forceinline__ void gen_stage(typename Elem<T>::Acc* sdst, const T* g, int r0, int c0, int N, int d) {
  if (g == nullptr) return;
  for (int idx = threadIdx.x; idx < 32 * 32; idx += GenericTraits::kThreads) {
    const int r = idx / 32, c = idx % 32;
    const int gr = r0 + r, gc = c0 + c;
    sdst[r * GenericTraits::kStride + c] =
        (gr < N && gc < d) ? Elem<T>::to_acc(g[static_cast<int64_t>(gr) * d + gc]) : typename Elem<T>::Acc(0);
  }
}

// s[k] += Σ_c Own[o][c] · Other[r + 8k][c] over one staged chunk.
template <typename Acc>
__device__ __forceinline__ void gen_dot(Acc (&s)[GenericTraits::kPerThread], const Acc* sown, const Acc* sother,
                                        GenThread th) {
  const Acc* a = sown + th.o * GenericTraits::kStride;
#pragma unroll 8
  for (int c = 0; c < GenericTraits::kChunk; ++c) {
    const Acc av = a[c];
#pragma unroll
    for (int k = 0; k < GenericTraits::kPerThread; ++k)
      s[k] += av * sother[(th.r + 8 * k) * GenericTraits::kStride + c];
  }
}

// acc[k] += Σ_{x < nx} C[o][x] · Other[x][c0 + r + 8k]: a coefficient tile (smem) times the other
// side's rows (global memory, the head's rows x0 ..), output columns of this block's slice. Each
// row's values are loaded before they are used, so that ptxas issues a row's loads together
// (written as one loop with the loads beside their uses, it interleaved load and use and waited
// on every pair of loads).
template <typename T>
__device__ __forceinline__ void gen_accumulate(typename Elem<T>::Acc (&acc)[GenericTraits::kColsPerThread],
                                               const typename Elem<T>::Acc* sC, const T* other, int x0, int nx,
                                               int c0, int d, GenThread th) {
  constexpr int kCols = GenericTraits::kColsPerThread;
  const typename Elem<T>::Acc* crow = sC + th.o * GenericTraits::kStride;
  const int col = c0 + th.r;  // this thread's columns: col + 8k
  const T* orow = other + static_cast<int64_t>(x0) * d + col;
#pragma unroll 2
  for (int x = 0; x < nx; ++x, orow += d) {
    T v[kCols];
#pragma unroll
    for (int k = 0; k < kCols; ++k) v[k] = col + 8 * k < d ? orow[8 * k] : T{};
    const auto cv = crow[x];
#pragma unroll
    for (int k = 0; k < kCols; ++k)
      if (col + 8 * k < d) acc[k] += cv * Elem<T>::to_acc(v[k]);
  }
}

// out[row][c0 + r + 8k] = acc[k] (columns < d).
template <typename T>
__device__ __forceinline__ void gen_store(T* out_row, const typename Elem<T>::Acc (&acc)[GenericTraits::kColsPerThread],
                                          int c0, int d, GenThread th) {
#pragma unroll
  for (int k = 0; k < GenericTraits::kColsPerThread; ++k) {
    const int c = c0 + th.r + 8 * k;
    if (c < d) out_row[c] = Elem<T>::from_acc(acc[k]);
  }
}

// Launches a generic kernel over (BH · blocks of kRows own rows) x (column slices of kCols), with
// the shared memory that its GenericTraits::Smem names.
// key_side: blocks over (B·Hkv) x blocks of key rows, else (B·H) x blocks of query rows. An empty
// grid (no rows) launches nothing.
template <typename T>
void launch_generic(void (*kernel)(Params<T>), const Params<T>& p, GenericTraits::Smem carved, bool key_side = false) {
  using C = GenericTraits;
  const size_t smem = (carved.stages * C::kStage + carved.tiles * C::kTile) * sizeof(typename Elem<T>::Acc);
  const dim3 grid(grid_x(key_side ? p.BHkv() : p.BH, cdiv(key_side ? p.Nk : p.N, C::kRows)),
                  std::max(1, cdiv(p.d, C::kCols)));
  if (grid.x == 0) return;
  set_smem(kernel, smem);
  kernel<<<grid, C::kThreads, smem, cuda_stream()>>>(p);
  CUDA_CHECK_LAUNCH();
}

// ======================================================================== sm_80 (mma.sync) path


// Calls f(T{}) with T the element type of `dtype` (the launchers' dtype switch, written once).
template <typename F>
void dispatch_dtype(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::f64: return f(double{});
    case DType::f32: return f(float{});
    case DType::bf16: return f(__nv_bfloat16{});
    case DType::f16: return f(__half{});
    default: break;
  }
  throw DTypeError(std::string(op) + " (CUDA): unsupported dtype " + dtype_name(dtype));
}

// Run-time flags to template arguments, written once (as FlashAttention-3's static_switch.h):
// static_switch(f, b0, b1, ...) returns f(B0{}, B1{}, ...), Bi std::true_type where bi holds and
// std::false_type where not, and compiles f for every combination. The launchers pick a kernel
// instance with it: static_switch([](auto kOpts) { return kernel<T, kD, kOpts>; }, p.opts).
template <typename F>
decltype(auto) static_switch(F&& f) {
  return f();
}
template <typename F, typename... Flags>
decltype(auto) static_switch(F&& f, bool flag, Flags... flags) {
  if (flag) return static_switch([&](auto... rest) { return f(std::true_type{}, rest...); }, flags...);
  return static_switch([&](auto... rest) { return f(std::false_type{}, rest...); }, flags...);
}

// The launchers' path switch, written once: sm90(HeadDim<d>{}) for d in {64, 128}, sm80(...) for d in
// {32, 64, 128}, or generic(), as choose_path (traits.cuh) says. For T other than
// bf16/f16 only generic() is compiled.
template <int kD>
using HeadDim = std::integral_constant<int, kD>;
template <typename T, typename Args, typename Sm90, typename Sm80, typename Generic>
void on_path(const Args& a, Level level, Sm90&& sm90, Sm80&& sm80, Generic&& generic) {
  if constexpr (is_half_type<T>()) {
    switch (choose_path(a, level)) {
      case Path::kSm90: return a.shape.d == 64 ? sm90(HeadDim<64>{}) : sm90(HeadDim<128>{});
      case Path::kSm80:
        if (a.shape.d == 32) return sm80(HeadDim<32>{});
        return a.shape.d == 64 ? sm80(HeadDim<64>{}) : sm80(HeadDim<128>{});
      case Path::kGeneric: break;
    }
  }
  generic();
}


// ---------------------------------------------------------------- PTX wrappers

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, asynchronously; zero-filled when !valid (src is then not read).
__device__ __forceinline__ void cp_async16(void* sdst, const void* gsrc, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(sdst)), "l"(gsrc),
               "r"(src_bytes));
}
// 4 bytes global -> shared, likewise.
__device__ __forceinline__ void cp_async4(void* sdst, const void* gsrc, bool valid) {
  const int src_bytes = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(sdst)), "l"(gsrc),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* s) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(s)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* s) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(s)));
}
// The reverse of ldmatrix_x4_trans (sm_90): four 8 x 8 b16 matrices, register i of each thread
// holding matrix i in the mma fragment layout, stored transposed: row r of the stored matrix i (at
// the address that lane 8·i + r passes) is column r of the fragment's matrix.
__device__ __forceinline__ void stmatrix_x4_trans(void* s, const uint32_t (&r)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(smem_addr(s)),
               "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
#endif
}

// c (16x8 f32) += a (16x16) · b (16x8).
template <typename T>
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                                          uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma_16816<__half>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// ---------------------------------------------------------------- fragment layout
//
// A warp's 16x16 score tile is two m16n8 accumulators c[n][e], n in {0, 1}. With g = lane / 4 and
// t = lane % 4, element c[n][e] sits at
//   own row    g + 8 * (e / 2)            (0..15 within the warp's 16 own rows)
//   other col  8 * n + 2 * t + (e % 2)    (0..15 within the 16-row other sub-tile)
// Output accumulators acc[j][e] (16 x kCols) use the same map with column 8 * j + 2 * t + (e % 2).
// A thread therefore holds two own rows (h = e / 2 selects which), shared with the 3 other lanes
// of its quad: row reductions are a quad shuffle.

__device__ __forceinline__ int frag_row(int lane, int e) { return lane / 4 + 8 * (e / 2); }
__device__ __forceinline__ int frag_col(int lane, int n, int e) { return 8 * n + 2 * (lane % 4) + (e % 2); }

__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  v += __shfl_xor_sync(0xffffffffu, v, 2);
  return v;
}
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
  return v;
}

// A 16x16 accumulator tile (f32, C layout) as the A operand (16 x k16) of the next product: the
// C layout of two n8 tiles is the A layout of one k16 tile.
template <typename T>
__device__ __forceinline__ void to_a_frag(uint32_t (&a)[4], const float (&c)[2][4]) {
  a[0] = Elem<T>::pack(c[0][0], c[0][1]);  // row g,     k 2t..2t+1
  a[1] = Elem<T>::pack(c[0][2], c[0][3]);  // row g + 8, k 2t..2t+1
  a[2] = Elem<T>::pack(c[1][0], c[1][1]);  // row g,     k 8+2t..
  a[3] = Elem<T>::pack(c[1][2], c[1][3]);  // row g + 8, k 8+2t..
}

// The same tile as two A operands, hi = round(c) and lo = round(c - hi): hi·B + lo·B carries c to
// about 2^-16 relative (bf16) instead of 2^-8. Used where products cancel later (BoB pass 1).
// hi is rounded once (packed) and read back from its register, not rounded a second time.
template <typename T>
__device__ __forceinline__ void to_a_frag_split(uint32_t (&hi)[4], uint32_t (&lo)[4], const float (&c)[2][4]) {
  to_a_frag<T>(hi, c);
#pragma unroll
  for (int r = 0; r < 4; ++r) {  // hi[r] packs c[r / 2][2·(r % 2)] and c[r / 2][2·(r % 2) + 1]
    const float2 h = Elem<T>::unpack(hi[r]);
    lo[r] = Elem<T>::pack(c[r / 2][2 * (r % 2)] - h.x, c[r / 2][2 * (r % 2) + 1] - h.y);
  }
}

// Runs f(std::true_type{}) where a tile needs the per-entry mask (keys past N, or causal with a
// key after some row), else f(std::false_type{}): the elementwise block of a tile is compiled
// twice and the unmasked copy, which most tiles take, does no index arithmetic. `masked` must be
// uniform over the block. Inside f: constexpr bool kMasked = decltype(tag)::value.
template <typename F>
__device__ __forceinline__ void with_mask(bool masked, F&& f) {
  if (masked)
    f(std::true_type{});
  else
    f(std::false_type{});
}

template <int N>
__device__ __forceinline__ void zero(float (&c)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) c[i][e] = 0.f;
}

// ---------------------------------------------------------------- warp tile products

// c (16 own x 16 other, f32) += Own[16 x kD] · Other[16 x kD]ᵀ. sown: the warp's first own row;
// sother: the sub-tile's first other row; both row-major with row stride kStride.
template <typename T, int kD>
__device__ __forceinline__ void mma_scores(float (&c)[2][4], const T* sown, const T* sother, int lane) {
  constexpr int kStride = Sm80Traits<kD>::kStride;
  // A: matrices (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15).
  const T* a_ptr = sown + (lane % 16) * kStride + (lane / 16) * 8;
  // B (k = column of d, n = other row): matrices (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7),
  // (n 8-15, k 8-15): registers b0, b1 of n-tile 0, then of n-tile 1.
  const int mi = lane / 8;
  const T* b_ptr = sother + ((lane % 8) + 8 * (mi / 2)) * kStride + 8 * (mi % 2);
#pragma unroll
  for (int k = 0; k < kD; k += 16) {
    uint32_t a[4], b[4];
    ldmatrix_x4(a, a_ptr + k);
    ldmatrix_x4(b, b_ptr + k);
    mma_16816<T>(c[0], a, b[0], b[1]);
    mma_16816<T>(c[1], a, b[2], b[3]);
  }
}

// acc (16 own x kCols, f32) += A (16 own x 16 other) · Other[16 x kCols]. sother: the sub-tile's
// first other row at the first output column; row stride kStride.
template <typename T, int kD, int kCols>
__device__ __forceinline__ void mma_accumulate(float (&acc)[kCols / 8][4], const uint32_t (&a)[4], const T* sother,
                                               int lane) {
  constexpr int kStride = Sm80Traits<kD>::kStride;
  static_assert(kCols % 16 == 0, "pairs of n8 tiles");
  // B (k = other row, n = column), transposed load: matrices (k 0-7, n 0-7), (k 8-15, n 0-7),
  // (k 0-7, n 8-15), (k 8-15, n 8-15): b0, b1 of n-tile 2p, then of n-tile 2p + 1.
  const int mi = lane / 8;
  const T* b_ptr = sother + ((lane % 8) + 8 * (mi % 2)) * kStride + 8 * (mi / 2);
#pragma unroll
  for (int p = 0; p < kCols / 16; ++p) {
    uint32_t b[4];
    ldmatrix_x4_trans(b, b_ptr + 16 * p);
    mma_16816<T>(acc[2 * p], a, b[0], b[1]);
    mma_16816<T>(acc[2 * p + 1], a, b[2], b[3]);
  }
}

// acc += (hi + lo) · Other: mma_accumulate with a split A operand (to_a_frag_split); the B
// fragments are loaded once for both products.
template <typename T, int kD, int kCols>
__device__ __forceinline__ void mma_accumulate_split(float (&acc)[kCols / 8][4], const uint32_t (&hi)[4],
                                                     const uint32_t (&lo)[4], const T* sother, int lane) {
  constexpr int kStride = Sm80Traits<kD>::kStride;
  const int mi = lane / 8;
  const T* b_ptr = sother + ((lane % 8) + 8 * (mi % 2)) * kStride + 8 * (mi / 2);
#pragma unroll
  for (int p = 0; p < kCols / 16; ++p) {
    uint32_t b[4];
    ldmatrix_x4_trans(b, b_ptr + 16 * p);
    mma_16816<T>(acc[2 * p], hi, b[0], b[1]);
    mma_16816<T>(acc[2 * p + 1], hi, b[2], b[3]);
    mma_16816<T>(acc[2 * p], lo, b[0], b[1]);
    mma_16816<T>(acc[2 * p + 1], lo, b[2], b[3]);
  }
}

// ---------------------------------------------------------------- sm_80 blocks over the mask
//
// What the sm_80 kernels' blocks sweep. kOpts false: the plain case (one key/value head per query
// head, Nk = N, full or causal mask); true: grouped heads, Nk != N and windows (Params::sees).

// A block of kBM query rows from i0 (warp w: rows [iw, iw + 16)) over the key tiles [begin, end)
// of kBN keys that its rows see, of its key/value head (rows from khead).
template <bool kOpts, int kBM, int kBN, typename P>
struct Sm80QueryBlock {
  int nk, i0, iw, iw_last, begin, end;
  int64_t head, khead;  // the query head's first row; the key/value head's
  __device__ Sm80QueryBlock(const P& p, int warp) {
    nk = kOpts ? p.Nk : p.N;
    const BlockCoord bc = block_coord(cdiv(p.N, kBM));
    i0 = bc.blk * kBM;
    iw = i0 + 16 * warp;
    iw_last = min(iw + 15, p.N - 1);
    head = bc.bh * p.N;
    khead = kOpts ? p.kv_head(bc.bh) * nk : head;
    begin = 0;
    end = p.causal ? cdiv(min(p.N, i0 + kBM), kBN) : cdiv(p.N, kBN);
    if constexpr (kOpts) {
      const TileRange band = key_tiles<kBN, false>(p, i0, i0 + kBM);
      begin = band.begin;
      end = band.end;
    }
  }
  // The warp's 16 rows against keys [js, js + 16): -1 none of them or of any later keys (stop),
  // 0 none of these (skip), 1 some.
  __device__ int sub_tile(const P& p, int js) const {
    if constexpr (kOpts) {
      if (js >= p.key_hi(iw_last)) return -1;
      return js + 16 <= p.key_lo(iw) ? 0 : 1;
    } else {
      return (js >= p.N || (p.causal && js > iw + 15)) ? -1 : 1;
    }
  }
  __device__ bool sees(const P& p, int row, int key) const {
    return kOpts ? p.sees(row, key) : key < p.N && (!p.causal || key <= row);
  }
};

// A block of kBM key rows from j0 (warp w: keys [jw, jw + 16)) of key/value head bh over, for each
// query head of its group in turn, the query tiles [q_begin, q_begin + tiles) of kBN rows that see
// its keys: step t < steps is tile tile(t) of query head query_head(t) (its first row).
template <bool kOpts, int kBM, int kBN, typename P>
struct Sm80KeyBlock {
  int nk, j0, jw, jw_last, q_begin, tiles, steps;
  int64_t head, qhead;  // the key/value head's first row; its group's first query head's
  __device__ Sm80KeyBlock(const P& p, int warp) {
    nk = kOpts ? p.Nk : p.N;
    const BlockCoord bc = block_coord(cdiv(nk, kBM));
    j0 = bc.blk * kBM;
    jw = j0 + 16 * warp;
    jw_last = min(jw + 15, nk - 1);
    head = bc.bh * nk;
    qhead = kOpts ? p.first_query_head(bc.bh) * p.N : head;
    q_begin = p.causal ? j0 / kBN : 0;
    int q_end = cdiv(p.N, kBN);
    if constexpr (kOpts) {
      const int lo = p.query_lo(j0), hi = p.query_hi(min(j0 + kBM, nk) - 1);
      q_begin = lo / kBN;
      q_end = hi > lo ? cdiv(hi, kBN) : q_begin;
    }
    tiles = q_end - q_begin;
    steps = (kOpts ? p.group : 1) * tiles;
  }
  __device__ int tile(int t) const { return q_begin + (kOpts ? t % tiles : t); }
  __device__ int64_t query_head(const P& p, int t) const {
    return kOpts ? qhead + static_cast<int64_t>(t / tiles) * p.N : qhead;
  }
  // Queries [is, is + 16) against the warp's keys: -1 none of them or later ones, 0 none, 1 some.
  __device__ int sub_tile(const P& p, int is) const {
    if constexpr (kOpts) {
      if (is >= p.query_hi(jw_last)) return -1;
      return is + 16 <= p.query_lo(jw) ? 0 : 1;
    } else {
      if (is >= p.N) return -1;
      return (p.causal && is + 15 < jw) ? 0 : 1;  // every query before every key of the warp
    }
  }
  __device__ bool sees(const P& p, int query, int key) const {
    return kOpts ? p.sees(query, key) : query < p.N && (!p.causal || key <= query);
  }
};

// The main loop of every sm_80 kernel: the other side's tiles begin..end-1, double-buffered by
// cp.async. load(t, stage) issues tile t's copies into stage (the caller has issued its own rows'
// copies: they land with the first tile). body(t, stage) runs once tile t has landed and every
// warp sees it; a stage is refilled only after every warp has left body.
template <typename Load, typename Body>
__device__ __forceinline__ void sm80_pipeline(int begin, int end, Load&& load, Body&& body) {
  static_assert(Sm80Traits<32>::kStages == 2 && Sm80Traits<64>::kStages == 2 && Sm80Traits<128>::kStages == 2,
                "the sm_80 kernels carve kStages stages of shared memory for these two buffers");
  if (begin < end) load(begin, 0);
  cp_async_commit();
  for (int t = begin; t < end; ++t) {
    const int stage = (t - begin) % 2;
    if (t + 1 < end) {  // prefetch the next tile into the other stage
      load(t + 1, 1 - stage);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    body(t, stage);
    __syncthreads();
  }
}

// f(q, r) for the 16-row sub-tiles q (rows [r, r + 16), r = r0 + 16·q) of a kBN-row tile that the
// warp's rows see (blk.sub_tile: the first that no row sees, nor any later one, ends the tile).
template <int kBN, typename Block, typename P, typename F>
__device__ __forceinline__ void sm80_sub_tiles(const Block& blk, const P& p, int r0, F&& f) {
#pragma unroll 1
  for (int q = 0; q < kBN / 16; ++q) {
    const int seen = blk.sub_tile(p, r0 + 16 * q);
    if (seen < 0) break;
    if (seen > 0) f(q, r0 + 16 * q);
  }
}

// ---------------------------------------------------------------- tile loads

// Rows [r0, r0 + kRows) of a head's (N, kD) matrix into s[kRows][kStride], by cp.async; rows at or
// past N are zero-filled. No-op for an absent (null) operand.
template <typename T, int kD, int kRows>
__device__ __forceinline__ void load_rows_async(T* s, const T* g, int r0, int N) {
  using Cfg = Sm80Traits<kD>;
  if (g == nullptr) return;
  constexpr int kVecs = kD * static_cast<int>(sizeof(T)) / 16;  // 16-byte vectors per row
  for (int v = threadIdx.x; v < kRows * kVecs; v += Cfg::kThreads) {
    const int r = v / kVecs, cv = v % kVecs;
    const bool ok = r0 + r < N;
    const T* src = g + static_cast<int64_t>(ok ? r0 + r : 0) * kD + cv * (16 / sizeof(T));
    cp_async16(s + r * Cfg::kStride + cv * (16 / sizeof(T)), src, ok);
  }
}

// Row scalars [r0, r0 + n) of a head's (N) vector into s[n]; zero past N. No-op when null.
template <int kThreads>
__device__ __forceinline__ void load_scalars_async(float* s, const float* g, int r0, int n, int N) {
  if (g == nullptr) return;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const bool ok = r0 + i < N;
    cp_async4(s + i, g + (ok ? r0 + i : 0), ok);
  }
}

// Stores a 16 x kCols f32 accumulator (scaled by alpha, per own row half) as T, rows < N.
// out_rows: the warp's first own row of the head's output at the first output column.
template <typename T, int kCols>
__device__ __forceinline__ void store_acc(T* out_rows, int ld, const float (&acc)[kCols / 8][4], const float (&alpha)[2],
                                          int row0, int N, int lane) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = frag_row(lane, 2 * h);
    if (row0 + r >= N) continue;
    T* o = out_rows + static_cast<int64_t>(r) * ld;
#pragma unroll
    for (int j = 0; j < kCols / 8; ++j) {
      const int c = frag_col(lane, j, 0);
      const uint32_t v = Elem<T>::pack(acc[j][2 * h] * alpha[h], acc[j][2 * h + 1] * alpha[h]);
      *reinterpret_cast<uint32_t*>(o + c) = v;
    }
  }
}

// ---------------------------------------------------------------- Hopper (wgmma) tiles
//
// The wgmma kernels keep their bf16/f16 tiles in shared memory in the 128-byte-swizzled layout
// that wgmma reads without bank conflicts. A tile of kRows rows x kD columns (kD = 64 or 128) is
// stored as kD / 64 column halves of 64 columns, one after the other; within a half, row r is 128
// contiguous bytes whose eight 16-byte chunks are permuted by XOR with r % 8:
//   element (r, c) at  (c / 64)·kRows·64 + r·64 + (((c % 64) / 8) XOR (r % 8))·8 + c % 8   (elements)
// Eight rows (1024 bytes) form one swizzle atom; tiles start 1024-byte aligned. The same layout
// serves a K-major operand (rows = M or N, columns = k: scores Own·Otherᵀ) and an MN-major one
// (rows = k, columns = N: Coef·Other). A warp writing one row from global memory (128 bytes)
// touches every bank once.

template <int kRows>
__device__ __forceinline__ int swz_offset(int r, int c) {
  return (c / 64) * kRows * 64 + r * 64 + ((((c % 64) / 8) ^ (r % 8)) * 8) + c % 8;
}

// wgmma shared-memory matrix descriptor for a 128-byte-swizzled operand: start address (16-byte
// units), and 1024 bytes (one 8-row atom) as the stride between 8-row groups. The other offset
// field only matters when one instruction spans two atoms along the row (never here: k16 reads
// 32 bytes of a K-major row, and MN-major products are issued 64 columns at a time), so both
// fields hold 1024. Bits 62-63 = 1: 128-byte swizzle.
__device__ __forceinline__ uint64_t make_desc_sw128(const void* s) {
  const uint64_t addr = smem_addr(s);
  return ((addr & 0x3FFFF) >> 4) | (uint64_t(1024 >> 4) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

// Makes this thread's completed cp.async writes visible to the async proxy (wgmma reads shared
// memory through it); each writing thread runs it before the barrier that precedes the wgmma.
__device__ __forceinline__ void fence_proxy_async() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// 2^x by the special-function unit alone (ex2.approx.ftz: relative error ~2^-22, subnormal results
// flushed to 0), where exp2f adds range handling around it. Plenty for probabilities that are
// rounded to bf16/f16 before the P·V product.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

}  // namespace gg::kernels::cuda::attn
