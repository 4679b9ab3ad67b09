// Sequence-parallel attention on P in-process ranks against the single-thread gg::attention
// over the whole sequence (f64): the output, the first-order gradients and the second-order
// gradients (of a function of dQ, dK, dV, through create_graph: the fused backward-over-backward
// on every rank) agree to rounding, for both schedules (all-gather and ring), contiguous and
// zig-zag shards, odd lengths, grouped-query heads, full, causal and windowed masks.
#include <gtest/gtest.h>

#include <algorithm>
#include <ostream>
#include <string>

#include "dist_util.h"
#include "sequence_parallel.h"
#include "gradgrad.h"

namespace gg {
namespace {

using dist::Group;
using dist::Sharding;
using dist::Schedule;
using test::expect_matches_one_rank;

struct Case {
  int P;
  Sharding sharding;
  Schedule schedule;
};

std::string name_of(const Case& c) {
  return std::string(c.schedule == Schedule::ring ? "ring_" : "all_gather_") +
         (c.sharding == Sharding::zigzag ? "zigzag" : "contiguous") + "_P" + std::to_string(c.P);
}
std::string case_name(const ::testing::TestParamInfo<Case>& i) { return name_of(i.param); }
void PrintTo(const Case& c, std::ostream* os) { *os << name_of(c); }

std::vector<Case> all_cases() {
  std::vector<Case> c;
  for (Schedule s : {Schedule::all_gather, Schedule::ring})
    for (Sharding sh : {Sharding::contiguous, Sharding::zigzag})
      for (int P = 1; P <= 4; ++P) c.push_back({P, sh, s});
  return c;
}

class SequenceParallel : public ::testing::TestWithParam<Case> {};

// 13 rows: uneven shards and chunks for every P.
TEST_P(SequenceParallel, OutputFirstAndSecondOrderMatchOneRank) {
  expect_matches_one_rank(GetParam().P, GetParam().sharding, 13, Device::cpu(), GetParam().schedule);
}

// Short sequences: 5 rows over 4 ranks leaves three of the 8 zig-zag chunks empty; 5 over 3 and
// 7 over 4 cut unevenly (2, 2, 1 and 2, 2, 2, 1, or zig-zag chunks of 1 and 0 rows); 2 over 2
// gives every rank one row.
TEST_P(SequenceParallel, ShortSequences) {
  const Case c = GetParam();
  if (c.P == 4) {
    expect_matches_one_rank(4, c.sharding, 5, Device::cpu(), c.schedule);
    expect_matches_one_rank(4, c.sharding, 7, Device::cpu(), c.schedule);
  } else if (c.P == 3) {
    expect_matches_one_rank(3, c.sharding, 5, Device::cpu(), c.schedule);
  } else {
    expect_matches_one_rank(c.P, c.sharding, 2, Device::cpu(), c.schedule);
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, SequenceParallel, ::testing::ValuesIn(all_cases()), case_name);

// Under a causal mask with contiguous shards, rank 0 sees no key of any block it receives in
// the ring, and rank 1 none of the blocks after the first one it receives. Their backwards
// must still run every reverse shift (dist/attention.cpp, the deadlock rule), at first order
// and at second order whether the second-order scalar is a function of dK, of dQ alone or of
// dV alone. A rank that skipped one would leave its neighbours waiting: this test would hang,
// which ctest's TIMEOUT for the RingDeadlock tests (tests/dist/CMakeLists.txt) turns into a
// failure.
TEST(RingDeadlock, RanksThatSeeNoReceivedKeyRunEveryShift) {
  for (const int P : {2, 3, 4}) {
    SCOPED_TRACE("P = " + std::to_string(P));
    for (const test::PenTerms terms : {test::PenTerms{true, false, false}, test::PenTerms{false, true, false},
                                       test::PenTerms{false, false, true}}) {
      expect_matches_one_rank(P, Sharding::contiguous, 9, Device::cpu(), Schedule::ring, terms,
                              {"causal", "diagonal_only"});
    }
  }
}

// Third order (the gradient of a function of the second-order gradients, through the composite
// fallback on every rank), causal and contiguous, so that rank 0 sees no received key: the
// all-gather schedule matches the one-thread op; the ring raises an AutogradError on every rank
// instead of interleaving its shifts differently on different ranks (which hangs). Under the
// RingDeadlock timeout.
TEST(RingDeadlock, ThirdOrderAllGatherMatchesRingRaises) {
  const int P = 3;
  const int64_t B = 1, Hq = 2, Hkv = 1, N = 7, d = 3;
  manual_seed(31);
  const Tensor Q = randn({B, Hq, N, d}, DType::f64), K = randn({B, Hkv, N, d}, DType::f64),
               V = randn({B, Hkv, N, d}, DType::f64), dO = randn({B, Hq, N, d}, DType::f64);
  const AttentionOptions causal{std::nullopt, true};
  // Orders 1-3 of one program: the output's vector-Jacobian product, a nonlinear scalar of
  // those gradients, and the same again one order up.
  auto third = [&](const Tensor& o, const TensorList& leaves, const Tensor& cot) {
    const TensorList g1 = grad({o}, leaves, {cot}, std::nullopt, /*create_graph=*/true);
    const TensorList g2 = grad({sum(g1[0] * g1[0]) + sum(tanh(g1[1])) + sum(g1[2] * g1[2] * g1[2])}, leaves, {},
                               std::nullopt, /*create_graph=*/true);
    return grad({sum(g2[0] * g2[0]) + sum(g2[1] * g2[2])}, leaves);
  };
  const TensorList full = {test::leaf(Q), test::leaf(K), test::leaf(V)};
  const TensorList want = third(attention(full[0], full[1], full[2], causal), full, dO);
  for (Schedule s : {Schedule::all_gather, Schedule::ring}) {
    std::vector<TensorList> got(static_cast<size_t>(P));
    auto run = [&] {
      dist::run_threads(P, [&](Group& g) {
        const int r = g.rank();
        auto rows = [&](const Tensor& x) { return test::rows_of(x, r, P, Sharding::contiguous); };
        const TensorList leaves = {test::leaf(rows(Q)), test::leaf(rows(K)), test::leaf(rows(V))};
        const Tensor o = dist::attention(g, leaves[0], leaves[1], leaves[2], causal, Sharding::contiguous, s);
        got[static_cast<size_t>(r)] = third(o, leaves, rows(dO));
      });
    };
    if (s == Schedule::ring) {
      EXPECT_THROW(run(), AutogradError);
      continue;
    }
    run();
    for (size_t i = 0; i < 3; ++i) {
      TensorList parts;
      for (int r = 0; r < P; ++r) parts.push_back(got[static_cast<size_t>(r)][i]);
      EXPECT_LT(test::relative_gap(cat(parts, 2), want[i]), 1e-11) << "third order, input " << i;
    }
  }
}

// The ring's narrowing, on a case worked by hand: 12 rows over 3 contiguous ranks (4 each),
// window_left = 1 and no right window. Rank 2 (rows 8-11) against rank 1's keys (4-7): only
// row 8 sees one of them (key 7); rows 9-11 see none, and as the last rows of the pair they
// would need a negative local window_left, so the pair is cut to row 8 against key 7. Under
// causal with window_left = 4, rank 2 against rank 0's keys (0-3) is skipped (row 8 sees keys
// 4-8). Checked through the result, against the one-thread op at orders 0-2.
TEST(RingNarrowing, QueryRowsBelowTheKeyChunksReachAreCut) {
  for (Sharding sh : {Sharding::contiguous, Sharding::zigzag})
    expect_matches_one_rank(3, sh, 12, Device::cpu(), Schedule::ring, {},
                            {"causal_window_left_4", "window_left_1_only"});
}

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

// No forward mode through the ring or the all-gather: a dual input is refused on every rank
// before any collective, not given a zero tangent.
TEST(DistAttention, ADualInputIsRefused) {
  EXPECT_THROW(dist::run_threads(2,
                                 [](Group& g) {
                                   fwd::DualLevel level;
                                   const Tensor t = zeros({1, 1, 3, 2}, DType::f64);
                                   dist::attention(g, fwd::make_dual(t, ones_like(t)), t, t);
                                 }),
               AutogradError);
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
  // Ranks whose heads differ (the ring would shift blocks of different sizes).
  for (Schedule s : {Schedule::all_gather, Schedule::ring})
    EXPECT_THROW(dist::run_threads(2,
                                   [s](Group& g) {
                                     const Tensor t = zeros({1, 1 + g.rank(), 4, 2}, DType::f64);
                                     dist::attention(g, t, t, t, {}, Sharding::contiguous, s);
                                   }),
                 ShapeError);
  EXPECT_THROW(dist::run_threads(1,
                                 [](Group& g) {
                                   const Tensor t = zeros({1, 1, 4, 2}, DType::f64);
                                   dist::attention(g, t, t, t, {}, Sharding::contiguous, static_cast<Schedule>(7));
                                 }),
               ValueError);
}

// What the tape keeps between the forward and the backward, counted by the CPU allocator across
// the forward of P = 4 ranks (f64, one query head, n = 64 rows and d = 32 per rank): the ring
// keeps its rank's output and row log-sum-exp (its O(n·d) backward re-sends the blocks), the
// all-gather schedule the gathered keys and values of the whole sequence. (Measured: ring 67,840
// bytes, about O and L of the four ranks; all-gather 722,944; the ring as it kept every block on
// the tape, 878,848.)
TEST(SequenceParallelMemory, RingKeepsOnlyItsRowsForTheBackward) {
  const int P = 4;
  const int64_t n = 64, d = 32;
  const int64_t rank_bytes = n * d * 8;  // one (n, d) f64 tensor
  for (Schedule schedule : {Schedule::ring, Schedule::all_gather}) {
    int64_t held = 0;
    std::vector<Tensor> keep(P);
    dist::run_threads(P, [&](dist::Group& g) {
      manual_seed(40 + g.rank());
      const Tensor q = randn({1, 1, n, d}, DType::f64).requires_grad_(true),
                   k = randn({1, 1, n, d}, DType::f64).requires_grad_(true),
                   v = randn({1, 1, n, d}, DType::f64).requires_grad_(true);
      g.barrier();
      const int64_t before = cpu::memory_stats().current_bytes;
      g.barrier();
      const Tensor o = dist::attention(g, q, k, v, {}, Sharding::contiguous, schedule);
      g.barrier();
      if (g.rank() == 0) held = cpu::memory_stats().current_bytes - before;
      g.barrier();
      keep[static_cast<size_t>(g.rank())] = o;  // the tape lives on with o
      grad({sum(o * o)}, {q, k, v});            // and the backward still runs
    });
    if (schedule == Schedule::ring)
      EXPECT_LT(held, P * 2 * rank_bytes) << "ring: " << held << " bytes for " << P << " ranks";
    else
      EXPECT_GT(held, P * 2 * rank_bytes) << "all_gather: " << held << " bytes for " << P << " ranks";
  }
}

// The CPU allocator's peak above what was held before, over P thread ranks each running
// run(group, its q, k, v) on one query head of n = 32 rows and d = 32 (f64; inputs drawn from
// `seed`, leaves when `leaves`), divided by P.
template <typename Run>
int64_t peak_per_rank(int P, uint64_t seed, bool leaves, Run&& run) {
  std::vector<Tensor> qs, ks, vs;
  manual_seed(seed);
  for (int r = 0; r < P; ++r)
    for (auto* v : {&qs, &ks, &vs}) v->push_back(randn({1, 1, 32, 32}, DType::f64).requires_grad_(leaves));
  int64_t peak = 0;
  dist::run_threads(P, [&](dist::Group& g) {
    const size_t r = static_cast<size_t>(g.rank());
    g.barrier();
    const int64_t before = cpu::memory_stats().current_bytes;
    if (g.rank() == 0) cpu::reset_peak_memory_stats();
    g.barrier();
    run(g, qs[r], ks[r], vs[r]);
    g.barrier();
    if (g.rank() == 0) peak = cpu::memory_stats().peak_bytes - before;
    g.barrier();
  });
  return peak / P;
}
constexpr int64_t kRankBytes = 32 * 32 * 8;  // one (n, d) f64 tensor

// The ring's forward at its peak, counted by the CPU allocator above the inputs, for all ranks
// (f64, one query head, n = 32 rows and d = 32 per rank, contiguous, full mask): each query
// chunk's output is merged block by block as the blocks pass, so the peak per rank does not grow
// with the P parts a chunk gets. (Measured per rank: 45-46 KB at P = 16, 52-61 KB at P = 4; when
// every part was kept until a merge at the end, 133-141 KB at P = 16.)
TEST(SequenceParallelMemory, RingForwardPeakDoesNotGrowWithTheRanks) {
  for (int P : {4, 16}) {
    const int64_t peak = peak_per_rank(P, 60, false, [](dist::Group& g, const Tensor& q, const Tensor& k, const Tensor& v) {
      dist::attention(g, q, k, v, {}, Sharding::contiguous, Schedule::ring);
    });
    EXPECT_LT(peak, 10 * kRankBytes) << P << " ranks: " << peak << " bytes per rank at the peak";
  }
}

// The peak of a second-order chain through the ring (forward, create_graph backward, the
// gradient of Σ dQ² + Σ dK∘dV), counted by the CPU allocator above the inputs for all ranks
// (f64, one query head, n = 32 rows and d = 32 per rank, contiguous, causal): the BoB's two
// rounds hold the blocks, their cotangents and the row scalars of the rank's rows only, so the
// peak per rank does not grow with P. (Measured per rank: 255 KB at P = 4, 246 KB at P = 16;
// with the create_graph backward recomputing the ring on the tape, 234 KB and 526 KB.)
TEST(SequenceParallelMemory, RingSecondOrderPeakDoesNotGrowWithTheRanks) {
  std::vector<int64_t> per_rank;
  for (int P : {4, 16}) {
    per_rank.push_back(peak_per_rank(P, 70, true, [](dist::Group& g, const Tensor& q, const Tensor& k, const Tensor& v) {
      const Tensor o = dist::attention(g, q, k, v, {std::nullopt, true}, Sharding::contiguous, Schedule::ring);
      GradOptions create;
      create.create_graph = true;
      const TensorList dg = grad({sum(o * o)}, {q, k, v}, {}, create);
      grad({sum(dg[0] * dg[0]) + sum(dg[1] * dg[2])}, {q, k, v});
    }));
    EXPECT_LT(per_rank.back(), 40 * kRankBytes) << P << " ranks: " << per_rank.back() << " bytes per rank at the peak";
  }
  EXPECT_LT(per_rank[1], per_rank[0] * 5 / 4) << "per rank: " << per_rank[0] << " bytes at P = 4, " << per_rank[1]
                                               << " at P = 16";
}

// Every pass of the ring starts every transfer before the pairs that it overlaps and makes no
// blocking shift: the forward its P - 1 block shifts; the first-order backward, with or without
// create_graph, P - 1 block shifts and P gradient shifts; the BoB two rounds of P - 1 block
// shifts, and P gradient shifts in the second, followed here by a first-order backward (dO = 2·o
// takes the BoB's grad_dO back through the forward).
TEST(RingOverlap, EveryOrderStartsEveryTransfer) {
  const int P = 3;
  std::vector<std::vector<std::string>> forward(P), backward(P), taped(P), second(P);
  dist::run_threads(P, [&](Group& g) {
    const size_t r = static_cast<size_t>(g.rank());
    std::vector<std::string> log;
    auto logging = std::make_shared<test::RecordingRank>(g, &log);
    auto shifts = [&] {  // the transfers logged since the last call
      std::vector<std::string> s;
      for (const std::string& e : log)
        if (e == "sendrecv" || e == "start_sendrecv") s.push_back(e);
      log.clear();
      return s;
    };
    manual_seed(50 + g.rank());
    const Tensor q = randn({1, 2, 5, 4}, DType::f64).requires_grad_(true),
                 k = randn({1, 2, 5, 4}, DType::f64).requires_grad_(true),
                 v = randn({1, 2, 5, 4}, DType::f64).requires_grad_(true);
    const Tensor o = dist::attention(*logging, q, k, v, {std::nullopt, true}, Sharding::zigzag, Schedule::ring);
    forward[r] = shifts();
    GradOptions keep;
    keep.retain_graph = true;
    grad({sum(o * o)}, {q, k, v}, {}, keep);
    backward[r] = shifts();
    GradOptions create;
    create.create_graph = true;
    const TensorList d = grad({sum(o * o)}, {q, k, v}, {}, create);
    taped[r] = shifts();
    grad({sum(d[0] * d[0]) + sum(d[1] * d[2])}, {q, k, v});
    second[r] = shifts();
  });
  for (size_t r = 0; r < P; ++r) {
    EXPECT_EQ(forward[r], std::vector<std::string>(P - 1, "start_sendrecv")) << "rank " << r;
    EXPECT_EQ(backward[r], std::vector<std::string>(2 * P - 1, "start_sendrecv")) << "rank " << r;
    EXPECT_EQ(taped[r], std::vector<std::string>(2 * P - 1, "start_sendrecv")) << "rank " << r;
    EXPECT_EQ(second[r], std::vector<std::string>(3 * P - 2 + 2 * P - 1, "start_sendrecv")) << "rank " << r;
  }
}

}  // namespace
}  // namespace gg
