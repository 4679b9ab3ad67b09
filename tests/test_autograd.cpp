// Tape semantics: accumulation, retain_graph, allow_unused, NoGradGuard, detach, version
// counter, diamonds, reuse of a graph, and higher orders through nested grad calls.
#include <cmath>
#include <type_traits>

#include "test_util.h"

namespace gg::test {
namespace {

Tensor scalar(double v) { return full({}, v, DType::f64).requires_grad_(true); }

TEST(Autograd, NestedGradGivesHigherDerivatives) {
  Tensor x = scalar(0.7);
  Tensor y = sin(x) * exp(x);  // y' = e^x (sin + cos), y'' = 2 e^x cos, y''' = 2 e^x (cos - sin)
  Tensor d1 = grad(y, x, {}, std::nullopt, /*create_graph=*/true);
  Tensor d2 = grad(d1, x, {}, std::nullopt, /*create_graph=*/true);
  Tensor d3 = grad(d2, x, {}, std::nullopt, /*create_graph=*/true);
  const double e = std::exp(0.7), s = std::sin(0.7), c = std::cos(0.7);
  EXPECT_NEAR(d1.item(), e * (s + c), 1e-13);
  EXPECT_NEAR(d2.item(), 2 * e * c, 1e-13);
  EXPECT_NEAR(d3.item(), 2 * e * (c - s), 1e-13);
  EXPECT_TRUE(d3.requires_grad());
}

TEST(Autograd, BackwardAccumulatesIntoLeaves) {
  Tensor x = scalar(3.0);
  (x * x).backward();
  EXPECT_DOUBLE_EQ(x.grad().item(), 6.0);
  (x * 2.0).backward();
  EXPECT_DOUBLE_EQ(x.grad().item(), 8.0);  // accumulated
  EXPECT_FALSE(x.grad().requires_grad());
  x.zero_grad();
  EXPECT_FALSE(x.grad().defined());
}

TEST(Autograd, BackwardWithCreateGraphKeepsHistoryOnGrad) {
  Tensor x = scalar(2.0);
  pow(x, 3.0).backward(Tensor(), /*retain_graph=*/std::nullopt, /*create_graph=*/true);
  Tensor g = x.grad();  // 3x² = 12, differentiable
  EXPECT_DOUBLE_EQ(g.item(), 12.0);
  ASSERT_TRUE(g.requires_grad());
  EXPECT_DOUBLE_EQ(grad(g, x).item(), 12.0);  // 6x
}

// libtorch's positional order: backward(gradient, retain_graph, create_graph) and
// grad(outputs, inputs, grad_outputs, retain_graph, create_graph, allow_unused).
TEST(Autograd, PositionalArgumentsFollowLibtorch) {
  Tensor x = scalar(2.0);
  Tensor y = pow(x, 3.0);
  y.backward(Tensor(), true);  // retain_graph: nothing recorded, the graph kept
  EXPECT_FALSE(x.grad().requires_grad());
  y.backward();
  EXPECT_DOUBLE_EQ(x.grad().item(), 24.0);
  EXPECT_THROW(y.backward(), AutogradError);

  Tensor z = pow(x, 3.0);
  Tensor g = grad({z}, {x}, {}, /*retain_graph=*/true, /*create_graph=*/false)[0];
  EXPECT_FALSE(g.requires_grad());
  EXPECT_TRUE(grad({z}, {x}, {}, /*retain_graph=*/false, /*create_graph=*/true)[0].requires_grad());
  EXPECT_THROW(grad(z, x), AutogradError);  // retain_graph = false freed it
}

TEST(Autograd, GradDoesNotTouchLeafGrad) {
  Tensor x = scalar(1.0);
  grad(x * 5.0, x);
  EXPECT_FALSE(x.grad().defined());
}

TEST(Autograd, RetainGraph) {
  Tensor x = scalar(1.5);
  Tensor y = exp(x) * x;
  grad(y, x, {}, /*retain_graph=*/true);
  EXPECT_NO_THROW(grad(y, x, {}, /*retain_graph=*/true));
  grad(y, x);  // frees the saved tensors
  try {
    grad(y, x);
    FAIL() << "expected AutogradError";
  } catch (const AutogradError& e) {
    EXPECT_NE(std::string(e.what()).find("second time"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("retain_graph"), std::string::npos) << e.what();
  }
}

TEST(Autograd, AllowUnused) {
  Tensor x = scalar(1.0), z = scalar(2.0);
  Tensor y = x * 3.0;
  EXPECT_THROW(grad({y}, {x, z}, {}, /*retain_graph=*/true), AutogradError);
  TensorList g = grad({y}, {x, z}, {}, /*retain_graph=*/true, /*create_graph=*/false, /*allow_unused=*/true);
  EXPECT_DOUBLE_EQ(g[0].item(), 3.0);
  EXPECT_FALSE(g[1].defined());
}

TEST(Autograd, ErrorsForOutputsWithoutGrad) {
  Tensor x = full({}, 1.0, DType::f64);  // no requires_grad
  EXPECT_THROW(grad(x * 2.0, x), AutogradError);
  Tensor w = scalar(1.0);
  Tensor v = ones({3}, DType::f64) * w;
  EXPECT_THROW(grad(v, w), ValueError);  // non-scalar output needs grad_outputs
  EXPECT_THROW(grad(v, w, ones({2}, DType::f64)), ShapeError);
  EXPECT_DOUBLE_EQ(grad(v, w, ones({3}, DType::f64)).item(), 3.0);
}

TEST(Autograd, NoGradGuard) {
  Tensor x = scalar(1.0);
  Tensor y;
  {
    NoGradGuard ng;
    y = x * 2.0;
    EXPECT_FALSE(GradMode::is_enabled());
  }
  EXPECT_TRUE(GradMode::is_enabled());
  EXPECT_FALSE(y.requires_grad());
  EXPECT_TRUE((x * 2.0).requires_grad());
}

TEST(Autograd, DetachCutsHistory) {
  Tensor x = scalar(2.0);
  Tensor y = x * x;
  Tensor d = y.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_EQ(d.impl().storage, y.impl().storage);
  Tensor z = y * d;  // d is a constant 4
  EXPECT_DOUBLE_EQ(grad(z, x).item(), 16.0);  // d(x² · 4)/dx = 8x
}

TEST(Autograd, InPlaceAfterSaveIsDetected) {
  Tensor a = from_vector({1, 2, 3}, {3}, DType::f64);
  Tensor w = from_vector({4, 5, 6}, {3}, DType::f64).requires_grad_(true);
  Tensor y = sum(w * a);  // mul saves a
  mul_(a, 2.0);
  try {
    grad(y, w);
    FAIL() << "expected AutogradError";
  } catch (const AutogradError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("in-place"), std::string::npos) << m;
    EXPECT_NE(m.find("'mul'"), std::string::npos) << m;
    EXPECT_NE(m.find("version is 1, expected 0"), std::string::npos) << m;
  }
}

TEST(Autograd, InPlaceOnLeafRequiringGradNeedsNoGrad) {
  Tensor w = from_vector({1, 2}, {2}, DType::f64).requires_grad_(true);
  EXPECT_THROW(add_(w, ones({2}, DType::f64)), AutogradError);
  {
    NoGradGuard ng;
    add_(w, ones({2}, DType::f64), -0.5);  // an SGD-style update
  }
  EXPECT_EQ(w.to_vector<double>(), (Values{0.5, 1.5}));
}

TEST(Autograd, DiamondGraphSumsBothPaths) {
  Tensor x = scalar(0.3);
  Tensor a = exp(x);
  Tensor y = a * sin(a) + a;  // x feeds y through a, along three paths
  double e = std::exp(0.3);
  EXPECT_NEAR(grad(y, x).item(), e * (std::sin(e) + e * std::cos(e) + 1), 1e-14);
}

TEST(Autograd, GraphReusedByTwoGradCalls) {
  Tensor x = scalar(0.5), w = scalar(-1.2);
  Tensor y = tanh(x * w);
  TensorList g1 = grad(TensorList{y}, {x}, {}, /*retain_graph=*/true);
  TensorList g2 = grad(TensorList{y}, {w}, {}, /*retain_graph=*/true);
  double t = std::tanh(-0.6);
  EXPECT_NEAR(g1[0].item(), (1 - t * t) * -1.2, 1e-14);
  EXPECT_NEAR(g2[0].item(), (1 - t * t) * 0.5, 1e-14);
}

TEST(Autograd, GradWithRespectToNonLeafAndMultipleOutputs) {
  Tensor x = scalar(2.0);
  Tensor h = x * x;       // non-leaf input
  Tensor y1 = h * 3.0, y2 = exp(h);
  TensorList g = grad({y1, y2}, {h, x});
  EXPECT_NEAR(g[0].item(), 3.0 + std::exp(4.0), 1e-10);
  EXPECT_NEAR(g[1].item(), (3.0 + std::exp(4.0)) * 4.0, 1e-9);
}

TEST(Autograd, LongChainDoesNotOverflowTheStack) {
  Tensor x = scalar(1.0);
  Tensor y = x;
  for (int i = 0; i < 20000; ++i) y = y * 1.0;
  EXPECT_DOUBLE_EQ(grad(y, x).item(), 1.0);
}

TEST(Autograd, LongTapesAreFreedWithoutRecursion) {
  // 300k nodes, chained both through edges (neg) and through saved tensors (mul saves its
  // inputs): freeing them must not recurse once per node.
  {
    Tensor x = scalar(1.0);
    Tensor y = x;
    for (int i = 0; i < 150000; ++i) y = neg(y);
    Tensor z = y;
    for (int i = 0; i < 150000; ++i) z = z * y;
  }
  SUCCEED();
}

TEST(Autograd, BroadcastGradientsHaveInputShapes) {
  Tensor a = randn({3, 1}, DType::f64).requires_grad_(true);
  Tensor b = randn({4}, DType::f64).requires_grad_(true);
  TensorList g = grad({sum(a * b)}, {a, b});
  EXPECT_EQ(g[0].shape(), (Shape{3, 1}));
  EXPECT_EQ(g[1].shape(), (Shape{4}));
  Values bv = b.to_vector<double>(), av = a.to_vector<double>();
  double sb = bv[0] + bv[1] + bv[2] + bv[3], sa = av[0] + av[1] + av[2];
  EXPECT_NEAR(g[0].to_vector<double>()[0], sb, 1e-14);
  EXPECT_NEAR(g[1].to_vector<double>()[2], sa, 1e-14);
}

TEST(Autograd, BackwardRecordsLevels) {
  Tensor x = scalar(0.4);
  Tensor y = tanh(x);
  EXPECT_EQ(y.grad_fn()->level, 0);
  Tensor d1 = grad(y, x, {}, std::nullopt, /*create_graph=*/true);
  ASSERT_TRUE(d1.grad_fn());
  EXPECT_EQ(d1.grad_fn()->level, 1);
  Tensor d2 = grad(d1, x, {}, std::nullopt, /*create_graph=*/true);
  EXPECT_EQ(d2.grad_fn()->level, 2);
}

// The call forms of libtorch's torch::autograd::grad, and the plain-tensor form. A braced list
// must select the list overload even with one element (it would otherwise convert to Tensor);
// each form is checked by its result type (at compile time) and by its values against the
// derivatives written out by hand.
// f(x, w) = x² w + sin w:  ∂f/∂x = 2xw,  ∂f/∂w = x² + cos w,  ∂²f/∂w∂x = 2x.
TEST(Autograd, GradCallFormsOfLibtorch) {
  const double xv = 0.5, wv = -1.25;
  Tensor x = scalar(xv), w = scalar(wv);
  auto f = [&] { return x * x * w + sin(w); };
  const double dfdx = 2 * xv * wv, dfdw = xv * xv + std::cos(wv);

  // grad({y}, {x})[0]: one-element lists.
  static_assert(std::is_same_v<decltype(grad({f()}, {x})), TensorList>);
  EXPECT_NEAR(grad({f()}, {x})[0].item(), dfdx, 1e-15);

  // Two inputs, then two outputs (their gradients add up).
  TensorList both = grad({f()}, {x, w});
  ASSERT_EQ(both.size(), 2u);
  EXPECT_NEAR(both[0].item(), dfdx, 1e-15);
  EXPECT_NEAR(both[1].item(), dfdw, 1e-15);
  EXPECT_NEAR(grad({f(), x * 3.0}, {x})[0].item(), dfdx + 3.0, 1e-15);

  // grad_outputs and options as braced lists: TensorList d = grad({o}, {q}, {dO}, std::nullopt, /*create_graph=*/true).
  Tensor o = f();
  TensorList d = grad({o}, {x}, {full({}, 2.0, DType::f64)}, std::nullopt, /*create_graph=*/true);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_NEAR(d[0].item(), 2.0 * dfdx, 1e-15);
  ASSERT_TRUE(d[0].requires_grad());
  EXPECT_NEAR(grad({d[0]}, {w})[0].item(), 2.0 * 2 * xv, 1e-15);  // d(2·2xw)/dw
  // Empty grad_outputs with options.
  static_assert(std::is_same_v<decltype(grad({o}, {x}, {}, std::nullopt, /*create_graph=*/true)), TensorList>);
  EXPECT_NEAR(grad({f()}, {w}, {}, std::nullopt, /*create_graph=*/true)[0].item(), dfdw, 1e-15);

  // A vector output with a vector cotangent, the attention-style call.
  Tensor q = from_vector({0.5, -2.0, 3.0}, {3}, DType::f64).requires_grad_();
  Tensor dq = grad({q * q}, {q}, {from_vector({1.0, 10.0, 100.0}, {3}, DType::f64)}, std::nullopt, /*create_graph=*/true)[0];
  expect_close(dq.to_vector<double>(), {1.0, -40.0, 600.0}, 0, 1e-13, "grad({q*q}, {q}, {v})");

  // TensorList variables, and each mixed with a braced list.
  TensorList outs{f()}, ins{x, w};
  static_assert(std::is_same_v<decltype(grad(outs, ins)), TensorList>);
  TensorList from_vars = grad(outs, ins);
  EXPECT_NEAR(from_vars[0].item(), dfdx, 1e-15);
  EXPECT_NEAR(from_vars[1].item(), dfdw, 1e-15);
  static_assert(std::is_same_v<decltype(grad({f()}, ins, {}, std::nullopt, /*create_graph=*/true)), TensorList>);
  EXPECT_NEAR(grad({f()}, ins, {}, std::nullopt, /*create_graph=*/true)[1].item(), dfdw, 1e-15);
  TensorList outs2{f()};
  static_assert(std::is_same_v<decltype(grad(outs2, {w})), TensorList>);
  EXPECT_NEAR(grad(outs2, {w})[0].item(), dfdw, 1e-15);

  // Plain tensors keep returning one Tensor, with and without grad_output and options.
  static_assert(std::is_same_v<decltype(grad(f(), x)), Tensor>);
  static_assert(std::is_same_v<decltype(grad(f(), x, {}, std::nullopt, /*create_graph=*/true)), Tensor>);
  EXPECT_NEAR(grad(f(), x).item(), dfdx, 1e-15);
  Tensor gw = grad(f(), w, full({}, -3.0, DType::f64), std::nullopt, /*create_graph=*/true);
  EXPECT_NEAR(gw.item(), -3.0 * dfdw, 1e-15);
  EXPECT_NEAR(grad(gw, x).item(), -3.0 * 2 * xv, 1e-15);
}

// GradOptions::on_gradient: once per input, with the gradient grad returns; an input's call
// comes as soon as its gradient is complete (c's, which only the last op uses, before a's and
// b's, which need the backward of the ops before it), an unused input's (undefined) at the end.
TEST(Autograd, OnGradientCallsEachInputOnceWhenComplete) {
  const Tensor a = from_vector({1.5, -0.5}, {2}, DType::f64).requires_grad_(true);
  const Tensor b = from_vector({0.25, 2.0}, {2}, DType::f64).requires_grad_(true);
  const Tensor c = from_vector({3.0, 1.0}, {2}, DType::f64).requires_grad_(true);
  const Tensor unused = from_vector({1.0}, {1}, DType::f64).requires_grad_(true);
  const Tensor y = sum(exp(a * b) * c);
  std::vector<std::pair<size_t, bool>> calls;
  TensorList seen(4);
  GradOptions o;
  o.allow_unused = true;
  o.on_gradient = [&](size_t k, const Tensor& g) {
    calls.emplace_back(k, g.defined());
    seen[k] = g;
  };
  const TensorList got = grad({y}, {a, b, unused, c}, {}, o);
  ASSERT_EQ(calls.size(), 4u);
  EXPECT_EQ(calls[0], std::make_pair(size_t{3}, true));
  EXPECT_EQ(calls[3], std::make_pair(size_t{2}, false));
  EXPECT_TRUE((calls[1].first == 0 && calls[2].first == 1) || (calls[1].first == 1 && calls[2].first == 0));
  for (size_t k : {0, 1, 3}) EXPECT_EQ(seen[k].to_vector<double>(), got[k].to_vector<double>()) << k;
  EXPECT_FALSE(got[2].defined());
}

}  // namespace
}  // namespace gg::test
