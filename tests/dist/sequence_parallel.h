// Sequence-parallel attention on P in-process ranks against gg::attention over the whole
// sequence on one thread (f64, on the CPU or one GPU): the output, the first-order gradients
// and the second-order gradients (of a function of dQ, dK, dV through create_graph) agree to
// 1e-12 of their scale, for grouped-query heads and full, causal and windowed masks.
#pragma once
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dist_util.h"
#include "gradgrad.h"

namespace gg::test {

struct MaskCase {
  std::string name;
  AttentionOptions options;
};

inline std::vector<MaskCase> mask_cases() {
  std::vector<MaskCase> c;
  c.push_back({"full", {}});
  c.push_back({"causal", {std::nullopt, true}});
  c.push_back({"causal_window_left_4", {std::nullopt, true, 4}});
  c.push_back({"window_3_2", {std::nullopt, false, 3, 2}});
  c.push_back({"window_right_5_only", {0.3, false, std::nullopt, 5}});
  c.push_back({"window_left_1_only", {std::nullopt, false, 1}});
  c.push_back({"diagonal_only", {std::nullopt, false, 0, 0}});
  return c;
}

// Rank r's rows of the full x along dim 2.
inline Tensor rows_of(const Tensor& x, int r, int P, dist::Sharding s) {
  return s == dist::Sharding::zigzag ? contiguous(dist::zigzag_shard(x.detach(), r, P, 2)) : test::shard(x, 2, r, P);
}
// The full tensor from the ranks' rows.
inline Tensor unshard(const TensorList& parts, int P, dist::Sharding s) {
  const Tensor all = cat(parts, 2);
  return s == dist::Sharding::zigzag ? dist::zigzag_unshard(all, P, 2) : all;
}

// dist::attention on P ranks against gg::attention on one thread, for every mask case.
inline void expect_matches_one_rank(int P, dist::Sharding sharding, int64_t N, Device device = Device::cpu()) {
  const int64_t B = 2, Hq = 4, Hkv = 2, d = 6;  // grouped-query heads
  manual_seed(100 + P + N);
  auto draw = [&](const Shape& s) { return to(randn(s, DType::f64), device); };
  const Tensor Q = draw({B, Hq, N, d}), K = draw({B, Hkv, N, d}), V = draw({B, Hkv, N, d});
  const Tensor dO = draw({B, Hq, N, d});
  const Tensor A = draw({B, Hq, N, d}), C = draw({B, Hkv, N, d});

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
    dist::run_threads(P, [&](dist::Group& g) {
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

    EXPECT_LT(test::relative_gap(unshard(out, P, sharding), O), 1e-12) << "output";
    for (size_t i = 0; i < 3; ++i) {
      TensorList f, s;
      for (int r = 0; r < P; ++r) {
        f.push_back(first[static_cast<size_t>(r)][i]);
        s.push_back(second[static_cast<size_t>(r)][i]);
      }
      EXPECT_LT(test::relative_gap(unshard(f, P, sharding), g1[i]), 1e-12) << "first order, input " << i;
      EXPECT_LT(test::relative_gap(unshard(s, P, sharding), g2[i]), 1e-12) << "second order, input " << i;
    }
  }
}

}  // namespace gg::test
