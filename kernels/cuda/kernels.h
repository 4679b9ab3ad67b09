// CUDA kernels: the same functions and parameter structs as kernels/cpu/kernels.h, run on the
// library's stream for the current device (core/cuda_runtime.h). This header includes no CUDA
// headers, so host code that dispatches here compiles with the plain C++ compiler.
#pragma once
#include "../params.h"

namespace gg::kernels::cuda {

void copy_strided(const CopyParams& p);  // both pointers on the device
void fill(const FillParams& p);
void random(const RandomParams& p);      // the same numbers as the CPU kernel for the same seed
void arange(const ArangeParams& p);
void unary(const UnaryParams& p);
void binary(const BinaryParams& p);
void where(const WhereParams& p);
void reduce_last(const ReduceParams& p);
void matmul(const MatmulParams& p);      // cuBLAS; a_offsets/b_offsets are host arrays
void softmax_last(const SoftmaxParams& p);
void index_select(const IndexParams& p);  // idx is a device pointer
void index_add(const IndexParams& p);

// Fused attention (kernels/cuda/attention_*.cu). L is f32 for bf16/f16 inputs, else the input
// dtype; scratch comes from the stream-ordered allocator.
void attention_fwd(const AttentionArgs& a);
void attention_bwd(const AttentionArgs& a);
void attention_bwd_bwd(const AttentionArgs& a);

// How the fused sweeps add their parts of dQ (grad_Q, grad_dO) and how the tail split's pieces
// combine their rows: deterministic (the default; a fixed order, bitwise reproducible) or faster
// (atomic additions in any order, as PyTorch's flash and cuDNN backwards add dQ). The public
// switch is gg::set_attention_deterministic (ops/ops.h), which also sets this one.
void set_attention_deterministic(bool deterministic);
bool attention_deterministic();

// The launch plans of the attention kernels (the tail split, the group split, the segments of
// the ordered additions) are in kernels/cuda/attention/plan.h.

// The position of key unit blk (of per_head units of 128 keys in its head, launched in the order
// blk = per_head - 1, ..., 0) among the units that add a part to the buffer tile t (rows
// [t·tile_rows, (t + 1)·tile_rows)) when the fused sweeps' additions are ordered: its launch rank
// per_head - 1 - blk, counted (causal) from the first unit that reaches the tile, the units blk <=
// t·tile_rows / 128 (those whose keys start at or before the tile's last query). Each tile's units
// take the positions 0, 1, ... in launch order (tests: OrderedAddPositions).
#if defined(__CUDACC__)
__host__ __device__
#endif
constexpr int ordered_add_position(int blk, int per_head, int t, int tile_rows, bool causal) {
  const int rank = per_head - 1 - blk;
  if (!causal) return rank;
  const int last = t * tile_rows / 128 < per_head - 1 ? t * tile_rows / 128 : per_head - 1;
  return rank - (per_head - 1 - last);
}

// The same under a general mask (grouped heads, Nq != Nk, windows: the key sweeps' bands,
// attention_sweeps.cuh KeyBand). Without a right bound (right_bounded false) every band reaches
// the first query tile and the blocks launch from the last: the position is per_head - 1 - blk.
// With one (causal, window_right), the longest band is block 0's and the blocks launch from it:
// the adders of tile t are the blocks from the first whose band holds t, in order blk = 0, 1, ....
// Without a left bound (wl < 0) every band reaches the last tile, so that first block is 0; with
// one, block b's last key 128·b + 127 must reach back to tile t's first query t·tile_rows:
// b >= (t·tile_rows + shift - wl) / 128, shift = Nk - Nq. Blocks that no query sees hold tile 0
// only (a band of one masked tile).
#if defined(__CUDACC__)
__host__ __device__
#endif
constexpr int band_add_position(int blk, int per_head, int t, int tile_rows, bool right_bounded, int wl, int shift) {
  if (!right_bounded) return per_head - 1 - blk;
  if (wl < 0 || t == 0) return blk;
  const int x = t * tile_rows + shift - wl;
  return blk - (x > 0 ? x / 128 : 0);
}

#if defined(__CUDACC__)
#define GG_MASK_FN __host__ __device__
#else
#define GG_MASK_FN
#endif
// The general mask on 32-bit indices (AttentionShape's, for the kOpts kernels): query i < nq sees
// key j < nk when i' - wl <= j <= i' + right, i' = i + nk - nq; wl, right = -1: unbounded (right
// is 0 when causal). Query i sees the keys [key_lo(i), key_hi(i)), key j is seen by the queries
// [query_lo(j), query_hi(j)); all four are non-decreasing. keys_of and queries_of give the same
// as a Range, empty past nq or nk, whose test is one subtraction and one unsigned compare (the
// masked tiles' per-entry test: a thread forms the Range of each of its rows or keys once per
// tile). Tests: MaskBandMatchesDefinition.
struct MaskBand {
  int nq, nk, wl, right;
  struct Range {
    int lo, n;
    GG_MASK_FN bool holds(int x) const {
      return static_cast<unsigned>(x) - static_cast<unsigned>(lo) < static_cast<unsigned>(n);
    }
  };
  GG_MASK_FN int key_lo(int i) const {
    const int lo = i + (nk - nq) - wl;
    return (wl < 0 || lo < 0) ? 0 : lo;
  }
  GG_MASK_FN int key_hi(int i) const {
    const int hi = i + (nk - nq) + right + 1;
    return (right < 0 || hi > nk) ? nk : (hi < 0 ? 0 : hi);
  }
  GG_MASK_FN int query_lo(int j) const {
    const int lo = j - (nk - nq) - right;
    return (right < 0 || lo < 0) ? 0 : lo;
  }
  GG_MASK_FN int query_hi(int j) const {
    const int hi = j - (nk - nq) + wl + 1;
    return (wl < 0 || hi > nq) ? nq : (hi < 0 ? 0 : hi);
  }
  GG_MASK_FN Range keys_of(int i) const {
    const int lo = key_lo(i), hi = key_hi(i);
    return {lo, i < nq && hi > lo ? hi - lo : 0};
  }
  GG_MASK_FN Range queries_of(int j) const {
    const int lo = query_lo(j), hi = query_hi(j);
    return {lo, j < nk && hi > lo ? hi - lo : 0};
  }
  GG_MASK_FN bool sees(int i, int j) const { return keys_of(i).holds(j); }
};
#undef GG_MASK_FN

// n / d for 0 <= n < 2^31 by a multiply-high and a shift (the key sweeps' steps into query head
// and tile, per step): for d > 1, l = ceil(log2 d), mul = ceil(2^(31 + l) / d), n / d =
// (n·mul) >> (31 + l); the rounding error of mul adds less than n / 2^(31 + l) < 1 / d to n / d,
// too little to reach the next integer.
struct DivBy {
  uint32_t d = 1, mul = 0;
  int shift = 0;
  DivBy() = default;
#if defined(__CUDACC__)
  __host__ __device__
#endif
  explicit DivBy(uint32_t divisor) : d(divisor) {
    if (d <= 1) return;
    int l = 0;
    while ((uint32_t{1} << l) < d) ++l;
    mul = static_cast<uint32_t>(((uint64_t{1} << (31 + l)) + d - 1) / d);
    shift = l - 1;
  }
#if defined(__CUDACC__)
  __host__ __device__
#endif
  uint32_t div(uint32_t n) const {
    if (d <= 1) return n;
    return static_cast<uint32_t>((uint64_t{n} * mul) >> 32) >> shift;
  }
};

// Test-only hooks: which kernel family the attention calls take, and the SM count the tail split
// plans for. Not part of the library's interface; tests/gpu uses them to run the sm_80 kernels
// and the generic kernels on any device and to split the last wave of a small problem.
namespace testing {
enum class AttentionPath {
  kAuto,     // attention_traits.cuh, choose_path: sm_90a where it applies, else sm_80, else generic
  kSm80,     // the mma.sync kernels wherever they apply (bf16/f16, d in {32, 64, 128}), else generic
  kGeneric,  // the generic kernels for every call
};
void set_attention_path(AttentionPath path);
AttentionPath attention_path();
bool sm90_path_available();  // sm_90a code built and the current device is compute capability 9.x
// Plan the tail split as if the device had `sms` SMs (0: no split; -1: the device's count).
void set_tail_split_sms(int sms);
int tail_split_sms_override();

// Sets a value for one scope and restores the previous one after it.
class ScopedAttentionPath {
 public:
  explicit ScopedAttentionPath(AttentionPath path) : was_(attention_path()) { set_attention_path(path); }
  ~ScopedAttentionPath() { set_attention_path(was_); }
  ScopedAttentionPath(const ScopedAttentionPath&) = delete;
  ScopedAttentionPath& operator=(const ScopedAttentionPath&) = delete;

 private:
  AttentionPath was_;
};
class ScopedTailSplitSms {
 public:
  explicit ScopedTailSplitSms(int sms) : was_(tail_split_sms_override()) { set_tail_split_sms(sms); }
  ~ScopedTailSplitSms() { set_tail_split_sms(was_); }
  ScopedTailSplitSms(const ScopedTailSplitSms&) = delete;
  ScopedTailSplitSms& operator=(const ScopedTailSplitSms&) = delete;

 private:
  int was_;
};
}  // namespace testing

}  // namespace gg::kernels::cuda
