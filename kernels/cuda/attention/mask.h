// Index arithmetic of the CUDA attention kernels, on the host and the device: the general mask on
// 32-bit indices (MaskBand), the order of the fused sweeps' ordered additions
// (ordered_add_position, band_add_position) and the key sweeps' division by a constant (DivBy).
// Plain C++ that nvcc also compiles for the device; it includes no CUDA headers, so
// attention/plan.h (built with or without the CUDA backend) and the CPU tests use it too.
// Not installed.
#pragma once
#include <cstdint>

namespace gg::kernels::cuda {

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
// sweeps.cuh KeyBand). Without a right bound (right_bounded false) every band reaches
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

}  // namespace gg::kernels::cuda
