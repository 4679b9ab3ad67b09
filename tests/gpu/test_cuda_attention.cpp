// The CUDA attention kernels (kernels/cuda/attention/) at every level: forward (O, L),
// backward (dQ, dK, dV) and backward-over-backward (gQ, gK, gV, gdO), through the public ops.
//
//   F64AndF32MatchCpu      GPU f64 (generic kernels) vs the CPU f64 kernels: ≤ 1e-12 relative;
//                          GPU f32 (exact-FFMA generic kernels) vs CPU f64: ≤ 1e-5.
//   PartialCotangents      BoB with every subset of (Qt, Kt, Vt), the same tolerances.
//   LowPrecision*          bf16/f16 (tensor-core kernels for d in {32, 64, 128}, generic else)
//                          vs an f64 reference from the same rounded inputs: error ≤ 2 x the
//                          error of attention_composite run in the same dtype on the GPU, or
//                          ≤ a floor of 2 units of the dtype's rounding (see low_precision_bound).
//   PoisonedOutputs        kernels called directly on NaN-filled outputs write every element.
//   ExplicitScale          a non-default scale on every path.
//   BobIsDeterministic     bitwise identical BoB outputs across runs at bf16, N = 1024.
//   DeterministicSwitch    gg::set_attention_deterministic reads back, starting from the environment.
//   AutogradChain          gg::attention differentiated twice on the GPU runs the fused kernels.
//   Sm80PathWithinTwiceComposite, GenericPathWithinTwiceComposite  the LowPrecision comparison
//                          with the sm_80 (mma.sync) or the generic kernels forced
//                          (testing::ScopedAttentionPath), on any device, the H200 included.
//   HopperForwardWarpSpecialized  the sm_90a forward: O, L against f64 within 2 x the sm_80
//                          forward's error, poisoned, deterministic.
//   HopperBobCotangentSubsets  the sm_90a BoB, cotangent subsets 7, 1, 2, 4 and N = 1: every
//                          output within 2 x the sm_80 kernels' error, deterministic (with all
//                          cotangents, the backward's outputs too).
//   HopperFusedBackward    the fused backward (dQ added in a fixed order, the default, or in any
//                          order): every output within 2 x the sm_80 backward's error against f64;
//                          dK and dV bitwise equal in both orders; the ordered dQ bitwise equal
//                          across runs.
//   HopperFusedBob         the fused BoB (all three cotangents) and the E/F-first BoB (one
//                          missing), grad_Q and grad_dO added in order or not: every output within
//                          2 x the sm_80 BoB's error; grad_K and grad_V (the E/F BoB: all four)
//                          bitwise equal in both orders; the ordered ones bitwise equal across runs.
//   OrderedAddPositions    (no GPU needed) the fused sweeps' units take turns 0, 1, ... per tile;
//   BandAddPositions       likewise under general masks, and within segments;
//                          DivByMatchesDivision: the bands' divider; MaskBandMatchesDefinition:
//                          the general mask's bounds and per-entry test. The launch plans (tail
//                          split, group split, segments) are tested in tests/test_attention_plan.cpp.
//   HopperFusedTailSplit   the key sweeps with their last wave split (planned for 20 SMs), fused
//                          and deterministic: every output within 2 x the unsplit deterministic
//                          kernels' error; the deterministic ones bitwise equal across runs.
//   HopperForwardTailSplit the sm_90a forward with its last wave split over key tiles: O, L
//                          against f64 as unsplit, deterministic.
//   Hopper*                the sm_90a (wgmma) forward, backward and BoB vs the sm_80 kernels, both
//                          against f64: error ≤ 2 x the sm_80 kernels' (or the rounding floor);
//                          runs where the sm_90a kernels apply (H100/H200 with a 90a build).
// Errors are max|Δ| / max|ref over the output's family| (see family_scale); NaN/Inf never pass
// (checked explicitly). GG_ATTN_VERBOSE=1 prints every error measured.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "../test_util.h"
#include "gpu_util.h"
#include "kernels/cuda/attention/mask.h"
#include "kernels/cuda/attention/plan.h"
#include "kernels/cuda/attention/testing.h"
#include "kernels/cuda/kernels.h"
#include "ops/ops.h"

namespace gg::test {
namespace {

const Device kGpu = Device::cuda(0);

// Which kernels run (attention/testing.h, ScopedAttentionPath): kSm80 forces the mma.sync kernels
// wherever they apply, kGeneric the generic ones; the tail split planned for a pretended SM count.
using kernels::cuda::testing::AttentionPath;
using PathMode = kernels::cuda::testing::ScopedAttentionPath;
using TailSplitMode = kernels::cuda::testing::ScopedTailSplitSms;
// Bitwise reproducibility (gg::set_attention_deterministic; on by default; off, the fused sweeps
// add in any order), set for one scope and restored after it.
class DeterministicMode {
 public:
  explicit DeterministicMode(bool on) : was_(attention_deterministic()) { set_attention_deterministic(on); }
  ~DeterministicMode() { set_attention_deterministic(was_); }
  DeterministicMode(const DeterministicMode&) = delete;
  DeterministicMode& operator=(const DeterministicMode&) = delete;

