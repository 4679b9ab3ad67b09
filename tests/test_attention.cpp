// The fused attention op against the composite ground truth, at orders 0, 1, 2 and (through
// the fallback) 3, plus the edge cases: partial cotangents, zero dO, rows that see only
// themselves, huge logits, and a MAML step whose outer gradient runs through BoB.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <tuple>

#include "attention_chain.h"
#include "test_util.h"

namespace gg::test {
namespace {

TensorList random_inputs(const Shape& s, int count, double scale = 1.0) {
  TensorList t;
  for (int i = 0; i < count; ++i) t.push_back(randn(s, DType::f64) * scale);
  return t;
}

class FusedVsComposite : public ::testing::TestWithParam<std::tuple<bool, int64_t, int64_t>> {};

TEST_P(FusedVsComposite, OrdersZeroOneTwo) {
  auto [causal, N, d] = GetParam();
  manual_seed(static_cast<uint64_t>(N * 1000 + d * 10 + causal));
  const Shape s = {2, 2, N, d};
  TensorList qkv = random_inputs(s, 3), extra = random_inputs(s, 4);
  TensorList tilde = {extra[1], extra[2], extra[3]};
  Chain a = run_chain(fused, qkv, extra[0], tilde, causal), b = run_chain(composite, qkv, extra[0], tilde, causal);
  expect_chains_equal(a, b, 1e-10, "N=" + std::to_string(N) + " d=" + std::to_string(d));
}

INSTANTIATE_TEST_SUITE_P(Attention, FusedVsComposite,
                         ::testing::Combine(::testing::Bool(), ::testing::Values<int64_t>(1, 7, 64, 130),
                                            ::testing::Values<int64_t>(8, 16, 64)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "causal" : "full") + "_N" +
                                  std::to_string(std::get<1>(info.param)) + "_d" + std::to_string(std::get<2>(info.param));
                         });

TEST_P(FusedVsComposite, LogSumExpOrdersZeroOneTwo) {
  auto [causal, N, d] = GetParam();
  manual_seed(static_cast<uint64_t>(N * 1000 + d * 10 + causal + 7));
  const Shape s = {2, 2, N, d};
  TensorList qkv = random_inputs(s, 3), extra = random_inputs(s, 4);
  TensorList tilde = {extra[1], extra[2], extra[3]};
  const AttentionOptions o{std::nullopt, causal};
  Chain a = run_chain(fused_lse, qkv, extra[0], tilde, o), b = run_chain(composite_lse, qkv, extra[0], tilde, o);
  expect_chains_equal(a, b, 1e-10, "L, N=" + std::to_string(N) + " d=" + std::to_string(d));
}

// The primitives with dL directly: the backward's dL term is that of the composite's L, and the
// BoB's grad_dL is its derivative in dL (finite differences of <Q̃, dQ> + <K̃, dK>).
TEST(Attention, BackwardTakesLogSumExpCotangent) {
  manual_seed(23);
  const Shape s = {1, 2, 6, 4};
  TensorList t = random_inputs(s, 7);
  const AttentionOptions o{std::nullopt, true};
  AttentionForward f = attention_forward(t[0], t[1], t[2], o);
  const Tensor dL = randn({1, 2, 6}, DType::f64);
  TensorList with = attention_backward(t[0], t[1], t[2], f.O, f.L, t[3], o, dL);
  TensorList x = {leaf(t[0]), leaf(t[1]), leaf(t[2])};
  AttentionForward c = attention_composite_forward(x[0], x[1], x[2], o);
  TensorList want = grad({c.O, c.L}, x, {t[3], dL});
  for (size_t i = 0; i < 3; ++i)
    EXPECT_LE(rel_error(with[i].to_vector<double>(), want[i].to_vector<double>(), 1.0), 1e-12) << i;
  TensorList bob = attention_backward_backward(t[0], t[1], t[2], f.O, f.L, t[3], t[4], t[5], t[6], o, dL);
  ASSERT_EQ(bob.size(), 5u);
  auto inner = [&](const Tensor& dl) {
    TensorList g = attention_backward(t[0], t[1], t[2], f.O, f.L, t[3], o, dl);
    return sum(t[4] * g[0] + t[5] * g[1] + t[6] * g[2]).item();
  };
  const Values gdL = bob[4].to_vector<double>(), dl0 = dL.to_vector<double>();
  for (size_t r = 0; r < dl0.size(); ++r) {  // inner is affine in dL: central differences are exact
    Values up = dl0, down = dl0;
    up[r] += 0.5;
    down[r] -= 0.5;
    const double fd = inner(from_vector(up, {1, 2, 6}, DType::f64)) - inner(from_vector(down, {1, 2, 6}, DType::f64));
    EXPECT_NEAR(gdL[r], fd, 1e-10 * (1 + std::abs(fd))) << r;
  }
}

TEST(Attention, PartialCotangentsSkipTerms) {
  manual_seed(11);
  const Shape s = {1, 2, 9, 5};
  TensorList qkv = random_inputs(s, 3), extra = random_inputs(s, 4);
  for (bool causal : {false, true})
    for (int mask = 1; mask < 8; ++mask) {
      TensorList tilde(3);
      for (int i = 0; i < 3; ++i)
        if (mask & (1 << i)) tilde[static_cast<size_t>(i)] = extra[static_cast<size_t>(i) + 1];
      Chain a = run_chain(fused, qkv, extra[0], tilde, causal), b = run_chain(composite, qkv, extra[0], tilde, causal);
      expect_chains_equal(a, b, 1e-10, "cotangent mask " + std::to_string(mask));
    }
}

TEST(Attention, PrimitiveBoBWithAbsentCotangentsMatchesZeros) {
  manual_seed(12);
  const Shape s = {1, 1, 6, 4};
  TensorList t = random_inputs(s, 5);
  AttentionForward f = attention_forward(t[0], t[1], t[2]);
  TensorList none = attention_backward_backward(t[0], t[1], t[2], f.O, f.L, t[3], Tensor(), Tensor(), Tensor());
  for (const Tensor& g : none)
    for (double v : g.to_vector<double>()) EXPECT_EQ(v, 0.0);
  Tensor z = zeros(s, DType::f64);
  TensorList only_q = attention_backward_backward(t[0], t[1], t[2], f.O, f.L, t[3], t[4], Tensor(), Tensor());
  TensorList zero_kv = attention_backward_backward(t[0], t[1], t[2], f.O, f.L, t[3], t[4], z, z);
  for (size_t i = 0; i < 4; ++i) EXPECT_LE(rel_error(only_q[i].to_vector<double>(), zero_kv[i].to_vector<double>()), 1e-14);
}

TEST(Attention, ZeroCotangentGivesZeroGradients) {
  manual_seed(13);
  const Shape s = {1, 2, 10, 4};
  TensorList qkv = random_inputs(s, 3), extra = random_inputs(s, 3);
  Tensor dO = zeros(s, DType::f64);
  Chain a = run_chain(fused, qkv, dO, extra, true), b = run_chain(composite, qkv, dO, extra, true);
  for (const Values& g : a.first)
    for (double v : g) EXPECT_EQ(v, 0.0);
  expect_chains_equal(a, b, 1e-10, "zero dO");
}

TEST(Attention, FirstCausalRowSeesOnlyItself) {
  manual_seed(14);
  const Shape s = {1, 1, 5, 3};
  TensorList qkv = random_inputs(s, 3);
  Values O = attention(qkv[0], qkv[1], qkv[2], {std::nullopt, true}).to_vector<double>();
  Values V = qkv[2].to_vector<double>();
  for (int c = 0; c < 3; ++c) EXPECT_DOUBLE_EQ(O[static_cast<size_t>(c)], V[static_cast<size_t>(c)]);
  // And its derivatives are exact too: the row's softmax is identically 1.
  TensorList extra = random_inputs(s, 4);
  Chain a = run_chain(fused, qkv, extra[0], {extra[1], extra[2], extra[3]}, true);
  Chain b = run_chain(composite, qkv, extra[0], {extra[1], extra[2], extra[3]}, true);
  expect_chains_equal(a, b, 1e-10, "causal");
}

TEST(Attention, LargeLogitsStayFinite) {
  manual_seed(15);
  const Shape s = {1, 2, 33, 8};
  // Scores s·q·k of about ±80: q, k ~ 9·N(0,1)/... scaled so that the largest |score| is ~80.
  TensorList qkv = random_inputs(s, 3);
  Tensor q = qkv[0] * 6.0, k = qkv[1] * 6.0;
  Tensor scores = matmul(q, transpose(k, -1, -2)) / std::sqrt(8.0);
  double smax = max(abs(scores)).item();
  EXPECT_GT(smax, 60.0);
  EXPECT_LT(smax, 200.0);
  TensorList extra = random_inputs(s, 4);
  for (bool causal : {false, true}) {
    Chain a = run_chain(fused, {q, k, qkv[2]}, extra[0], {extra[1], extra[2], extra[3]}, causal);
    Chain b = run_chain(composite, {q, k, qkv[2]}, extra[0], {extra[1], extra[2], extra[3]}, causal);
    for (const auto* vs : {&a.first, &a.second})
      for (const Values& g : *vs)
        for (double v : g) ASSERT_TRUE(std::isfinite(v));
    expect_chains_equal(a, b, 1e-9, "large logits");
  }
  // f32 as well: finite everywhere.
  Tensor O32 = attention(to(q, DType::f32), to(k, DType::f32), to(qkv[2], DType::f32));
  for (double v : O32.to_vector<double>()) ASSERT_TRUE(std::isfinite(v));
}

TEST(Attention, F32MatchesF64) {
  manual_seed(16);
  const Shape s = {2, 1, 70, 16};
  TensorList t = random_inputs(s, 3);
  Values o64 = attention(t[0], t[1], t[2], {std::nullopt, true}).to_vector<double>();
  Values o32 = attention(to(t[0], DType::f32), to(t[1], DType::f32), to(t[2], DType::f32), {std::nullopt, true}).to_vector<double>();
  EXPECT_LE(rel_error(o32, o64), 1e-5);
}

TEST(Attention, GradcheckAndGradgradcheck) {
  manual_seed(17);
  const Shape s = {1, 2, 5, 3};
  for (bool causal : {false, true}) {
    TensorList x;
    for (const Tensor& t : random_inputs(s, 3)) x.push_back(leaf(t));
    SingleFn f = [causal](const TensorList& a) { return attention(a[0], a[1], a[2], {0.7, causal}); };
    GradcheckResult r1 = gradcheck(f, x);
    EXPECT_TRUE(r1.ok) << r1.message;
    GradcheckResult r2 = gradgradcheck(f, x);
    EXPECT_TRUE(r2.ok) << r2.message;
  }
}

TEST(Attention, ThirdOrderThroughFallback) {
  manual_seed(18);
  const Shape s = {1, 1, 3, 2};
  for (bool causal : {false, true}) {
    TensorList x;
    for (const Tensor& t : random_inputs(s, 4)) x.push_back(leaf(t));  // q, k, v, u
    MultiFn first = [causal](const TensorList& a) {
      TensorList qkv = {a[0], a[1], a[2]};
      return grad({attention(a[0], a[1], a[2], {std::nullopt, causal})}, qkv, {a[3]}, std::nullopt, /*create_graph=*/true);
    };
    GradcheckResult r = gradgradcheck(first, x);  // second derivatives of the first: order 3
    EXPECT_TRUE(r.ok) << r.message;
  }
}

TEST(Attention, FourthOrderMatchesComposite) {
  // The fallback keeps the graph: d⁴/dx⁴ of a scalar function through attention agrees.
  manual_seed(19);
  const Shape s = {1, 1, 3, 2};
  TensorList base = random_inputs(s, 3);
  auto fourth = [&](AttnFn f) {
    Tensor q = leaf(base[0]);
    Tensor y = sum(pow(f(q, base[1], base[2], {std::nullopt, true}), 2.0));
    Tensor g = q;
    Tensor cur = y;
    for (int order = 0; order < 4; ++order) {
      Tensor gq = grad(cur, q, {}, std::nullopt, /*create_graph=*/true);
      cur = sum(gq * base[0]);  // contract with a fixed direction to keep a scalar
    }
    return cur.item();
  };
  double a = fourth(fused), b = fourth(composite);
  EXPECT_NEAR(a, b, 1e-9 * std::max(1.0, std::abs(b)));
}

TEST(Attention, BadInputsAreTypedErrors) {
  Tensor q = zeros({1, 2, 4, 8}, DType::f64);
  EXPECT_THROW(attention(q, zeros({1, 2, 5, 8}, DType::f64), q), ShapeError);
  EXPECT_THROW(attention(q, q, zeros({1, 2, 4, 8})), DTypeError);
  EXPECT_THROW(attention(zeros({2, 4, 8}, DType::f64), zeros({2, 4, 8}, DType::f64), zeros({2, 4, 8}, DType::f64)), ShapeError);
  EXPECT_THROW(attention(q, q, q, {std::nan(""), false}), ValueError);
  // the BoB's stages: E and F must be L-shaped, of L's dtype
  const AttentionForward f = attention_forward(q, q, q);
  const Tensor E = zeros(f.L.shape(), DType::f64);
  try {
    attention_bob_from_row_sums(q, q, q, f.O, f.L, q, q, q, q, zeros({1, 2, 5}, DType::f64), E);
    ADD_FAILURE() << "a wrongly shaped E was taken";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("attention_bob_from_row_sums: E has shape"), std::string::npos) << e.what();
  }
  EXPECT_THROW(attention_bob_from_row_sums(q, q, q, f.O, f.L, q, q, q, q, E, zeros(f.L.shape(), DType::f32)), DTypeError);
  EXPECT_THROW(attention_bob_row_sums(q, q, q, f.O, Tensor(), q, q, q, q), ValueError);
}

