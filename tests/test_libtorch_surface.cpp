// The programs a libtorch user writes in the first hour, each as libtorch spells it, each
// checking that it computes what it computes in libtorch (not only that it compiles).
#include <functional>
#include <sstream>
#include <string>

#include <strings.h>     // POSIX ::index
#include <sys/select.h>  // POSIX ::select

#include "test_util.h"

// At global scope, as in a user's main.cpp: argument-dependent lookup picks gg::select and
// gg::index over the POSIX functions of the same names.
static gg::Tensor second_row(const gg::Tensor& m) { return select(m, 0, 1); }
static gg::Tensor first_column(const gg::Tensor& m) { return index(m, {gg::indexing::Slice(), 0}); }

namespace gg::test {
namespace {

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

// backward(gradient, retain_graph, create_graph): the second argument keeps the graph and
// records nothing, so the gradient is a constant and a second pass works.
TEST(LibtorchSurface, BackwardSecondArgumentIsRetainGraph) {
  Tensor x = tensor({2.0}, DType::f64).requires_grad_();
  Tensor y = (x * x * x).sum();
  y.backward(Tensor(), true);
  EXPECT_FALSE(x.grad().requires_grad());
  EXPECT_DOUBLE_EQ(x.grad().item<double>(), 12.0);
  y.backward();  // the graph was retained: accumulates 12 again
  EXPECT_DOUBLE_EQ(x.grad().item<double>(), 24.0);
  EXPECT_THROW(y.backward(), AutogradError);  // freed by the pass above

  x.grad().zero_();
  (x * x * x).sum().backward({}, /*retain_graph=*/{}, /*create_graph=*/true);
  EXPECT_TRUE(x.grad().requires_grad());  // 3x², differentiable: d/dx = 6x
  EXPECT_DOUBLE_EQ(grad(x.grad().sum(), x).item<double>(), 12.0);
}

// grad(outputs, inputs, grad_outputs, retain_graph, create_graph, allow_unused).
TEST(LibtorchSurface, GradPositionalArgumentsFollowLibtorch) {
  Tensor x = tensor({1.0, 2.0}, DType::f64).requires_grad_();
  Tensor z = tensor({5.0}, DType::f64).requires_grad_();
  Tensor y = (x.exp() * x).sum();
  TensorList g = grad({y}, {x}, {}, /*retain_graph=*/true, /*create_graph=*/false);
  EXPECT_FALSE(g[0].requires_grad());
  TensorList h = grad({y}, {x}, {}, /*retain_graph=*/std::nullopt, /*create_graph=*/true);
  EXPECT_TRUE(h[0].requires_grad());
  TensorList u = grad({(x * 2.0).sum()}, {x, z}, {}, std::nullopt, false, /*allow_unused=*/true);
  EXPECT_FALSE(u[1].defined());
  // The named form, for options set one at a time.
  GradOptions o;
  o.create_graph = true;
  EXPECT_TRUE(grad({(x * x).sum()}, {x}, {}, o)[0].requires_grad());
  EXPECT_TRUE(o.retain_graph == std::nullopt);
}

TEST(LibtorchSurface, MemberForms) {
  Tensor x = tensor({{1.0, 2.0, 3.0}, {4.0, 5.0, 6.0}}, DType::f64);  // (2, 3)
  EXPECT_DOUBLE_EQ(x.sum().item<double>(), 21.0);
  EXPECT_EQ(values(x.sum(1)), (std::vector<double>{6.0, 15.0}));
  EXPECT_EQ(x.sum(0, /*keepdim=*/true).sizes(), (Shape{1, 3}));
  EXPECT_EQ(values(x.sum({0, 1})), (std::vector<double>{21.0}));
  EXPECT_DOUBLE_EQ(x.mean().item<double>(), 3.5);
  EXPECT_EQ(values(x.mean(-1)), (std::vector<double>{2.0, 5.0}));
  EXPECT_DOUBLE_EQ(x.max().item<double>(), 6.0);
  EXPECT_EQ(x.reshape({3, 2}).sizes(), (Shape{3, 2}));
  EXPECT_EQ(x.view({-1}).sizes(), (Shape{6}));
  EXPECT_THROW(x.t().view({6}), ShapeError);  // not contiguous: view never copies
  EXPECT_EQ(values(x.t().reshape({6})), (std::vector<double>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(x.transpose(0, 1).sizes(), (Shape{3, 2}));
  EXPECT_EQ(x.unsqueeze(0).unsqueeze(-1).permute({3, 1, 0, 2}).sizes(), (Shape{1, 2, 1, 3}));
  EXPECT_EQ(x.unsqueeze(1).squeeze().sizes(), (Shape{2, 3}));
  EXPECT_EQ(x.unsqueeze(1).squeeze(1).sizes(), (Shape{2, 3}));
  EXPECT_EQ(x.reshape({1, 2, 3}).flatten(1).sizes(), (Shape{1, 6}));
  EXPECT_EQ(x.flatten().sizes(), (Shape{6}));
  EXPECT_EQ(x.sum(0).expand({4, 3}).sizes(), (Shape{4, 3}));
  EXPECT_EQ(values(x.pow(2.0).sqrt()), values(x));
  EXPECT_EQ(values(x.neg().abs()), values(x));
  EXPECT_NEAR(x.log().exp().sum().item<double>(), 21.0, 1e-12);
  EXPECT_NEAR(x.tanh().sum().item<double>(), values(tanh(x).sum())[0], 0.0);
  EXPECT_NEAR(x.sigmoid().sum().item<double>(), values(sigmoid(x).sum())[0], 0.0);
  EXPECT_EQ(values((-x).relu()), std::vector<double>(6, 0.0));
  EXPECT_EQ(values(x.matmul(x.t())), (std::vector<double>{14, 32, 32, 77}));
  EXPECT_EQ(values(x.mm(x.t())), (std::vector<double>{14, 32, 32, 77}));
  EXPECT_EQ(values(mm(x.t(), x).sum(0)), (std::vector<double>{66, 87, 108}));
  EXPECT_THROW(mm(x, x.sum(0)), ShapeError);  // mm wants two matrices
  EXPECT_EQ(x.to(DType::f32).dtype(), DType::f32);
  EXPECT_EQ(values(x.add(x, 2.0).sub(1.0).mul(2.0).div(x)).front(), 4.0);  // (1 + 2·1 - 1)·2 / 1

  Tensor c = x.clone();
  EXPECT_FALSE(c.is_same(x));
  EXPECT_EQ(values(c), values(x));
  EXPECT_TRUE(x.t().contiguous().is_contiguous());
  Tensor w = x.clone().requires_grad_();
  EXPECT_FALSE((w * 2.0).detach().requires_grad());
}

TEST(LibtorchSurface, ItemSizesAndDataPointers) {
  Tensor x = zeros({2, 3});
  EXPECT_EQ(x.dim(), 2);
  EXPECT_EQ(x.numel(), 6);
  EXPECT_EQ(x.sizes()[1], 3);
  EXPECT_EQ(x.size(-1), 3);
  float* p = x.data_ptr<float>();
  for (int i = 0; i < 6; ++i) p[i] = static_cast<float>(i);
  EXPECT_FLOAT_EQ(x.sum().item<float>(), 15.0f);
  EXPECT_EQ(x.sum().item<int64_t>(), 15);
  EXPECT_EQ(tensor({15}).item<int>(), 15);
  EXPECT_EQ(tensor(int64_t{1} << 60).item<int64_t>(), int64_t{1} << 60);  // exact beyond 2^53
  EXPECT_TRUE((x.sum() > 1.0).item<bool>());
  EXPECT_THROW(x.data_ptr<double>(), DTypeError);
  EXPECT_THROW(x.item<double>(), ValueError);  // six elements
}

TEST(LibtorchSurface, RetainGradOnANonLeaf) {
  Tensor x = tensor({1.0, -2.0, 3.0}, DType::f64).requires_grad_();
  Tensor y = x * 2.0;
  y.retain_grad();
  Tensor z = (y * y).sum();
  z.backward();
  EXPECT_EQ(values(y.grad()), (std::vector<double>{4.0, -8.0, 12.0}));  // 2y
  EXPECT_EQ(values(x.grad()), (std::vector<double>{8.0, -16.0, 24.0}));
  x.retain_grad();  // a leaf keeps its gradient anyway
  EXPECT_THROW(tensor({1.0}).retain_grad(), AutogradError);
}

TEST(LibtorchSurface, InPlaceAndCompoundAssignment) {
  Tensor x = tensor({1.0, 2.0, 3.0}, DType::f64);
  Tensor alias = x;  // the same tensor, as in libtorch
  x.add_(tensor({1.0, 1.0, 1.0}, DType::f64)).mul_(2.0);
  EXPECT_EQ(values(alias), (std::vector<double>{4, 6, 8}));
  x -= 2.0;
  x /= tensor({2.0, 4.0, 6.0}, DType::f64);
  x *= 3.0;
  x += x;
  EXPECT_EQ(values(x), (std::vector<double>{6, 6, 6}));
  x.sub_(x, 0.5).div_(3.0);
  EXPECT_EQ(values(x), (std::vector<double>{1, 1, 1}));
  x.fill_(7.0);
  EXPECT_EQ(values(x), (std::vector<double>{7, 7, 7}));
  x.copy_(tensor({1.0, 2.0, 3.0}, DType::f64));
  x.zero_();
  EXPECT_EQ(values(x), (std::vector<double>{0, 0, 0}));
  EXPECT_THROW(x += tensor({1.0, 2.0}, DType::f64), ShapeError);

  // A leaf that requires grad is updated under NoGradGuard, like an optimizer step.
  Tensor w = tensor({1.0, 2.0}, DType::f64).requires_grad_();
  try {
    w += 1.0;
    FAIL() << "expected AutogradError";
  } catch (const AutogradError& e) {
    EXPECT_NE(std::string(e.what()).find("requires grad"), std::string::npos) << e.what();
  }
  (w * w).sum().backward();
  {
    NoGradGuard no_grad;
    w -= 0.25 * w.grad();
    zero_(w.grad());  // an rvalue handle
  }
  EXPECT_EQ(values(w), (std::vector<double>{0.5, 1.0}));
  EXPECT_EQ(values(w.grad()), (std::vector<double>{0.0, 0.0}));
}

TEST(LibtorchSurface, ComparisonsWithNumbers) {
  Tensor x = tensor({0.5, 1.0, 2.0}, DType::f64);
  EXPECT_EQ((x > 1.0).dtype(), DType::b8);
  EXPECT_EQ((x > 1.0).to_vector<uint8_t>(), (std::vector<uint8_t>{0, 0, 1}));
  EXPECT_EQ((1.0 < x).to_vector<uint8_t>(), (std::vector<uint8_t>{0, 0, 1}));
  EXPECT_EQ((x >= 1).to_vector<uint8_t>(), (std::vector<uint8_t>{0, 1, 1}));
  EXPECT_EQ((x <= 1.0).to_vector<uint8_t>(), (std::vector<uint8_t>{1, 1, 0}));
  EXPECT_EQ((x == 1.0).to_vector<uint8_t>(), (std::vector<uint8_t>{0, 1, 0}));
  EXPECT_EQ((2.0 != x).to_vector<uint8_t>(), (std::vector<uint8_t>{1, 1, 0}));
  EXPECT_EQ((x < x * 2.0).to_vector<uint8_t>(), (std::vector<uint8_t>{1, 1, 1}));
  EXPECT_EQ((x.gt(0.75)).to_vector<uint8_t>(), (std::vector<uint8_t>{0, 1, 1}));
  // An integer tensor meets a fractional number in floating point, as PyTorch promotes it, not
  // rounded to an integer; an integer number stays an exact i64 comparison, even beyond 2^53.
  EXPECT_EQ((tensor({1, 2, 3}) > 1.5).to_vector<uint8_t>(), (std::vector<uint8_t>{0, 1, 1}));
  EXPECT_EQ((1.5 >= tensor({1, 2, 3})).to_vector<uint8_t>(), (std::vector<uint8_t>{1, 0, 0}));
  EXPECT_EQ((tensor({1, 2, 3}) == 2).to_vector<uint8_t>(), (std::vector<uint8_t>{0, 1, 0}));
  EXPECT_EQ((2 < tensor({1, 2, 3})).to_vector<uint8_t>(), (std::vector<uint8_t>{0, 0, 1}));
  const int64_t big = (int64_t{1} << 60) + 1;
  EXPECT_EQ((tensor({big}) == big - 1).to_vector<uint8_t>(), (std::vector<uint8_t>{0}));
  EXPECT_EQ((tensor({big}) == big).to_vector<uint8_t>(), (std::vector<uint8_t>{1}));
  EXPECT_EQ(tensor({1, 2, 3}).gt(1.5).to_vector<uint8_t>(), (std::vector<uint8_t>{0, 1, 1}));
  // The operators are the named comparisons: the same promotion with a tensor on either side.
  Tensor f32 = tensor({0.5f, 1.0f, 2.0f});
  EXPECT_EQ((f32 == x).to_vector<uint8_t>(), (std::vector<uint8_t>{1, 1, 1}));  // f32 meets f64 in f64
  EXPECT_TRUE(equal(x >= 1.0, ge(x, 1.0)));
  EXPECT_TRUE(equal(1.0 > x, lt(x, 1.0)));
  // A mask selects through where, as torch::where does.
  EXPECT_EQ(values(where(x > 1.0, x, zeros_like(x))), (std::vector<double>{0, 0, 2}));
}

// Binary ops promote as PyTorch's do, members and operators alike; the in-place forms compute
// in the promoted type and must cast back into the destination.
TEST(LibtorchSurface, MixedDTypesPromote) {
  Tensor d = tensor({1.0, 2.0}, DType::f64);
  Tensor f = tensor({0.5f, 0.25f});
  Tensor i = tensor({1, 2});
  EXPECT_EQ((d * f).dtype(), DType::f64);
  EXPECT_EQ(d.add(f).dtype(), DType::f64);
  EXPECT_EQ((i * 2).dtype(), DType::i64);
  EXPECT_EQ((i * 2.5).dtype(), DType::f32);
  EXPECT_EQ(i.mul(2.5).dtype(), DType::f32);
  EXPECT_EQ((i + f).dtype(), DType::f32);
  EXPECT_EQ((d * scalar_tensor(2.0, DType::f32)).dtype(), DType::f64);  // a 0-dim tensor does not widen
  EXPECT_EQ(i.pow(2).to_vector<int64_t>(), (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(i.pow(2).dtype(), DType::i64);

  Tensor fd = tensor({1.0f, 2.0f});
  fd += d;  // an f64 result fits an f32 destination (same category)
  EXPECT_EQ(fd.dtype(), DType::f32);
  EXPECT_EQ(values(fd), (std::vector<double>{2, 4}));
  i += 1;
  i *= 3;
  i -= 1;
  i /= 2;  // i64 division truncates, as gg::div does
  EXPECT_EQ(i.dtype(), DType::i64);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{2, 4}));  // (2·3 - 1) / 2, (3·3 - 1) / 2
  EXPECT_THROW(i += 1.5, DTypeError);  // an f32 result cannot go back into i64
  EXPECT_THROW(i.mul_(f), DTypeError);
  EXPECT_THROW(i.div_(0.5), DTypeError);
  EXPECT_THROW(sub_(i, f), DTypeError);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{2, 4}));  // refused before writing
  try {
    i.sub_(d);
    FAIL() << "expected DTypeError";
  } catch (const DTypeError& e) {
    EXPECT_NE(std::string(e.what()).find("gg::sub_"), std::string::npos) << e.what();
  }
}

// torch.cat and torch.stack promote their tensors' dtypes; each input's gradient comes back in
// its own dtype, and the rule is differentiable again.
TEST(LibtorchSurface, CatAndStackPromote) {
  Tensor d = tensor({1.0, 2.0}, DType::f64).requires_grad_();
  Tensor f = tensor({0.5f, 0.25f}).requires_grad_();
  Tensor i = tensor({3, 4});
  Tensor c = cat({f, d, i}, 0);
  EXPECT_EQ(c.dtype(), DType::f64);
  EXPECT_EQ(values(c), (std::vector<double>{0.5, 0.25, 1, 2, 3, 4}));
  EXPECT_EQ(cat({i, i}, 0).dtype(), DType::i64);
  Tensor s = stack({f, d}, 0);
  EXPECT_EQ(s.dtype(), DType::f64);
  EXPECT_EQ(s.sizes(), (Shape{2, 2}));

  GradOptions record;
  record.create_graph = true;
  const Tensor w = tensor({1.0, 2.0, 3.0, 4.0, 5.0, 6.0}, DType::f64);
  TensorList g = grad({(c * c * w).sum()}, {f, d}, {}, record);  // 2·w·x
  EXPECT_EQ(g[0].dtype(), DType::f32);
  EXPECT_EQ(g[1].dtype(), DType::f64);
  EXPECT_EQ(values(g[0]), (std::vector<double>{1, 1}));
  EXPECT_EQ(values(g[1]), (std::vector<double>{6, 16}));
  TensorList h = grad({g[0].sum() + g[1].sum()}, {f, d});  // 2·w
  EXPECT_EQ(h[0].dtype(), DType::f32);
  EXPECT_EQ(values(h[0]), (std::vector<double>{2, 4}));
  EXPECT_EQ(values(h[1]), (std::vector<double>{6, 8}));
}

// The everyday ops as members, each the free function.
TEST(LibtorchSurface, MemberFormsOfTheEverydayOps) {
  Tensor x = tensor({{1.0, 5.0, 3.0}, {4.0, 2.0, 6.0}}, DType::f64);  // (2, 3)
  auto [values_1, indices_1] = x.max(1);
  EXPECT_EQ(values(values_1), (std::vector<double>{5, 6}));
  EXPECT_EQ(indices_1.to_vector<int64_t>(), (std::vector<int64_t>{1, 2}));
  auto [min_0, argmin_0] = x.min(0, /*keepdim=*/true);
  EXPECT_EQ(min_0.sizes(), (Shape{1, 3}));
  EXPECT_EQ(argmin_0.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 0}));
  EXPECT_DOUBLE_EQ(x.min().item<double>(), 1.0);
  EXPECT_EQ(x.argmax().item<int64_t>(), 5);
  EXPECT_EQ(x.argmax(1).to_vector<int64_t>(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(x.argmin(0, true).sizes(), (Shape{1, 3}));
  EXPECT_EQ(values(x.amax({0})), (std::vector<double>{4, 5, 6}));
  EXPECT_EQ(values(x.amin({1})), (std::vector<double>{1, 2}));
  EXPECT_EQ(values(x.max(x - 1.0)), values(x));
  EXPECT_EQ(values(x.min(x - 1.0)), values(x - 1.0));
  EXPECT_EQ(values(x.clamp(2, 5)), (std::vector<double>{2, 5, 3, 4, 2, 5}));
  EXPECT_EQ(values(x.clamp(std::nullopt, 2.5)), (std::vector<double>{1, 2.5, 2.5, 2.5, 2, 2.5}));
  EXPECT_EQ(values(x.clamp_min(4)), (std::vector<double>{4, 5, 4, 4, 4, 6}));
  EXPECT_EQ(values(x.clamp_max(1.5)), values(clamp_max(x, 1.5)));
  EXPECT_EQ(values(x.log1p()), values(log1p(x)));
  EXPECT_EQ(values(x.expm1()), values(expm1(x)));
  EXPECT_EQ(values((x / 4.0).floor()), (std::vector<double>{0, 1, 0, 1, 0, 1}));
  EXPECT_EQ(values((x / 4.0).ceil()), (std::vector<double>{1, 2, 1, 1, 1, 2}));
  EXPECT_EQ(values((x / 2.0).round()), (std::vector<double>{0, 2, 2, 2, 1, 3}));  // half to even
  EXPECT_EQ(values(x.maximum(x * -1.0)), values(x));
  EXPECT_EQ(values(x.minimum(x * -1.0)), values(-x));
  EXPECT_EQ(values(x.pow(x)), values(pow(x, x)));
  EXPECT_EQ(values(x.logsumexp({1})), values(logsumexp(x, {1})));
  EXPECT_DOUBLE_EQ(x.var().item<double>(), var(x).item<double>());
  EXPECT_EQ(values(x.std({0}, /*correction=*/0)), (std::vector<double>{1.5, 1.5, 1.5}));
  EXPECT_DOUBLE_EQ(x.norm().item<double>(), std::sqrt(91.0));
  EXPECT_DOUBLE_EQ(x.norm(1).item<double>(), 21.0);
  EXPECT_EQ(values(x.norm(2, {1})), values(norm(x, 2, {1})));
  EXPECT_EQ(values(x.masked_fill(x > 3.0, 0)), (std::vector<double>{1, 0, 3, 0, 2, 0}));
  EXPECT_EQ(values(x.masked_fill(x > 3.0, scalar_tensor(-1.0, DType::f64))), (std::vector<double>{1, -1, 3, -1, 2, -1}));
  EXPECT_EQ(values(x.triu()), (std::vector<double>{1, 5, 3, 0, 2, 6}));
  EXPECT_EQ(values(x.tril(-1)), (std::vector<double>{0, 0, 0, 4, 0, 0}));
  Tensor idx = tensor({{2, 0}, {1, 1}});
  EXPECT_EQ(values(x.gather(1, idx)), (std::vector<double>{3, 1, 2, 2}));
  EXPECT_EQ(values(zeros({2, 3}, DType::f64).scatter_add(1, idx, ones({2, 2}, DType::f64))),
            (std::vector<double>{1, 0, 1, 0, 2, 0}));
  EXPECT_TRUE(x.equal(x.clone()));
  EXPECT_FALSE(x.equal(x + 1e-9));
  EXPECT_TRUE(x.allclose(x + 1e-9));
}

TEST(LibtorchSurface, PrintingShapesDTypesAndDevices) {
  std::ostringstream os;
  Tensor x = zeros({2, 3}, DType::f64);
  os << x.shape() << " " << x.sizes() << " " << x.dtype() << " " << x.device();
  EXPECT_EQ(os.str(), "[2, 3] [2, 3] f64 cpu");
}

TEST(LibtorchSurface, TensorFactoriesAndGuards) {
  Tensor i = tensor({1, 2, 3});
  EXPECT_EQ(i.dtype(), DType::i64);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3}));
  Tensor f = tensor({1.0, 2.0});
  EXPECT_EQ(f.dtype(), DType::f32);
  EXPECT_EQ(f.sizes(), (Shape{2}));
  EXPECT_EQ(tensor({1.0, 2.0}, DType::f64).dtype(), DType::f64);
  EXPECT_EQ(tensor({1, 2}, DType::f32).dtype(), DType::f32);
  EXPECT_EQ(tensor({true, false}).dtype(), DType::b8);
  Tensor m = tensor({{1, 2}, {3, 4}});
  EXPECT_EQ(m.sizes(), (Shape{2, 2}));
  EXPECT_EQ(m.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(tensor(2.5).dim(), 0);
  EXPECT_EQ(tensor(int64_t{3}).item<int64_t>(), 3);
  EXPECT_THROW(tensor({{1.0, 2.0}, {3.0}}), ShapeError);  // ragged rows

  Tensor w = tensor({1.0}).requires_grad_();
  {
    NoGradGuard no_grad;
    EXPECT_FALSE((w * 2.0).requires_grad());
  }
  EXPECT_TRUE((w * 2.0).requires_grad());
}