 private:
  bool was_;
};


// ------------------------------------------------------------------------ helpers

struct Inputs {
  Shape shape;
  Values Q, K, V, dO, Qt, Kt, Vt;
};

// Standard normal inputs, rounded to `round_to` so that every dtype under test (and the f64
// references) sees exactly the same values.
Inputs make_inputs(int64_t B, int64_t H, int64_t N, int64_t d, uint64_t seed, DType round_to) {
  manual_seed(seed);
  Inputs in;
  in.shape = {B, H, N, d};
  auto draw = [&] { return to(to(randn(in.shape, DType::f64), round_to), DType::f64).to_vector<double>(); };
  in.Q = draw();
  in.K = draw();
  in.V = draw();
  in.dO = draw();
  in.Qt = draw();
  in.Kt = draw();
  in.Vt = draw();
  return in;
}

// Outputs of the three levels. cot_mask: bit 0 = Qt present, bit 1 = Kt, bit 2 = Vt.
struct Levels {
  Values O, L;
  std::vector<Values> bwd;  // dQ, dK, dV
  std::vector<Values> bob;  // gQ, gK, gV, gdO
};

const char* const kBwdNames[] = {"dQ", "dK", "dV"};
const char* const kBobNames[] = {"gQ", "gK", "gV", "gdO"};

// The fused ops (gg::attention_forward / _backward / _backward_backward) in `dtype` on `device`.
Levels run_fused(const Inputs& in, DType dtype, Device device, bool causal, int cot_mask = 7,
                 std::optional<double> scale = std::nullopt) {
  auto t = [&](const Values& v) { return from_vector(v, in.shape, dtype, device); };
  const AttentionOptions o{scale, causal};
  Tensor q = t(in.Q), k = t(in.K), v = t(in.V), dO = t(in.dO);
  Tensor qt = (cot_mask & 1) ? t(in.Qt) : Tensor();
  Tensor kt = (cot_mask & 2) ? t(in.Kt) : Tensor();
  Tensor vt = (cot_mask & 4) ? t(in.Vt) : Tensor();
  Levels r;
  AttentionForward f = attention_forward(q, k, v, o);
  r.O = f.O.to_vector<double>();
  r.L = f.L.to_vector<double>();
  for (const Tensor& g : attention_backward(q, k, v, f.O, f.L, dO, o)) r.bwd.push_back(g.to_vector<double>());
  const TensorList bob = attention_backward_backward(q, k, v, f.O, f.L, dO, qt, kt, vt, o);
  for (size_t i = 0; i < 4; ++i) r.bob.push_back(bob[i].to_vector<double>());  // gdL (no dL: E) aside
  return r;
}

// The composite attention in `dtype` on `device`, differentiated with the engine's own ops:
// O, then (dQ, dK, dV) for cotangent dO with create_graph, then the gradient of
// <Qt, dQ> + <Kt, dK> + <Vt, dV> with respect to (Q, K, V, dO). L is not part of it.
Levels run_composite(const Inputs& in, DType dtype, Device device, bool causal, int cot_mask = 7,
                     std::optional<double> scale = std::nullopt) {
  auto t = [&](const Values& v) { return leaf(from_vector(v, in.shape, dtype, device)); };
  TensorList x = {t(in.Q), t(in.K), t(in.V)};
  Tensor dO = t(in.dO);
  const TensorList tilde = {from_vector(in.Qt, in.shape, dtype, device), from_vector(in.Kt, in.shape, dtype, device),
                            from_vector(in.Vt, in.shape, dtype, device)};
  Levels r;
  Tensor O = attention_composite(x[0], x[1], x[2], {scale, causal});
  r.O = O.to_vector<double>();
  TensorList d = grad({O}, x, {dO}, std::nullopt, /*create_graph=*/true);
  for (const Tensor& g : d) r.bwd.push_back(g.to_vector<double>());
  Tensor inner;
  for (int i = 0; i < 3; ++i)
    if (cot_mask & (1 << i)) inner = inner.defined() ? inner + sum(tilde[i] * d[i]) : sum(tilde[i] * d[i]);
  if (!inner.defined()) {
    r.bob.assign(4, Values(r.O.size(), 0.0));
    return r;
  }
  TensorList g = grad({inner}, {x[0], x[1], x[2], dO}, {}, std::nullopt, /*create_graph=*/false, /*allow_unused=*/true);
  for (const Tensor& gi : g) r.bob.push_back(gi.defined() ? gi.to_vector<double>() : Values(r.O.size(), 0.0));
  return r;
}

bool verbose() {
  const char* v = std::getenv("GG_ATTN_VERBOSE");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

bool all_finite(const Values& v) {
  for (double x : v)
    if (!std::isfinite(x)) return false;
  return true;
}

// max|got - want| / scale, where scale is max|ref| over the output's family (O; L; dQ dK dV;
// gQ gK gV gdO): some outputs are exactly zero in exact arithmetic (dQ, dK, gQ, gK at N = 1,
// every BoB output without cotangents) and both sides then return rounding noise of the
// family's scale. An all-zero family is compared absolutely.
double family_scale(const std::vector<Values>& family) {
  double m = 1e-300;
  for (const Values& v : family)
    for (double x : v) m = std::max(m, std::abs(x));
  return m < 1e-290 ? 1.0 : m;
}
double rel_err(const Values& got, const Values& want, double scale) {
  double m = 0;
  for (size_t i = 0; i < got.size(); ++i) m = std::max(m, std::abs(got[i] - want[i]));
  return m / scale;
}

double max_abs_diff(const Values& a, const Values& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

void expect_rel(const Values& got, const Values& want, double scale, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  ASSERT_TRUE(all_finite(got)) << what << ": non-finite output";
  const double err = rel_err(got, want, scale);
  if (verbose()) std::printf("  %-60s err %.3g (tol %.3g)\n", what.c_str(), err, tol);
  EXPECT_LE(err, tol) << what;
}

std::string case_name(DType dtype, const Inputs& in, bool causal, int cot_mask = 7) {
  return std::string(dtype_name(dtype)) + " B=" + std::to_string(in.shape[0]) + " H=" + std::to_string(in.shape[1]) +
         " N=" + std::to_string(in.shape[2]) + " d=" + std::to_string(in.shape[3]) + (causal ? " causal" : "") +
         " cot=" + std::to_string(cot_mask);
}

void expect_levels_close(const Levels& got, const Levels& want, double tol, const std::string& what) {
  expect_rel(got.O, want.O, family_scale({want.O}), tol, what + " O");
  expect_rel(got.L, want.L, family_scale({want.L}), tol, what + " L");
  ASSERT_EQ(got.bwd.size(), 3u);
  ASSERT_EQ(got.bob.size(), 4u);
  const double s1 = family_scale(want.bwd), s2 = family_scale(want.bob);
  for (int i = 0; i < 3; ++i) expect_rel(got.bwd[i], want.bwd[i], s1, tol, what + " " + kBwdNames[i]);
  for (int i = 0; i < 4; ++i) expect_rel(got.bob[i], want.bob[i], s2, tol, what + " " + kBobNames[i]);
}

// ------------------------------------------------------------------------ f64 / f32 vs the CPU

// Inputs are rounded to f32, so the f64 runs (CPU and GPU) and the f32 run see the same values.
// f32 tolerance 1e-5: f32 arithmetic (unit roundoff 6e-8) over sums of ≤ 200 terms of d ≤ 128
// products, plus BoB's cancellations (F = ... - 2·D·E) stay well under it.
class CudaAttentionVsCpu : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, bool>> {};

TEST_P(CudaAttentionVsCpu, F64AndF32MatchCpu) {
  GG_REQUIRE_GPU_OR_SKIP();
  const auto [N, d, causal] = GetParam();
  const Inputs in = make_inputs(2, 3, N, d, 1000 + N * 7 + d + causal, DType::f32);
  const Levels cpu = run_fused(in, DType::f64, Device::cpu(), causal);
  const Levels gpu64 = run_fused(in, DType::f64, kGpu, causal);
  const Levels gpu32 = run_fused(in, DType::f32, kGpu, causal);
  expect_levels_close(gpu64, cpu, 1e-12, case_name(DType::f64, in, causal));
  expect_levels_close(gpu32, cpu, 1e-5, case_name(DType::f32, in, causal));
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttentionVsCpu,
                         ::testing::Combine(::testing::Values<int64_t>(1, 7, 64, 200),
                                            ::testing::Values<int64_t>(32, 64, 128, 80), ::testing::Bool()));

class CudaAttentionCotangents : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, bool>> {};

TEST_P(CudaAttentionCotangents, PartialCotangents) {
  GG_REQUIRE_GPU_OR_SKIP();
  const auto [N, d, causal] = GetParam();
  const Inputs in = make_inputs(2, 3, N, d, 2000 + N * 7 + d + causal, DType::f32);
  for (int mask = 0; mask < 8; ++mask) {
    const Levels cpu = run_fused(in, DType::f64, Device::cpu(), causal, mask);
    const Levels gpu64 = run_fused(in, DType::f64, kGpu, causal, mask);
    const Levels gpu32 = run_fused(in, DType::f32, kGpu, causal, mask);
    const double scale = family_scale(cpu.bob);
    for (int i = 0; i < 4; ++i) {
      expect_rel(gpu64.bob[i], cpu.bob[i], scale, 1e-12, case_name(DType::f64, in, causal, mask) + " " + kBobNames[i]);
      expect_rel(gpu32.bob[i], cpu.bob[i], scale, 1e-5, case_name(DType::f32, in, causal, mask) + " " + kBobNames[i]);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttentionCotangents,
                         ::testing::Combine(::testing::Values<int64_t>(7, 200), ::testing::Values<int64_t>(32, 80),
                                            ::testing::Bool()));

// ------------------------------------------------------------------------ bf16 / f16

// The floor of the low-precision bound: 2 units of the dtype's rounding (2^-8 for bf16, 2^-11
// for f16) relative to max|ref|. Outputs are stored in the dtype, so even an exact kernel is
// off by up to one unit; the floor keeps a composite that happens to be nearly exact on an output
// (e.g. O at N = 1, where softmax is exactly 1) from failing a kernel that rounds once more.
double low_precision_floor(DType dtype) { return dtype == DType::bf16 ? 2.0 / 256 : 2.0 / 2048; }

void expect_within_composite(const Values& fused, const Values& comp, const Values& ref, double scale, DType dtype,
                             const std::string& what) {
  ASSERT_EQ(fused.size(), ref.size()) << what;
  ASSERT_TRUE(all_finite(fused)) << what << ": non-finite output";
  const double err_fused = rel_err(fused, ref, scale), err_comp = rel_err(comp, ref, scale);
  const double bound = std::max(2 * err_comp, low_precision_floor(dtype));
  if (verbose()) std::printf("  %-60s fused %.3g composite %.3g\n", what.c_str(), err_fused, err_comp);
  EXPECT_LE(err_fused, bound) << what << ": fused error " << err_fused << ", composite error " << err_comp;
}

// L is f32 and has no composite counterpart: it is compared absolutely. Its inputs are exact
// products of rounded values summed in f32, so its error is ~1e-6·|L|; 1e-3 is a loose bound.
void compare_low_precision(const Inputs& in, DType dtype, bool causal, int cot_mask, bool gpu_reference,
                           std::optional<double> scale = std::nullopt) {
  const std::string what = case_name(dtype, in, causal, cot_mask) + (scale ? " scale=" + std::to_string(*scale) : "");
  // At large N the f64 reference runs on the GPU (the generic f64 kernels, validated against the
  // CPU kernels by F64AndF32MatchCpu and PartialCotangents): the CPU f64 kernels would take minutes.
  const Levels ref = run_fused(in, DType::f64, gpu_reference ? kGpu : Device::cpu(), causal, cot_mask, scale);
  const Levels fused = run_fused(in, dtype, kGpu, causal, cot_mask, scale);
  const Levels comp = run_composite(in, dtype, kGpu, causal, cot_mask, scale);
  expect_within_composite(fused.O, comp.O, ref.O, family_scale({ref.O}), dtype, what + " O");
  ASSERT_TRUE(all_finite(fused.L)) << what << " L: non-finite";
  EXPECT_LE(max_abs_diff(fused.L, ref.L), 1e-3) << what << " L";
  const double s1 = family_scale(ref.bwd), s2 = family_scale(ref.bob);
  for (int i = 0; i < 3; ++i)
    expect_within_composite(fused.bwd[i], comp.bwd[i], ref.bwd[i], s1, dtype, what + " " + kBwdNames[i]);
  for (int i = 0; i < 4; ++i)
    expect_within_composite(fused.bob[i], comp.bob[i], ref.bob[i], s2, dtype, what + " " + kBobNames[i]);
}

DType dtype_of(bool f16) { return f16 ? DType::f16 : DType::bf16; }

// Small and ragged N (tile tails, single rows, partial sub-tiles), all head dims: the tensor-core
// kernels for d in {32, 64, 128} (d = 128 splits BoB pass 1 in two column slices), generic else.
class CudaAttentionLowPrecisionSmall : public ::testing::TestWithParam<std::tuple<bool, int64_t, int64_t, bool>> {};

TEST_P(CudaAttentionLowPrecisionSmall, WithinTwiceComposite) {
  GG_REQUIRE_GPU_OR_SKIP();
  const auto [f16, N, d, causal] = GetParam();
  const DType dtype = dtype_of(f16);
  const Inputs in = make_inputs(2, 3, N, d, 3000 + N * 7 + d + causal, dtype);
  compare_low_precision(in, dtype, causal, 7, /*gpu_reference=*/false);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttentionLowPrecisionSmall,
                         ::testing::Combine(::testing::Bool(), ::testing::Values<int64_t>(1, 7, 200),
                                            ::testing::Values<int64_t>(32, 64, 128, 80), ::testing::Bool()));

// The sizes that matter for speed: N = 512 (CPU reference) and 4096 (GPU f64 reference).
class CudaAttentionLowPrecisionLarge : public ::testing::TestWithParam<std::tuple<bool, int64_t, int64_t, bool>> {};

TEST_P(CudaAttentionLowPrecisionLarge, WithinTwiceComposite) {
  GG_REQUIRE_GPU_OR_SKIP();
  const auto [f16, N, d, causal] = GetParam();
  const DType dtype = dtype_of(f16);
  const Inputs in = make_inputs(1, 2, N, d, 4000 + N + d + causal, dtype);
  compare_low_precision(in, dtype, causal, 7, /*gpu_reference=*/N > 1024);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttentionLowPrecisionLarge,
                         ::testing::Combine(::testing::Bool(), ::testing::Values<int64_t>(512, 4096),
                                            ::testing::Values<int64_t>(64, 128), ::testing::Bool()));

// Every subset of cotangents through the tensor-core BoB kernels (d = 64: one slice; d = 128: two).
class CudaAttentionLowPrecisionCotangents : public ::testing::TestWithParam<std::tuple<bool, int64_t, bool>> {};

TEST_P(CudaAttentionLowPrecisionCotangents, WithinTwiceComposite) {
  GG_REQUIRE_GPU_OR_SKIP();
  const auto [f16, d, causal] = GetParam();
  const DType dtype = dtype_of(f16);
  const Inputs in = make_inputs(1, 2, 200, d, 5000 + d + causal, dtype);
  for (int mask = 0; mask < 8; ++mask) compare_low_precision(in, dtype, causal, mask, /*gpu_reference=*/false);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttentionLowPrecisionCotangents,
                         ::testing::Combine(::testing::Bool(), ::testing::Values<int64_t>(64, 128), ::testing::Bool()));

// A scale other than 1/sqrt(d), on every path (f64, f32, tensor cores, generic bf16); a negative
// one too (the Hopper forward takes row maxima of the raw scores, so it leaves scale <= 0 to the
// mma.sync kernel: this checks that hand-over).
// The sm_80 (mma.sync) kernels wherever they apply, forced (testing::ScopedAttentionPath): on an
// H200 they would otherwise run only at d = 32, yet they are the path of A100-class cards. The
// same comparison as the LowPrecision tests, every cotangent subset at one size.
class CudaAttentionSm80Path : public ::testing::TestWithParam<std::tuple<bool, int64_t, int64_t, bool>> {};

TEST_P(CudaAttentionSm80Path, Sm80PathWithinTwiceComposite) {
  GG_REQUIRE_GPU_OR_SKIP();
  const auto [f16, N, d, causal] = GetParam();
  const DType dtype = dtype_of(f16);
  const Inputs in = make_inputs(2, 3, N, d, 5000 + N * 7 + d + causal, dtype);
  PathMode sm80(AttentionPath::kSm80);
  compare_low_precision(in, dtype, causal, 7, /*gpu_reference=*/false);
  if (N == 200)
    for (int mask : {1, 2, 4, 3}) compare_low_precision(in, dtype, causal, mask, /*gpu_reference=*/false);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttentionSm80Path,
                         ::testing::Combine(::testing::Bool(), ::testing::Values<int64_t>(1, 77, 200, 1000),
                                            ::testing::Values<int64_t>(32, 64, 128), ::testing::Bool()));

// The generic kernels (the GPU reference, and the path of f64, f32 and other head dims) forced for
// bf16/f16 at head dims the tensor-core kernels would take.
TEST(CudaAttention, GenericPathWithinTwiceComposite) {
  GG_REQUIRE_GPU_OR_SKIP();
  PathMode generic(AttentionPath::kGeneric);
  for (bool f16 : {false, true})
    for (int64_t d : {32, 64, 128})
      for (bool causal : {false, true}) {
        const DType dtype = dtype_of(f16);
        const Inputs in = make_inputs(1, 2, 77, d, 5500 + d + causal + 3 * f16, dtype);
        compare_low_precision(in, dtype, causal, 7, /*gpu_reference=*/false);
      }
}

// The BoB's two stages (ops.h: attention_bob_row_sums, attention_bob_from_row_sums) over three
// blocks of keys, grouped heads and Nq != Nk, against the same stages on the CPU in f64: f64 on
// the GPU (generic kernels) within 1e-12; bf16 on each path (sm_90a where it applies, sm_80,
// generic) within 2 x the error of the whole BoB on that path, or the rounding floor.
TEST(CudaAttention, BobStagesOverKeyBlocks) {
  GG_REQUIRE_GPU_OR_SKIP();
  const int64_t nq = 150, nk = 230;
  const std::vector<std::pair<int64_t, int64_t>> blocks = {{0, 64}, {64, 101}, {101, nk}};
  for (int64_t d : {64, 128})
    for (const AttentionPath path : {AttentionPath::kAuto, AttentionPath::kSm80, AttentionPath::kGeneric})
      for (const DType dtype : {DType::bf16, DType::f64}) {
        if (dtype == DType::f64 && path != AttentionPath::kGeneric) continue;
        PathMode mode(path);
        manual_seed(7100 + d);
        auto draw = [&](const Shape& s) { return to(to(randn(s, DType::f64), DType::bf16), DType::f64); };
        const Shape qs = {1, 4, nq, d}, ks = {1, 2, nk, d};
        const TensorList x = {draw(qs), draw(ks), draw(ks), draw(qs), draw(qs), draw(ks), draw(ks)};  // q k v dO q̃ k̃ ṽ
        const std::string what = std::string(dtype_name(dtype)) + " d " + std::to_string(d) + " path " +
                                 std::to_string(static_cast<int>(path));
        // f64 on the CPU, and the same inputs in `dtype` on the GPU
        auto run = [&](DType dt, Device dev) {
          TensorList t;
          for (const Tensor& a : x) t.push_back(to(to(a, dt), dev));
          const AttentionForward f = attention_forward(t[0], t[1], t[2]);
          std::vector<Values> out;  // E, F and gQ, gK, gV, gdO of each block, then the whole BoB's
          Tensor F = zeros(f.L.shape(), DType::f64, dev);  // the stages take the whole E and F
          for (const auto& [b0, b1] : blocks) {
            auto keys = [&](const Tensor& a) { return slice(a, 2, b0, b1); };
            const TensorList ef = attention_bob_row_sums(t[0], keys(t[1]), keys(t[2]), f.O, f.L, t[3], t[4],
                                                         keys(t[5]), keys(t[6]));
            for (const Tensor& e : ef) out.push_back(to(e, DType::f64).to_vector<double>());
            F = F + to(ef[1], DType::f64);
          }
          const TensorList whole = attention_backward_backward(t[0], t[1], t[2], f.O, f.L, t[3], t[4], t[5], t[6]);
          const Tensor E = to(to(whole[4], DType::f64), f.L.dtype());
          for (const auto& [b0, b1] : blocks) {
            auto keys = [&](const Tensor& a) { return slice(a, 2, b0, b1); };
            for (const Tensor& g : attention_bob_from_row_sums(t[0], keys(t[1]), keys(t[2]), f.O, f.L, t[3], t[4],
                                                               keys(t[5]), keys(t[6]), E, to(F, f.L.dtype())))
              out.push_back(to(g, DType::f64).to_vector<double>());
          }
          for (size_t i = 0; i < 4; ++i) out.push_back(to(whole[i], DType::f64).to_vector<double>());
          return out;
        };
        const std::vector<Values> ref = run(DType::f64, Device::cpu()), got = run(dtype, kGpu);
        ASSERT_EQ(ref.size(), got.size());
        const size_t n_sums = 2 * blocks.size(), n_parts = 4 * blocks.size();
        double whole_err = 0;  // the whole BoB's error on this path, relative to its family
        {
          const std::vector<Values> w(ref.end() - 4, ref.end());
          for (size_t i = 0; i < 4; ++i) whole_err = std::max(whole_err, rel_err(got[n_sums + n_parts + i], w[i], family_scale(w)));
        }
        const double tol = dtype == DType::f64 ? 1e-12 : std::max(2 * whole_err, low_precision_floor(dtype));
        // families: E of every block, F of every block, gQ of every block, ...
        auto family = [&](size_t i) {
          const size_t first = i < n_sums ? 0 : n_sums, kinds = i < n_sums ? 2 : 4;
          std::vector<Values> f;
          for (size_t j = first + (i - first) % kinds; j < first + kinds * blocks.size(); j += kinds) f.push_back(ref[j]);
          return f;
        };
        for (size_t i = 0; i < n_sums + n_parts; ++i) {
          ASSERT_TRUE(all_finite(got[i])) << what << " output " << i;
          const double err = rel_err(got[i], ref[i], family_scale(family(i)));
          if (verbose()) std::printf("  %-40s stage output %2zu: %.3g (whole BoB %.3g)\n", what.c_str(), i, err, whole_err);
          EXPECT_LE(err, tol) << what << " stage output " << i << " (whole BoB's error " << whole_err << ")";
        }
      }
}

TEST(CudaAttention, ExplicitScale) {
  GG_REQUIRE_GPU_OR_SKIP();
  for (double scale : {0.37, -0.37})
    for (int64_t d : {64, 80})
      for (bool causal : {false, true}) {
        const Inputs in = make_inputs(2, 3, 100, d, 9000 + d + causal, DType::bf16);  // bf16 values: exact in f32
        const std::string sc = " scale=" + std::to_string(scale);
        const Levels cpu = run_fused(in, DType::f64, Device::cpu(), causal, 7, scale);
        expect_levels_close(run_fused(in, DType::f64, kGpu, causal, 7, scale), cpu, 1e-12,
                            case_name(DType::f64, in, causal) + sc);
        expect_levels_close(run_fused(in, DType::f32, kGpu, causal, 7, scale), cpu, 1e-5,
                            case_name(DType::f32, in, causal) + sc);
        compare_low_precision(in, DType::bf16, causal, 7, /*gpu_reference=*/false, scale);
      }
}

// ------------------------------------------------------------------------ every element written

// Calls the kernels directly with output buffers pre-filled with NaN: every element must be
// overwritten, and with the values the ops return.
void check_poisoned(DType dtype, int64_t N, int64_t d, bool causal) {
  const Inputs in = make_inputs(2, 2, N, d, 6000 + N + d + causal, dtype);
  const std::string what = case_name(dtype, in, causal);
  auto t = [&](const Values& v) { return from_vector(v, in.shape, dtype, kGpu); };
  const Tensor q = t(in.Q), k = t(in.K), v = t(in.V), dO = t(in.dO), qt = t(in.Qt), kt = t(in.Kt), vt = t(in.Vt);
  const DType lse = (dtype == DType::bf16 || dtype == DType::f16) ? DType::f32 : dtype;
  const Shape rows = {in.shape[0], in.shape[1], in.shape[2]};
  const AttentionOptions o{std::nullopt, causal};
  auto nan_like = [&](const Shape& s, DType dt) { return full(s, NAN, dt, kGpu); };

  kernels::AttentionInputs inputs{};
  inputs.shape = {in.shape[0], in.shape[1], N, d, 1.0 / std::sqrt(static_cast<double>(d)), causal};
  inputs.dtype = dtype;
  inputs.Q = q.raw_data();
  inputs.K = k.raw_data();
  inputs.V = v.raw_data();

  // forward
  const AttentionForward want_f = attention_forward(q, k, v, o);
  Tensor O = nan_like(in.shape, dtype), L = nan_like(rows, lse);
  kernels::AttentionFwdArgs fa{};
  static_cast<kernels::AttentionInputs&>(fa) = inputs;
  fa.O = O.raw_data();
  fa.L = L.raw_data();
  kernels::cuda::attention_fwd(fa);
  ASSERT_TRUE(all_finite(O.to_vector<double>())) << what << " O";
  ASSERT_TRUE(all_finite(L.to_vector<double>())) << what << " L";
  EXPECT_EQ(O.to_vector<double>(), want_f.O.to_vector<double>()) << what << " O";
  EXPECT_EQ(L.to_vector<double>(), want_f.L.to_vector<double>()) << what << " L";

  // backward
  kernels::AttentionSavedArgs saved{};
  static_cast<kernels::AttentionInputs&>(saved) = inputs;
  saved.O = want_f.O.raw_data();
  saved.L = want_f.L.raw_data();
  saved.dO = dO.raw_data();
  saved.deterministic = attention_deterministic();  // as the op's call below
  const TensorList want_b = attention_backward(q, k, v, want_f.O, want_f.L, dO, o);
  TensorList outs = {nan_like(in.shape, dtype), nan_like(in.shape, dtype), nan_like(in.shape, dtype)};
  kernels::AttentionBwdArgs ba{};
  static_cast<kernels::AttentionSavedArgs&>(ba) = saved;
  ba.dQ = outs[0].raw_data();
  ba.dK = outs[1].raw_data();
  ba.dV = outs[2].raw_data();
  kernels::cuda::attention_bwd(ba);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(all_finite(outs[i].to_vector<double>())) << what << " " << kBwdNames[i];
    EXPECT_EQ(outs[i].to_vector<double>(), want_b[i].to_vector<double>()) << what << " " << kBwdNames[i];
  }

  // BoB, with all, some and no cotangents
  for (int mask : {7, 1, 2, 4, 0}) {
    const Tensor qm = (mask & 1) ? qt : Tensor(), km = (mask & 2) ? kt : Tensor(), vm = (mask & 4) ? vt : Tensor();
    const TensorList want = attention_backward_backward(q, k, v, want_f.O, want_f.L, dO, qm, km, vm, o);
    TensorList g = {nan_like(in.shape, dtype), nan_like(in.shape, dtype), nan_like(in.shape, dtype),
                    nan_like(in.shape, dtype)};
    kernels::AttentionBobArgs a{};
    static_cast<kernels::AttentionSavedArgs&>(a) = saved;
    a.Qt = qm.defined() ? qm.raw_data() : nullptr;
    a.Kt = km.defined() ? km.raw_data() : nullptr;
    a.Vt = vm.defined() ? vm.raw_data() : nullptr;
    a.gQ = g[0].raw_data();
    a.gK = g[1].raw_data();
    a.gV = g[2].raw_data();
    a.gdO = g[3].raw_data();
    kernels::cuda::attention_bwd_bwd(a);
    for (int i = 0; i < 4; ++i) {
      const std::string w = what + " cot=" + std::to_string(mask) + " " + kBobNames[i];
      ASSERT_TRUE(all_finite(g[i].to_vector<double>())) << w;
      EXPECT_EQ(g[i].to_vector<double>(), want[i].to_vector<double>()) << w;
    }
  }
}





TEST(CudaAttention, PoisonedOutputs) {
  GG_REQUIRE_GPU_OR_SKIP();
  for (bool causal : {false, true}) {
    check_poisoned(DType::bf16, 77, 64, causal);   // tensor cores, one pass-1 slice
    check_poisoned(DType::f16, 77, 128, causal);   // tensor cores, two pass-1 slices
    {  // the sm_80 kernels, which the two lines above do not take on Hopper
      PathMode sm80(AttentionPath::kSm80);
      check_poisoned(DType::bf16, 77, 64, causal);
      check_poisoned(DType::f16, 77, 128, causal);
    }
    {  // the fused backward and fused BoB (atomic additions), Hopper at d = 64
      DeterministicMode nd(false);
      check_poisoned(DType::bf16, 77, 64, causal);
    }
    check_poisoned(DType::bf16, 77, 80, causal);   // generic, f32 arithmetic, two column slices
    check_poisoned(DType::f32, 77, 32, causal);    // generic
    check_poisoned(DType::f64, 77, 16, causal);    // generic, d smaller than a staging chunk
  }
}

// ------------------------------------------------------------------------ Hopper kernels


#define GG_REQUIRE_HOPPER_OR_SKIP()                                                                   \
  do {                                                                                                \
    GG_REQUIRE_GPU_OR_SKIP();                                                                         \
    if (!kernels::cuda::testing::sm90_path_available())                                               \
      GTEST_SKIP() << "sm_90a attention kernels not built or not a compute capability 9.x device";    \
  } while (0)

class CudaAttentionHopper : public ::testing::TestWithParam<std::tuple<bool, int64_t, int64_t, bool>> {};

TEST_P(CudaAttentionHopper, WithinTwiceMmaSync) {
  GG_REQUIRE_HOPPER_OR_SKIP();
  const auto [f16, N, d, causal] = GetParam();
  const DType dtype = dtype_of(f16);
  const Inputs in = make_inputs(2, 3, N, d, 8000 + N + d + causal, dtype);
  const std::string what = case_name(dtype, in, causal);
  const Levels ref = run_fused(in, DType::f64, Device::cpu(), causal);
  const Levels hopper = run_fused(in, dtype, kGpu, causal);
  Levels mma;
  {
    PathMode sm80(AttentionPath::kSm80);
    mma = run_fused(in, dtype, kGpu, causal);
  }
  auto expect_close = [&](const Values& h, const Values& m, const Values& r, double scale, const std::string& out) {
    ASSERT_TRUE(all_finite(h)) << what << " " << out;
    const double err_h = rel_err(h, r, scale), err_m = rel_err(m, r, scale);
    if (verbose()) std::printf("  %-50s %-3s hopper %.3g mma.sync %.3g\n", what.c_str(), out.c_str(), err_h, err_m);
    EXPECT_LE(err_h, std::max(2 * err_m, low_precision_floor(dtype))) << what << " " << out << ": hopper " << err_h
                                                                     << ", mma.sync " << err_m;
  };
  expect_close(hopper.O, mma.O, ref.O, family_scale({ref.O}), "O");
  EXPECT_LE(max_abs_diff(hopper.L, ref.L), 1e-3) << what << " L";
  const double s1 = family_scale(ref.bwd), s2 = family_scale(ref.bob);
  for (int i = 0; i < 3; ++i) expect_close(hopper.bwd[i], mma.bwd[i], ref.bwd[i], s1, kBwdNames[i]);
  for (int i = 0; i < 4; ++i) expect_close(hopper.bob[i], mma.bob[i], ref.bob[i], s2, kBobNames[i]);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttentionHopper,
                         ::testing::Combine(::testing::Bool(), ::testing::Values<int64_t>(1, 77, 200, 1000),
                                            ::testing::Values<int64_t>(64, 128), ::testing::Bool()));

// The sm_90a forward (TMA producer, three consumer warpgroups at d = 64, two at d = 128): O and L
// against the CPU f64 reference, O's error at most 2 x the sm_80 forward's (or the rounding
// floor); outputs poisoned before the run; two runs bitwise equal.

TEST(CudaAttention, HopperForwardWarpSpecialized) {
  GG_REQUIRE_HOPPER_OR_SKIP();
  for (bool f16 : {false, true})
    for (int64_t d : {64, 128})
      for (bool causal : {false, true})
        for (int64_t N : {1, 77, 200, 1000}) {
          const DType dtype = dtype_of(f16);
          const Inputs in = make_inputs(2, 3, N, d, 8700 + N + d + causal, dtype);
          const std::string what = case_name(dtype, in, causal) + " ws";
          auto t = [&](const Values& v) { return from_vector(v, in.shape, dtype, kGpu); };
          const Tensor q = t(in.Q), k = t(in.K), v = t(in.V);
          const Tensor qc = from_vector(in.Q, in.shape, DType::f64, Device::cpu()),
                       kc = from_vector(in.K, in.shape, DType::f64, Device::cpu()),
                       vc = from_vector(in.V, in.shape, DType::f64, Device::cpu());
          const AttentionForward ref = attention_forward(qc, kc, vc, AttentionOptions{std::nullopt, causal});
          const AttentionForward sm80 = [&] {
            PathMode mode(AttentionPath::kSm80);
            return attention_forward(q, k, v, AttentionOptions{std::nullopt, causal});
          }();
          kernels::AttentionFwdArgs a{};
          a.shape = {in.shape[0], in.shape[1], N, d, 1.0 / std::sqrt(static_cast<double>(d)), causal};
          a.dtype = dtype;
          a.Q = q.raw_data();
          a.K = k.raw_data();
          a.V = v.raw_data();
          std::vector<Values> O, L;
          for (int r = 0; r < 2; ++r) {
            Tensor o = full(in.shape, NAN, dtype, kGpu), lse = full({in.shape[0], in.shape[1], N}, NAN, DType::f32, kGpu);
            a.O = o.raw_data();
            a.L = lse.raw_data();
            kernels::cuda::attention_fwd(a);
            O.push_back(o.to_vector<double>());
            L.push_back(lse.to_vector<double>());
            ASSERT_TRUE(all_finite(O.back())) << what << " O";
            ASSERT_TRUE(all_finite(L.back())) << what << " L";
          }
          EXPECT_EQ(O[0], O[1]) << what << ": O not deterministic";
          const Values ref_O = ref.O.to_vector<double>(), ref_L = ref.L.to_vector<double>();
          const double scale = family_scale({ref_O});
          const double err_ws = rel_err(O[0], ref_O, scale), err_m = rel_err(sm80.O.to_vector<double>(), ref_O, scale);
          if (verbose()) std::printf("  %-50s O ws %.3g mma.sync %.3g\n", what.c_str(), err_ws, err_m);
          EXPECT_LE(err_ws, std::max(2 * err_m, low_precision_floor(dtype))) << what << " O: ws " << err_ws
                                                                             << ", mma.sync " << err_m;
          EXPECT_LE(max_abs_diff(L[0], ref_L), 1e-3) << what << " L";
        }
}

// The sm_90a BoB on every cotangent subset that takes a different branch (7 = all three: the fused
// BoB at d = 64 and pass 0 with P·Vt at d = 128; 1, 2, 4 = one each: E and F first) and a single
// row (N = 1: every coefficient cancels to 0 in exact arithmetic): every output against the CPU
// f64 reference and the sm_80 kernels, and two runs agree bitwise. Causal runs cover the
// consumers that skip the last tiles of a block and must still take their turns (ping-pong in the
// d = 128 backward), else the block hangs.
TEST(CudaAttention, HopperBobCotangentSubsets) {
  GG_REQUIRE_HOPPER_OR_SKIP();
  for (bool f16 : {false, true})
    for (int64_t d : {64, 128})
      for (bool causal : {false, true})
        for (int cot_mask : {7, 1, 2, 4, -1}) {
          const int64_t N = cot_mask < 0 ? 1 : f16 ? 77 : 300;
          const int mask = cot_mask < 0 ? 7 : cot_mask;
          const DType dtype = dtype_of(f16);
          const Inputs in = make_inputs(1, 3, N, d, 9000 + N + d + causal + 10 * mask, dtype);
          const std::string what = case_name(dtype, in, causal, mask);
          const Levels ref = run_fused(in, DType::f64, Device::cpu(), causal, mask);
          const Levels mma = [&] {
            PathMode sm80(AttentionPath::kSm80);
            return run_fused(in, dtype, kGpu, causal, mask);
          }();
          const Levels a = run_fused(in, dtype, kGpu, causal, mask);
          const Levels b = run_fused(in, dtype, kGpu, causal, mask);
          // one family of outputs: finite, bitwise equal across the two runs, within 2 x the
          // sm_80 kernels' error against f64 (or the rounding floor)
          auto check = [&](const std::vector<Values>& x, const std::vector<Values>& y, const std::vector<Values>& m,
                           const std::vector<Values>& r, const char* const* names) {
            const double scale = family_scale(r);
            for (size_t i = 0; i < r.size(); ++i) {
              ASSERT_TRUE(all_finite(x[i])) << what << " " << names[i];
              EXPECT_EQ(x[i], y[i]) << what << " " << names[i] << ": not deterministic";
              const double err_h = rel_err(x[i], r[i], scale), err_m = rel_err(m[i], r[i], scale);
              if (verbose()) std::printf("  %-59s %-3s wgmma %.3g mma.sync %.3g\n", what.c_str(), names[i], err_h, err_m);
              EXPECT_LE(err_h, std::max(2 * err_m, low_precision_floor(dtype)))
                  << what << " " << names[i] << ": wgmma " << err_h << ", mma.sync " << err_m;
            }
          };
          check(a.bob, b.bob, mma.bob, ref.bob, kBobNames);
          if (HasFatalFailure()) return;
          if (mask != 7) continue;  // the backward does not depend on the cotangents
          check(a.bwd, b.bwd, mma.bwd, ref.bwd, kBwdNames);
          if (HasFatalFailure()) return;
        }
}

TEST(CudaAttention, HopperForwardPoisonedAndDeterministic) {
  GG_REQUIRE_HOPPER_OR_SKIP();
  for (bool causal : {false, true})
    for (int64_t d : {64, 128}) {
      const Inputs in = make_inputs(1, 2, 333, d, 8500 + d + causal, DType::bf16);
      auto t = [&](const Values& v) { return from_vector(v, in.shape, DType::bf16, kGpu); };
      const Tensor q = t(in.Q), k = t(in.K), v = t(in.V);
      kernels::AttentionFwdArgs a{};
      a.shape = {1, 2, 333, d, 1.0 / std::sqrt(static_cast<double>(d)), causal};
      a.dtype = DType::bf16;
      a.Q = q.raw_data();
      a.K = k.raw_data();
      a.V = v.raw_data();
      std::vector<Values> runs;
      for (int r = 0; r < 2; ++r) {
        Tensor O = full(in.shape, NAN, DType::bf16, kGpu), L = full({1, 2, 333}, NAN, DType::f32, kGpu);
        a.O = O.raw_data();
        a.L = L.raw_data();
        kernels::cuda::attention_fwd(a);
        runs.push_back(O.to_vector<double>());
        ASSERT_TRUE(all_finite(runs.back())) << "d=" << d << " causal=" << causal << " O";
        ASSERT_TRUE(all_finite(L.to_vector<double>())) << "d=" << d << " causal=" << causal << " L";
      }
      EXPECT_EQ(runs[0], runs[1]) << "d=" << d << " causal=" << causal;
    }
}

// The fused backward (sm_90a, d = 64), its additions to dQ ordered (the default) and not
// (set_attention_deterministic(false)): every output against the CPU f64 reference within 2 x the
// sm_80 backward's error (or the rounding floor), dK and dV bitwise equal in both orders (only dQ
// is added across blocks), causal and not, N from one tile to past several blocks; ordered, two
// runs bitwise equal.

// O, L and the backward's (dQ, dK, dV) of the fused ops.
std::vector<Values> run_backward(const Inputs& in, DType dtype, Device device, bool causal) {
  auto t = [&](const Values& v) { return from_vector(v, in.shape, dtype, device); };
  const AttentionOptions o{std::nullopt, causal};
  Tensor q = t(in.Q), k = t(in.K), v = t(in.V), dO = t(in.dO);
  AttentionForward f = attention_forward(q, k, v, o);
  std::vector<Values> r;
  for (const Tensor& g : attention_backward(q, k, v, f.O, f.L, dO, o)) r.push_back(g.to_vector<double>());
  return r;
}

TEST(CudaAttention, HopperFusedBackward) {
  GG_REQUIRE_HOPPER_OR_SKIP();
  for (bool f16 : {false, true})
    for (int64_t N : {1, 77, 333, 1000})
      for (bool causal : {false, true}) {
        const DType dtype = dtype_of(f16);
        const Inputs in = make_inputs(2, 3, N, 64, 9700 + N + causal, dtype);
        const std::string what = case_name(dtype, in, causal);
        const std::vector<Values> ref = run_backward(in, DType::f64, Device::cpu(), causal);
        const std::vector<Values> mma = [&] {
          PathMode sm80(AttentionPath::kSm80);
          return run_backward(in, dtype, kGpu, causal);
        }();
        const double scale = family_scale(ref);
        std::vector<Values> ordered;
        for (bool det : {true, false}) {
          DeterministicMode mode(det);
          const std::vector<Values> fused = run_backward(in, dtype, kGpu, causal);
          const std::string w = what + (det ? " ordered" : " atomic");
          if (det) {
            EXPECT_EQ(fused[0], run_backward(in, dtype, kGpu, causal)[0]) << w << " dQ, two runs";
            ordered = fused;
          } else {
            EXPECT_EQ(fused[1], ordered[1]) << w << " dK, ordered vs atomic";
            EXPECT_EQ(fused[2], ordered[2]) << w << " dV, ordered vs atomic";
          }
          for (int i = 0; i < 3; ++i) {
            ASSERT_TRUE(all_finite(fused[i])) << w << " " << kBwdNames[i];
            const double err = rel_err(fused[i], ref[i], scale), err_m = rel_err(mma[i], ref[i], scale);
            if (verbose()) std::printf("  %-50s %-3s fused %.3g mma.sync %.3g\n", w.c_str(), kBwdNames[i], err, err_m);
            EXPECT_LE(err, std::max(2 * err_m, low_precision_floor(dtype)))
                << w << " " << kBwdNames[i] << ": fused " << err << ", mma.sync " << err_m;
          }
        }
      }
}

// The fused BoB (sm_90a, d = 64, all three cotangents; mask 3: a cotangent missing, the E/F-first
// BoB), grad_Q and grad_dO added in a fixed order (the default) and in any order: every output
// within 2 x the sm_80 BoB's error against f64 (or the rounding floor), grad_K and grad_V bitwise
// equal in both orders (no addition across blocks; mask 3: all four); ordered, two runs bitwise
// equal.
TEST(CudaAttention, HopperFusedBob) {
  GG_REQUIRE_HOPPER_OR_SKIP();
  for (bool f16 : {false, true})
    for (int64_t N : {1, 77, 333, 1000})
      for (bool causal : {false, true})
        for (int mask : {7, 3}) {
          if (mask != 7 && N != 333) continue;
          const DType dtype = dtype_of(f16);
          const Inputs in = make_inputs(2, 3, N, 64, 9800 + N + causal + 10 * mask, dtype);
          const std::string what = case_name(dtype, in, causal, mask);
          const Levels ref = run_fused(in, DType::f64, N > 256 ? kGpu : Device::cpu(), causal, mask);
          const Levels mma = [&] {
            PathMode sm80(AttentionPath::kSm80);
            return run_fused(in, dtype, kGpu, causal, mask);
          }();
          Levels ordered_run;
          for (bool ordered : {true, false}) {
            DeterministicMode mode(ordered);
            const Levels fused = run_fused(in, dtype, kGpu, causal, mask);
            const std::string w = what + (ordered ? " ordered" : " atomic");
            const double scale = family_scale(ref.bob);
            if (ordered) {
              const Levels again = run_fused(in, dtype, kGpu, causal, mask);
              for (int i = 0; i < 4; ++i)
                EXPECT_EQ(fused.bob[i], again.bob[i]) << w << " " << kBobNames[i] << ", two runs";
              ordered_run = fused;
            }
            for (int i = 0; i < 4; ++i) {
              ASSERT_TRUE(all_finite(fused.bob[i])) << w << " " << kBobNames[i];
              if (!ordered && (i == 1 || i == 2 || mask != 7))
                EXPECT_EQ(fused.bob[i], ordered_run.bob[i]) << w << " " << kBobNames[i] << ", ordered vs atomic";
              const double err = rel_err(fused.bob[i], ref.bob[i], scale),
                           err_m = rel_err(mma.bob[i], ref.bob[i], scale);
              if (verbose())
                std::printf("  %-50s %-3s fused %.3g mma.sync %.3g\n", w.c_str(), kBobNames[i], err, err_m);
              EXPECT_LE(err, std::max(2 * err_m, low_precision_floor(dtype)))
                  << w << " " << kBobNames[i] << ": fused " << err << ", mma.sync " << err_m;
            }
          }
        }
}

// The key sweeps with their last wave split: B = 2, H = 3, N = 1000 are 48 units of 128 keys,
// planned for 20 SMs: two whole waves and 8 units in pieces (asserted from the plan), whose dK,
// dV (grad_K, grad_V) go through the f32 scratch: added atomically in the fused sweeps, stored
// per piece and summed in order in the deterministic dK dV sweep and BoB pass 2 (d = 64 and 128;
// the fused sweeps are d = 64 only). Every output within 2 x the unsplit deterministic kernels'
// error against f64 (or the rounding floor); the deterministic ones also bitwise equal across two
// runs.
TEST(CudaAttention, HopperFusedTailSplit) {
  GG_REQUIRE_HOPPER_OR_SKIP();
  constexpr int kSms = 20;
  constexpr int64_t N = 1000;
  for (int tiles : {16, 32}) {  // backward (key sweep tiles of 64 queries), BoB (32)
    const auto plan = kernels::cuda::plan_tail_split(6 * 8, tiles, false, kSms);
    ASSERT_EQ(plan.split_units, 8) << tiles;
    ASSERT_GT(plan.pieces, 1) << tiles;
  }
  for (int64_t dim : {64, 128})
    for (bool f16 : {false, true}) {
      const DType dtype = dtype_of(f16);
      const Inputs in = make_inputs(2, 3, N, dim, 9900 + f16 + dim, dtype);
      const std::string what = case_name(dtype, in, false);
      const Levels ref = run_fused(in, DType::f64, kGpu, false);
      const Levels det = run_fused(in, dtype, kGpu, false);
      TailSplitMode split(kSms);
      // the deterministic dK dV sweep and BoB pass 2 split too, each piece storing its own rows:
      // two runs bitwise equal
      const Levels det_split = run_fused(in, dtype, kGpu, false), det_split2 = run_fused(in, dtype, kGpu, false);
      for (int i = 0; i < 3; ++i) EXPECT_EQ(det_split.bwd[i], det_split2.bwd[i]) << what << " " << kBwdNames[i];
      for (int i = 0; i < 4; ++i) EXPECT_EQ(det_split.bob[i], det_split2.bob[i]) << what << " " << kBobNames[i];
      DeterministicMode nd(false);
      const Levels fused = run_fused(in, dtype, kGpu, false);
      for (const Levels* got : {&det_split, &fused})
        for (int level = 0; level < 2; ++level) {
          const std::vector<Values>& r = level == 0 ? ref.bwd : ref.bob;
          const std::vector<Values>& d = level == 0 ? det.bwd : det.bob;
          const std::vector<Values>& f = level == 0 ? got->bwd : got->bob;
          const double scale = family_scale(r);
          for (size_t i = 0; i < r.size(); ++i) {
            const std::string w =
                what + (got == &fused ? " fused " : " deterministic ") + (level == 0 ? kBwdNames[i] : kBobNames[i]);
            ASSERT_TRUE(all_finite(f[i])) << w;
            const double err = rel_err(f[i], r[i], scale), err_det = rel_err(d[i], r[i], scale);
            if (verbose()) std::printf("  %-50s split %.3g unsplit deterministic %.3g\n", w.c_str(), err, err_det);
            EXPECT_LE(err, std::max(2 * err_det, low_precision_floor(dtype)))
                << w << ": split " << err << ", unsplit deterministic " << err_det;
          }
        }
    }
}

// The sm_90a forward with its last wave split (attention/testing.h, ScopedTailSplitSms): B = 2,
// H = 3, N = 4000 are 126 units of 192 rows at d = 64 (three consumers) and 192 of 128 at d = 128,
// planned for 25 and 30 SMs: 1 and 12 units of the last wave each swept as two pieces of 16 key
// tiles, merged by fwd_merge_kernel (the plan is asserted; the forward plans pieces of at least 16
// tiles). O within 2 x the unsplit forward's error against f64 (or the rounding floor), L within
// 1e-3, two runs bitwise equal.
TEST(CudaAttention, HopperForwardTailSplit) {
  GG_REQUIRE_HOPPER_OR_SKIP();
  constexpr int64_t N = 4000;
  for (int64_t d : {64, 128}) {
    const int sms = d == 64 ? 25 : 30;
    const auto plan = kernels::cuda::plan_tail_split(d == 64 ? 126 : 192, 32, false, sms, 16);
    ASSERT_EQ(plan.split_units, d == 64 ? 1 : 12) << d;
    ASSERT_EQ(plan.pieces, 2) << d;
    for (bool f16 : {false, true}) {
      const DType dtype = dtype_of(f16);
      const Inputs in = make_inputs(2, 3, N, d, 9950 + d + f16, dtype);
      const std::string what = case_name(dtype, in, false) + " split";
      auto t = [&](const Values& v, DType dt, Device dev) { return from_vector(v, in.shape, dt, dev); };
      const AttentionOptions o{std::nullopt, false};
      const AttentionForward ref = attention_forward(t(in.Q, DType::f64, kGpu), t(in.K, DType::f64, kGpu),
                                                     t(in.V, DType::f64, kGpu), o);
      const Tensor q = t(in.Q, dtype, kGpu), k = t(in.K, dtype, kGpu), v = t(in.V, dtype, kGpu);
      const AttentionForward whole = attention_forward(q, k, v, o);
      std::vector<Values> O, L;
      for (int r = 0; r < 2; ++r) {
        TailSplitMode split(sms);
        const AttentionForward f = attention_forward(q, k, v, o);
        O.push_back(f.O.to_vector<double>());
        L.push_back(f.L.to_vector<double>());
        ASSERT_TRUE(all_finite(O.back())) << what << " O";
        ASSERT_TRUE(all_finite(L.back())) << what << " L";
      }
      EXPECT_EQ(O[0], O[1]) << what << ": O not deterministic";
      EXPECT_EQ(L[0], L[1]) << what << ": L not deterministic";
      const Values ref_O = ref.O.to_vector<double>(), ref_L = ref.L.to_vector<double>();
      const double scale = family_scale({ref_O});
      const double err = rel_err(O[0], ref_O, scale), err_whole = rel_err(whole.O.to_vector<double>(), ref_O, scale);
      if (verbose()) std::printf("  %-50s O split %.3g whole %.3g\n", what.c_str(), err, err_whole);
      EXPECT_LE(err, std::max(2 * err_whole, low_precision_floor(dtype))) << what << " O: split " << err << ", whole "
                                                                          << err_whole;
      EXPECT_LE(max_abs_diff(L[0], ref_L), 1e-3) << what << " L";
    }
  }
}

// ------------------------------------------------------------------------ determinism

// The public switch (ops/ops.h) reads back and starts from GG_ATTENTION_DETERMINISTIC (run with
// it set to 0 too: scripts/gpu-test.sh); the op layer passes it to the kernels in their
// arguments (AttentionSavedArgs::deterministic). No GPU needed.
TEST(CudaAttention, DeterministicSwitch) {
  const bool was = attention_deterministic();  // every test restores what it changes
  const char* env = std::getenv("GG_ATTENTION_DETERMINISTIC");
  EXPECT_EQ(was, env == nullptr || std::strcmp(env, "0") != 0) << "GG_ATTENTION_DETERMINISTIC=" << (env ? env : "");
  for (bool on : {false, true, false}) {
    set_attention_deterministic(on);
    EXPECT_EQ(attention_deterministic(), on);
  }
  set_attention_deterministic(was);
}

TEST(CudaAttention, BobIsDeterministic) {
  GG_REQUIRE_GPU_OR_SKIP();
  for (bool causal : {false, true}) {
    const Inputs in = make_inputs(2, 4, 1024, 64, 7000 + causal, DType::bf16);
    const Levels a = run_fused(in, DType::bf16, kGpu, causal);
    const Levels b = run_fused(in, DType::bf16, kGpu, causal);
    const std::string what = case_name(DType::bf16, in, causal);
    EXPECT_EQ(a.O, b.O) << what;
    EXPECT_EQ(a.L, b.L) << what;
    for (int i = 0; i < 3; ++i) EXPECT_EQ(a.bwd[i], b.bwd[i]) << what << " " << kBwdNames[i];
    for (int i = 0; i < 4; ++i) {
      ASSERT_TRUE(all_finite(a.bob[i])) << what << " " << kBobNames[i];
      EXPECT_EQ(a.bob[i], b.bob[i]) << what << " " << kBobNames[i];
    }
  }
}

// ------------------------------------------------------------------------ through autograd

// gg::attention differentiated twice with create_graph on the GPU gives the BoB op's outputs.
TEST(CudaAttention, AutogradChain) {
  GG_REQUIRE_GPU_OR_SKIP();
  const DType dtype = DType::bf16;
  const Inputs in = make_inputs(1, 2, 100, 64, 8000, dtype);
  auto t = [&](const Values& v) { return from_vector(v, in.shape, dtype, kGpu); };
  const AttentionOptions o{std::nullopt, true};
  TensorList x = {leaf(t(in.Q)), leaf(t(in.K)), leaf(t(in.V))};
  Tensor dO = leaf(t(in.dO));
  const TensorList tilde = {t(in.Qt), t(in.Kt), t(in.Vt)};
  Tensor O = attention(x[0], x[1], x[2], o);
  TensorList d = grad({O}, x, {dO}, std::nullopt, /*create_graph=*/true);
  Tensor inner = sum(tilde[0] * d[0]) + sum(tilde[1] * d[1]) + sum(tilde[2] * d[2]);
  TensorList g = grad({inner}, {x[0], x[1], x[2], dO});

  const Levels direct = run_fused(in, dtype, kGpu, true);
  EXPECT_LE(rel_err(O.to_vector<double>(), direct.O, family_scale({direct.O})), 1e-6);
  const double s1 = family_scale(direct.bwd), s2 = family_scale(direct.bob);
  for (int i = 0; i < 3; ++i) EXPECT_LE(rel_err(d[i].to_vector<double>(), direct.bwd[i], s1), 1e-6) << kBwdNames[i];
  for (int i = 0; i < 4; ++i) EXPECT_LE(rel_err(g[i].to_vector<double>(), direct.bob[i], s2), 1e-6) << kBobNames[i];
}

}  // namespace
}  // namespace gg::test