// ---------------------------------------------------------------------------------------------
// Grouped heads, Nq != Nk, windows: every option and their combinations against the composite.

class OptionsVsComposite : public ::testing::TestWithParam<size_t> {};

TEST_P(OptionsVsComposite, OrdersZeroToThree) {
  const OptCase& c = option_cases()[GetParam()];
  const OptInputs in = opt_inputs(c, 2, 100 + GetParam());
  const AttentionOptions o = options_of(c);
  Chain a = run_chain(fused, in.qkv, in.dO, in.tilde, o, in.w);
  Chain b = run_chain(composite, in.qkv, in.dO, in.tilde, o, in.w);
  ASSERT_EQ(a.third.size(), 4u);
  // Every order is exercised with values of ordinary size, not compared as zeros against zeros;
  // except that when every row sees one key, P is constant and the third order vanishes.
  const bool one_key_rows = c.left == 0 && (c.right == 0 || c.causal);
  for (const auto* family : {&b.first, &b.second}) EXPECT_GT(family_scale(*family), 1e-2) << describe(c);
  if (one_key_rows)
    EXPECT_LE(family_scale(a.third), 1e-12) << describe(c);
  else
    EXPECT_GT(family_scale(b.third), 1e-2) << describe(c);
  EXPECT_TRUE(all_finite(a)) << describe(c);
  EXPECT_TRUE(all_finite(b)) << describe(c);
  expect_chains_equal(a, b, 1e-10, describe(c));
}

