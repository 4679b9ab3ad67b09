// Elementwise ops on dense non-contiguous views (transposes, permutes) run on the CPU as flat
// arrays and return results laid out like their input. Checked against the same ops on
// contiguous copies (the path every other layout takes), element by element and exactly, and
// through first and second derivatives.
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "test_util.h"

namespace gg::test {
namespace {

// A (2, 3, 4) f64 tensor permuted to (4, 2, 3): dense, not contiguous.
Tensor permuted(uint64_t seed, double shift = 0.0) {
  manual_seed(seed);
  return permute(randn({2, 3, 4}, DType::f64) + shift, {2, 0, 1});
}

void expect_same(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  EXPECT_EQ(got.to_vector<double>(), want.to_vector<double>()) << what;
}

using Unary = std::pair<const char*, std::function<Tensor(const Tensor&)>>;

TEST(Layouts, UnaryOpsOnPermutedViews) {
  const std::vector<Unary> ops = {
      {"neg", [](const Tensor& x) { return neg(x); }},
      {"exp", [](const Tensor& x) { return exp(x); }},
      {"tanh", [](const Tensor& x) { return tanh(x); }},
      {"relu", [](const Tensor& x) { return relu(x); }},
      {"sin", [](const Tensor& x) { return sin(x); }},
      {"abs", [](const Tensor& x) { return abs(x); }},
      {"mul_scalar", [](const Tensor& x) { return x * 0.25; }},
      {"add_scalar", [](const Tensor& x) { return x + 3.0; }},
      {"pow", [](const Tensor& x) { return pow(x, 3.0); }},
  };
  const Tensor x = permuted(1);
  ASSERT_FALSE(x.is_contiguous());
  const Tensor xc = contiguous(x);
  for (const auto& [name, f] : ops) {
    const Tensor y = f(x);
    expect_same(y, f(xc), name);
    EXPECT_EQ(y.strides(), x.strides()) << name << ": laid out like its input";
  }
}

TEST(Layouts, BinaryOpsOnAlikeViews) {
  const Tensor a = permuted(2), b = permuted(3, 0.5);
  ASSERT_EQ(a.strides(), b.strides());
  const Tensor ac = contiguous(a), bc = contiguous(b);
  const std::vector<std::pair<const char*, std::function<Tensor(const Tensor&, const Tensor&)>>> ops = {
      {"add", [](const Tensor& p, const Tensor& q) { return p + q; }},
      {"sub", [](const Tensor& p, const Tensor& q) { return p - q; }},
      {"mul", [](const Tensor& p, const Tensor& q) { return p * q; }},
      {"div", [](const Tensor& p, const Tensor& q) { return p / q; }},
      {"maximum", [](const Tensor& p, const Tensor& q) { return maximum(p, q); }},
      {"lt", [](const Tensor& p, const Tensor& q) { return lt(p, q); }},
  };
  for (const auto& [name, f] : ops) {
    const Tensor y = f(a, b);
    expect_same(y, f(ac, bc), name);
    EXPECT_EQ(y.strides(), a.strides()) << name;
  }
  // Differently laid out operands, broadcasts and strided slices take the general path.
  expect_same(a + bc, ac + bc, "permuted + contiguous");
  EXPECT_TRUE((a + bc).is_contiguous());
  const Tensor row = randn({3}, DType::f64);
  expect_same(a + row, ac + row, "permuted + broadcast row");
  const Tensor every_other = slice(randn({8, 3}, DType::f64), 0, 0, 8, 2);  // not dense
  expect_same(exp(every_other), exp(contiguous(every_other)), "strided slice");
  EXPECT_TRUE(exp(every_other).is_contiguous());
}

// Size-1 dims may carry any stride; a transposed matrix with a unit dim is still one run.
TEST(Layouts, UnitDimsAndLaterViews) {
  manual_seed(4);
  const Tensor m = transpose(randn({5, 1, 3}, DType::f64), 0, 2);  // (3, 1, 5)
  expect_same(exp(m), exp(contiguous(m)), "unit dim");
  // A result laid out like a transpose behaves like any tensor afterwards.
  const Tensor y = tanh(permuted(5));
  expect_same(reshape(y, {24}), reshape(contiguous(y), {24}), "reshape of the result");
  // Reductions and products may add in another order for another layout: equal to rounding.
  const Tensor yc = contiguous(y);
  expect_close(sum(y, {1}).to_vector<double>(), sum(yc, {1}).to_vector<double>(), 1e-14, 1e-15, "reduction");
  expect_close(matmul(y, transpose(y, 1, 2)).to_vector<double>(), matmul(yc, transpose(yc, 1, 2)).to_vector<double>(),
               1e-14, 1e-15, "matmul");
}

TEST(Layouts, DerivativesThroughPermutedViews) {
  const Tensor a = permuted(6).detach().requires_grad_(), b = permuted(7, 2.0).detach().requires_grad_();
  auto f = [](const TensorList& in) {
    const Tensor t = tanh(in[0]) * in[1] - exp(in[0] * 0.5) / in[1];
    return sum(t * t);
  };
  EXPECT_TRUE(gradcheck(f, {a, b}).ok);
  EXPECT_TRUE(gradgradcheck(f, {a, b}).ok);
}

}  // namespace
}  // namespace gg::test
