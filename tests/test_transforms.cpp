// gg::func's transforms: closed forms and finite differences at orders 1-3, results that are
// differentiable again (hessian of a hessian, an HVP inside a training loss), list and named
// forms against the single-tensor ones, and the errors of bad arguments.
#include <cmath>
#include <string>

#include "test_util.h"

namespace gg::test {
namespace {

Tensor vec(const Values& values) { return from_vector(values, {static_cast<int64_t>(values.size())}, DType::f64); }
Values values(const Tensor& t) { return contiguous(t).to_vector<double>(); }

// Central differences of fn along every element of xs[j]: column k is (fn(x + h·e_k) −
// fn(x − h·e_k)) / 2h, flattened; the result is (numel(out), numel(xs[j])) in row-major order,
// i.e. ∂out/∂xs[j] laid out as out.shape + xs[j].shape.
Values finite_difference(const std::function<Tensor(const TensorList&)>& fn, const TensorList& xs, size_t j,
                         double h = 1e-5) {
  const int64_t n = xs[j].numel();
  std::vector<Values> cols;
  for (int64_t k = 0; k < n; ++k) {
    Values e(static_cast<size_t>(n), 0.0);
    e[static_cast<size_t>(k)] = h;
    Tensor step = reshape(vec(e), xs[j].shape());
    TensorList plus = xs, minus = xs;
    plus[j] = xs[j].detach() + step;
    minus[j] = xs[j].detach() - step;
    Values fp = values(fn(plus)), fm = values(fn(minus));
    Values col(fp.size());
    for (size_t i = 0; i < fp.size(); ++i) col[i] = (fp[i] - fm[i]) / (2 * h);
    cols.push_back(col);
  }
  Values out;
  const size_t rows = cols.empty() ? 0 : cols[0].size();
  for (size_t i = 0; i < rows; ++i)
    for (int64_t k = 0; k < n; ++k) out.push_back(cols[static_cast<size_t>(k)][i]);
  return out;
}

Shape concat_shape(Shape a, const Shape& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// f(a, b) = Σ tanh((W a) ∘ b): smooth, with every mixed derivative nonzero. a (3), b (2).
struct TwoTensors {
  Tensor W = from_vector({0.3, -0.7, 0.5, 1.1, 0.2, -0.4}, {2, 3}, DType::f64);
  Tensor a = vec({0.4, -0.3, 0.8}), b = vec({0.9, -0.6});
  Tensor f(const TensorList& x) const { return sum(tanh(matmul(W, x[0]) * x[1])); }
  // The same function of one packed vector z = (a, b).
  Tensor packed(const Tensor& z) const { return f({slice(z, 0, 0, 3), slice(z, 0, 3, 5)}); }
  Tensor z() const { return cat({a, b}, 0); }
};

// ---------------------------------------------------------------- orders 1-3 against finite differences

TEST(Transforms, GradHessianAndThirdOrderMatchFiniteDifferences) {
  TwoTensors t;
  auto f = [&](const TensorList& x) { return t.f(x); };
  const TensorList xs = {t.a, t.b};

  // Order 1: ∇f against differences of f.
  TensorList g = func::grad(f, xs);
  for (size_t j = 0; j < 2; ++j)
    expect_close(values(g[j]), finite_difference(f, xs, j), 0, 1e-9, "grad " + std::to_string(j));

  // Order 2: each Hessian block against differences of the gradient.
  std::vector<TensorList> h = func::hessian(f, xs);
  for (size_t i = 0; i < 2; ++i)
    for (size_t j = 0; j < 2; ++j) {
      EXPECT_EQ(h[i][j].shape(), (Shape{xs[i].numel(), xs[j].numel()}));
      auto gi = [&](const TensorList& x) { return func::grad(f, x)[i]; };
      expect_close(values(h[i][j]), finite_difference(gi, xs, j), 0, 1e-8, "hessian block");
    }

  // Order 3: jacrev of the Hessian against differences of the Hessian.
  auto hess_aa = [&](const TensorList& x) { return TensorList{func::hessian(f, x)[0][0]}; };
  std::vector<TensorList> t3 = func::jacrev(hess_aa, xs);
  EXPECT_EQ(t3[0][1].shape(), (Shape{3, 3, 2}));
  for (size_t j = 0; j < 2; ++j) {
    auto hj = [&](const TensorList& x) { return hess_aa(x)[0]; };
    expect_close(values(t3[0][j]), finite_difference(hj, xs, j), 0, 1e-7, "third order");
  }
}

// ---------------------------------------------------------------- hessian of a hessian

// f(x) = Σ xᵢ⁵ + (c·x)⁴: H = diag(20x³) + 12(c·x)² ccᵀ, and the fourth derivative is
// T_ijkl = 120 xᵢ [i=j=k=l] + 24 cᵢcⱼc_kc_l.
struct Quintic {
  Tensor c = vec({0.5, -1.0, 2.0});
  Tensor x = vec({0.7, -0.4, 1.3});
  Tensor f(const Tensor& x) const { return sum(pow(x, 5.0)) + pow(sum(c * x), 4.0); }
  double t4(int i, int j, int k, int l) const {
    const Values cv = values(c), xv = values(x);
    return (i == j && j == k && k == l ? 120 * xv[i] : 0.0) + 24 * cv[i] * cv[j] * cv[k] * cv[l];
  }
};

TEST(Transforms, HessianOfAHessianIsTheFourthDerivative) {
  Quintic q;
  auto f = [&](const Tensor& x) { return q.f(x); };
  // jacrev(jacrev(hessian)): a (3, 3, 3, 3) tensor.
  Tensor T = func::jacrev([&](const Tensor& x) {
    return func::jacrev([&](const Tensor& y) { return func::hessian(f, y); }, x);
  }, q.x);
  ASSERT_EQ(T.shape(), (Shape{3, 3, 3, 3}));
  const Values tv = values(T);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 3; ++k)
        for (int l = 0; l < 3; ++l) EXPECT_NEAR(tv[((i * 3 + j) * 3 + k) * 3 + l], q.t4(i, j, k, l), 1e-10);

  // The Hessian of the scalar Σ Wᵢⱼ Hᵢⱼ(x) is Σᵢⱼ Wᵢⱼ T_ijkl.
  Tensor W = from_vector({1.0, 0.5, -2.0, 0.0, 3.0, 1.5, -1.0, 0.25, 2.0}, {3, 3}, DType::f64);
  Tensor HH = func::hessian([&](const Tensor& x) { return sum(W * func::hessian(f, x)); }, q.x);
  const Values wv = values(W), hh = values(HH);
  for (int k = 0; k < 3; ++k)
    for (int l = 0; l < 3; ++l) {
      double want = 0;
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j) want += wv[i * 3 + j] * q.t4(i, j, k, l);
      EXPECT_NEAR(hh[k * 3 + l], want, 1e-10) << k << ", " << l;
    }
}

TEST(Transforms, SumOfTheHessianCanBeDifferentiated) {
  // f = Σ xᵢ⁴: H = diag(12x²), so ∂ΣH/∂x = 24x. The old gg::hessian detached x and raised here.
  Tensor x = leaf(vec({0.5, -1.5, 2.0}));
  Tensor H = hessian([](const Tensor& y) { return sum(pow(y, 4.0)); }, x);
  ASSERT_TRUE(H.requires_grad());
  expect_close(values(grad(sum(H), x)), {12.0, -36.0, 48.0}, 0, 1e-12, "d sum(H) / dx");
  // The same through hvp and jvp: ∂/∂x Σ H·v = 24 x ∘ v; J·v of x³ is 3x²v, ∂/∂x Σ = 6xv.
  Tensor v = vec({1.0, 2.0, -1.0});
  Tensor hv = hvp([](const Tensor& y) { return sum(pow(y, 4.0)); }, x, v);
  expect_close(values(grad(sum(hv), x)), {12.0, -72.0, -48.0}, 0, 1e-12, "d sum(Hv) / dx");
  Tensor jv = jvp([](const Tensor& y) { return pow(y, 3.0); }, x, v);
  expect_close(values(grad(sum(jv), x)), {3.0, -18.0, -12.0}, 0, 1e-12, "d sum(Jv) / dx");
}

TEST(Transforms, TangentsThatRequireGradAreDifferentiated) {
  // H·v is linear in v: ∂/∂v Σ (H v) = H 1, for f = Σ x⁴ that is 12x².
  Tensor x = vec({0.5, -1.5, 2.0});
  Tensor v = leaf(vec({1.0, 2.0, -1.0}));
  Tensor hv = func::hvp([](const Tensor& y) { return sum(pow(y, 4.0)); }, x, v);
  expect_close(values(grad(sum(hv), v)), {3.0, 27.0, 48.0}, 0, 1e-12, "d sum(Hv) / dv");
}

// ---------------------------------------------------------------- an HVP inside a training loss

TEST(Transforms, HvpInsideATrainingLossMatchesFiniteDifferences) {
  manual_seed(5);
  nn::MLP net({2, 4, 1}, nn::Activation::tanh, true, {DType::f64});
  const nn::NamedTensors names = net.named_parameters();
  Tensor xs = randn({6, 2}, DType::f64), ys = randn({6, 1}, DType::f64);
  nn::NamedTensors dirs;
  for (const auto& [name, p] : names) dirs.emplace_back(name, randn_like(p));

  // loss(θ) = L(θ) + ‖H(θ)·d‖²: a curvature penalty, a third-order quantity in θ.
  auto data_loss = [&](const nn::NamedTensors& p) { return mse_loss(nn::functional_call(net, p, xs), ys); };
  SingleFn loss = [&](const TensorList& theta) {
    const nn::NamedTensors p = nn::with_values(names, theta);
    Tensor penalty = scalar_tensor(0.0, DType::f64);
    for (const auto& [name, hd] : func::hvp(data_loss, p, dirs)) penalty = penalty + sum(hd * hd);
    return data_loss(p) + penalty;
  };
  GradcheckResult r = gradcheck(loss, net.parameters());
  EXPECT_TRUE(r.ok) << r.message;
}

// ---------------------------------------------------------------- list and named forms

TEST(Transforms, ListFormsEqualThePackedSingleTensorForms) {
  TwoTensors t;
  auto f = [&](const TensorList& x) { return t.f(x); };
  auto fz = [&](const Tensor& z) { return t.packed(z); };
  const Tensor z = t.z();
  const Tensor vz = vec({0.3, -1.2, 0.7, 2.0, -0.5});
  const TensorList vs = {slice(vz, 0, 0, 3), slice(vz, 0, 3, 5)};

  expect_close(values(cat(func::grad(f, {t.a, t.b}), 0)), values(func::grad(fz, z)), 0, 1e-14, "grad");
  expect_close(values(cat(func::hvp(f, {t.a, t.b}, vs), 0)), values(hvp(fz, z, vz)), 0, 1e-14, "hvp");

  // Hessian blocks laid side by side are the packed Hessian.
  std::vector<TensorList> h = func::hessian(f, {t.a, t.b});
  Tensor assembled = cat({cat({h[0][0], h[0][1]}, 1), cat({h[1][0], h[1][1]}, 1)}, 0);
  expect_close(values(assembled), values(hessian(fz, z)), 0, 1e-14, "hessian");

  // value_and_grad: one evaluation, both results.
  auto [value, g] = func::value_and_grad(f, {t.a, t.b});
  EXPECT_NEAR(value.item(), fz(z).item(), 1e-15);
  expect_close(values(g[1]), values(func::grad(f, {t.a, t.b})[1]), 0, 0, "value_and_grad");
}

TEST(Transforms, NamedFormsKeepTheNames) {
  manual_seed(2);
  nn::MLP net({3, 5, 2}, nn::Activation::tanh, true, {DType::f64});
  Tensor x = randn({4, 3}, DType::f64), y = randn({4, 2}, DType::f64);
  const nn::NamedTensors params = net.named_parameters();
  auto loss = [&](const nn::NamedTensors& p) { return mse_loss(nn::functional_call(net, p, x), y); };

  nn::NamedTensors g = func::grad(loss, params);
  TensorList want = grad({mse_loss(net(x), y)}, net.parameters());
  ASSERT_EQ(g.size(), params.size());
  for (size_t i = 0; i < g.size(); ++i) {
    EXPECT_EQ(g[i].first, params[i].first);
    EXPECT_TRUE(g[i].second.requires_grad()) << "the parameters require grad: the gradient stays on the tape";
    expect_close(values(g[i].second), values(want[i]), 0, 1e-14, g[i].first);
  }
}

TEST(Transforms, NamedJacobiansHessiansAndProductsEqualTheListForms) {
  manual_seed(4);
  nn::MLP net({2, 3, 1}, nn::Activation::tanh, true, {DType::f64});
  Tensor x = randn({4, 2}, DType::f64);
  const nn::NamedTensors params = net.named_parameters();
  const TensorList theta = net.parameters();
  auto out = [&](const nn::NamedTensors& p) { return nn::functional_call(net, p, x); };  // (4, 1)
  auto out_list = [&](const TensorList& t) { return TensorList{out(nn::with_values(params, t))}; };
  auto loss = [&](const nn::NamedTensors& p) { return sum(pow(out(p), 2.0)); };
  auto loss_list = [&](const TensorList& t) { return loss(nn::with_values(params, t)); };

  nn::NamedTensors rev = func::jacrev(out, params), fwd = func::jacfwd(out, params);
  std::vector<TensorList> want = func::jacrev(out_list, theta);
  std::vector<TensorList> hl = func::hessian(loss_list, theta);
  func::NamedHessian h = func::hessian(loss, params);
  nn::NamedTensors vs;
  for (const auto& [name, p] : params) vs.emplace_back(name, randn_like(p));
  auto [y, jv] = func::jvp(out, params, vs);
  func::JvpResult jl = func::jvp(out_list, theta, nn::values(vs));
  expect_close(values(jv), values(jl.tangents[0]), 0, 1e-14, "named jvp");
  Tensor u = randn({4, 1}, DType::f64);
  nn::NamedTensors vjp = func::vjp(out, params).vjp_fn(u);
  TensorList vjp_list = func::vjp(out_list, theta).vjp_fn({u});
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(rev[i].first, params[i].first);
    EXPECT_EQ(rev[i].second.shape(), concat_shape({4, 1}, params[i].second.shape()));
    expect_close(values(rev[i].second), values(want[0][i]), 0, 1e-14, "named jacrev");
    expect_close(values(fwd[i].second), values(want[0][i]), 0, 1e-14, "named jacfwd");
    expect_close(values(vjp[i].second), values(vjp_list[i]), 0, 1e-14, "named vjp");
    EXPECT_EQ(h[i].first, params[i].first);
    for (size_t j = 0; j < params.size(); ++j) {
      EXPECT_EQ(h[i].second[j].first, params[j].first);
      expect_close(values(h[i].second[j].second), values(hl[i][j]), 0, 1e-14, "named hessian");
    }
  }
  expect_error<ValueError>([&] { func::jvp(out, params, {vs.begin(), vs.end() - 1}); },
                           "gg::func::jvp: got 3 tangents for 4 parameters");
  nn::NamedTensors renamed = vs;
  renamed[1].first = "bias";
  expect_error<ValueError>([&] { func::hvp(loss, params, renamed); },
                           "gg::func::hvp: tangent 1 is named 'bias' but parameter 1 is 'layers.0.bias'");
}