// The same with L in the output (fused_lse: O + 0.5·L + 0.1·L²): the cotangent dL of the row
// log-sum-exp through the backward (D - dL), the BoB (grad_dL = E, F with 2·D + dL) and order 3.
TEST_P(OptionsVsComposite, LogSumExpOrdersZeroToThree) {
  const OptCase& c = option_cases()[GetParam()];
  const OptInputs in = opt_inputs(c, 2, 200 + GetParam());
  const AttentionOptions o = options_of(c);
  Chain a = run_chain(fused_lse, in.qkv, in.dO, in.tilde, o, in.w);
  Chain b = run_chain(composite_lse, in.qkv, in.dO, in.tilde, o, in.w);
  for (const auto* family : {&b.first, &b.second}) EXPECT_GT(family_scale(*family), 1e-2) << describe(c);
  EXPECT_TRUE(all_finite(a)) << describe(c);
  EXPECT_TRUE(all_finite(b)) << describe(c);
  expect_chains_equal(a, b, 1e-10, describe(c));
  // L's part is not negligible: without it the first-order gradients differ
  Chain plain = run_chain(fused, in.qkv, in.dO, in.tilde, o);
  double diff = 0;
  for (size_t i = 0; i < 3; ++i) diff = std::max(diff, rel_error(plain.first[i], a.first[i], family_scale(a.first)));
  EXPECT_GT(diff, 1e-3) << describe(c);
}

// The mask written out independently of the op's resolve_mask / first_key / last_key (which the
// composite shares with the kernels): plain loops over the definition in ops.h, forward only.
Values reference_forward(const OptCase& c, int64_t B, const TensorList& qkv) {
  const Values q = qkv[0].to_vector<double>(), k = qkv[1].to_vector<double>(), v = qkv[2].to_vector<double>();
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.d));
  const int64_t group = c.Hq / c.Hkv;
  Values out(q.size(), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < c.Hq; ++h)
      for (int64_t i = 0; i < c.Nq; ++i) {
        const int64_t aligned = i + c.Nk - c.Nq;
        std::vector<double> score;
        std::vector<int64_t> keys;
        for (int64_t j = 0; j < c.Nk; ++j) {
          if (c.causal && j > aligned) continue;
          if (c.left && j < aligned - *c.left) continue;
          if (c.right && j > aligned + *c.right) continue;
          double dot = 0;
          for (int64_t e = 0; e < c.d; ++e)
            dot += q[static_cast<size_t>(((b * c.Hq + h) * c.Nq + i) * c.d + e)] *
                   k[static_cast<size_t>(((b * c.Hkv + h / group) * c.Nk + j) * c.d + e)];
          score.push_back(scale * dot);
          keys.push_back(j);
        }
        if (keys.empty()) continue;  // O = 0
        const double m = *std::max_element(score.begin(), score.end());
        double total = 0;
        for (double& x : score) total += (x = std::exp(x - m));
        for (size_t t = 0; t < keys.size(); ++t)
          for (int64_t e = 0; e < c.d; ++e)
            out[static_cast<size_t>(((b * c.Hq + h) * c.Nq + i) * c.d + e)] +=
                score[t] / total * v[static_cast<size_t>(((b * c.Hkv + h / group) * c.Nk + keys[t]) * c.d + e)];
      }
  return out;
}

TEST_P(OptionsVsComposite, ForwardMatchesPlainLoops) {
  const OptCase& c = option_cases()[GetParam()];
  const OptInputs in = opt_inputs(c, 2, 100 + GetParam());
  const Values want = reference_forward(c, 2, in.qkv);
  for (AttnFn f : {fused, composite})
    EXPECT_LE(rel_error(f(in.qkv[0], in.qkv[1], in.qkv[2], options_of(c)).to_vector<double>(), want, 1.0), 1e-13)
        << describe(c);
}