// A whole first program: least squares by gradient descent, written with member forms.
TEST(LibtorchSurface, LinearRegressionLoop) {
  manual_seed(0);
  Tensor X = randn({64, 3}, DType::f64);
  Tensor true_w = tensor({{2.0}, {-1.0}, {0.5}}, DType::f64);
  Tensor Y = X.mm(true_w) + 0.25;
  Tensor w = zeros({3, 1}, DType::f64).requires_grad_();
  Tensor b = zeros({1}, DType::f64).requires_grad_();
  for (int step = 0; step < 300; ++step) {
    Tensor loss = (X.matmul(w) + b - Y).pow(2).mean();
    loss.backward();
    NoGradGuard no_grad;
    w -= 0.1 * w.grad();
    b -= 0.1 * b.grad();
    w.grad().zero_();
    b.grad().zero_();
  }
  EXPECT_NEAR(w[0].item<double>(), 2.0, 1e-6);
  EXPECT_NEAR(w[1].item<double>(), -1.0, 1e-6);
  EXPECT_NEAR(w[2].item<double>(), 0.5, 1e-6);
  EXPECT_NEAR(b.item<double>(), 0.25, 1e-6);
}

// torch::indexing, spelled the same: integers, Slice, None, Ellipsis ("..."), masks, indices.
TEST(LibtorchSurface, IndexingLikeTorchIndexing) {
  using namespace indexing;
  Tensor x = arange(0, 24, 1, DType::f64).reshape({2, 3, 4});
  EXPECT_EQ(x[1].sizes(), (Shape{3, 4}));
  EXPECT_DOUBLE_EQ(x[1][2][3].item<double>(), 23.0);
  EXPECT_DOUBLE_EQ(x[-1][0][-1].item<double>(), 15.0);
  EXPECT_EQ(values(x.index({0, Slice(), 0})), (std::vector<double>{0, 4, 8}));
  EXPECT_EQ(values(x.index({0, 1, Slice(1, None, 2)})), (std::vector<double>{5, 7}));
  EXPECT_EQ(x.index({None, Ellipsis, None}).sizes(), (Shape{1, 2, 3, 4, 1}));
  EXPECT_EQ(x.index({"...", 0}).sizes(), (Shape{2, 3}));
  EXPECT_EQ(x.index({Slice(None, -1)}).sizes(), (Shape{1, 3, 4}));
  EXPECT_EQ(x.index({}).sizes(), (Shape{2, 3, 4}));
  EXPECT_EQ(values(x.slice(2, 1, 3).select(0, 0).select(0, 0)), (std::vector<double>{1, 2}));
  EXPECT_EQ(values(x.slice(/*dim=*/1, /*start=*/2)[0]), (std::vector<double>{8, 9, 10, 11}));
  EXPECT_EQ(values(x.narrow(2, -2, 2)[0][0]), (std::vector<double>{2, 3}));
  EXPECT_EQ(values(x.index({x > 20.0})), (std::vector<double>{21, 22, 23}));
  EXPECT_EQ(values(x[0].index({tensor({2, -3})})), (std::vector<double>{8, 9, 10, 11, 0, 1, 2, 3}));
  EXPECT_EQ(x[tensor({false, true})].sizes(), (Shape{1, 3, 4}));
  EXPECT_EQ(values(x.index_select(2, tensor({3})).flatten()), (std::vector<double>{3, 7, 11, 15, 19, 23}));
  EXPECT_EQ(values(second_row(x[0])), (std::vector<double>{4, 5, 6, 7}));
  EXPECT_EQ(values(first_column(x[0])), (std::vector<double>{0, 4, 8}));

  // Basic indexing gives views, so writing through one changes x; assigning to an indexed
  // temporary writes into x, as in libtorch.
  x[1][2].fill_(-1.0);
  EXPECT_EQ(values(x[1][2]), (std::vector<double>(4, -1.0)));
  x[0][0] = 100.0;
  EXPECT_EQ(values(x[0][0]), (std::vector<double>(4, 100.0)));
  x.index({0, 1}) = tensor({1.0, 2.0, 3.0, 4.0}, DType::f64);
  EXPECT_EQ(values(x[0][1]), (std::vector<double>{1, 2, 3, 4}));
  x.index_put_({x < 0.0}, 0.0);
  EXPECT_EQ(values(x[1][2]), (std::vector<double>(4, 0.0)));
  x.index_put_({1, Slice(), 0}, tensor({7.0, 8.0, 9.0}, DType::f64));
  EXPECT_EQ(values(x.index({1, Slice(), 0})), (std::vector<double>{7, 8, 9}));
  x.index_put_({Ellipsis, tensor({true, false, false, true})}, 5.0);
  EXPECT_EQ(values(x[0][1]), (std::vector<double>{5, 2, 3, 5}));
  const uint64_t before = x.version();
  x[0] = x[1];  // a copy through the view bumps the version autograd checks
  EXPECT_GT(x.version(), before);
  EXPECT_EQ(values(x[0]), values(x[1]));
}