TEST(Transforms, SingleTensorFormsAreTheListFormsOfOne) {
  Tensor x = vec({1.0, -2.0, 0.5}), v = vec({0.3, 0.7, -1.1});
  auto f = [](const Tensor& t) { return sum(pow(t, 3.0)) * 0.5; };
  auto fl = [&](const TensorList& t) { return f(t[0]); };
  expect_close(values(func::hvp(f, x, v)), values(func::hvp(fl, {x}, {v})[0]), 0, 0, "hvp");
  expect_close(values(hvp(f, x, v)), {3 * 1.0 * 0.3, 3 * -2.0 * 0.7, 3 * 0.5 * -1.1}, 0, 1e-14, "hvp closed form");
  expect_close(values(func::hessian(f, x)), values(hessian(f, x)), 0, 0, "hessian");
  // torch.func's layout x.shape + x.shape; gg::hessian flattens it to (numel, numel).
  Tensor m = from_vector({1.0, 2.0, 3.0, 4.0}, {2, 2}, DType::f64);
  EXPECT_EQ(func::hessian(f, m).shape(), (Shape{2, 2, 2, 2}));
  EXPECT_EQ(hessian(f, m).shape(), (Shape{4, 4}));
  expect_close(values(func::hessian(f, m)), values(hessian(f, m)), 0, 0, "hessian of a matrix");
}

