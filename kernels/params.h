// Plain parameter structs shared by the CPU and CUDA kernels. Kernels see raw pointers,
// element types and strided layouts, never tensors. Strides are in elements.
#pragma once
#include <cstdint>
#include <vector>

#include "../core/dtype.h"
#include "elementwise_ops.h"

namespace gg::kernels {

constexpr int kMaxDims = 8;

struct Layout {
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};
};
Layout make_layout(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides);

// dst[i] = cast(src[i]) over the index space `dst_layout.sizes` (equal to src_layout.sizes).
struct CopyParams {
  DType src_dtype, dst_dtype;
  const void* src;
  void* dst;
  Layout src_layout, dst_layout;
};

struct FillParams {
  DType dtype;
  void* dst;  // contiguous
  int64_t n;
  double value;
};

// Counter-based random numbers: element i depends only on (seed, offset + i), so the same
// seed gives the same numbers on every backend and thread count.
enum class RandomKind { uniform, normal };
struct RandomParams {
  DType dtype;
  void* dst;  // contiguous
  int64_t n;
  uint64_t seed, offset;
  RandomKind kind;
  double a, b;  // uniform: [a, b); normal: mean a, std b
};

struct ArangeParams {
  DType dtype;
  void* dst;
  int64_t n;
  double start, step;
};

// y = f(x) elementwise on contiguous arrays of one floating dtype. `alpha` is the scalar of
// pow/add/mul-by-scalar. The ops and their formulas are listed in kernels/elementwise_ops.h.
#define GG_ENUM_ENTRY(name, ...) name,
enum class UnaryOp { GG_UNARY_OPS(GG_ENUM_ENTRY) };
struct UnaryParams {
  UnaryOp op;
  DType dtype;
  const void* x;
  void* y;
  int64_t n;
  double alpha;
};

// out = a op b with broadcasting: `out` is contiguous of shape a_layout.sizes; a and b are read
// through their own (possibly zero) strides over the same index space. Comparisons write b8.
enum class BinaryOp { GG_BINARY_OPS(GG_ENUM_ENTRY) };
#undef GG_ENUM_ENTRY

// The op's name as listed ("exp", "pow_scalar", "maximum", ...), for messages.
#define GG_NAME_CASE(name, ...) case Op::name: return #name;
inline const char* op_name(UnaryOp op) {
  using Op = UnaryOp;
  switch (op) { GG_UNARY_OPS(GG_NAME_CASE) }
  return "?";
}
inline const char* op_name(BinaryOp op) {
  using Op = BinaryOp;
  switch (op) { GG_BINARY_OPS(GG_NAME_CASE) }
  return "?";
}
#undef GG_NAME_CASE

// The `result` column of GG_BINARY_OPS as a bool: GG_RESULT_IS_B8_##result.
#define GG_RESULT_IS_B8_same false
#define GG_RESULT_IS_B8_b8 true

// True for the ops whose result is b8 (the comparisons).
#define GG_COMPARISON_CASE(name, result, formula) case BinaryOp::name: return GG_RESULT_IS_B8_##result;
constexpr bool is_comparison(BinaryOp op) {
  switch (op) { GG_BINARY_OPS(GG_COMPARISON_CASE) }
  return false;
}
#undef GG_COMPARISON_CASE

struct BinaryParams {
  BinaryOp op;
  DType dtype;  // of a and b
  const void* a;
  const void* b;
  void* out;
  Layout a_layout, b_layout;  // sizes = output shape
};

// out = cond ? a : b, broadcast like BinaryParams; cond is b8.
struct WhereParams {
  DType dtype;
  const uint8_t* cond;
  const void* a;
  const void* b;
  void* out;
  Layout cond_layout, a_layout, b_layout;
};

// Reduce the last axis of a contiguous (rows, cols) array: out[r] = op(x[r, :]).
enum class ReduceOp { sum, max };
struct ReduceParams {
  ReduceOp op;
  DType dtype;
  const void* x;
  void* out;
  int64_t rows, cols;
};

// Sum of a strided x over the dims where out_layout has stride 0: out_layout has x's sizes and
// the strides of the contiguous output along the kept dims. Reads x in place, no copy (CPU only).
struct SumStridedParams {
  DType dtype;
  const void* x;
  void* out;
  Layout x_layout, out_layout;
};

// C[b] = A[b] · B[b] for b < batch. A[b] is (M, K) at a + a_offsets[b] with row/col strides;
// B[b] is (K, N) likewise; C is contiguous (batch, M, N). One of each pair of strides is 1.
struct MatmulParams {
  DType dtype;
  int64_t batch, M, N, K;
  const void* a;
  const void* b;
  void* c;
  const int64_t* a_offsets;
  const int64_t* b_offsets;
  int64_t a_row_stride, a_col_stride, b_row_stride, b_col_stride;
};

// Softmax or log-softmax over the last axis of a contiguous (rows, cols) array.
struct SoftmaxParams {
  DType dtype;
  const void* x;
  void* y;
  int64_t rows, cols;
  bool log;
};

// index_select: out[o, j, i] = x[o, idx[j], i] with x (outer, dim_size, inner) contiguous.
// index_add:    out[o, idx[j], i] += x[o, j, i] with out pre-zeroed (the backward).
struct IndexParams {
  DType dtype;
  const void* src;
  void* dst;
  const int64_t* idx;
  int64_t outer, dim_size, inner, n_idx;
};

