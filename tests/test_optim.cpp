// gg::optim against updates computed element by element from the formulas of PyTorch's
// documentation (f64, several steps, gradients that change per step), a small regression whose
// loss must fall under each optimizer, and the learning-rate schedules.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <ostream>

#include "gradgrad.h"
#include "test_util.h"

namespace gg::test {
namespace {

const Values kTheta0 = {0.5, -1.5, 2.0, 0.0};
// The gradient handed to step t (1-based) for element i: varied in sign and size.
double grad_at(int t, size_t i) { return std::sin(1.3 * t + 0.7 * static_cast<double>(i)) * (1.0 + 0.5 * t); }
Tensor grad_tensor(int t) {
  Values g(kTheta0.size());
  for (size_t i = 0; i < g.size(); ++i) g[i] = grad_at(t, i);
  return from_vector(g, {2, 2}, DType::f64);
}
Tensor theta0() { return leaf(from_vector(kTheta0, {2, 2}, DType::f64)); }

constexpr int kSteps = 5;

// Runs kSteps steps; odd steps pass gradients in, even steps go through .grad().
void run(optim::Optimizer& opt, Tensor& p) {
  for (int t = 1; t <= kSteps; ++t) {
    if (t % 2 == 1) {
      opt.step({grad_tensor(t)});
    } else {
      p.set_grad(grad_tensor(t));
      opt.step();
      opt.zero_grad();
      EXPECT_FALSE(p.grad().defined());
    }
  }
}

struct SgdCase { double momentum, dampening, weight_decay; bool nesterov; };
// Printed by field (gtest would print the struct's bytes, padding included, and ctest names the
// tests by that print, so the names would change from build to build).
void PrintTo(const SgdCase& c, std::ostream* os) {
  *os << "momentum " << c.momentum << " dampening " << c.dampening << " wd " << c.weight_decay
      << (c.nesterov ? " nesterov" : "");
}

class SgdReference : public ::testing::TestWithParam<SgdCase> {};

TEST_P(SgdReference, MatchesFormula) {
  const SgdCase c = GetParam();
  const double lr = 0.1;
  Values theta = kTheta0, buf(kTheta0.size());
  for (int t = 1; t <= kSteps; ++t)
    for (size_t i = 0; i < theta.size(); ++i) {
      double g = grad_at(t, i) + c.weight_decay * theta[i];
      if (c.momentum != 0) {
        buf[i] = t == 1 ? g : c.momentum * buf[i] + (1 - c.dampening) * g;
        g = c.nesterov ? g + c.momentum * buf[i] : buf[i];
      }
      theta[i] -= lr * g;
    }
  Tensor p = theta0();
  optim::SGD opt({p}, {lr, c.momentum, c.dampening, c.weight_decay, c.nesterov});
  run(opt, p);
  expect_close(p.to_vector<double>(), theta, 1e-14, 1e-14, "SGD");
  EXPECT_EQ(opt.steps(0), kSteps);
  EXPECT_TRUE(p.requires_grad() && p.is_leaf());
}

INSTANTIATE_TEST_SUITE_P(Optim, SgdReference,
                         ::testing::Values(SgdCase{0, 0, 0, false}, SgdCase{0.9, 0, 0, false},
                                           SgdCase{0.9, 0.3, 0.01, false}, SgdCase{0.8, 0, 0.05, true}));

struct AdamCase { double weight_decay; bool decoupled; };
void PrintTo(const AdamCase& c, std::ostream* os) {
  *os << "wd " << c.weight_decay << (c.decoupled ? " decoupled" : "");
}

class AdamReference : public ::testing::TestWithParam<AdamCase> {};

TEST_P(AdamReference, MatchesFormula) {
  const AdamCase c = GetParam();
  const double lr = 0.05, b1 = 0.8, b2 = 0.95, eps = 1e-6;
  Values theta = kTheta0, m(kTheta0.size()), v(kTheta0.size());
  for (int t = 1; t <= kSteps; ++t)
    for (size_t i = 0; i < theta.size(); ++i) {
      double g = grad_at(t, i);
      if (c.decoupled) theta[i] -= lr * c.weight_decay * theta[i];
      else g += c.weight_decay * theta[i];
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      const double mhat = m[i] / (1 - std::pow(b1, t)), vhat = v[i] / (1 - std::pow(b2, t));
      theta[i] -= lr * mhat / (std::sqrt(vhat) + eps);
    }
  Tensor p = theta0();
  const optim::AdamOptions o{lr, b1, b2, eps, c.weight_decay};
  std::unique_ptr<optim::Adam> opt =
      c.decoupled ? std::make_unique<optim::AdamW>(TensorList{p}, o) : std::make_unique<optim::Adam>(TensorList{p}, o);
  run(*opt, p);
  expect_close(p.to_vector<double>(), theta, 1e-13, 1e-14, c.decoupled ? "AdamW" : "Adam");
  expect_close(opt->exp_avg(0).to_vector<double>(), m, 1e-13, 1e-15, "first moment");
  expect_close(opt->exp_avg_sq(0).to_vector<double>(), v, 1e-13, 1e-15, "second moment");
}

INSTANTIATE_TEST_SUITE_P(Optim, AdamReference,
                         ::testing::Values(AdamCase{0, false}, AdamCase{0.1, false}, AdamCase{0.1, true}));

TEST(Optim, AdamWDefaultsToPyTorchDecay) {
  Tensor p = theta0();
  optim::AdamW opt({p});
  EXPECT_EQ(opt.options.weight_decay, 1e-2);
  EXPECT_EQ(opt.lr, 1e-3);
}

// Each parameter keeps its own step count: one that gets no gradient is not advanced.
TEST(Optim, StatePerParameter) {
  Tensor a = theta0(), b = theta0();
  optim::Adam opt({a, b}, {0.1});
  opt.step({grad_tensor(1), Tensor()});
  opt.step({grad_tensor(2), grad_tensor(2)});
  EXPECT_EQ(opt.steps(0), 2);
  EXPECT_EQ(opt.steps(1), 1);
  // b's single step is Adam's first step: θ − lr·sign(g) up to eps.
  const Values bv = b.to_vector<double>();
  for (size_t i = 0; i < bv.size(); ++i)
    EXPECT_NEAR(bv[i], kTheta0[i] - 0.1 * (grad_at(2, i) > 0 ? 1 : -1), 1e-6) << i;
}

TEST(Optim, BadArgumentsAreTypedErrors) {
  Tensor p = theta0();
  EXPECT_THROW(optim::SGD({p}, {0.1, 0.0, 0.0, 0.0, /*nesterov=*/true}), ValueError);
  EXPECT_THROW(optim::Adam({p}, {0.1, 1.0}), ValueError);
  EXPECT_THROW(optim::Adam({p * 2.0}), ValueError);  // not a leaf
  EXPECT_THROW(optim::SGD({from_indices({1}, {1})}), DTypeError);
  optim::SGD opt({p});
  EXPECT_THROW(opt.step({grad_tensor(1), grad_tensor(1)}), ValueError);
  EXPECT_THROW(opt.step({zeros({3}, DType::f64)}), ShapeError);
}

// A small regression (an MLP fitting sin on 64 points): each optimizer must bring the loss
// down to a tenth of its start in 200 steps, and the updates must not record anything.
void expect_loss_falls(const std::function<std::unique_ptr<optim::Optimizer>(TensorList)>& make) {
  manual_seed(7);
  nn::MLP mlp({1, 16, 1}, nn::Activation::tanh);
  Tensor x = rand({64, 1}) * 6.0 - 3.0, y = sin(x);
  std::unique_ptr<optim::Optimizer> opt = make(mlp.parameters());
  double first = 0, last = 0;
  for (int it = 0; it < 200; ++it) {
    Tensor loss = mse_loss(mlp(x), y);
    (it == 0 ? first : last) = loss.item();
    opt->zero_grad();
    loss.backward();
    opt->step();
  }
  for (const Tensor& p : mlp.parameters()) EXPECT_TRUE(p.is_leaf());
  EXPECT_LT(last, 0.1 * first) << "first " << first << ", last " << last;
}

TEST(Optim, SGDMomentumReducesLoss) {
  expect_loss_falls([](TensorList p) { return std::make_unique<optim::SGD>(std::move(p), optim::SGDOptions{0.05, 0.9}); });
}
TEST(Optim, AdamReducesLoss) {
  expect_loss_falls([](TensorList p) { return std::make_unique<optim::Adam>(std::move(p), optim::AdamOptions{0.02}); });
}
TEST(Optim, AdamWReducesLoss) {
  expect_loss_falls([](TensorList p) {
    return std::make_unique<optim::AdamW>(std::move(p), optim::AdamOptions{0.02, 0.9, 0.999, 1e-8, 0.01});
  });
}

TEST(Optim, ClipGradNorm) {
  TensorList g = {from_vector({3.0, 0.0}, {2}, DType::f64), Tensor(), from_vector({4.0}, {1}, DType::f64)};
  EXPECT_DOUBLE_EQ(optim::clip_grad_norm(g, 1.0), 5.0);
  const double coef = 1.0 / (5.0 + 1e-6);  // PyTorch's max_norm / (‖g‖ + 1e-6)
  expect_close(g[0].to_vector<double>(), {3 * coef, 0.0}, 1e-15, 0, "clipped");
  expect_close(g[2].to_vector<double>(), {4 * coef}, 1e-15, 0, "clipped");
  EXPECT_FALSE(g[1].defined());
  const Values before = g[2].to_vector<double>();
  EXPECT_NEAR(optim::clip_grad_norm(g, 10.0), 1.0, 1e-6);  // below the bound: unchanged
  EXPECT_EQ(g[2].to_vector<double>(), before);
}

TEST(Optim, ClipGradNormOtherOrders) {
  TensorList g = {from_vector({3.0, -4.0}, {2}, DType::f64), from_vector({-6.0}, {1}, DType::f64)};
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_DOUBLE_EQ(optim::clip_grad_norm(g, 3.0, inf), 6.0);  // max |g|
  const double coef = 3.0 / (6.0 + 1e-6);
  expect_close(g[0].to_vector<double>(), {3 * coef, -4 * coef}, 1e-15, 0, "inf-norm clipped");
  expect_close(g[1].to_vector<double>(), {-6 * coef}, 1e-15, 0, "inf-norm clipped");
  TensorList h = {from_vector({1.0, -2.0}, {2}, DType::f64), from_vector({3.0}, {1}, DType::f64)};
  EXPECT_DOUBLE_EQ(optim::clip_grad_norm(h, 0.0, 1.0), 6.0);  // Σ|g|; max_norm 0 only measures
  EXPECT_NEAR(optim::clip_grad_norm(h, 0.0, 3.0), std::cbrt(36.0), 1e-14);
  EXPECT_EQ(h[0].to_vector<double>(), (Values{1.0, -2.0}));
  EXPECT_THROW(optim::clip_grad_norm(h, 1.0, 0.0), ValueError);
  EXPECT_THROW(optim::clip_grad_norm(h, 1.0, -2.0), ValueError);
}

// As torch.nn.utils.clip_grad_norm_: a NaN norm makes every gradient NaN; an infinite one scales
// by 0 (so inf·0 = NaN where a gradient was infinite, 0 elsewhere); error_if_nonfinite throws
// before touching them.
TEST(Optim, ClipGradNormNonFinite) {
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  for (const DType dt : {DType::f64, DType::f32}) {
    SCOPED_TRACE(dtype_name(dt));
    TensorList g = {from_vector({1.0, nan}, {2}, dt), from_vector({2.0}, {1}, dt)};
    EXPECT_TRUE(std::isnan(optim::clip_grad_norm(g, 1.0)));
    for (const Tensor& t : g)
      for (double v : t.to_vector<double>()) EXPECT_TRUE(std::isnan(v)) << v;

    g = {from_vector({1.0, inf}, {2}, dt), from_vector({-2.0}, {1}, dt)};
    EXPECT_EQ(optim::clip_grad_norm(g, 1.0), inf);
    const Values g0 = g[0].to_vector<double>();
    EXPECT_EQ(g0[0], 0.0);
    EXPECT_TRUE(std::isnan(g0[1])) << g0[1];
    EXPECT_EQ(g[1].to_vector<double>(), (Values{0.0}));

    g = {from_vector({1.0, -inf}, {2}, dt)};
    EXPECT_EQ(optim::clip_grad_norm(g, 1.0, inf), inf);
    EXPECT_TRUE(std::isnan(g[0].to_vector<double>()[1]));

    for (const double bad : {nan, inf}) {
      g = {from_vector({1.0, 2.0}, {2}, dt), from_vector({bad}, {1}, dt)};
      try {
        optim::clip_grad_norm(g, 1.0, 2.0, /*error_if_nonfinite=*/true);
        ADD_FAILURE() << "no ValueError for a norm of " << bad;
      } catch (const ValueError& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("clip_grad_norm"), std::string::npos) << m;
        EXPECT_NE(m.find(std::isnan(bad) ? "is nan" : "is inf"), std::string::npos) << m;
      }
      EXPECT_EQ(g[0].to_vector<double>(), (Values{1.0, 2.0}));  // untouched
    }
    g = {from_vector({3.0, 4.0}, {2}, dt)};  // finite: no error, clipped as usual
    EXPECT_DOUBLE_EQ(optim::clip_grad_norm(g, 1.0, 2.0, true), 5.0);
  }
}

TEST(Optim, Schedules) {
  EXPECT_DOUBLE_EQ(optim::cosine(0, 100, 1.0, 0.1), 1.0);
  EXPECT_DOUBLE_EQ(optim::cosine(50, 100, 1.0, 0.1), 0.55);
  EXPECT_DOUBLE_EQ(optim::cosine(25, 100, 1.0, 0.0), 0.5 * (1 + std::cos(M_PI / 4)));
  EXPECT_DOUBLE_EQ(optim::cosine(100, 100, 1.0, 0.1), 0.1);
  EXPECT_DOUBLE_EQ(optim::cosine(500, 100, 1.0, 0.1), 0.1);
  EXPECT_DOUBLE_EQ(optim::linear_warmup(0, 4, 2.0), 0.5);
  EXPECT_DOUBLE_EQ(optim::linear_warmup(3, 4, 2.0), 2.0);
  EXPECT_DOUBLE_EQ(optim::linear_warmup(9, 4, 2.0), 2.0);
  EXPECT_DOUBLE_EQ(optim::warmup_cosine(1, 4, 104, 2.0), 1.0);
  EXPECT_DOUBLE_EQ(optim::warmup_cosine(4, 4, 104, 2.0), 2.0);
  EXPECT_DOUBLE_EQ(optim::warmup_cosine(54, 4, 104, 2.0), 1.0);
  // Assigned to an optimizer's lr, a schedule changes the step taken.
  Tensor p = theta0();
  optim::SGD opt({p}, {1.0});
  opt.lr = optim::linear_warmup(0, 10, 1.0);
  opt.step({ones({2, 2}, DType::f64)});
  EXPECT_NEAR(p.to_vector<double>()[0], kTheta0[0] - 0.1, 1e-15);
}

}  // namespace
}  // namespace gg::test