INSTANTIATE_TEST_SUITE_P(Attention, OptionsVsComposite, ::testing::Range<size_t>(0, option_cases().size()),
                         [](const auto& info) { return std::string(option_cases()[info.param].name); });

// Sizes that cross the 64-row tiles, so that whole tiles are skipped or taken unmasked and the
// window edges cut through blocks: orders 0-2 (order 3 would hold Nq×Nk graphs three deep).
TEST(Attention, OptionsAcrossTiles) {
  const std::vector<OptCase> cases = {
      {"gqa_window", 4, 2, 70, 150, 8, false, 20, 5},
      {"causal_window_empty_rows", 2, 1, 150, 70, 8, true, 10, {}},
      {"right_window", 2, 2, 130, 130, 8, false, {}, 3},
      {"causal_nq_lt_nk", 3, 1, 65, 200, 8, true, {}, {}},
      {"wide_left", 2, 2, 200, 200, 8, false, 70, 0},
  };
  uint64_t seed = 200;
  for (const OptCase& c : cases) {
    const OptInputs in = opt_inputs(c, 1, seed++);
    Chain a = run_chain(fused, in.qkv, in.dO, in.tilde, options_of(c));
    Chain b = run_chain(composite, in.qkv, in.dO, in.tilde, options_of(c));
    expect_chains_equal(a, b, 1e-10, describe(c));
  }
}

// A window that cannot hide a key is no window, and window_right = 0 alone is causal: the
// results are bitwise those of the plain options (the op resolves them to the same kernel call).
TEST(Attention, EquivalentMasksGiveIdenticalResults) {
  const OptCase c{"base", 2, 1, 9, 12, 4, false, {}, {}};
  const OptInputs in = opt_inputs(c, 1, 300);
  auto chain = [&](const AttentionOptions& o) { return run_chain(fused, in.qkv, in.dO, in.tilde, o); };
  auto same = [](const Chain& a, const Chain& b, const std::string& what) {
    EXPECT_EQ(a.O, b.O) << what;
    EXPECT_EQ(a.first, b.first) << what;
    EXPECT_EQ(a.second, b.second) << what;
  };
  const Chain full = chain({}), causal = chain({std::nullopt, true});
  same(full, chain({std::nullopt, false, 11, 8}), "left = Nk - 1, right = Nq - 1");
  same(full, chain({std::nullopt, false, 1000, 1000}), "huge windows");
  same(causal, chain({std::nullopt, false, std::nullopt, 0}), "right = 0");
  same(causal, chain({std::nullopt, true, 11, 0}), "causal, left = Nk - 1, right = 0");
  // And a window that hides keys is not the full mask.
  EXPECT_NE(full.O, chain({std::nullopt, false, 10, std::nullopt}).O);
  EXPECT_NE(causal.O, chain({std::nullopt, false, std::nullopt, 1}).O);
}

// Bottom-right causal: query i sees keys j <= i + Nk - Nq, so with Nq < Nk the last query sees
// every key, and with Nq > Nk the first Nq - Nk queries see none: O = 0, L = -inf there, exact
// zero gradients, in the fused op and the composite.
// A masked key weighs exactly 0, not a tiny probability: with the causal mask, query 0 sees key 0
// alone, so O_0 = V_0 exactly even when the hidden value row V_1 is near the largest finite
// number (a masked probability of 2.9e-39, the clamped f32 exp of -inf, times 1e38 would show).
TEST(Attention, MaskedKeysWeighExactlyZero) {
  const int64_t N = 70, d = 8;  // two key blocks: the diagonal tiles are partly masked
  for (const DType dt : {DType::f32, DType::f64}) {
    const double big = dt == DType::f32 ? 1e38 : 1e307;
    std::vector<double> vv = randn({1, 1, N, d}, DType::f64).to_vector<double>();
    for (int64_t k = 0; k < d; ++k) vv[static_cast<size_t>(d + k)] = big;  // key 1, hidden from query 0
    const Tensor q = randn({1, 1, N, d}, dt), k = randn({1, 1, N, d}, dt);
    const Tensor v = from_vector(vv, {1, 1, N, d}, dt);
    const Values O = attention(q, k, v, {std::nullopt, true}).to_vector<double>();
    const Values v_rows = v.to_vector<double>();
    for (int64_t c = 0; c < d; ++c)
      EXPECT_EQ(O[static_cast<size_t>(c)], v_rows[static_cast<size_t>(c)]) << dtype_name(dt) << " column " << c;
  }
}

TEST(Attention, RowsWithoutKeysGiveZeros) {
  const OptCase c{"empty", 2, 1, 9, 4, 3, true, {}, {}};
  const OptInputs in = opt_inputs(c, 1, 301);
  for (AttnFn f : {fused, composite}) {
    Chain ch = run_chain(f, in.qkv, in.dO, in.tilde, options_of(c), in.w);
    ASSERT_TRUE(all_finite(ch));
    const int64_t empty_rows = c.Nq - c.Nk, d = c.d;
    for (int64_t h = 0; h < c.Hq; ++h)
      for (int64_t i = 0; i < c.Nq; ++i) {
        const size_t at = static_cast<size_t>((h * c.Nq + i) * d);
        bool zero = true;
        for (int64_t k = 0; k < d; ++k)
          for (const Values* v : {&ch.O, &ch.first[0], &ch.second[0], &ch.second[3], &ch.third[0], &ch.third[3]})
            zero = zero && (*v)[at + static_cast<size_t>(k)] == 0.0;
        EXPECT_EQ(zero, i < empty_rows) << "head " << h << " row " << i;
      }
  }
  const AttentionForward fw = attention_forward(in.qkv[0], in.qkv[1], in.qkv[2], options_of(c));
  const Values L = fw.L.to_vector<double>();
  for (int64_t h = 0; h < c.Hq; ++h)
    for (int64_t i = 0; i < c.Nq; ++i) {
      const double l = L[static_cast<size_t>(h * c.Nq + i)];
      if (i < c.Nq - c.Nk)
        EXPECT_EQ(l, -std::numeric_limits<double>::infinity());
      else
        EXPECT_TRUE(std::isfinite(l));
    }
  // With Nq < Nk, the last query sees every key: its row equals unmasked attention's last row.
  const OptCase w{"wide", 1, 1, 3, 8, 3, true, {}, {}};
  const OptInputs wi = opt_inputs(w, 1, 302);
  const Values causal = attention(wi.qkv[0], wi.qkv[1], wi.qkv[2], {std::nullopt, true}).to_vector<double>();
  const Values full = attention(wi.qkv[0], wi.qkv[1], wi.qkv[2]).to_vector<double>();
  for (size_t k = 6; k < 9; ++k) EXPECT_NEAR(causal[k], full[k], 1e-14);
  EXPECT_GT(std::abs(causal[0] - full[0]), 1e-6);
}

