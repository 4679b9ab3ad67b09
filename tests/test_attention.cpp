// The fused attention op against the composite ground truth, at orders 0, 1, 2 and (through
// the fallback) 3, plus the edge cases: partial cotangents, zero dO, rows that see only
// themselves, huge logits, and a MAML step whose outer gradient runs through BoB.
#include <cmath>
#include <tuple>

#include "test_util.h"

namespace gg::test {
namespace {

using AttnFn = Tensor (*)(const Tensor&, const Tensor&, const Tensor&, const AttentionOptions&);

struct Chain {
  Values O;
  std::vector<Values> first;   // dQ, dK, dV
  std::vector<Values> second;  // gQ, gK, gV, gdO
};

// O, then (dQ, dK, dV) for cotangent dO with create_graph, then the gradient of
// <Qt,dQ> + <Kt,dK> + <Vt,dV> with respect to (Q, K, V, dO). Absent cotangents are skipped.
Chain run_chain(AttnFn f, const TensorList& qkv, const Tensor& dO_in, const TensorList& tilde, bool causal) {
  TensorList x;
  for (const Tensor& t : qkv) x.push_back(leaf(t));
  Tensor dO = leaf(dO_in);
  Tensor O = f(x[0], x[1], x[2], {std::nullopt, causal});
  TensorList d = grad({O}, x, {dO}, {/*create_graph=*/true});
  Chain c;
  c.O = O.to_vector<double>();
  for (const Tensor& t : d) c.first.push_back(t.to_vector<double>());
  Tensor inner;
  for (size_t i = 0; i < 3; ++i)
    if (tilde[i].defined()) inner = inner.defined() ? inner + sum(tilde[i] * d[i]) : sum(tilde[i] * d[i]);
  if (!inner.defined()) return c;
  TensorList g = grad({inner}, {x[0], x[1], x[2], dO}, {}, {false, -1, /*allow_unused=*/true});
  for (const Tensor& t : g) c.second.push_back(t.defined() ? t.to_vector<double>() : Values(c.O.size(), 0.0));
  return c;
}

Tensor fused(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) { return attention(q, k, v, o); }
Tensor composite(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  return attention_composite(q, k, v, o);
}

// Largest magnitude over a family of outputs (e.g. dQ, dK, dV). Errors are judged relative to
// it, because some outputs are exactly zero in exact arithmetic (dQ and dK when N = 1) and
// both implementations then return rounding noise of order 1e-17 · the family's scale.
double family_scale(const std::vector<Values>& vs) {
  double m = 1e-300;  // an all-zero family compares as equal when the other is zero too
  for (const Values& v : vs)
    for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

void expect_chains_equal(const Chain& a, const Chain& b, double tol, const std::string& what) {
  EXPECT_LE(rel_error(a.O, b.O, family_scale({b.O}) * 1e-3), tol) << what << " order 0";
  const double s1 = family_scale(b.first), s2 = family_scale(b.second);
  for (size_t i = 0; i < a.first.size(); ++i)
    EXPECT_LE(rel_error(a.first[i], b.first[i], s1), tol) << what << " order 1, output " << i;
  ASSERT_EQ(a.second.size(), b.second.size()) << what;
  for (size_t i = 0; i < a.second.size(); ++i)
    EXPECT_LE(rel_error(a.second[i], b.second[i], s2), tol) << what << " order 2, output " << i;
}

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
      return grad({attention(a[0], a[1], a[2], {std::nullopt, causal})}, qkv, {a[3]}, {true});
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
      Tensor gq = grad(cur, q, {}, {true});
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
    TensorList g = grad({inner_loss}, w, {}, {/*create_graph=*/true});
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
