// Host-side planning of the CUDA attention kernels' launches: how the key sweeps and the forward
// split their work over the SMs (the tail split, the group split) and how many segments the fused
// sweeps' ordered additions use. Plain C++ (attention/plan.cpp), built with or without the CUDA
// backend so that the CPU tests check it (tests/test_attention_plan.cpp). The measurements behind
// the rules are in docs/kernels.md (§5, ordered additions; §6, the tail split).
#pragma once
#include <cstdint>

#include "kernels/cuda/attention/mask.h"

namespace gg::kernels::cuda {

// Keys per block of the warp-specialised key sweeps (sweeps.cuh asserts that SweepSm90Traits::kBlock
// agrees), the unit of the key bands and segment chains below.
inline constexpr int kKeyBlockRows = 128;

// The tail split (not causal): where the blocks of a warp-specialised kernel, one per SM, leave a
// last wave that fills only part of the SMs, each unit of that wave is swept by several blocks
// over parts of its other side's tiles (sweeps.cuh, TailSplitRun; the forward's merge
// kernel). The split for `units` units of `tiles` tiles each on `sms` SMs: blocks [0, whole)
// sweep whole units; each of the last split_units units is swept by `pieces` blocks (pieces = 1,
// split_units = 0: no split). Pieces of at least min_tiles tiles; among 2..16 pieces per unit the
// count whose last round of pieces is shortest, counting about two tiles' work for each piece's
// start, if at least 10% shorter than the unsplit last wave. sms <= 0: no split.
struct TailSplitPlan {
  int whole, pieces, split_units;
};
TailSplitPlan plan_tail_split(int64_t units, int tiles, bool causal, int sms, int min_tiles = 8);

// The key sweeps of grouped heads whose units differ in length (a causal mask or a window: a unit
// near the start of a causal sequence sweeps it all, once per query head of the group) are split
// into `pieces` pieces of whole query heads of the group, each sweeping its heads in the unit's
// order (KeyBand), as the fused sweeps' ordered additions need to run without waits (pieces cut
// inside a head are slower: docs/kernels.md §6). pieces is the larger of two counts, each a
// divisor of group:
// - fill: with fewer than 2 units per SM the longest units decide the time: the largest divisor
//   up to ceil(4·sms / units);
// - tail: longest_share, the longest unit's steps over the average steps per SM (units launch
//   longest first, so the SMs that take the longest units finish last): the smallest divisor up to
//   group / 4 that brings the longest piece to at most a sixth of an SM's average, else the largest
//   up to group / 4 (more pieces cost an f32 scratch of 8 bytes per key element and piece, which
//   would take the peak above the ungrouped one's; docs/kernels.md §6 has the measured counts).
// pieces 1: no split (also for group <= 1, sms <= 0 or units < 1). Else whole = 0 and
// split_units = units: every unit is split.
TailSplitPlan plan_group_split(int64_t units, int group, int sms, double longest_share = 0);

// The band of the key block [j0, j0 + kKeyBlockRows) under the mask m: the query tiles of tile_rows rows
// [first, first + count) that see some key of the block. A block whose keys no query sees has a
// band of one tile (count 1), where its first query would be. The same band as the key sweeps'
// (sweeps.cuh, key_band_tiles, on the kernels' Params); longest_key_unit_share uses it.
struct KeyBlockBand {
  int first, count;
};
inline KeyBlockBand key_block_band(const MaskBand& m, int j0, int tile_rows) {
  const int end = j0 + kKeyBlockRows < m.nk ? j0 + kKeyBlockRows : m.nk;
  const int lo = m.query_lo(j0), hi = m.query_hi(end - 1);
  const int first = lo / tile_rows;
  return {first, hi > lo ? (hi + tile_rows - 1) / tile_rows - first : 1};
}

// plan_group_split's longest_share for key sweeps (blocks of kKeyBlockRows keys over query tiles of
// tile_rows rows) of bh_kv key/value heads under the mask (nq, nk, causal, window_left,
// window_right; -1: unbounded), from the blocks' bands. 0 under a left bound: the units are then
// alike but at the ends of the sequence, and a split would only change the count of waves (not
// measured). 0 also for an empty problem or a non-positive bh_kv, tile_rows or sms.
double longest_key_unit_share(int64_t nq, int64_t nk, bool causal, int64_t window_left, int64_t window_right,
                              int64_t bh_kv, int tile_rows, int sms);

// How many segments (1, 2, 4 or 8) the fused sweeps' ordered additions are spread over under a
// general mask (d = 64, deterministic mode): key block b adds its parts into segment b mod S, an
// f32 buffer and counters of its own, and the conversion sums the S buffers in a fixed order.
// Without a left bound (left_bounded false) every key block's band ends at the last query tile,
// so the blocks running at once, up to chain = min(sms, cdiv(nk, kKeyBlockRows)) of a head, meet each tile
// at the same step and take their turns there one after the other; a block with few steps
// (steps = group * cdiv(nq, kKeyBlockRows)) spends much of its time waiting in that chain, which S segments
// make S times shorter. S is the largest power of two up to 8 with S * steps <= chain and
// S * nq * group <= nk (the extra f32 buffers, per output, under twice the bytes of a bf16 K); 1
// with a left bound (the bands slide: each block meets a tile a step after the one before it, and
// segments make the chain slower: docs/kernels.md §5), and 1 for an empty problem, group < 1 or
// sms < 1.
// Where the blocks have more steps the chain's wait is a small part of their time, which the
// extra buffers' memory does not buy back (docs/kernels.md §5).
int ordered_add_segments(int64_t nq, int64_t nk, int group, bool left_bounded, int sms);

}  // namespace gg::kernels::cuda
