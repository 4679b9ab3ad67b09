// The op table (tests/op_table.cpp), row by row on the CPU: forward against a plain-loop
// reference, f32 against f64, gradcheck and gradgradcheck in f64, and a third-order check
// where the row asks for it (the backward of the backward of the backward is differentiated).
#include "op_table.h"

namespace gg::test {
namespace {

std::vector<OpCase> third_order_rows() {
  std::vector<OpCase> rows;
  for (const OpCase& c : op_table())
    if (c.third_order) rows.push_back(c);
  return rows;
}

class OpTable : public ::testing::TestWithParam<OpCase> {
 protected:
  TensorList make_inputs() {
    const OpCase& c = GetParam();
    std::vector<Values> vs = op_inputs(c);
    TensorList xs;
    for (size_t i = 0; i < vs.size(); ++i) xs.push_back(from_vector(vs[i], c.shapes[i], DType::f64).requires_grad_(true));
    return xs;
  }
};

TEST_P(OpTable, ForwardMatchesReference) {
  const OpCase& c = GetParam();
  TensorList xs = make_inputs();
  Tensor y = c.fn(xs);
  EXPECT_EQ(y.shape(), c.out_shape);
  EXPECT_EQ(y.dtype(), DType::f64);
  EXPECT_TRUE(y.requires_grad());
  std::vector<Values> in;
  for (const Tensor& x : xs) in.push_back(x.to_vector<double>());
  expect_close(y.to_vector<double>(), c.ref(in), 1e-12, 1e-12, c.name);
}

TEST_P(OpTable, ForwardF32MatchesF64) {
  const OpCase& c = GetParam();
  TensorList xs = make_inputs(), xs32;
  for (const Tensor& x : xs) xs32.push_back(to(x.detach(), DType::f32));
  Tensor y = c.fn(xs), y32 = c.fn(xs32);
  EXPECT_EQ(y32.dtype(), DType::f32);
  expect_close(y32.to_vector<double>(), y.to_vector<double>(), 1e-5, 1e-5, c.name);
}

TEST_P(OpTable, Gradcheck) {
  GradcheckResult r = gradcheck(GetParam().fn, make_inputs());
  EXPECT_TRUE(r.ok) << r.message;
}

TEST_P(OpTable, Gradgradcheck) {
  GradcheckResult r = gradgradcheck(GetParam().fn, make_inputs());
  EXPECT_TRUE(r.ok) << r.message;
}

// Third order: gradgradcheck of x, u -> grad(f(x), x, u, create_graph), i.e. the second
// derivatives of the first derivative.
class OpTableThirdOrder : public OpTable {};

TEST_P(OpTableThirdOrder, GradOfGradOfGrad) {
  const OpCase& c = GetParam();
  TensorList xs = make_inputs();
  const size_t n = xs.size();
  Tensor y = c.fn(xs);
  Tensor u = randn(y.shape(), DType::f64).requires_grad_(true);
  xs.push_back(u);
  MultiFn first = [&c, n](const TensorList& a) {
    TensorList x(a.begin(), a.begin() + static_cast<long>(n));
    return grad({c.fn(x)}, x, {a[n]}, std::nullopt, /*create_graph=*/true, /*allow_unused=*/true);
  };
  GradcheckResult r = gradgradcheck(first, xs);
  EXPECT_TRUE(r.ok) << r.message;
}

std::string row_name(const ::testing::TestParamInfo<OpCase>& info) { return info.param.name; }
INSTANTIATE_TEST_SUITE_P(Ops, OpTable, ::testing::ValuesIn(op_table()), row_name);
INSTANTIATE_TEST_SUITE_P(Ops, OpTableThirdOrder, ::testing::ValuesIn(third_order_rows()), row_name);

}  // namespace
}  // namespace gg::test
