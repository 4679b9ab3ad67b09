// Sequence-parallel attention on P in-process ranks against gg::attention over the whole
// sequence on one thread (f64, on the CPU or one GPU): the output, the first-order gradients
// and the second-order gradients (of a function of dQ, dK, dV through create_graph) agree to
// 1e-12 of their scale, for grouped-query heads and full, causal and windowed masks, with
// either schedule (all-gather or ring).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
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

// Which of dQ, dK, dV the second-order scalar is a function of.
struct PenTerms {
  bool dq = true, dk = true, dv = true;
};

// dist::attention on P ranks against gg::attention on one thread, for every mask case (or only
// those named in `only`, when not empty).
inline void expect_matches_one_rank(int P, dist::Sharding sharding, int64_t N, Device device = Device::cpu(),
                                    dist::Schedule schedule = dist::Schedule::all_gather, PenTerms terms = {},
                                    const std::vector<std::string>& only = {}) {
  const int64_t B = 2, Hq = 4, Hkv = 2, d = 6;  // grouped-query heads
  manual_seed(100 + P + N);
  auto draw = [&](const Shape& s) { return to(randn(s, DType::f64), device); };
  const Tensor Q = draw({B, Hq, N, d}), K = draw({B, Hkv, N, d}), V = draw({B, Hkv, N, d});
  const Tensor dO = draw({B, Hq, N, d});
  const Tensor A = draw({B, Hq, N, d}), C = draw({B, Hkv, N, d});

  // The second-order scalar: a nonlinear function of the chosen first-order gradients.
  auto penalty = [&](const TensorList& g, const Tensor& a, const Tensor& c) {
    Tensor p = zeros({}, DType::f64, device);
    if (terms.dq) p = p + sum(g[0] * a);
    if (terms.dk) p = p + sum(g[1] * g[1]);
    if (terms.dv) p = p + sum(tanh(g[2]) * c);
    return p;
  };
  // With a scalar of dV alone, v takes no second-order gradient (dV = Pᵀ·dO does not involve
  // V): the engine may leave it undefined, which means zero.
  auto second_order = [&](const Tensor& p, const TensorList& leaves) {
    GradOptions o;
    o.allow_unused = true;
    TensorList g = grad({p}, leaves, {}, o);
    for (size_t i = 0; i < g.size(); ++i)
      if (!g[i].defined()) g[i] = zeros_like(leaves[i]);
    return g;
  };
  int ran = 0;
  for (const MaskCase& mc : mask_cases()) {
    if (!only.empty() && std::find(only.begin(), only.end(), mc.name) == only.end()) continue;
    ++ran;
    SCOPED_TRACE(mc.name);
    // One thread, whole sequence.
    const TensorList full = {test::leaf(Q), test::leaf(K), test::leaf(V)};
    const Tensor O = attention(full[0], full[1], full[2], mc.options);
    const TensorList g1 = grad({O}, full, {dO}, std::nullopt, /*create_graph=*/true);
    const TensorList g2 = second_order(penalty(g1, A, C), full);

    std::vector<Tensor> out(static_cast<size_t>(P));
    std::vector<TensorList> first(static_cast<size_t>(P)), second(static_cast<size_t>(P)), plain(static_cast<size_t>(P));
    dist::run_threads(P, [&](dist::Group& g) {
      const int r = g.rank();
      const TensorList leaves = {test::leaf(rows_of(Q, r, P, sharding)), test::leaf(rows_of(K, r, P, sharding)),
                                 test::leaf(rows_of(V, r, P, sharding))};
      const Tensor o = dist::attention(g, leaves[0], leaves[1], leaves[2], mc.options, sharding, schedule);
      GradOptions keep;  // a plain first-order pass (the ring's own backward), the graph kept
      keep.retain_graph = true;
      plain[static_cast<size_t>(r)] = grad({o}, leaves, {rows_of(dO, r, P, sharding)}, keep);
      const TensorList gr = grad({o}, leaves, {rows_of(dO, r, P, sharding)}, std::nullopt, /*create_graph=*/true);
      out[static_cast<size_t>(r)] = o.detach();
      first[static_cast<size_t>(r)] = gr;
      second[static_cast<size_t>(r)] =
          second_order(penalty(gr, rows_of(A, r, P, sharding), rows_of(C, r, P, sharding)), leaves);
    });

    EXPECT_LT(test::relative_gap(unshard(out, P, sharding), O), 1e-12) << "output";
    for (size_t i = 0; i < 3; ++i) {
      TensorList f, s, f0;
      for (int r = 0; r < P; ++r) {
        f.push_back(first[static_cast<size_t>(r)][i]);
        s.push_back(second[static_cast<size_t>(r)][i]);
        f0.push_back(plain[static_cast<size_t>(r)][i]);
      }
      EXPECT_LT(test::relative_gap(unshard(f0, P, sharding), g1[i]), 1e-12) << "first order (plain), input " << i;
      EXPECT_LT(test::relative_gap(unshard(f, P, sharding), g1[i]), 1e-12) << "first order, input " << i;
      EXPECT_LT(test::relative_gap(unshard(s, P, sharding), g2[i]), 1e-12) << "second order, input " << i;
    }
  }
  EXPECT_EQ(ran, only.empty() ? static_cast<int>(mask_cases().size()) : static_cast<int>(only.size()));
}

}  // namespace gg::test