// ---------------------------------------------------------------------------------------------
// Non-finite inputs (ops.h, AttentionOptions): NaN and ±inf follow the softmax's IEEE arithmetic
// as in the composite. The plants: attention_chain.h, planted_inputs.

void expect_same_nonfinite(const std::vector<Values>& got, const std::vector<Values>& want, double tol,
                           const std::string& what, bool exact = true) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const double scale = finite_scale(want);
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(same_nonfinite(got[i], want[i], tol, scale, exact)) << what << ", output " << i;
}

TEST(Attention, NonFiniteInputsMatchComposite) {
  const std::vector<OptCase> cases = {
      {"full", 2, 1, 9, 9, 4, false, {}, {}},
      {"full_tiles", 2, 2, 70, 70, 8, false, {}, {}},
      {"causal_tiles", 2, 1, 70, 70, 8, true, {}, {}},
      {"causal_nq_lt_nk", 2, 2, 7, 13, 4, true, {}, {}},
      {"causal_empty_rows", 2, 1, 12, 5, 4, true, {}, {}},
  };
  uint64_t seed = 340;
  for (const OptCase& c : cases) {
    const OptInputs in = opt_inputs(c, 1, seed++);
    const AttentionOptions o = options_of(c);
    for (const Planted& pl : planted_cases()) {
      if (!planted_defined(c, pl)) continue;
      const std::string what = describe(c) + ", " + pl.name;
      const TensorList t = planted_inputs(c, in, pl);
      const Chain a = run_chain(fused, {t[0], t[1], t[2]}, t[3], in.tilde, o);
      const Chain b = run_chain(composite, {t[0], t[1], t[2]}, t[3], in.tilde, o);
      // The derivatives' sums are grouped differently (D = rowsum(dO∘O) for Σ P∘dP, (P∘G)·V - E·O
      // for (P∘(G - E))·V), so with ±inf an entry may be inf on one side and inf - inf = NaN on
      // the other: their non-finite entries are compared, NaN against NaN only for a NaN plant.
      const bool exact = std::isnan(pl.value);
      expect_same_nonfinite({a.O}, {b.O}, 1e-10, what + " order 0");
      expect_same_nonfinite(a.first, b.first, 1e-10, what + " order 1", exact);
      expect_same_nonfinite(a.second, b.second, 1e-10, what + " order 2", exact);
      const Values L = attention_forward(t[0], t[1], t[2], o).L.to_vector<double>();
      const Values Lc = attention_composite_forward(t[0], t[1], t[2], o).L.to_vector<double>();
      expect_same_nonfinite({L}, {Lc}, 1e-10, what + " L");
      bool reached = false;
      for (double x : a.O) reached = reached || !std::isfinite(x);
      EXPECT_TRUE(reached || pl.input == 3) << what << ": the planted value reached no entry of O";
    }
  }
}

// The online softmax's running max skips a NaN score. A row whose visible scores in its first
// key tile are all NaN (here the row that sees key 63 as the only key of tile 0) keeps the NaN
// even though its later tiles are finite; rows that do not see key 63 stay finite.
TEST(Attention, NanScoresInFirstTileReachTheRow) {
  const OptCase c{"window", 1, 1, 80, 80, 8, true, 10, {}};
  const OptInputs in = opt_inputs(c, 1, 350);
  Values k = in.qkv[1].to_vector<double>();
  k[63 * 8 + 2] = std::nan("");
  const Tensor K = from_vector(k, in.qkv[1].shape(), DType::f64);
  const AttentionForward f = attention_forward(in.qkv[0], K, in.qkv[2], options_of(c));
  const AttentionForward g = attention_composite_forward(in.qkv[0], K, in.qkv[2], options_of(c));
  const Values L = f.L.to_vector<double>();
  for (int64_t i = 0; i < c.Nq; ++i)
    EXPECT_EQ(std::isnan(L[static_cast<size_t>(i)]), i >= 63 && i <= 73) << "row " << i;
  expect_same_nonfinite({f.O.to_vector<double>(), L}, {g.O.to_vector<double>(), g.L.to_vector<double>()}, 1e-10,
                        "O, L");
}

// A row that sees no key gives O = 0 and L = -inf whatever the data, NaN in its own query
// included; the other rows take NaN as the composite does.
TEST(Attention, RowsWithoutKeysIgnoreNonFiniteData) {
  const OptCase c{"empty", 2, 1, 12, 5, 3, true, {}, {}};
  const OptInputs in = opt_inputs(c, 1, 351);
  Values q = in.qkv[0].to_vector<double>(), k = in.qkv[1].to_vector<double>(), v = in.qkv[2].to_vector<double>();
  q[1] = q[11 * 3] = std::nan("");  // rows 0 (no key) and 11 of head 0
  k[2 * 3 + 1] = std::nan("");      // key 2, seen by rows 9, 10, 11
  v[0] = std::numeric_limits<double>::infinity();  // key 0, seen by every row with a key
  const Tensor Q = from_vector(q, in.qkv[0].shape(), DType::f64), K = from_vector(k, in.qkv[1].shape(), DType::f64),
               V = from_vector(v, in.qkv[2].shape(), DType::f64);
  const AttentionForward f = attention_forward(Q, K, V, options_of(c));
  const AttentionForward g = attention_composite_forward(Q, K, V, options_of(c));
  const Values O = f.O.to_vector<double>(), L = f.L.to_vector<double>();
  for (int64_t h = 0; h < c.Hq; ++h)
    for (int64_t i = 0; i < c.Nq - c.Nk; ++i) {
      EXPECT_EQ(L[static_cast<size_t>(h * c.Nq + i)], -std::numeric_limits<double>::infinity()) << h << " " << i;
      for (int64_t e = 0; e < c.d; ++e)
        EXPECT_EQ(O[static_cast<size_t>((h * c.Nq + i) * c.d + e)], 0.0) << h << " " << i;
    }
  EXPECT_TRUE(std::isnan(L[11]));
  expect_same_nonfinite({O, L}, {g.O.to_vector<double>(), g.L.to_vector<double>()}, 1e-10, "O, L");
}

