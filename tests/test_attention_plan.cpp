// The CUDA attention kernels' launch plans (kernels/cuda/attention/plan.h) and mask arithmetic
// (attention/mask.h): plain arithmetic on the shape and the SM count, built and tested with or
// without the CUDA backend.
//
//   TailSplit            plan_tail_split: the split of the key sweeps' and the forward's last
//                        wave for known shapes; no split where it must not; the plan's invariants.
//   OrderedAddSegments   ordered_add_segments: known shapes, the rule over a grid of shapes, and 1
//                        for a left bound, an empty problem or one SM.
//   GroupSplit           plan_group_split and longest_key_unit_share: known shapes, the rule over
//                        a grid of shapes, degenerate arguments.
//   KeyBlockBand         key_block_band (the key sweeps' bands) against the mask's definition.
//   AttentionMask.*      the mask arithmetic of attention/mask.h: the positions of the ordered
//                        additions (full, causal, general masks), DivBy, MaskBand.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/attention/mask.h"
#include "kernels/cuda/attention/plan.h"

namespace gg::test {
namespace {

using kernels::cuda::key_block_band;
using kernels::cuda::longest_key_unit_share;
using kernels::cuda::MaskBand;
using kernels::cuda::ordered_add_segments;
using kernels::cuda::plan_group_split;
using kernels::cuda::plan_tail_split;
using kernels::cuda::TailSplitPlan;

void expect_no_split(const TailSplitPlan& p, int64_t units, const std::string& at) {
  EXPECT_EQ(p.whole, units) << at;
  EXPECT_EQ(p.pieces, 1) << at;
  EXPECT_EQ(p.split_units, 0) << at;
}

// H = 16, d = 64, N = 16384 on the H200's 132 SMs: 2048 units of 128 keys, a last wave of 68; its
// units cut into 15 pieces of 34 query tiles (BoB sweep, 512 tiles) make a last round of 8 pieces
// on 132 SMs (1020 pieces), 8 · (1/15 + 2/512) = 0.565 units instead of 1.004.
TEST(AttentionPlan, TailSplit) {
  const auto p = plan_tail_split(2048, 512, false, 132);
  EXPECT_EQ(p.whole, 1980);
  EXPECT_EQ(p.split_units, 68);
  EXPECT_EQ(p.pieces, 15);
  for (auto none : {plan_tail_split(2048, 512, true, 132),     // causal: never
                    plan_tail_split(1056, 512, false, 132),    // whole waves
                    plan_tail_split(100, 512, false, 132),     // one partial wave
                    plan_tail_split(2048, 15, false, 132),     // pieces would be under 8 tiles
                    plan_tail_split(512, 128, false, 132),     // N = 4096: 9 pieces would save under 10%
                    plan_tail_split(352, 32, false, 132, 16),  // forward at N = 4096: pieces under 16 tiles
                    plan_tail_split(2048, 512, false, 0)}) {   // off
    EXPECT_EQ(none.pieces, 1);
    EXPECT_EQ(none.split_units, 0);
  }
  const auto all = plan_tail_split(2048, 512, false, 132);
  EXPECT_EQ(all.whole + all.split_units, 2048);
  // One unit past a whole wave: that unit in 16 pieces (the most), one per SM.
  const auto one = plan_tail_split(133, 512, false, 132);
  EXPECT_EQ(one.whole, 132);
  EXPECT_EQ(one.split_units, 1);
  EXPECT_EQ(one.pieces, 16);
  // No split: no units, one unit, one SM (every count of units is whole waves), no SMs or a
  // negative count, no tiles, min_tiles above the tiles.
  expect_no_split(plan_tail_split(0, 512, false, 132), 0, "units 0");
  expect_no_split(plan_tail_split(1, 512, false, 132), 1, "units 1");
  expect_no_split(plan_tail_split(1, 512, false, 1), 1, "units 1, sms 1");
  expect_no_split(plan_tail_split(2049, 512, false, 1), 2049, "sms 1");
  expect_no_split(plan_tail_split(2048, 512, false, -1), 2048, "sms -1");
  expect_no_split(plan_tail_split(133, 0, false, 132), 133, "tiles 0");
  expect_no_split(plan_tail_split(133, 512, false, 132, 513), 133, "min_tiles 513");
  // Every plan: a split keeps the whole waves and cuts the last one's units into 2..16 pieces of
  // at least min_tiles tiles each; none leaves every unit whole.
  int split = 0;
  for (int64_t units : {0, 1, 2, 7, 20, 21, 39, 132, 133, 200, 263, 265, 1000, 2048, 100000})
    for (int tiles : {1, 8, 15, 16, 32, 64, 128, 512, 4096})
      for (int sms : {1, 2, 20, 132})
        for (int min_tiles : {8, 16}) {
          const auto q = plan_tail_split(units, tiles, false, sms, min_tiles);
          const std::string at = std::to_string(units) + " " + std::to_string(tiles) + " " + std::to_string(sms) +
                                 " " + std::to_string(min_tiles);
          EXPECT_EQ(q.whole + q.split_units, units) << at;
          if (q.split_units == 0) {
            EXPECT_EQ(q.pieces, 1) << at;
            continue;
          }
          ++split;
          EXPECT_GT(units, sms) << at;
          EXPECT_EQ(q.whole % sms, 0) << at;
          EXPECT_EQ(q.split_units, units % sms) << at;
          EXPECT_GE(q.pieces, 2) << at;
          EXPECT_LE(q.pieces, 16) << at;
          EXPECT_LE(q.pieces * min_tiles, tiles) << at;
          EXPECT_EQ(plan_tail_split(units, tiles, true, sms, min_tiles).split_units, 0) << at;  // causal
        }
  EXPECT_GT(split, 50);
}

// 1 under a left bound; else the largest power of two up to 8 with S * steps <= chain and
// S * Nq * group <= Nk (steps = group * cdiv(Nq, 128), chain = min(SMs, cdiv(Nk, 128))).
TEST(AttentionPlan, OrderedAddSegments) {
  EXPECT_EQ(ordered_add_segments(1024, 65536, 1, false, 132), 8);    // 8 steps, chain 132
  EXPECT_EQ(ordered_add_segments(4096, 65536, 1, false, 132), 4);    // 32 steps: 8 * 32 > 132
  EXPECT_EQ(ordered_add_segments(4096, 16384, 1, false, 132), 4);    // chain 128 = 4 * 32; 4 * Nq = Nk
  EXPECT_EQ(ordered_add_segments(16384, 65536, 1, false, 132), 1);   // 128 steps: 2 * 128 > 132
  EXPECT_EQ(ordered_add_segments(8192, 65536, 1, false, 132), 2);    // 64 steps
  EXPECT_EQ(ordered_add_segments(1024, 65536, 1, true, 132), 1);     // a left bound
  EXPECT_EQ(ordered_add_segments(65536, 65536, 16, false, 132), 1);  // grouped, square: memory
  EXPECT_EQ(ordered_add_segments(2048, 2048, 2, false, 132), 1);
  EXPECT_EQ(ordered_add_segments(1000, 700, 1, false, 132), 1);      // Nq > Nk
  EXPECT_EQ(ordered_add_segments(200, 2000, 1, false, 2), 1);        // chain 2, 2 steps
  EXPECT_EQ(ordered_add_segments(100, 2000, 1, false, 2), 2);        // chain 2, 1 step
  // The shapes of the GPU tests' segmented runs (CudaAttentionOptionsEdges.SegmentedAdditions).
  EXPECT_EQ(ordered_add_segments(300, 4000, 1, false, 64), 8);
  EXPECT_EQ(ordered_add_segments(300, 4000, 2, false, 64), 4);
  EXPECT_EQ(ordered_add_segments(300, 4000, 2, false, 1), 1);
  // One segment: one SM (a chain of one block), an empty problem, no group, no SMs.
  EXPECT_EQ(ordered_add_segments(1, 1 << 20, 1, false, 1), 1);
  EXPECT_EQ(ordered_add_segments(0, 65536, 1, false, 132), 1);
  EXPECT_EQ(ordered_add_segments(1024, 0, 1, false, 132), 1);
  EXPECT_EQ(ordered_add_segments(1024, 65536, 0, false, 132), 1);
  EXPECT_EQ(ordered_add_segments(1024, 65536, 1, false, 0), 1);
  EXPECT_EQ(ordered_add_segments(1024, 65536, 1, false, -1), 1);
  for (int64_t nq : {1, 100, 1000, 5000})
    for (int64_t nk : {1, 300, 4096, 70000})
      for (int group : {1, 2, 8})
        for (int sms : {1, 20, 132}) {
          const int s = ordered_add_segments(nq, nk, group, false, sms);
          const int64_t steps = group * ((nq + 127) / 128), chain = std::min<int64_t>(sms, (nk + 127) / 128);
          EXPECT_TRUE(s == 1 || s == 2 || s == 4 || s == 8) << s;
          if (s > 1) {
            EXPECT_LE(s * steps, chain) << nq << " " << nk << " " << group << " " << sms;
            EXPECT_LE(s * nq * group, nk) << nq << " " << nk << " " << group << " " << sms;
          }
          if (s < 8) {
            EXPECT_TRUE(2 * s * steps > chain || 2 * s * nq * group > nk) << nq << " " << nk;
          }
          EXPECT_EQ(ordered_add_segments(nq, nk, group, true, sms), 1) << nq << " " << nk;
        }
}

// Causal, N = 64K, one key/value head: block b's band is 1024 - 2b tiles of 64 rows, so the
// longest unit is 1024 · 132 / 262,656 = 0.515 of an SM's average; a window gives 0. The count is
// the larger of the fill count (fewer than 2 units per SM: the largest divisor of the group up to
// ceil(4 · SMs / units)) and the tail count (the smallest divisor up to group / 4 that brings the
// longest piece to a sixth of an SM's average, else the largest).
TEST(AttentionPlan, GroupSplit) {
  const double share64k = longest_key_unit_share(65536, 65536, true, -1, -1, 1, 64, 132);
  EXPECT_NEAR(share64k, 1024.0 * 132 / 262656, 1e-12);
  EXPECT_NEAR(longest_key_unit_share(65536, 65536, true, -1, -1, 4, 64, 132), share64k / 4, 1e-12);
  EXPECT_NEAR(longest_key_unit_share(65536, 65536, false, -1, 0, 1, 32, 132), share64k, 1e-12);  // window_right 0
  EXPECT_EQ(longest_key_unit_share(65536, 65536, true, 4096, -1, 1, 64, 132), 0.0);  // a left bound
  EXPECT_NEAR(longest_key_unit_share(1024, 1024, false, -1, -1, 1, 64, 8), 1.0, 1e-12);  // full: 8 alike on 8 SMs
  EXPECT_EQ(plan_group_split(512, 16, 132, share64k).pieces, 4);  // Hkv 1, 64K: 0.515 / 4 <= 1/6
  EXPECT_EQ(plan_group_split(512, 16, 132, 0).split_units, 0);
  EXPECT_EQ(plan_group_split(1024, 16, 132, share64k / 2).pieces, 2);  // 128K
  EXPECT_EQ(plan_group_split(1024, 8, 132, share64k / 2).pieces, 2);   // Hkv 2, 64K
  EXPECT_EQ(plan_group_split(2048, 4, 132, share64k / 4).split_units, 0);  // Hkv 4: group / 4 = 1
  EXPECT_EQ(plan_group_split(512, 4, 132, 4 * share64k).split_units, 0);
  EXPECT_EQ(plan_group_split(128, 16, 132, 2.05).pieces, 4);  // fill 4 (wants 5), tail 4 (at most 16 / 4)
  EXPECT_EQ(plan_group_split(64, 16, 132, 4.1).pieces, 8);    // fill 8 (wants 9)
  EXPECT_EQ(plan_group_split(512, 16, 132, 1.0 / 6).split_units, 0);
  // The fill count alone (no longest_share), 20 SMs: 32 units want 3 pieces.
  const auto group = plan_group_split(32, 4, 20);
  EXPECT_EQ(group.whole, 0);
  EXPECT_EQ(group.split_units, 32);
  EXPECT_EQ(group.pieces, 2);
  EXPECT_EQ(plan_group_split(32, 4, 8).split_units, 0);    // 4 units per SM
  EXPECT_EQ(plan_group_split(32, 1, 20).split_units, 0);   // no group: no split
  EXPECT_EQ(plan_group_split(32, 5, 20).split_units, 0);   // no divisor of 5 up to 3
  EXPECT_EQ(plan_group_split(40, 4, 20).split_units, 0);   // 2 units per SM
  EXPECT_EQ(plan_group_split(39, 4, 20).pieces, 2);
  EXPECT_EQ(plan_group_split(128, 16, 132).pieces, 4);      // wants 5: 4 divides 16
  EXPECT_EQ(plan_group_split(512, 4, 132).split_units, 0);  // Hkv 4, N 16K on 132 SMs
  // Hq 8 over one key/value head, causal N 2048 (16 units, the first 16/136 of the work): 2
  // pieces on 4 SMs (share 0.47), none on 1 SM (0.12), for the key sweeps' tiles of 32, 64, 128.
  for (int rows : {32, 64, 128}) {
    EXPECT_EQ(plan_group_split(16, 8, 1, longest_key_unit_share(2048, 2048, true, -1, -1, 1, rows, 1)).pieces, 1)
        << rows;
    EXPECT_EQ(plan_group_split(16, 8, 4, longest_key_unit_share(2048, 2048, true, -1, -1, 1, rows, 4)).pieces, 2)
        << rows;
  }
  // Degenerate arguments: no split (whole = units), and a share of 0.
  for (const TailSplitPlan& none : {plan_group_split(0, 16, 132, 1.0), plan_group_split(-3, 16, 132, 1.0),
                                    plan_group_split(16, 16, 0, 1.0), plan_group_split(16, 16, -1, 1.0),
                                    plan_group_split(16, 0, 132, 1.0), plan_group_split(16, -4, 132, 1.0),
                                    plan_group_split(400, 16, 132, -1.0)}) {
    EXPECT_EQ(none.pieces, 1);
    EXPECT_EQ(none.split_units, 0);
  }
  EXPECT_EQ(plan_group_split(0, 16, 132, 1.0).whole, 0);
  EXPECT_EQ(plan_group_split(400, 16, 132, -1.0).whole, 400);
  // One unit: every divisor up to 4 · SMs, so the whole group (16 on 132 SMs; 4 on one SM).
  EXPECT_EQ(plan_group_split(1, 16, 132).pieces, 16);
  EXPECT_EQ(plan_group_split(1, 16, 1).pieces, 4);
  EXPECT_EQ(plan_group_split(2, 16, 1).split_units, 0);  // 2 units on one SM
  EXPECT_EQ(plan_group_split(1, 16, 1).split_units, 1);
  EXPECT_EQ(longest_key_unit_share(0, 1024, true, -1, -1, 1, 64, 132), 0.0);
  EXPECT_EQ(longest_key_unit_share(1024, 0, true, -1, -1, 1, 64, 132), 0.0);
  EXPECT_EQ(longest_key_unit_share(1024, 1024, true, -1, -1, 0, 64, 132), 0.0);
  EXPECT_EQ(longest_key_unit_share(1024, 1024, true, -1, -1, 1, 0, 132), 0.0);
  EXPECT_EQ(longest_key_unit_share(1024, 1024, true, -1, -1, 1, 64, 0), 0.0);
  EXPECT_EQ(longest_key_unit_share(1024, 1024, true, 0, -1, 1, 64, 132), 0.0);  // window_left 0: a left bound
  EXPECT_NEAR(longest_key_unit_share(100, 100, true, -1, -1, 1, 64, 1), 1.0, 1e-12);  // one block on one SM
  for (int64_t units : {1, 16, 100, 263, 264, 512, 5000})
    for (int group : {1, 2, 4, 8, 12, 16})
      for (double share : {0.0, 0.1, 0.2, 0.5, 1.0, 3.0}) {
        const auto plan = plan_group_split(units, group, 132, share);
        const std::string at = std::to_string(units) + " " + std::to_string(group) + " " + std::to_string(share);
        if (plan.split_units == 0) {
          EXPECT_EQ(plan.pieces, 1) << at;
          EXPECT_TRUE(group <= 1 || (units >= 264 && (group < 8 || share <= 1.0 / 6))) << at;
          continue;
        }
        EXPECT_EQ(plan.split_units, units) << at;
        EXPECT_EQ(plan.whole, 0) << at;
        EXPECT_EQ(group % plan.pieces, 0) << at;
        if (units >= 264) {
          EXPECT_LE(plan.pieces, group / 4) << at;
          EXPECT_GT(share, 1.0 / 6) << at;
          for (int q = 2; q < plan.pieces; ++q) {  // no smaller divisor would do
            if (group % q == 0) {
              EXPECT_GT(share / q, 1.0 / 6) << at << " " << q;
            }
          }
        }
      }
}

// key_block_band against the mask's definition (query i sees key j when
// i' - window_left <= j <= i' + right, i' = i + Nk - Nq): the tiles from the first to the last
// query that sees a key of [j0, j0 + 128); a block that no query sees has the one tile where its
// first query would be (max(0, j0 - (Nk - Nq) - right) under a right bound, else 0).
TEST(AttentionPlan, KeyBlockBand) {
  const std::vector<MaskBand> masks = {  // {nq, nk, wl, right}; -1: unbounded
      {300, 300, -1, -1}, {300, 300, -1, 0},  {200, 1000, -1, 0}, {1000, 200, -1, 0}, {700, 700, 300, 0},
      {500, 900, 40, 10}, {640, 640, 0, 0},   {900, 500, -1, 30}, {129, 1000, 5, 0},  {1000, 129, 0, 0},
      {300, 1500, 100, 0}, {200, 2000, 40, 0}, {1000, 300, 64, 0}, {1, 1, -1, -1},    {1, 300, -1, 0},
      {300, 1, -1, 0},    {128, 128, -1, -1}, {50, 700, 0, -1}};
  int empty = 0;
  for (const MaskBand& m : masks)
    for (int tile_rows : {32, 64, 128}) {
      const int shift = m.nk - m.nq;
      auto sees = [&](int i, int j) {
        const int a = i + shift;
        return (m.wl < 0 || j >= a - m.wl) && (m.right < 0 || j <= a + m.right);
      };
      for (int j0 = 0; j0 < m.nk; j0 += 128) {
        int lo = -1, hi = -1;
        for (int i = 0; i < m.nq; ++i)
          for (int j = j0; j < std::min(j0 + 128, m.nk); ++j)
            if (sees(i, j)) {
              if (lo < 0) lo = i;
              hi = i;
              break;
            }
        const int query_lo = m.right < 0 ? 0 : std::max(0, j0 - shift - m.right);
        const int first = (lo < 0 ? query_lo : lo) / tile_rows, count = lo < 0 ? 1 : hi / tile_rows + 1 - first;
        empty += lo < 0;
        const auto band = key_block_band(m, j0, tile_rows);
        EXPECT_EQ(band.first, first) << "Nq=" << m.nq << " Nk=" << m.nk << " wl=" << m.wl << " right=" << m.right
                                     << " tile_rows=" << tile_rows << " j0=" << j0;
        EXPECT_EQ(band.count, count) << "Nq=" << m.nq << " Nk=" << m.nk << " wl=" << m.wl << " right=" << m.right
                                     << " tile_rows=" << tile_rows << " j0=" << j0;
      }
    }
  EXPECT_GT(empty, 0);  // blocks that no query sees were checked too
}

// The order of the fused sweeps' ordered additions (attention/mask.h: ordered_add_position): for
// every buffer tile, the key units that add a part to it (all of a head's, or, causal, those
// whose first query tile, as sweep_unit starts it, is at or before the tile) take the
// positions 0, 1, ... in the order they are launched in (blk from per_head - 1 down to 0): each
// waits only for units launched before it, and no two share a position.
TEST(AttentionMask, OrderedAddPositions) {
  using kernels::cuda::ordered_add_position;
  for (int N : {1, 77, 128, 333, 1000, 4096})
    for (int tile_rows : {32, 64})
      for (bool causal : {false, true}) {
        const int per_head = (N + 127) / 128, tiles = (N + tile_rows - 1) / tile_rows;
        for (int t = 0; t < tiles; ++t) {
          int next = 0;
          for (int blk = per_head - 1; blk >= 0; --blk) {  // launch order within the head
            const int first_tile = causal ? blk * 128 / tile_rows : 0;
            if (first_tile > t) continue;  // the unit's sweep starts after tile t
            EXPECT_EQ(ordered_add_position(blk, per_head, t, tile_rows, causal), next)
                << "N=" << N << " tile_rows=" << tile_rows << " causal=" << causal << " t=" << t << " blk=" << blk;
            ++next;
          }
          EXPECT_GT(next, 0) << "N=" << N << " t=" << t << ": no unit reaches the tile";
        }
      }
}

// The same under general masks (attention/mask.h: band_add_position): key block b's band of
// query tiles is formed here from the mask's definition (query i sees key j when
// i' - window_left <= j <= i' + right, i' = i + Nk - Nq; a band that no query reaches is the one
// tile where its first query would be, as key_band makes it); for every tile, the blocks whose
// band holds it take the positions 0, 1, ... in launch order (from block 0 under a right bound,
// from the last block otherwise). In segments (plan.h: ordered_add_segments, S = 2, 4, 8): the
// blocks of segment b mod S take the positions 0, 1, ... among themselves, in the same order
// (band_add_position(...) >> log2 S, as the sweeps' band_position forms it).
TEST(AttentionMask, BandAddPositions) {
  using kernels::cuda::band_add_position;
  struct Mask {
    int nq, nk, wl, wr;  // -1: unbounded
    bool causal;
  };
  const std::vector<Mask> masks = {
      {300, 300, -1, -1, false}, {300, 300, -1, -1, true},  {200, 1000, -1, -1, true}, {1000, 200, -1, -1, true},
      {700, 700, 300, -1, true}, {500, 900, 40, 10, false}, {640, 640, 0, 0, false},   {900, 500, -1, 30, false},
      {129, 1000, 5, -1, true},  {1000, 129, 0, 0, false}, {300, 1500, 100, -1, true}, {200, 2000, 40, 0, false},
      {1000, 300, 64, -1, true}};
  for (const Mask& m : masks)
    for (int tile_rows : {32, 64}) {
      const int right = m.causal ? 0 : m.wr;  // -1: none
      const int shift = m.nk - m.nq, per_head = (m.nk + 127) / 128, tiles = (m.nq + tile_rows - 1) / tile_rows;
      auto sees = [&](int i, int j) {
        const int a = i + shift;
        return (m.wl < 0 || j >= a - m.wl) && (right < 0 || j <= a + right);
      };
      std::vector<int> first(per_head), end(per_head);  // band [first, end) of each block
      for (int b = 0; b < per_head; ++b) {
        int lo = -1, hi = -1;
        for (int i = 0; i < m.nq; ++i)
          for (int j = 128 * b; j < std::min(128 * b + 128, m.nk); ++j)
            if (sees(i, j)) {
              if (lo < 0) lo = i;
              hi = i;
              break;
            }
        const int query_lo = right < 0 ? 0 : std::max(0, 128 * b - shift - right);
        first[b] = (lo < 0 ? query_lo : lo) / tile_rows;
        end[b] = lo < 0 ? first[b] + 1 : hi / tile_rows + 1;
      }
      for (int log2s = 0; log2s <= 3; ++log2s) {
        const int segments = 1 << log2s;
        int checked = 0;
        for (int t = 0; t < tiles; ++t) {
          std::vector<int> next(segments, 0);
          for (int k = 0; k < per_head; ++k) {  // launch order within the head (KeyBand)
            const int blk = right >= 0 ? k : per_head - 1 - k;
            if (t < first[blk] || t >= end[blk]) continue;
            int& n = next[blk % segments];
            EXPECT_EQ(band_add_position(blk, per_head, t, tile_rows, right >= 0, m.wl, shift) >> log2s, n)
                << "Nq=" << m.nq << " Nk=" << m.nk << " wl=" << m.wl << " wr=" << m.wr << " causal=" << m.causal
                << " tile_rows=" << tile_rows << " segments=" << segments << " t=" << t << " blk=" << blk;
            ++n;
          }
          for (int n : next) checked += n;
        }
        EXPECT_GE(checked, per_head) << "Nq=" << m.nq << " Nk=" << m.nk << ": every block adds somewhere";
      }
    }
}

// DivBy (the key sweeps' steps into query head and tile) against integer division.
TEST(AttentionMask, DivByMatchesDivision) {
  using kernels::cuda::DivBy;
  std::vector<uint32_t> ns = {0, 1, 2, 3, 127, 128, 129, 4095, 65535, 65536, 1u << 20, (1u << 31) - 1};
  for (uint32_t n = 0; n < 5000; ++n) ns.push_back(n * 7919u % 100003u);
  for (uint32_t d : {1u, 2u, 3u, 5u, 7u, 31u, 32u, 33u, 100u, 127u, 128u, 129u, 1000u, 4097u, 65537u, 1u << 20}) {
    const DivBy by(d);
    for (uint32_t n : ns) ASSERT_EQ(by.div(n), n / d) << n << " / " << d;
  }
}

// MaskBand against the mask's definition (query i sees key j when
// i' - window_left <= j <= i' + right, i' = i + Nk - Nq, 0 <= i < Nq, 0 <= j < Nk): sees, the
// Range of every row (keys_of) and of every key (queries_of), and the four bounds, for rows and keys
// up to two past the matrix, with bounds absent, zero, inside and past either side.
TEST(AttentionMask, MaskBandMatchesDefinition) {
  using kernels::cuda::MaskBand;
  std::vector<MaskBand> masks;  // {nq, nk, wl, right}
  for (auto [nq, nk] : {std::pair{37, 37}, {20, 53}, {53, 20}, {1, 9}, {9, 1}})
    for (int wl : {-1, 0, 1, 5, 36, 52})
      for (int right : {-1, 0, 3, 19}) masks.push_back({nq, nk, wl, right});
  int seen = 0, hidden = 0;
  for (const MaskBand& m : masks) {
    const std::string at = "Nq=" + std::to_string(m.nq) + " Nk=" + std::to_string(m.nk) +
                           " wl=" + std::to_string(m.wl) + " right=" + std::to_string(m.right);
    auto want = [&](int i, int j) {
      const int a = i + m.nk - m.nq;
      return i >= 0 && i < m.nq && j >= 0 && j < m.nk && (m.wl < 0 || j >= a - m.wl) &&
             (m.right < 0 || j <= a + m.right);
    };
    for (int i = 0; i < m.nq + 2; ++i)
      for (int j = 0; j < m.nk + 2; ++j) {
        const bool w = want(i, j);
        ASSERT_EQ(m.sees(i, j), w) << at << " i=" << i << " j=" << j;
        ASSERT_EQ(m.keys_of(i).holds(j), w) << at << " i=" << i << " j=" << j;
        ASSERT_EQ(m.queries_of(j).holds(i), w) << at << " i=" << i << " j=" << j;
        if (i < m.nq && j < m.nk) {  // the bounds, where the row and the key exist
          ASSERT_EQ(j >= m.key_lo(i) && j < m.key_hi(i), w) << at << " i=" << i << " j=" << j;
          ASSERT_EQ(i >= m.query_lo(j) && i < m.query_hi(j), w) << at << " i=" << i << " j=" << j;
        }
        (w ? seen : hidden) += 1;
      }
  }
  EXPECT_GT(seen, 1000);
  EXPECT_GT(hidden, 1000);
}

}  // namespace
}  // namespace gg::test
