// Sequence-parallel attention on P in-process ranks against the single-thread gg::attention
// over the whole sequence (f64): the output, the first-order gradients and the second-order
// gradients (of a function of dQ, dK, dV, through create_graph: the fused backward-over-backward
// on every rank) agree to rounding, for contiguous and zig-zag shards, odd lengths, grouped-query
// heads, full, causal and windowed masks.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "dist_util.h"
#include "sequence_parallel.h"
#include "gradgrad.h"

namespace gg {
namespace {

using dist::Group;
using dist::Sharding;
using test::expect_matches_one_rank;

struct Case {
  int P;
  Sharding sharding;
};

class SequenceParallel : public ::testing::TestWithParam<Case> {};

// 13 rows: uneven shards and chunks for every P.
TEST_P(SequenceParallel, OutputFirstAndSecondOrderMatchOneRank) {
  expect_matches_one_rank(GetParam().P, GetParam().sharding, 13);
}

// Fewer rows than zig-zag chunks: 5 rows over 4 ranks leaves three of the 8 chunks empty.
TEST(SequenceParallelShort, EmptyZigzagChunks) { expect_matches_one_rank(4, Sharding::zigzag, 5); }

INSTANTIATE_TEST_SUITE_P(Ranks, SequenceParallel,
                         ::testing::Values(Case{1, Sharding::contiguous}, Case{2, Sharding::contiguous},
                                           Case{3, Sharding::contiguous}, Case{4, Sharding::contiguous},
                                           Case{1, Sharding::zigzag}, Case{2, Sharding::zigzag},
                                           Case{3, Sharding::zigzag}, Case{4, Sharding::zigzag}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return std::string(i.param.sharding == Sharding::zigzag ? "zigzag" : "contiguous") + "_P" +
                                  std::to_string(i.param.P);
                         });

TEST(Zigzag, ShardsAreChunksRAnd2PMinus1MinusRAndUnshardInvertsThem) {
  const Tensor x = arange(0, 11, 1, DType::f64);  // 11 rows over 3 ranks: chunks 2,2,2,2,2,1
  const int P = 3;
  TensorList shards;
  for (int r = 0; r < P; ++r) shards.push_back(dist::zigzag_shard(x, r, P, 0));
  EXPECT_EQ(test::values(shards[0]), (std::vector<double>{0, 1, 10}));
  EXPECT_EQ(test::values(shards[1]), (std::vector<double>{2, 3, 8, 9}));
  EXPECT_EQ(test::values(shards[2]), (std::vector<double>{4, 5, 6, 7}));
  EXPECT_EQ(test::values(dist::zigzag_unshard(cat(shards, 0), P, 0)), test::values(x));
  EXPECT_THROW(dist::zigzag_shard(x, 3, P, 0), ValueError);
  EXPECT_THROW(dist::zigzag_shard(x, 0, P, 1), IndexError);
}

// The point of zig-zag: under a causal mask every rank gets about the same number of
// (query, key) pairs, where contiguous blocks give the last rank almost all of them.
TEST(Zigzag, BalancesCausalWork) {
  const int64_t N = 64, P = 4;
  auto pairs = [&](int64_t start, int64_t n) {  // causal pairs of rows [start, start + n)
    int64_t s = 0;
    for (int64_t i = start; i < start + n; ++i) s += i + 1;
    return s;
  };
  const Tensor pos = arange(0, static_cast<double>(N), 1, DType::f64);
  std::vector<int64_t> zig, blocks;
  for (int64_t r = 0; r < P; ++r) {
    int64_t s = 0;
    for (double i : test::values(dist::zigzag_shard(pos, r, P, 0))) s += static_cast<int64_t>(i) + 1;
    zig.push_back(s);
    blocks.push_back(pairs(r * N / P, N / P));
  }
  EXPECT_EQ(*std::max_element(zig.begin(), zig.end()), *std::min_element(zig.begin(), zig.end()));
  EXPECT_GT(blocks.back(), 6 * blocks.front());
}

TEST(DistAttention, BadShardsAreTypedErrors) {
  // A rank with no rows.
  EXPECT_THROW(dist::run_threads(2,
                                 [](Group& g) {
                                   const int64_t n = g.rank() == 0 ? 3 : 0;
                                   const Tensor t = zeros({1, 1, n, 2}, DType::f64);
                                   dist::attention(g, t, t, t);
                                 }),
               ShapeError);
  // Shards that are not a zig-zag cut (contiguous 4 + 4 of 8 rows; zig-zag would be 4 + 4 too,
  // so use 5 + 3).
  EXPECT_THROW(dist::run_threads(2,
                                 [](Group& g) {
                                   const Tensor t = zeros({1, 1, g.rank() == 0 ? 5 : 3, 2}, DType::f64);
                                   dist::attention(g, t, t, t, {}, Sharding::zigzag);
                                 }),
               ShapeError);
  EXPECT_THROW(dist::run_threads(1,
                                 [](Group& g) {
                                   const Tensor q = zeros({1, 1, 4, 2}, DType::f64);
                                   const Tensor k = zeros({1, 1, 3, 2}, DType::f64);
                                   dist::attention(g, q, k, k);
                                 }),
               ShapeError);
  EXPECT_THROW(dist::run_threads(1,
                                 [](Group& g) {
                                   const Tensor t = zeros({1, 1, 4, 2}, DType::f64);
                                   dist::attention(g, t, t, t, {std::nullopt, true, std::nullopt, 2});
                                 }),
               ValueError);
  // Ranks whose heads differ.
  EXPECT_THROW(dist::run_threads(2,
                                 [](Group& g) {
                                   const Tensor t = zeros({1, 1 + g.rank(), 4, 2}, DType::f64);
                                   dist::attention(g, t, t, t);
                                 }),
               ShapeError);
}

}  // namespace
}  // namespace gg
