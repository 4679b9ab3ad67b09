// Sequence-parallel attention on P in-process ranks against the single-thread gg::attention
// over the whole sequence (f64): the output, the first-order gradients and the second-order
// gradients (of a function of dQ, dK, dV, through create_graph: the fused backward-over-backward
// on every rank) agree to rounding, for contiguous and zig-zag shards, odd lengths, grouped-query
// heads, full, causal and windowed masks.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "dist_util.h"
#include "gradgrad.h"

namespace gg {
namespace {

using dist::Group;
using dist::Sharding;
using test::relative_gap;

constexpr double kTol = 1e-12;

struct MaskCase {
  std::string name;
  AttentionOptions options;
};

std::vector<MaskCase> mask_cases() {
  std::vector<MaskCase> c;
  c.push_back({"full", {}});
  c.push_back({"causal", {std::nullopt, true}});
  c.push_back({"causal_window_left_4", {std::nullopt, true, 4}});
  c.push_back({"window_3_2", {std::nullopt, false, 3, 2}});
  c.push_back({"window_right_5_only", {0.3, false, std::nullopt, 5}});
  c.push_back({"window_left_1_only", {std::nullopt, false, 1}});
  return c;
}

// Rank r's rows of the full x along dim 2.
Tensor rows_of(const Tensor& x, int r, int P, Sharding s) {
  return s == Sharding::zigzag ? contiguous(dist::zigzag_shard(x.detach(), r, P, 2)) : test::shard(x, 2, r, P);
}
// The full tensor from the ranks' rows.
Tensor unshard(const TensorList& parts, int P, Sharding s) {
  const Tensor all = cat(parts, 2);
  return s == Sharding::zigzag ? dist::zigzag_unshard(all, P, 2) : all;
}

// dist::attention on P ranks against gg::attention on one thread, for every mask case.
void expect_matches_one_rank(int P, Sharding sharding, int64_t N) {
  const int64_t B = 2, Hq = 4, Hkv = 2, d = 6;  // grouped-query heads
  manual_seed(100 + P + N);
  const Tensor Q = randn({B, Hq, N, d}, DType::f64), K = randn({B, Hkv, N, d}, DType::f64),
               V = randn({B, Hkv, N, d}, DType::f64);
  const Tensor dO = randn({B, Hq, N, d}, DType::f64);
  const Tensor A = randn({B, Hq, N, d}, DType::f64), C = randn({B, Hkv, N, d}, DType::f64);

  for (const MaskCase& mc : mask_cases()) {
    SCOPED_TRACE(mc.name);
    // One thread, whole sequence.
    const TensorList full = {test::leaf(Q), test::leaf(K), test::leaf(V)};
    const Tensor O = attention(full[0], full[1], full[2], mc.options);
    const TensorList g1 = grad({O}, full, {dO}, {true});
    const Tensor pen = sum(g1[0] * A) + sum(g1[1] * g1[1]) + sum(tanh(g1[2]) * C);
    const TensorList g2 = grad({pen}, full);

    std::vector<Tensor> out(static_cast<size_t>(P));
    std::vector<TensorList> first(static_cast<size_t>(P)), second(static_cast<size_t>(P));
    dist::run_threads(P, [&](Group& g) {
      const int r = g.rank();
      const TensorList leaves = {test::leaf(rows_of(Q, r, P, sharding)), test::leaf(rows_of(K, r, P, sharding)),
                                 test::leaf(rows_of(V, r, P, sharding))};
      const Tensor o = dist::attention(g, leaves[0], leaves[1], leaves[2], mc.options, sharding);
      const TensorList gr = grad({o}, leaves, {rows_of(dO, r, P, sharding)}, {true});
      const Tensor p = sum(gr[0] * rows_of(A, r, P, sharding)) + sum(gr[1] * gr[1]) +
                       sum(tanh(gr[2]) * rows_of(C, r, P, sharding));
      out[static_cast<size_t>(r)] = o.detach();
      first[static_cast<size_t>(r)] = gr;
      second[static_cast<size_t>(r)] = grad({p}, leaves);
    });

    EXPECT_LT(relative_gap(unshard(out, P, sharding), O), kTol) << "output";
    for (size_t i = 0; i < 3; ++i) {
      TensorList f, s;
      for (int r = 0; r < P; ++r) {
        f.push_back(first[static_cast<size_t>(r)][i]);
        s.push_back(second[static_cast<size_t>(r)][i]);
      }
      EXPECT_LT(relative_gap(unshard(f, P, sharding), g1[i]), kTol) << "first order, input " << i;
      EXPECT_LT(relative_gap(unshard(s, P, sharding), g2[i]), kTol) << "second order, input " << i;
    }
  }
}

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
}

}  // namespace
}  // namespace gg