// Every index op is recorded with a backward in ops: gradients of gradients are exact.
TEST(LibtorchSurface, IndexingIsDifferentiableToSecondOrder) {
  using namespace indexing;
  Tensor w = tensor({{1.0, 2.0, 3.0}, {4.0, 5.0, 6.0}}, DType::f64).requires_grad_();
  auto f = [](const Tensor& w) {
    return w.index({Slice(), 1}).pow(3.0).sum() + w[0][0] * w[1][2] + w.index({w > 4.5}).sum();
  };
  Tensor g = grad(f(w), w, {}, std::nullopt, /*create_graph=*/true);
  // 3w² on column 1, w12 at (0, 0), w00 at (1, 2), and 1 where w > 4.5
  EXPECT_EQ(values(g), (std::vector<double>{6, 12, 0, 0, 76, 2}));
  EXPECT_EQ(values(grad(g.sum(), w)), (std::vector<double>{1, 12, 0, 0, 30, 1}));

  SingleFn fn = [](const TensorList& in) {
    const Tensor& x = in[0];
    return x.index({Ellipsis, tensor({2, 0})}).index({None, 1}).tanh() * x.narrow(1, 1, 2).select(0, -1);
  };
  Tensor x = randn({2, 3}, DType::f64).requires_grad_();
  EXPECT_TRUE(gradcheck(fn, {x}).ok);
  EXPECT_TRUE(gradgradcheck(fn, {x}).ok);
}