// The BoB's two stages over blocks of keys (dist::attention's ring): with the whole rows' O and L,
// the blocks' row sums add up to E and F, and with those the blocks' parts of gQ and gdO add up
// to the whole BoB's, their gK and gV are the whole BoB's rows of their keys. Grouped heads,
// Nq != Nk, blocks of unequal length, every set of cotangents.
TEST(Attention, BobStagesOverKeyBlocksAddUp) {
  manual_seed(31);
  const int64_t nq = 11, nk = 19, d = 6;
  const Tensor q = randn({2, 4, nq, d}, DType::f64), dO = randn({2, 4, nq, d}, DType::f64);
  const Tensor k = randn({2, 2, nk, d}, DType::f64), v = randn({2, 2, nk, d}, DType::f64);
  const Tensor qt0 = randn(q.shape(), DType::f64), kt0 = randn(k.shape(), DType::f64), vt0 = randn(k.shape(), DType::f64);
  const AttentionForward f = attention_forward(q, k, v);
  const std::vector<std::pair<int64_t, int64_t>> blocks = {{0, 7}, {7, 8}, {8, 19}};
  for (int mask = 1; mask < 8; ++mask) {
    const Tensor qt = mask & 1 ? qt0 : Tensor(), kt = mask & 2 ? kt0 : Tensor(), vt = mask & 4 ? vt0 : Tensor();
    const TensorList whole = attention_backward_backward(q, k, v, f.O, f.L, dO, qt, kt, vt);
    auto keys = [&](const Tensor& x, std::pair<int64_t, int64_t> b) {
      return x.defined() ? slice(x, 2, b.first, b.second) : Tensor();
    };
    Tensor E = zeros(f.L.shape(), DType::f64), F = zeros(f.L.shape(), DType::f64);
    for (const auto& b : blocks) {
      const TensorList ef = attention_bob_row_sums(q, keys(k, b), keys(v, b), f.O, f.L, dO, qt, keys(kt, b), keys(vt, b));
      E = E + ef[0];
      F = F + ef[1];
    }
    const std::string what = "cotangent mask " + std::to_string(mask);
    expect_close(E.to_vector<double>(), whole[4].to_vector<double>(), 1e-12, 1e-12, what + ": E = grad_dL");
    Tensor gQ = zeros(q.shape(), DType::f64), gdO = zeros(q.shape(), DType::f64);
    TensorList gK, gV;
    for (const auto& b : blocks) {
      const TensorList g = attention_bob_from_row_sums(q, keys(k, b), keys(v, b), f.O, f.L, dO, qt, keys(kt, b),
                                                       keys(vt, b), E, F);
      gQ = gQ + g[0];
      gK.push_back(g[1]);
      gV.push_back(g[2]);
      gdO = gdO + g[3];
    }
    expect_close(gQ.to_vector<double>(), whole[0].to_vector<double>(), 1e-12, 1e-12, what + ": gQ");
    expect_close(cat(gK, 2).to_vector<double>(), whole[1].to_vector<double>(), 1e-12, 1e-12, what + ": gK");
    expect_close(cat(gV, 2).to_vector<double>(), whole[2].to_vector<double>(), 1e-12, 1e-12, what + ": gV");
    expect_close(gdO.to_vector<double>(), whole[3].to_vector<double>(), 1e-12, 1e-12, what + ": gdO");
  }
}

// Grouped heads equal the same attention with k and v repeated per query head; dK and dV are
// the sums over the group.
TEST(Attention, GroupedHeadsEqualRepeatedHeads) {
  const OptCase c{"gqa", 6, 2, 8, 11, 4, false, 3, 1};
  const OptInputs in = opt_inputs(c, 2, 303);
  auto repeat = [&](const Tensor& t) {
    TensorList heads;
    for (int64_t h = 0; h < c.Hq; ++h) heads.push_back(slice(t, 1, h / 3, h / 3 + 1));
    return cat(heads, 1);
  };
  const TensorList wide = {in.qkv[0], repeat(in.qkv[1]), repeat(in.qkv[2])};
  const Chain g = run_chain(fused, in.qkv, in.dO, {Tensor(), Tensor(), Tensor()}, options_of(c));
  const Chain r = run_chain(fused, wide, in.dO, {Tensor(), Tensor(), Tensor()}, options_of(c));
  EXPECT_LE(rel_error(g.O, r.O), 1e-14);
  EXPECT_LE(rel_error(g.first[0], r.first[0]), 1e-14);
  for (size_t t = 1; t < 3; ++t) {  // sum the repeated heads' gradients over each group
    const Values& wv = r.first[t];
    Values summed(g.first[t].size(), 0.0);
    const size_t per_head = static_cast<size_t>(c.Nk * c.d);
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t h = 0; h < c.Hq; ++h)
        for (size_t e = 0; e < per_head; ++e)
          summed[static_cast<size_t>(b * c.Hkv + h / 3) * per_head + e] +=
              wv[static_cast<size_t>(b * c.Hq + h) * per_head + e];
    EXPECT_LE(rel_error(g.first[t], summed), 1e-13) << "output " << t;
  }
}

TEST(Attention, OptionsGradcheckAndGradgradcheck) {
  const std::vector<OptCase> cases = {
      {"gqa_nq_lt_nk_window", 2, 1, 3, 5, 2, false, 1, 1},
      {"mqa_causal_nq_gt_nk", 3, 1, 5, 3, 2, true, {}, {}},
      {"left_causal", 2, 2, 4, 4, 3, true, 1, {}},
  };
  uint64_t seed = 310;
  for (const OptCase& c : cases) {
    const OptInputs in = opt_inputs(c, 1, seed++);
    TensorList x;
    for (const Tensor& t : in.qkv) x.push_back(leaf(t));
    const AttentionOptions o = options_of(c, 0.7);
    SingleFn f = [o](const TensorList& a) { return attention(a[0], a[1], a[2], o); };
    GradcheckResult r1 = gradcheck(f, x);
    EXPECT_TRUE(r1.ok) << describe(c) << ": " << r1.message;
    GradcheckResult r2 = gradgradcheck(f, x);
    EXPECT_TRUE(r2.ok) << describe(c) << ": " << r2.message;
  }
}