// ---------------------------------------------------------------- Jacobians and vjp

// Two inputs, two outputs; the second output does not depend on b.
TensorList two_outputs(const TensorList& x) {
  return {sin(x[0]) * sum(x[1] * x[1]), reshape(matmul(reshape(x[0], {1, 3}), reshape(x[0], {3, 1})), {})};
}

TEST(Transforms, JacfwdEqualsJacrevAndFiniteDifferences) {
  const TensorList xs = {vec({0.2, -0.9, 1.4}), from_vector({0.5, -1.0, 2.0, 0.1}, {2, 2}, DType::f64)};
  std::vector<TensorList> rev = func::jacrev(two_outputs, xs), fwd = func::jacfwd(two_outputs, xs);
  ASSERT_EQ(rev.size(), 2u);
  const Shape want[2][2] = {{{3, 3}, {3, 2, 2}}, {{3}, {2, 2}}};
  for (size_t i = 0; i < 2; ++i)
    for (size_t j = 0; j < 2; ++j) {
      EXPECT_EQ(rev[i][j].shape(), want[i][j]);
      EXPECT_EQ(fwd[i][j].shape(), want[i][j]);
      expect_close(values(fwd[i][j]), values(rev[i][j]), 0, 1e-14, "jacfwd vs jacrev");
      auto yi = [&](const TensorList& x) { return two_outputs(x)[i]; };
      expect_close(values(rev[i][j]), finite_difference(yi, xs, j), 0, 1e-8, "jacrev vs differences");
    }
  expect_close(values(rev[1][1]), {0, 0, 0, 0}, 0, 0, "an unused input");

  // Single-tensor forms: the Jacobian of tanh(Wx) is diag(1 − tanh²(Wx)) W.
  Tensor W = from_vector({0.3, -0.7, 0.5, 1.1, 0.2, -0.4}, {2, 3}, DType::f64);
  auto g = [&](const Tensor& x) { return tanh(matmul(W, x)); };
  Tensor x = vec({0.2, -0.9, 1.4});
  Tensor J = reshape(1.0 - pow(g(x), 2.0), {2, 1}) * W;
  expect_close(values(func::jacrev(g, x)), values(J), 0, 1e-14, "jacrev");
  expect_close(values(func::jacfwd(g, x)), values(J), 0, 1e-14, "jacfwd");
}

