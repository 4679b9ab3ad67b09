// Every row of the op table on the GPU: forward, first and second derivatives equal the CPU
// results (f64 ≤ 1e-12 relative, f32 ≤ 1e-5), and bf16 forward/backward within bf16 tolerance
// of the f64 CPU results. The JVP column: forward mode (J·v) and forward over reverse (the
// tangent H_u·v of a gradient) equal the CPU's.
#include <cmath>

#include "../op_table.h"
#include "gpu_util.h"

namespace gg::test {
namespace {

const Device kGpu = Device::cuda(0);

double scale_of(const Values& v) {
  double m = 1e-300;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

void expect_rel(const Values& got, const Values& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const double s = scale_of(want);
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_FALSE(std::isnan(got[i])) << what << " element " << i << " is NaN";
    worst = std::max(worst, std::abs(got[i] - want[i]) / s);
  }
  EXPECT_LE(worst, tol) << what;
}

struct Derivs {
  Values y;
  std::vector<Values> g1, g2;
};

// y = f(x); g1 = grad(y, x, u) with create_graph; g2 = grad(Σ <g1_i, v_i>, x).
Derivs derivatives(const OpCase& c, const std::vector<Values>& in, const Values& u, const std::vector<Values>& v,
                   DType dtype, Device device, bool second) {
  TensorList xs;
  for (size_t i = 0; i < in.size(); ++i) xs.push_back(from_vector(in[i], c.shapes[i], dtype, device).requires_grad_(true));
  Tensor y = c.fn(xs);
  Derivs d;
  d.y = y.to_vector<double>();
  TensorList g = grad({y}, xs, {from_vector(u, y.shape(), dtype, device)}, std::nullopt, /*create_graph=*/second, /*allow_unused=*/true);
  for (const Tensor& t : g) d.g1.push_back(t.defined() ? t.to_vector<double>() : Values());
  if (!second) return d;
  Tensor inner;
  for (size_t i = 0; i < g.size(); ++i) {
    if (!g[i].defined() || !g[i].requires_grad()) continue;
    Tensor term = sum(g[i] * from_vector(v[i], c.shapes[i], dtype, device));
    inner = inner.defined() ? inner + term : term;
  }
  if (!inner.defined()) return d;
  TensorList g2 = grad({inner}, xs, {}, std::nullopt, /*create_graph=*/false, /*allow_unused=*/true);
  for (const Tensor& t : g2) d.g2.push_back(t.defined() ? t.to_vector<double>() : Values());
  return d;
}

class CudaOpTable : public ::testing::TestWithParam<OpCase> {};

void compare_on_gpu(const OpCase& c, DType dtype, double tol) {
  std::vector<Values> in = op_inputs(c);
  manual_seed(99);
  Values u = randn(c.out_shape, DType::f64).to_vector<double>();
  std::vector<Values> v;
  for (const Shape& s : c.shapes) v.push_back(randn(s, DType::f64).to_vector<double>());
  Derivs cpu = derivatives(c, in, u, v, dtype, Device::cpu(), true);
  Derivs gpu = derivatives(c, in, u, v, dtype, kGpu, true);
  expect_rel(gpu.y, cpu.y, tol, c.name + " forward");
  ASSERT_EQ(gpu.g1.size(), cpu.g1.size());
  for (size_t i = 0; i < cpu.g1.size(); ++i) expect_rel(gpu.g1[i], cpu.g1[i], tol, c.name + " d1 input " + std::to_string(i));
  ASSERT_EQ(gpu.g2.size(), cpu.g2.size()) << c.name;
  for (size_t i = 0; i < cpu.g2.size(); ++i) expect_rel(gpu.g2[i], cpu.g2[i], tol, c.name + " d2 input " + std::to_string(i));
}

TEST_P(CudaOpTable, F64MatchesCpuToOrderTwo) {
  GG_REQUIRE_GPU_OR_SKIP();
  compare_on_gpu(GetParam(), DType::f64, 1e-12);
}

TEST_P(CudaOpTable, F32MatchesCpuToOrderTwo) {
  GG_REQUIRE_GPU_OR_SKIP();
  compare_on_gpu(GetParam(), DType::f32, 1e-5);
}

// bf16 has an 8-bit mantissa: forward and first backward within a few bf16 ulps (relative to
// the output's scale) of the f64 CPU result.
TEST_P(CudaOpTable, Bf16ForwardBackward) {
  GG_REQUIRE_GPU_OR_SKIP();
  const OpCase& c = GetParam();
  std::vector<Values> in = op_inputs(c);
  manual_seed(99);
  Values u = randn(c.out_shape, DType::f64).to_vector<double>();
  Derivs ref = derivatives(c, in, u, {}, DType::f64, Device::cpu(), false);
  // Round the inputs to bf16 first so that the reference sees the same inputs.
  std::vector<Values> in16;
  for (size_t i = 0; i < in.size(); ++i) in16.push_back(to(from_vector(in[i], c.shapes[i], DType::f64), DType::bf16).to_vector<double>());
  Values u16 = to(from_vector(u, c.out_shape, DType::f64), DType::bf16).to_vector<double>();
  ref = derivatives(c, in16, u16, {}, DType::f64, Device::cpu(), false);
  Derivs gpu = derivatives(c, in16, u16, {}, DType::bf16, kGpu, false);
  expect_rel(gpu.y, ref.y, 3e-2, c.name + " bf16 forward");
  for (size_t i = 0; i < ref.g1.size(); ++i) expect_rel(gpu.g1[i], ref.g1[i], 5e-2, c.name + " bf16 d1 input " + std::to_string(i));
}

// Forward mode on `device`: J·v, and the tangent of grad(y, x, u) along v (forward over reverse).
Derivs jvps(const OpCase& c, const std::vector<Values>& in, const Values& u, const std::vector<Values>& v, DType dtype,
            Device device) {
  fwd::DualLevel level;
  TensorList xs;
  for (size_t i = 0; i < in.size(); ++i)
    xs.push_back(fwd::make_dual(from_vector(in[i], c.shapes[i], dtype, device).requires_grad_(true),
                                from_vector(v[i], c.shapes[i], dtype, device)));
  Tensor y = c.fn(xs);
  Derivs d;
  const Tensor t = fwd::unpack_dual(y).tangent;
  d.y = t.defined() ? t.to_vector<double>() : Values(static_cast<size_t>(y.numel()), 0.0);
  TensorList g = grad({y}, xs, {from_vector(u, y.shape(), dtype, device)}, std::nullopt, false, /*allow_unused=*/true);
  for (size_t i = 0; i < g.size(); ++i) {
    const Tensor gt = g[i].defined() ? fwd::unpack_dual(g[i]).tangent : Tensor();
    d.g2.push_back(gt.defined() ? gt.to_vector<double>() : Values(in[i].size(), 0.0));
  }
  return d;
}

void compare_jvps_on_gpu(const OpCase& c, DType dtype, double tol) {
  std::vector<Values> in = op_inputs(c);
  manual_seed(98);
  Values u = randn(c.out_shape, DType::f64).to_vector<double>();
  std::vector<Values> v;
  for (const Shape& s : c.shapes) v.push_back(randn(s, DType::f64).to_vector<double>());
  Derivs cpu = jvps(c, in, u, v, dtype, Device::cpu()), gpu = jvps(c, in, u, v, dtype, kGpu);
  expect_rel(gpu.y, cpu.y, tol, c.name + " jvp");
  for (size_t i = 0; i < cpu.g2.size(); ++i)
    expect_rel(gpu.g2[i], cpu.g2[i], tol, c.name + " jvp of the gradient, input " + std::to_string(i));
}

TEST_P(CudaOpTable, F64JvpMatchesCpuToOrderTwo) {
  GG_REQUIRE_GPU_OR_SKIP();
  compare_jvps_on_gpu(GetParam(), DType::f64, 1e-12);
}

TEST_P(CudaOpTable, F32JvpMatchesCpuToOrderTwo) {
  GG_REQUIRE_GPU_OR_SKIP();
  compare_jvps_on_gpu(GetParam(), DType::f32, 1e-5);
}

TEST(CudaForwardAD, ATangentOnAnotherDeviceIsRefused) {
  GG_REQUIRE_GPU_OR_SKIP();
  fwd::DualLevel level;
  try {
    fwd::make_dual(ones({2}, DType::f64, kGpu), ones({2}, DType::f64));
    ADD_FAILURE() << "no exception";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("gg::fwd::make_dual: tangent is on cpu but primal is on cuda:0"),
              std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, CudaOpTable, ::testing::ValuesIn(op_table()),
                         [](const ::testing::TestParamInfo<OpCase>& info) { return info.param.name; });

}  // namespace
}  // namespace gg::test