// Order 3 by finite differences of the second derivatives (the fallback through the composite),
// with grouped heads, Nq != Nk, a window and rows that see no key.
TEST(Attention, OptionsThirdOrderThroughFallback) {
  const std::vector<OptCase> cases = {
      {"mqa_causal_empty_rows", 2, 1, 4, 2, 2, true, {}, {}},
      {"gqa_window_nq_lt_nk", 2, 1, 2, 4, 2, false, 1, 0},
  };
  uint64_t seed = 330;
  for (const OptCase& c : cases) {
    const OptInputs in = opt_inputs(c, 1, seed++);
    TensorList x;
    for (const Tensor& t : in.qkv) x.push_back(leaf(t));
    x.push_back(leaf(in.dO));
    const AttentionOptions o = options_of(c);
    MultiFn first = [o](const TensorList& a) {
      return grad({attention(a[0], a[1], a[2], o)}, {a[0], a[1], a[2]}, {a[3]}, std::nullopt, /*create_graph=*/true);
    };
    GradcheckResult r = gradgradcheck(first, x);
    EXPECT_TRUE(r.ok) << describe(c) << ": " << r.message;
  }
}

TEST(Attention, OptionsF32MatchesF64) {
  const std::vector<OptCase> cases = {
      {"gqa_window", 4, 2, 70, 90, 16, false, 15, 4},
      {"mqa_causal_empty_rows", 3, 1, 90, 70, 16, true, {}, {}},
  };
  uint64_t seed = 320;
  for (const OptCase& c : cases) {
    const OptInputs in64 = opt_inputs(c, 1, seed);
    const OptInputs in32 = opt_inputs(c, 1, seed++, DType::f32);
    const Chain a = run_chain(fused, in32.qkv, in32.dO, in32.tilde, options_of(c));
    const Chain b = run_chain(fused, in64.qkv, in64.dO, in64.tilde, options_of(c));
    EXPECT_TRUE(all_finite(a)) << describe(c);
    // f32 inputs are f64's rounded, so the difference is rounding: about 1e-7 relative to each
    // family's scale, times a small growth factor through the three levels.
    expect_chains_equal(a, b, 2e-5, describe(c) + " f32");
  }
}

template <typename E, typename F>
void expect_error_naming(F&& f, const std::vector<std::string>& pieces) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one naming " << pieces.front();
  } catch (const E& e) {
    const std::string m = e.what();
    for (const std::string& p : pieces) EXPECT_NE(m.find(p), std::string::npos) << m << " lacks " << p;
  }
}

TEST(Attention, OptionErrorsAreTyped) {
  const Tensor q = zeros({2, 6, 5, 4}, DType::f64), k = zeros({2, 4, 7, 4}, DType::f64);
  expect_error_naming<ShapeError>([&] { attention(q, k, k); }, {"gg::attention", "Hq = 6", "Hkv = 4"});
  const Tensor k2 = zeros({2, 2, 7, 4}, DType::f64);
  expect_error_naming<ShapeError>([&] { attention(q, zeros({1, 2, 7, 4}, DType::f64), zeros({1, 2, 7, 4}, DType::f64)); },
                                  {"gg::attention", "batch", "B = 2", "B = 1"});
  expect_error_naming<ShapeError>([&] { attention(q, zeros({2, 2, 7, 3}, DType::f64), zeros({2, 2, 7, 3}, DType::f64)); },
                                  {"gg::attention", "head dim", "d = 4", "d = 3"});
  expect_error_naming<ShapeError>([&] { attention(q, k2, zeros({2, 2, 6, 4}, DType::f64)); },
                                  {"gg::attention", "v", "[2, 2, 7, 4]", "[2, 2, 6, 4]"});
  expect_error_naming<ShapeError>([&] { attention(q, zeros({2, 7, 4}, DType::f64), zeros({2, 7, 4}, DType::f64)); },
                                  {"gg::attention", "k must be (B, Hkv, Nk, d)"});
  expect_error_naming<ValueError>([&] { attention(q, k2, k2, {std::nullopt, false, -1, std::nullopt}); },
                                  {"gg::attention", "window_left", "-1"});
  expect_error_naming<ValueError>([&] { attention(q, k2, k2, {std::nullopt, false, std::nullopt, -3}); },
                                  {"gg::attention", "window_right", "-3"});
  expect_error_naming<ValueError>([&] { attention(q, k2, k2, {std::nullopt, true, std::nullopt, 2}); },
                                  {"gg::attention", "causal", "window_right = 2"});
  // The composite checks the same options.
  expect_error_naming<ValueError>([&] { attention_composite(q, k2, k2, {std::nullopt, false, -2, std::nullopt}); },
                                  {"gg::attention_composite", "window_left", "-2"});
  expect_error_naming<ValueError>([&] { attention_composite(q, k2, k2, {std::nullopt, true, std::nullopt, 1}); },
                                  {"gg::attention_composite", "causal", "window_right = 1"});
  expect_error_naming<ShapeError>([&] { attention_composite(q, k, k); }, {"gg::attention_composite", "Hq = 6", "Hkv = 4"});
  // The primitives check their extra tensors against q's or k's shape.
  const Tensor v2 = zeros({2, 2, 7, 4}, DType::f64);
  const AttentionForward f = attention_forward(q, k2, v2);
  expect_error_naming<ShapeError>([&] { attention_backward(q, k2, v2, f.O, f.L, zeros({2, 6, 7, 4}, DType::f64)); },
                                  {"gg::attention_backward", "dO", "[2, 6, 7, 4]", "[2, 6, 5, 4]"});
  expect_error_naming<ShapeError>(
      [&] { attention_backward_backward(q, k2, v2, f.O, f.L, q, Tensor(), q, Tensor()); },
      {"gg::attention_backward_backward", "kt", "[2, 6, 5, 4]", "[2, 2, 7, 4]"});
  // ... and their dtype, naming the argument.
  const Tensor dO32 = zeros(q.shape(), DType::f32), vt32 = zeros(v2.shape(), DType::f32);
  expect_error_naming<DTypeError>([&] { attention_backward(q, k2, v2, f.O, f.L, dO32); },
                                  {"gg::attention_backward: dO has dtype f32, expected f64"});
  expect_error_naming<DTypeError>(
      [&] { attention_backward_backward(q, k2, v2, f.O, f.L, q, Tensor(), Tensor(), vt32); },
      {"gg::attention_backward_backward: vt has dtype f32, expected f64"});
}

