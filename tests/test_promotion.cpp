// Type promotion against PyTorch's table (tests/promotion_table.h): result_type for every row,
// and every row the CPU can compute (f32, f64, i64 and b8 results) run through the op.
#include "promotion_table.h"

namespace gg::test::promotion {
namespace {

TEST(Promotion, TableIsThere) { EXPECT_GT(table().size(), 3000u); }

TEST(Promotion, ResultTypeMatchesPyTorch) {
  for (const Row& r : table()) {
    if (r.op == "div" || r.op == "sub" || r.op == "pow" || r.result == "error") continue;
    const Operand a = operand(r.a, Device::cpu()), b = operand(r.b, Device::cpu());
    DType t = a.tensor && b.tensor ? result_type(*a.tensor, *b.tensor)
              : a.tensor           ? result_type(*a.tensor, *b.number)
                                   : result_type(*a.number, *b.tensor);
    const bool comparison = r.result == "b8" && r.op != "add" && r.op != "mul" && r.op != "maximum" &&
                            r.op != "minimum" && r.op != "where";
    if (comparison) continue;  // the result is b8 whatever the operands promote to
    EXPECT_EQ(dtype_name(t), r.result) << r.op << "(" << r.a << ", " << r.b << ")";
  }
}

TEST(Promotion, OpsOnCpuMatchPyTorch) {
  const int run = check_rows(Device::cpu(), [](DType t) {
    return t == DType::f32 || t == DType::f64 || t == DType::i64;
  });
  EXPECT_GT(run, 1000);
}

// The gradient of each operand has the operand's own dtype, through the casts.
TEST(Promotion, GradientsKeepEachInputsDtype) {
  Tensor a = from_vector({1, 2}, {2}, DType::f32).requires_grad_();
  Tensor b = from_vector({3, 4}, {2}, DType::f64).requires_grad_();
  Tensor y = sum(a * b);
  EXPECT_EQ(y.dtype(), DType::f64);
  TensorList g = grad({y}, {a, b});
  EXPECT_EQ(g[0].dtype(), DType::f32);
  EXPECT_EQ(g[1].dtype(), DType::f64);
  EXPECT_EQ(g[0].to_vector<double>(), (std::vector<double>{3, 4}));
  EXPECT_EQ(g[1].to_vector<double>(), (std::vector<double>{1, 2}));
  // A 0-dim f32 does not widen... but an f64 0-dim keeps an f32 tensor f32.
  Tensor s = scalar_tensor(2.0, DType::f64).requires_grad_();
  Tensor z = sum(a * s);
  EXPECT_EQ(z.dtype(), DType::f32);
  EXPECT_EQ(grad(z, s).dtype(), DType::f64);
  EXPECT_EQ((from_indices({1, 2}, {2}) * 2.5).dtype(), DType::f32);
  EXPECT_EQ((from_indices({1, 2}, {2}) * 2).dtype(), DType::i64);
}

}  // namespace
}  // namespace gg::test::promotion