TEST(Transforms, VjpAndJvpAreTheTransposedProducts) {
  const TensorList xs = {vec({0.2, -0.9, 1.4}), from_vector({0.5, -1.0, 2.0, 0.1}, {2, 2}, DType::f64)};
  std::vector<TensorList> J = func::jacrev(two_outputs, xs);
  func::VjpResult r = func::vjp(two_outputs, xs);
  expect_close(values(r.outputs[0]), values(two_outputs(xs)[0]), 0, 0, "vjp outputs");
  const TensorList us = {vec({1.0, -2.0, 0.5}), scalar_tensor(3.0, DType::f64)};
  for (int call = 0; call < 2; ++call) {  // the function can be called again
    TensorList jt_u = r.vjp_fn(us);
    // Jᵀu for input 0: Σ_i uᵢ J[i][0] (J[0][0] is (3, 3), J[1][0] is (3)).
    Tensor want0 = matmul(reshape(us[0], {1, 3}), J[0][0]) + J[1][0] * us[1];
    expect_close(values(jt_u[0]), values(want0), 0, 1e-14, "vjp input 0");
    Tensor want1 = reshape(matmul(reshape(us[0], {1, 3}), reshape(J[0][1], {3, 4})), {2, 2});
    expect_close(values(jt_u[1]), values(want1), 0, 1e-14, "vjp input 1");
  }

  const TensorList vs = {vec({0.3, 0.1, -0.4}), from_vector({1.0, 0.0, -1.0, 2.0}, {2, 2}, DType::f64)};
  func::JvpResult f = func::jvp(two_outputs, xs, vs);
  Tensor want0 = matmul(J[0][0], vs[0]) + matmul(reshape(J[0][1], {3, 4}), reshape(vs[1], {4}));
  expect_close(values(f.tangents[0]), values(want0), 0, 1e-14, "jvp output 0");
  expect_close(values(f.tangents[1]), {values(sum(J[1][0] * vs[0]))[0]}, 0, 1e-14, "jvp output 1");
}