// The write-into forms give the allocating forms' results bit for bit (one code path), write
// only the given tensors (no allocation for contiguous inputs), and name a bad output.
TEST(Attention, OutVariantsMatchAndCheckOutputs) {
  manual_seed(31);
  const Shape sq = {2, 4, 5, 8}, sk = {2, 2, 7, 8};
  const Tensor q = randn(sq, DType::f64), k = randn(sk, DType::f64), v = randn(sk, DType::f64);
  const Tensor dO = randn(sq, DType::f64), dL = randn({2, 4, 5}, DType::f64), qt = randn(sq, DType::f64);
  const Tensor kt = randn(sk, DType::f64), vt = randn(sk, DType::f64);
  const AttentionOptions o{0.3, false, 2, 1};
  const AttentionForward f = attention_forward(q, k, v, o);
  const TensorList g = attention_backward(q, k, v, f.O, f.L, dO, o, dL);
  const TensorList gg2 = attention_backward_backward(q, k, v, f.O, f.L, dO, qt, kt, vt, o, dL);
  const Tensor O = empty(sq, DType::f64), L = empty({2, 4, 5}, DType::f64);
  TensorList d = {empty(sq, DType::f64), empty(sk, DType::f64), empty(sk, DType::f64)};
  TensorList b = {empty(sq, DType::f64), empty(sk, DType::f64), empty(sk, DType::f64), empty(sq, DType::f64),
                  empty({2, 4, 5}, DType::f64)};
  const int64_t allocations = cpu::memory_stats().allocations;
  attention_forward_out(q, k, v, O, L, o);
  attention_backward_out(q, k, v, f.O, f.L, dO, d[0], d[1], d[2], o, dL);
  attention_backward_backward_out(q, k, v, f.O, f.L, dO, qt, kt, vt, b[0], b[1], b[2], b[3], b[4], o, dL);
  EXPECT_EQ(cpu::memory_stats().allocations, allocations);
  EXPECT_EQ(O.to_vector<double>(), f.O.to_vector<double>());
  EXPECT_EQ(L.to_vector<double>(), f.L.to_vector<double>());
  EXPECT_EQ(O.version(), 1u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(d[i].to_vector<double>(), g[i].to_vector<double>()) << i;
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(b[i].to_vector<double>(), gg2[i].to_vector<double>()) << i;
  // gdL undefined: not computed, the rest unchanged.
  TensorList b2 = {empty(sq, DType::f64), empty(sk, DType::f64), empty(sk, DType::f64), empty(sq, DType::f64)};
  attention_backward_backward_out(q, k, v, f.O, f.L, dO, qt, kt, vt, b2[0], b2[1], b2[2], b2[3], Tensor(), o, dL);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(b2[i].to_vector<double>(), gg2[i].to_vector<double>()) << i;

  expect_error_naming<ShapeError>([&] { attention_forward_out(q, k, v, empty(sk, DType::f64), L, o); },
                                  {"gg::attention_forward_out", "O", "[2, 4, 5, 8]", "[2, 2, 7, 8]"});
  expect_error_naming<DTypeError>([&] { attention_forward_out(q, k, v, O, empty({2, 4, 5}), o); },
                                  {"gg::attention_forward_out", "L", "f64", "f32"});
  expect_error_naming<ValueError>(
      [&] { attention_forward_out(q, k, v, transpose(empty({2, 4, 8, 5}, DType::f64), 2, 3), L, o); },
      {"gg::attention_forward_out", "O", "contiguous"});
  expect_error_naming<ShapeError>([&] { attention_backward_out(q, k, v, f.O, f.L, dO, d[0], d[0], d[2], o); },
                                  {"gg::attention_backward_out", "dK", "[2, 2, 7, 8]", "[2, 4, 5, 8]"});
  expect_error_naming<ValueError>([&] { attention_backward_out(q, k, v, f.O, f.L, dO, Tensor(), d[1], d[2], o); },
                                  {"gg::attention_backward_out", "dQ"});
  expect_error_naming<ShapeError>(
      [&] { attention_backward_backward_out(q, k, v, f.O, f.L, dO, qt, kt, vt, b[0], b[1], b[2], b[3], b[0], o); },
      {"gg::attention_backward_backward_out", "gdL", "[2, 4, 5]"});
  // Inputs are checked before outputs: a bad q is named as such.
  expect_error_naming<ShapeError>([&] { attention_forward_out(zeros({4, 5, 8}, DType::f64), k, v, O, L, o); },
                                  {"gg::attention_forward_out", "q must be (B, Hq, Nq, d)"});
}

// MAML through the fused op: a one-layer attention regressor, one inner SGD step on a support
// loss, outer loss on a query set, gradient w.r.t. the initial weights (second order).
TEST(Attention, MamlOuterGradientMatchesComposite) {
  manual_seed(20);
  const int64_t N = 12, D = 8;
  Tensor X = randn({1, 1, N, D}, DType::f64), Y = randn({1, 1, N, D}, DType::f64);
  Tensor Xq = randn({1, 1, N, D}, DType::f64), Yq = randn({1, 1, N, D}, DType::f64);
  TensorList init = {randn({D, D}, DType::f64) * 0.4, randn({D, D}, DType::f64) * 0.4, randn({D, D}, DType::f64) * 0.4};
  auto outer_grad = [&](AttnFn f) {
    TensorList w;
    for (const Tensor& t : init) w.push_back(leaf(t));
    auto model = [&](const TensorList& p, const Tensor& x) {
      return f(matmul(x, p[0]), matmul(x, p[1]), matmul(x, p[2]), {std::nullopt, true});
    };
    Tensor inner_loss = mse_loss(model(w, X), Y);
    TensorList g = grad({inner_loss}, w, {}, std::nullopt, /*create_graph=*/true);
    TensorList adapted;
    for (size_t i = 0; i < w.size(); ++i) adapted.push_back(w[i] - g[i] * 0.1);
    Tensor outer_loss = mse_loss(model(adapted, Xq), Yq);
    std::vector<Values> out;
    for (const Tensor& t : grad({outer_loss}, w)) out.push_back(t.to_vector<double>());
    return out;
  };
  auto a = outer_grad(fused), b = outer_grad(composite);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_LE(rel_error(a[i], b[i]), 1e-10) << "weight " << i;
}

}  // namespace
}  // namespace gg::test
