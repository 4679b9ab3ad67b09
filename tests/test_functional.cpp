// hvp, jvp, hessian and the public gradcheck helpers.
#include <cmath>

#include "test_util.h"

namespace gg::test {
namespace {

// f(x) = Σ x_i³ + x_0·x_1, with H = diag(6x) + [[0,1],[1,0]] on the first two coordinates.
Tensor cubic(const Tensor& x) { return sum(pow(x, 3.0)) + slice(x, 0, 0, 1) * slice(x, 0, 1, 2); }

TEST(Functional, HvpMatchesClosedForm) {
  Tensor x = from_vector({1.0, -2.0, 0.5}, {3}, DType::f64);
  Tensor v = from_vector({0.3, 0.7, -1.1}, {3}, DType::f64);
  Values hv = hvp([](const Tensor& t) { return sum(cubic(t)); }, x, v).to_vector<double>();
  EXPECT_NEAR(hv[0], 6 * 1.0 * 0.3 + 0.7, 1e-13);
  EXPECT_NEAR(hv[1], 6 * -2.0 * 0.7 + 0.3, 1e-13);
  EXPECT_NEAR(hv[2], 6 * 0.5 * -1.1, 1e-13);
}

TEST(Functional, HessianIsSymmetricAndExact) {
  Tensor x = from_vector({1.0, -2.0, 0.5}, {3}, DType::f64);
  Tensor h = hessian([](const Tensor& t) { return sum(cubic(t)); }, x);
  EXPECT_EQ(h.shape(), (Shape{3, 3}));
  Values want = {6, 1, 0, 1, -12, 0, 0, 0, 3};
  expect_close(h.to_vector<double>(), want, 0, 1e-13, "hessian");
}

TEST(Functional, JvpMatchesFiniteDifferences) {
  manual_seed(3);
  Tensor w = randn({4, 3}, DType::f64);
  auto f = [&](const Tensor& x) { return tanh(matmul(w, x)); };
  Tensor x = randn({3}, DType::f64), v = randn({3}, DType::f64);
  Values jv = jvp(f, x, v).to_vector<double>();
  const double h = 1e-6;
  Values fp = f(x + v * h).to_vector<double>(), fm = f(x - v * h).to_vector<double>();
  for (size_t i = 0; i < jv.size(); ++i) EXPECT_NEAR(jv[i], (fp[i] - fm[i]) / (2 * h), 1e-8);
}

TEST(Functional, GradcheckCatchesAWrongGradient) {
  // A function whose recorded backward is deliberately wrong: y = x·stopgrad(x) pretends
  // dy/dx = x instead of 2x.
  SingleFn wrong = [](const TensorList& xs) { return xs[0] * xs[0].detach(); };
  Tensor x = from_vector({0.5, -1.5}, {2}, DType::f64).requires_grad_(true);
  GradcheckResult r = gradcheck(wrong, {x});
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.message.find("mismatch"), std::string::npos) << r.message;
  SingleFn right = [](const TensorList& xs) { return xs[0] * xs[0]; };
  EXPECT_TRUE(gradcheck(right, {x}).ok);
  EXPECT_TRUE(gradgradcheck(right, {x}).ok);
}

TEST(Functional, GradgradcheckCatchesAWrongSecondDerivative) {
  // First derivative right, second wrong: y = x³ with the backward's dependence on x cut.
  SingleFn wrong = [](const TensorList& xs) {
    Tensor x = xs[0];
    Tensor c = pow(x, 3.0).detach();
    // value x³, gradient 3x² · (a constant): correct first order, zero second-order term
    return c + (x - x.detach()) * (3.0 * pow(x, 2.0)).detach();
  };
  Tensor x = from_vector({0.5, -1.5}, {2}, DType::f64).requires_grad_(true);
  EXPECT_TRUE(gradcheck(wrong, {x}).ok);
  EXPECT_FALSE(gradgradcheck(wrong, {x}).ok);
}

TEST(Functional, GradcheckRequiresF64) {
  Tensor x = ones({2}, DType::f32).requires_grad_(true);
  EXPECT_THROW(gradcheck(SingleFn([](const TensorList& xs) { return xs[0] * 2.0; }), {x}), DTypeError);
}

}  // namespace
}  // namespace gg::test