// ---------------------------------------------------------------- graphs: kept only when needed

TEST(Transforms, InputsThatDoNotRequireGradGiveResultsWithoutAGraph) {
  TwoTensors t;
  auto f = [&](const TensorList& x) { return t.f(x); };
  const TensorList xs = {t.a, t.b}, vs = {vec({1.0, 0.0, -1.0}), vec({0.5, 0.5})};
  auto none = [](const TensorList& ts) {
    for (const Tensor& r : ts)
      if (r.requires_grad()) return false;
    return true;
  };
  EXPECT_TRUE(none(func::grad(f, xs)));
  EXPECT_TRUE(none(func::hvp(f, xs, vs)));
  EXPECT_TRUE(none(func::hessian(f, xs)[0]));
  EXPECT_TRUE(none(func::jacrev(two_outputs, {t.a, t.b})[0]));
  EXPECT_TRUE(none(func::jacfwd(two_outputs, {t.a, t.b})[1]));
  func::JvpResult j = func::jvp(two_outputs, {t.a, t.b}, vs);
  EXPECT_TRUE(none(j.outputs) && none(j.tangents));
  func::VjpResult v = func::vjp(two_outputs, {t.a, t.b});
  EXPECT_TRUE(none(v.outputs) && none(v.vjp_fn({ones({3}, DType::f64), scalar_tensor(1.0, DType::f64)})));
  EXPECT_FALSE(func::value_and_grad(f, xs).first.requires_grad());

  // Inputs that require grad, under NoGradGuard: the transform runs, the results are plain.
  Tensor a = leaf(t.a), b = leaf(t.b);
  NoGradGuard no_grad;
  TensorList g = func::grad(f, {a, b});
  EXPECT_TRUE(none(g));
  expect_close(values(g[0]), values(func::grad(f, xs)[0]), 0, 0, "grad under NoGradGuard");
  EXPECT_TRUE(none(func::hessian(f, {a, b})[1]));
}