// Bad indices are typed errors naming the op, the argument and the values.
TEST(LibtorchSurface, IndexingErrorsNameTheOpAndTheValues) {
  using namespace indexing;
  Tensor x = zeros({2, 3});
  auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  auto has = [](const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; };
  std::string m = message([&] { x[5]; });
  EXPECT_TRUE(has(m, "gg::select") && has(m, "index 5") && has(m, "size 2")) << m;
  EXPECT_THROW(x[5], IndexError);
  m = message([&] { x.index({0, -4}); });
  EXPECT_TRUE(has(m, "gg::index") && has(m, "-4") && has(m, "dim 1 of size 3")) << m;
  EXPECT_THROW(x.index({0, -4}), IndexError);
  m = message([&] { x.index({tensor({true, false, true})}); });
  EXPECT_TRUE(has(m, "gg::index") && has(m, "mask of shape [3]") && has(m, "[2]")) << m;
  EXPECT_THROW(x.index({tensor({true, false, true})}), IndexError);
  EXPECT_THROW(x.index({0, 0, 0}), IndexError);
  EXPECT_THROW(x.index({Ellipsis, Ellipsis}), IndexError);
  EXPECT_THROW(x.index({Slice(0, 2, -1)}), ValueError);
  EXPECT_THROW(x.index({tensor({0.5})}), DTypeError);
  EXPECT_THROW(x.index({tensor({0}), tensor({0})}), ValueError);
  EXPECT_THROW(x.index({"..x"}), ValueError);
  EXPECT_THROW(x.index({tensor({3})}), IndexError);
  EXPECT_THROW(x.narrow(1, 2, 5), IndexError);
  EXPECT_THROW(x.select(2, 0), IndexError);
  EXPECT_THROW(x.index_put_({tensor({true})}, 1.0), IndexError);
  EXPECT_THROW(x.index_put_({tensor({1})}, 1.0), ValueError);
  Tensor w = zeros({2}).requires_grad_();
  EXPECT_THROW(w.index_put_({0}, 1.0), AutogradError);
  EXPECT_THROW(w[0] = 1.0, AutogradError);
}

}  // namespace
}  // namespace gg::test