// Fused attention over contiguous row-major tensors: Q, O, dO (B, H, N, d); K, V (B, Hkv, Nk, d);
// L and the row scalars (B, H, N). Query head h reads key/value head h / (H / Hkv).
// Query i sees key j when  i' - window_left <= j <= i' + window_right,  i' = i + Nk - N (the
// bottom-right alignment of FlashAttention); causal is window_right = 0. The defaults of the
// fields after `causal` (-1) mean Hkv = H, Nk = N and unbounded windows, so a shape written as
// {B, H, N, d, scale, causal} is the square, equal-heads case. The op layer leaves them at -1
// whenever they would not change the result.
struct AttentionShape {
  int64_t B, H, N, d;         // H: query heads, N: query length (Nq)
  double scale;               // s, resolved by the op (default 1/sqrt(d))
  bool causal;                // mask key j > i' (window_right = 0)
  int64_t Hkv = -1;           // key/value heads, H a multiple of it; -1: Hkv = H
  int64_t Nk = -1;            // key length; -1: Nk = N
  int64_t window_left = -1;   // keys before i' a query sees; -1: unbounded
  int64_t window_right = -1;  // keys after i' a query sees; -1: unbounded (0 when causal)

  int64_t kv_heads() const { return Hkv < 0 ? H : Hkv; }
  int64_t keys() const { return Nk < 0 ? N : Nk; }
  // The keys query i sees are [first_key(i), last_key(i)]; none when last_key(i) < first_key(i).
  int64_t first_key(int64_t i) const {
    const int64_t lo = i + keys() - N - window_left;
    return (window_left < 0 || lo < 0) ? 0 : lo;
  }
  int64_t last_key(int64_t i) const {
    const int64_t wr = causal ? 0 : window_right;
    const int64_t hi = i + keys() - N + wr;
    return (wr < 0 || hi > keys() - 1) ? keys() - 1 : hi;
  }
};
// The BoB in one call (kWhole), or in the two stages a caller runs when each call sees only some of
// a row's keys (dist::attention's ring, docs/distributed.md §5): kRowSums writes the call's part
// of the row scalars E and F (F completed with -(2·D + dL)·E, so the parts add up) to E and F,
// and may overwrite gQ and gdO (gK, gV unused); kFromRowSums reads the whole row's E and
// F from them and writes the call's parts of the four gradients (grad_dO's -E∘O term as
// -E∘(P·V) over the call's keys).
// D = rowsum(dO∘O) - dL is formed from O as always, so O must be the whole row's output.
enum class BobStage { kWhole, kRowSums, kFromRowSums };

// One argument struct per level, named as the level's math names its tensors. L and the row
// scalars are f32 for bf16/f16 inputs, else the input dtype; every other tensor has the inputs'.
// What every level reads:
struct AttentionInputs {
  AttentionShape shape;
  DType dtype;
  const void *Q, *K, *V;  // (B, H, N, d), (B, Hkv, Nk, d), (B, Hkv, Nk, d)
};
// The forward: O = softmax(s·Q·Kᵀ)·V and L = logsumexp_j(s·Q·Kᵀ).
struct AttentionFwdArgs : AttentionInputs {
  void* O;  // (B, H, N, d)
  void* L;  // (B, H, N)
};
// What the backward and the BoB read besides Q, K, V.
struct AttentionSavedArgs : AttentionInputs {
  const void *O, *L;  // the forward's outputs: (B, H, N, d), (B, H, N)
  const void* dO;     // cotangent of O: (B, H, N, d)
  const void* dL;     // cotangent of L: (B, H, N); nullptr = absent
  // The fused sweeps add their parts of a gradient in a fixed order (bitwise reproducible), or
  // atomically in any order (gg::set_attention_deterministic; docs/kernels.md §5).
  bool deterministic = true;
};
// The backward: dQ, dK, dV.
struct AttentionBwdArgs : AttentionSavedArgs {
  void *dQ, *dK, *dV;  // shaped like Q, K, V
};
// The backward of the backward: the gradients of <Qt, dQ> + <Kt, dK> + <Vt, dV>.
struct AttentionBobArgs : AttentionSavedArgs {
  const void *Qt, *Kt, *Vt;           // cotangents of dQ, dK, dV (shaped like Q, K, V); nullptr = absent
  void *gQ, *gK, *gV, *gdO;           // gradients of Q, K, V, dO (shaped like them)
  void* gdL = nullptr;                // gradient of dL: (B, H, N); nullptr = not wanted
  BobStage stage = BobStage::kWhole;  // the whole of it or one of its two stages
  void *E = nullptr, *F = nullptr;    // the stages' row scalars: (B, H, N)
};

// The forward's JVP (CPU only): O, L and their tangents for tangents of Q, K, V.
struct AttentionJvpArgs : AttentionInputs {
  const void *Qt, *Kt, *Vt;  // tangents of Q, K, V (shaped like them); nullptr = zero
  void *O, *L;               // as the forward's: (B, H, N, d), (B, H, N)
  void *Ot, *Lt;             // their tangents, shaped like O and L
};

}  // namespace gg::kernels