TEST(Transforms, InputsThatRequireGradGiveResultsOnTheTape) {
  TwoTensors t;
  auto f = [&](const TensorList& x) { return t.f(x); };
  Tensor a = leaf(t.a), b = leaf(t.b);
  TensorList g = func::grad(f, {a, b});
  EXPECT_TRUE(g[0].requires_grad() && g[1].requires_grad());
  // ∂/∂b Σ ∇_a f = Σ_i H_ab[i, :] (rows of the mixed block).
  Tensor mixed = func::hessian(f, {t.a, t.b})[0][1];
  expect_close(values(grad(sum(g[0]), b)), values(sum(mixed, {0})), 0, 1e-14, "grad of grad");
  // An input that requires grad next to one that does not: only the first carries history.
  TensorList g2 = func::grad(f, {a, t.b});
  expect_close(values(grad(sum(g2[1]), a)), values(sum(func::hessian(f, {t.a, t.b})[1][0], {0})), 0, 1e-14,
               "mixed inputs");
  // vjp's function follows the grad mode of its own call.
  func::VjpResult r = func::vjp([](const TensorList& x) { return TensorList{pow(x[0], 3.0)}; }, {a});
  EXPECT_TRUE(r.outputs[0].requires_grad());
  const TensorList u = {ones({3}, DType::f64)};
  EXPECT_TRUE(r.vjp_fn(u)[0].requires_grad());
  {
    NoGradGuard no_grad;
    EXPECT_FALSE(r.vjp_fn(u)[0].requires_grad());
  }
  expect_close(values(grad(sum(r.vjp_fn(u)[0]), a)), values(t.a * 6.0), 0, 1e-14, "d/da sum(3a²)");
  // A non-leaf input works like a leaf: the gradient flows back through it to a.
  Tensor a2 = a * 2.0;
  Tensor ga = func::grad([](const Tensor& x) { return sum(pow(x, 3.0)); }, a2);  // 3(2a)²
  expect_close(values(grad(sum(ga), a)), values(t.a * 24.0), 0, 1e-14, "non-leaf input");  // ∂/∂a 12a² = 24a
}

TEST(Transforms, ZeroDimAndEmptyInputs) {
  // 0-dim: d(x³)/dx = 3x², d²/dx² = 6x, as 0-dim tensors.
  Tensor x = scalar_tensor(2.0, DType::f64);
  auto cube = [](const Tensor& t) { return t * t * t; };
  EXPECT_EQ(func::jacrev(cube, x).shape(), Shape{});
  EXPECT_NEAR(func::jacrev(cube, x).item(), 12.0, 1e-14);
  EXPECT_NEAR(func::jacfwd(cube, x).item(), 12.0, 1e-14);
  EXPECT_NEAR(func::hessian(cube, x).item(), 12.0, 1e-14);
  EXPECT_NEAR(func::jvp([&](const TensorList& t) { return TensorList{cube(t[0])}; }, {x},
                        {scalar_tensor(0.5, DType::f64)}).tangents[0].item(), 6.0, 1e-14);
  // Empty: shapes follow the layout, with no rows or columns.
  Tensor e = zeros({0}, DType::f64);
  auto sq = [](const Tensor& t) { return t * t; };
  EXPECT_EQ(func::jacrev(sq, e).shape(), (Shape{0, 0}));
  EXPECT_EQ(func::jacfwd(sq, e).shape(), (Shape{0, 0}));
  EXPECT_EQ(func::hessian([](const Tensor& t) { return sum(t); }, e).shape(), (Shape{0, 0}));
  EXPECT_EQ(func::grad([](const Tensor& t) { return sum(t); }, e).shape(), (Shape{0}));
}

// ---------------------------------------------------------------- bad arguments

TEST(Transforms, BadArgumentsRaiseTypedErrorsNamingTheTransform) {
  Tensor x = vec({1.0, 2.0});
  auto f = [](const Tensor& t) { return sum(t * t); };
  auto not_scalar = [](const Tensor& t) { return t * t; };
  expect_error<ShapeError>([&] { func::hvp(f, x, vec({1.0, 2.0, 3.0})); },
                           "gg::func::hvp: v[0] has shape [3] but x[0] has shape [2]");
  expect_error<ShapeError>([&] { hvp(f, x, vec({1.0})); }, "gg::hvp: v has shape [1] but x has shape [2]");
  expect_error<ShapeError>([&] { func::jvp(two_outputs, {vec({1, 2, 3}), zeros({2, 2}, DType::f64)},
                                           {vec({1, 2, 3}), zeros({4}, DType::f64)}); },
                           "gg::func::jvp: v[1] has shape [4] but x[1] has shape [2, 2]");
  expect_error<ValueError>([&] { func::hvp([](const TensorList& t) { return sum(t[0]); }, {x}, {}); },
                           "gg::func::hvp: got 0 v for 1 x");
  expect_error<DTypeError>([&] { func::hvp(f, x, ones({2})); },
                           "gg::func::hvp: v[0] has dtype f32 but x[0] has dtype f64");
  expect_error<ValueError>([&] { func::grad(not_scalar, x); },
                           "gg::func::grad: f must return a one-element tensor, but returned shape [2]");
  expect_error<ValueError>([&] { func::hessian(not_scalar, x); },
                           "gg::func::hessian: f must return a one-element tensor, but returned shape [2]");
  expect_error<ValueError>([&] { hessian(not_scalar, x); }, "gg::func::hessian: f must return a one-element");
  func::VjpResult r = func::vjp(two_outputs, {vec({1, 2, 3}), zeros({2, 2}, DType::f64)});
  expect_error<ShapeError>([&] { r.vjp_fn({zeros({2}, DType::f64), scalar_tensor(1.0, DType::f64)}); },
                           "gg::func::vjp: cotangents[0] has shape [2] but outputs[0] has shape [3]");
}

}  // namespace
}  // namespace gg::test
