// The CUDA attention with grouped-query heads, Nq != Nk and windows: the general-mask (kOpts)
// instances of the sm_90a kernels (bf16/f16, d in {64, 128} on a 9.x device) and of the sm_80
// kernels (bf16/f16, d in {32, 64, 128}), and the generic kernels (everything else) (choose_path):
//
//   OptionsMatchCpu    forward (O, L), backward (dQ, dK, dV) and BoB (every subset of the three
//                      cotangents) on the GPU against the CPU kernels: f64 within 1e-12 of each
//                      output family's largest value (at least 1), f32 within 1e-5. The CPU kernels are held to
//                      the composite at orders 0-3 by tests/test_attention.cpp.
//   ChainVsComposite   gg::attention on the GPU differentiated to order 3 (orders 1 and 2 run the
//                      fused kernels, order 3 the fallback) against attention_composite on the
//                      GPU, f64, 1e-10.
//   LowPrecision       bf16 and f16, head dims 32, 64, 96, 128 and 256: every output of orders 0-2
//                      against an f64 reference from the same rounded inputs, within 2 x the error
//                      of the composite run in the same dtype on the GPU (or 2 units of rounding).
//   RowsWithoutKeys    rows that see no key: O = 0 and L = -inf, and their gradients exactly 0
//                      (f64: generic kernels; bf16: the sm_90a kernels on a 9.x device, else sm_80).
//   WithinTwiceGeneric the tensor-core kernels' general-mask instances (the default path: sm_90a
//                      on a 9.x device; and the sm_80 kernels, forced), bf16/f16, d = 64 and 128,
//                      every level against the CPU's f64 within twice the error of the generic
//                      CUDA kernels (forced) in the same dtype: bands of tiles cut by windows at
//                      both ends, grouped heads up to 8 per key/value head, blocks whose rows or
//                      keys see nothing.
//   SegmentedAdditions the fused sweeps' ordered additions in segments (Nq << Nk, no left bound):
//                      within twice the one-segment error, bitwise reproducible.
//   Deterministic      the backward and the BoB of a grouped, windowed case (the ordered additions
//                      of the fused sweeps at d = 64 on sm_90a): bitwise identical across runs.
//   GroupedTailSplit   grouped heads with the key sweeps' last wave split (full masks): within
//                      twice the unsplit error, bitwise reproducible, atomic mode too.
//   GroupedLongestSplit  grouped causal key sweeps split for their longest units: within twice
//                      the unsplit error, bitwise reproducible.
//   PersistentWindowForward  the sm_90a forward's persistent blocks (windows bounded on both
//                      sides): bitwise equal to one block per unit, rows without keys O = 0.
//   NonFinite          NaN and ±inf planted in a query row, a key, a value or a row of dO: every
//                      path's NaN (and infinite) entries at every level are the CPU kernels', which
//                      are the composite's; rows without keys keep O = 0, L = -inf.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../attention_chain.h"
#include "../test_util.h"
#include "gpu_util.h"
#include "kernels/cuda/attention/plan.h"
#include "kernels/cuda/attention/testing.h"

namespace gg::test {
namespace {

const Device kGpu = Device::cuda(0);

Values host_values(const Tensor& t) { return to(to(t, Device::cpu()), DType::f64).to_vector<double>(); }

// The three recorded primitives, called directly. cot_mask: bit 0 = Qt present, 1 = Kt, 2 = Vt.
struct Levels {
  Values O, L;
  std::vector<Values> bwd;  // dQ, dK, dV
  std::vector<Values> bob;  // gQ, gK, gV, gdO, and gdL when a dL was given
};

// dL: a cotangent of L (on the CPU, f64; converted to L's dtype and the device), or undefined.
Levels run_levels(const OptInputs& in, const AttentionOptions& o, DType dtype, Device device, int cot_mask,
                  const Tensor& dL_in = {}) {
  auto put = [&](const Tensor& t) { return to(to(t, dtype), device); };
  const Tensor q = put(in.qkv[0]), k = put(in.qkv[1]), v = put(in.qkv[2]), dO = put(in.dO);
  const Tensor qt = (cot_mask & 1) ? put(in.tilde[0]) : Tensor();
  const Tensor kt = (cot_mask & 2) ? put(in.tilde[1]) : Tensor();
  const Tensor vt = (cot_mask & 4) ? put(in.tilde[2]) : Tensor();
  const AttentionForward f = attention_forward(q, k, v, o);
  Levels r;
  r.O = host_values(f.O);
  r.L = host_values(f.L);
  const Tensor dL = dL_in.defined() ? to(to(dL_in, f.L.dtype()), device) : Tensor();
  for (const Tensor& t : attention_backward(q, k, v, f.O, f.L, dO, o, dL)) r.bwd.push_back(host_values(t));
  const TensorList bob = attention_backward_backward(q, k, v, f.O, f.L, dO, qt, kt, vt, o, dL);
  for (size_t i = 0; i < (dL.defined() ? 5u : 4u); ++i) r.bob.push_back(host_values(bob[i]));
  return r;
}

// max |got - want| / scale, where -inf must meet -inf (L of a row without keys).
double scaled_error(const Values& got, const Values& want, double scale) {
  EXPECT_EQ(got.size(), want.size());
  double e = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    if (std::isinf(want[i]) || std::isinf(got[i])) {
      if (got[i] != want[i]) return std::numeric_limits<double>::infinity();
      continue;
    }
    const double d = std::abs(got[i] - want[i]);
    if (!(d <= e)) e = d;  // NaN propagates
  }
  return e / scale;
}

// Errors relative to a family's largest value, but at least 1 (the inputs are standard normal):
// where every row sees one key, some BoB families are exactly zero and both sides return
// rounding noise, which a relative error would compare as noise against noise.
double scale_of(const std::vector<Values>& family) { return std::max(family_scale(family), 1.0); }

void expect_levels_match(const Levels& got, const Levels& want, double tol, const std::string& what) {
  EXPECT_LE(scaled_error(got.O, want.O, scale_of({want.O})), tol) << what << " O";
  EXPECT_LE(scaled_error(got.L, want.L, scale_of({want.L})), tol) << what << " L";
  const double s1 = scale_of(want.bwd), s2 = scale_of(want.bob);
  for (size_t i = 0; i < 3; ++i) EXPECT_LE(scaled_error(got.bwd[i], want.bwd[i], s1), tol) << what << " bwd " << i;
  for (size_t i = 0; i < 4; ++i) EXPECT_LE(scaled_error(got.bob[i], want.bob[i], s2), tol) << what << " bob " << i;
}

// The option cases of the CPU tests (d = 5, up to 13 rows) and sizes that cross the generic
// kernels' 32-row tiles, so that window edges cut through blocks and whole tiles are skipped.
const std::vector<OptCase>& gpu_cases() {
  static const std::vector<OptCase> cases = [] {
    std::vector<OptCase> c = option_cases();
    const std::vector<OptCase> large = {
        {"tiles_gqa_window", 4, 2, 70, 150, 8, false, 20, 5},
        {"tiles_causal_window_empty_rows", 2, 1, 150, 70, 8, true, 10, {}},
        {"tiles_right_window", 2, 2, 130, 130, 8, false, {}, 3},
        {"tiles_causal_nq_lt_nk", 3, 1, 65, 200, 8, true, {}, {}},
        {"tiles_wide_left", 2, 2, 200, 200, 8, false, 70, 0},
        {"d96_gqa4_causal_window", 8, 2, 100, 100, 96, true, 33, {}},
        {"d256_mqa_nq_lt_nk", 2, 1, 40, 90, 256, false, {}, {}},
        {"d32_gqa_two_sided", 4, 1, 77, 77, 32, false, 9, 12},
    };
    c.insert(c.end(), large.begin(), large.end());
    return c;
  }();
  return cases;
}

class CudaAttentionOptions : public ::testing::TestWithParam<size_t> {};

TEST_P(CudaAttentionOptions, OptionsMatchCpu) {
  GG_REQUIRE_GPU_OR_SKIP();
  const OptCase& c = gpu_cases()[GetParam()];
  const OptInputs in = opt_inputs(c, 2, 300 + GetParam(), DType::f32);  // values exact in f32
  const AttentionOptions o = options_of(c);
  for (int mask : {7, 1, 2, 4, 3, 6}) {
    const std::string what = describe(c) + " cot=" + std::to_string(mask);
    const Levels cpu = run_levels(in, o, DType::f64, Device::cpu(), mask);
    expect_levels_match(run_levels(in, o, DType::f64, kGpu, mask), cpu, 1e-12, what + " f64");
    expect_levels_match(run_levels(in, o, DType::f32, kGpu, mask), cpu, 1e-5, what + " f32");
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaAttentionOptions, ::testing::Range<size_t>(0, gpu_cases().size()),
                         [](const auto& info) { return std::string(gpu_cases()[info.param].name); });

// The cases up to 100 x 100 scores: order 3 of the composite holds Nq x Nk graphs three deep.
TEST(CudaAttentionOptionsChain, ChainVsComposite) {
  GG_REQUIRE_GPU_OR_SKIP();
  int ran = 0;
  for (size_t n = 0; n < gpu_cases().size(); ++n) {
    const OptCase& c = gpu_cases()[n];
    if (c.Nq * c.Nk > 100 * 100) continue;
    const OptInputs in = opt_inputs(c, 2, 400 + n, DType::f64, kGpu);
    const AttentionOptions o = options_of(c);
    const Chain a = run_chain(fused, in.qkv, in.dO, in.tilde, o, in.w);
    const Chain b = run_chain(composite, in.qkv, in.dO, in.tilde, o, in.w);
    EXPECT_GT(family_scale(b.second), 1e-2) << describe(c);
    EXPECT_TRUE(all_finite(a)) << describe(c);
    expect_chains_equal(a, b, 1e-10, describe(c));
    ++ran;
  }
  EXPECT_GE(ran, 20);
}

// ---------------------------------------------------------------------- bf16 / f16, head dims

double rounding_floor(DType dtype) { return dtype == DType::bf16 ? 2.0 / 256 : 2.0 / 2048; }

void expect_family_within(const std::vector<Values>& fused_f, const std::vector<Values>& comp_f,
                          const std::vector<Values>& ref_f, DType dtype, const std::string& what) {
  const double scale = family_scale(ref_f);
  ASSERT_EQ(fused_f.size(), ref_f.size()) << what;
  for (size_t i = 0; i < ref_f.size(); ++i) {
    const double e_fused = scaled_error(fused_f[i], ref_f[i], scale), e_comp = scaled_error(comp_f[i], ref_f[i], scale);
    EXPECT_LE(e_fused, std::max(2 * e_comp, rounding_floor(dtype)))
        << what << " output " << i << ": fused " << e_fused << ", composite " << e_comp;
  }
}

// Every level of `in` in bf16 with the kernels' plans made for `sms` SMs (attention/testing.h,
// ScopedTailSplitSms) against the same with the plans for `base_sms`: two runs bitwise
// equal in the backward and the BoB (pieces and segments are summed in a fixed order), and each
// output within twice the base run's error against the f64 reference. Returns the base run.
Levels expect_plan_within_base(const OptInputs& in, const AttentionOptions& o, const Levels& ref, int base_sms,
                               int sms, const std::string& what) {
  using kernels::cuda::testing::ScopedTailSplitSms;
  Levels base;
  {
    ScopedTailSplitSms planned(base_sms);
    base = run_levels(in, o, DType::bf16, kGpu, 7);
  }
  ScopedTailSplitSms planned(sms);
  const Levels a = run_levels(in, o, DType::bf16, kGpu, 7), b = run_levels(in, o, DType::bf16, kGpu, 7);
  EXPECT_EQ(a.bwd, b.bwd) << what;
  EXPECT_EQ(a.bob, b.bob) << what;
  expect_family_within(a.bwd, base.bwd, ref.bwd, DType::bf16, what + " bwd");
  expect_family_within(a.bob, base.bob, ref.bob, DType::bf16, what + " bob");
  return base;
}

class CudaAttentionOptionsLowPrecision : public ::testing::TestWithParam<std::tuple<int64_t, bool>> {};

TEST_P(CudaAttentionOptionsLowPrecision, WithinTwiceComposite) {
  GG_REQUIRE_GPU_OR_SKIP();
  const auto [d, f16] = GetParam();
  const DType dtype = f16 ? DType::f16 : DType::bf16;
  const std::vector<OptCase> cases = {
      {"gqa_causal_window", 4, 2, 150, 150, d, true, 40, {}},
      {"mqa_nq_lt_nk_two_sided", 4, 1, 90, 170, d, false, 30, 10},
  };
  for (const OptCase& c : cases) {
    const std::string what = describe(c) + " " + dtype_name(dtype);
    const OptInputs in = opt_inputs(c, 1, 500 + d, dtype);  // rounded to the dtype: every run sees them
    TensorList ref_qkv, q_qkv, ref_tilde, q_tilde;
    for (const Tensor& t : in.qkv) {
      ref_qkv.push_back(to(t, DType::f64));
      q_qkv.push_back(to(t, kGpu));
    }
    for (const Tensor& t : in.tilde) {
      ref_tilde.push_back(to(t, DType::f64));
      q_tilde.push_back(to(t, kGpu));
    }
    const AttentionOptions o = options_of(c);
    const Chain ref = run_chain(fused, ref_qkv, to(in.dO, DType::f64), ref_tilde, o);  // CPU f64
    const Chain fu = run_chain(fused, q_qkv, to(in.dO, kGpu), q_tilde, o);
    const Chain co = run_chain(composite, q_qkv, to(in.dO, kGpu), q_tilde, o);
    expect_family_within({fu.O}, {co.O}, {ref.O}, dtype, what + " O");
    expect_family_within(fu.first, co.first, ref.first, dtype, what + " order 1");
    expect_family_within(fu.second, co.second, ref.second, dtype, what + " order 2");
  }
}

INSTANTIATE_TEST_SUITE_P(HeadDims, CudaAttentionOptionsLowPrecision,
                         ::testing::Combine(::testing::Values<int64_t>(32, 64, 96, 128, 256), ::testing::Bool()));

// ---------------------------------------------------------------------- edge rows, determinism

class CudaAttentionOptionsEmptyRows : public ::testing::TestWithParam<DType> {};

// f64 runs the generic kernels, bf16 the tensor-core ones (d = 64).
TEST_P(CudaAttentionOptionsEmptyRows, RowsWithoutKeys) {
  GG_REQUIRE_GPU_OR_SKIP();
  // causal with Nq = 77 > Nk = 7: rows 0..69 see no key (i' = i - 70 < 0); a window of 2 on the left
  const OptCase c{"empty_rows", 4, 2, 77, 7, 64, true, 2, {}};
  const OptInputs in = opt_inputs(c, 2, 600, GetParam());
  const Levels g = run_levels(in, options_of(c), GetParam(), kGpu, 7);
  const int64_t rows = 2 * c.Hq * c.Nq;
  for (int64_t r = 0; r < rows; ++r) {
    const bool empty = r % c.Nq < 70;
    ASSERT_EQ(std::isinf(g.L[r]) && g.L[r] < 0, empty) << "L row " << r << " = " << g.L[r];
    for (int64_t e = 0; e < c.d; ++e) {
      const size_t at = static_cast<size_t>(r * c.d + e);
      for (const Values* x : {&g.O, &g.bwd[0], &g.bob[0], &g.bob[3]}) {
        ASSERT_TRUE(std::isfinite((*x)[at])) << "row " << r;
        if (empty) ASSERT_EQ((*x)[at], 0.0) << "row " << r;
      }
    }
  }
  for (const Values* x : {&g.bwd[1], &g.bwd[2], &g.bob[1], &g.bob[2]})
    for (double v : *x) ASSERT_TRUE(std::isfinite(v));
  EXPECT_GT(family_scale({g.O}), 0.1);  // the other rows are not zero
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaAttentionOptionsEmptyRows, ::testing::Values(DType::f64, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// The tensor-core kernels' general-mask instances (bf16/f16, d = 64 and 128; the default path,
// sm_90a on a 9.x device, and the sm_80 kernels, forced) against the CPU f64 kernels, within twice
// the error of the generic CUDA kernels (forced) on the same inputs: tiles of 32 to 192 rows cut
// by windows, grouped heads up to 8 per key/value head, blocks whose rows or keys see nothing.
class CudaAttentionOptionsTensorCores : public ::testing::TestWithParam<std::tuple<int64_t, bool, bool>> {};

TEST_P(CudaAttentionOptionsTensorCores, WithinTwiceGeneric) {
  GG_REQUIRE_GPU_OR_SKIP();
  using kernels::cuda::testing::AttentionPath;
  const auto [d, f16, sm80] = GetParam();
  const DType dtype = f16 ? DType::f16 : DType::bf16;
  const std::vector<OptCase> cases = {
      {"gqa8_window", 8, 1, 200, 200, d, false, 37, 50},
      {"gqa2_causal_window_nq_lt_nk", 4, 2, 130, 300, d, true, 70, {}},
      {"causal_nq_gt_nk_empty_rows", 2, 2, 190, 100, d, true, {}, {}},
      {"right_window_only", 2, 1, 150, 150, d, false, {}, 20},
      {"zero_width_rect", 2, 2, 70, 140, d, false, 0, 0},
      {"gqa4_causal_window_bands", 8, 2, 700, 700, d, true, 300, {}},
      {"gqa4_full_nq_gt_nk", 4, 1, 520, 260, d, false, {}, {}},
      {"causal_nq_lt_nk", 2, 2, 300, 1000, d, true, {}, {}},
  };
  for (const OptCase& c : cases) {
    const std::string what = describe(c) + " " + dtype_name(dtype) + (sm80 ? " sm80" : " default");
    const OptInputs in = opt_inputs(c, 1, 800 + d, dtype);
    const AttentionOptions o = options_of(c);
    const Levels ref = run_levels(in, o, DType::f64, Device::cpu(), 7);
    Levels fast;
    {
      kernels::cuda::testing::ScopedAttentionPath path(sm80 ? AttentionPath::kSm80 : AttentionPath::kAuto);
      fast = run_levels(in, o, dtype, kGpu, 7);
    }
    Levels slow;
    {
      kernels::cuda::testing::ScopedAttentionPath generic(kernels::cuda::testing::AttentionPath::kGeneric);
      slow = run_levels(in, o, dtype, kGpu, 7);
    }
    expect_family_within({fast.O}, {slow.O}, {ref.O}, dtype, what + " O");
    expect_family_within(fast.bwd, slow.bwd, ref.bwd, dtype, what + " bwd");
    expect_family_within(fast.bob, slow.bob, ref.bob, dtype, what + " bob");
    EXPECT_LE(scaled_error(fast.L, ref.L, 1.0), 1e-3) << what << " L";
  }
}

INSTANTIATE_TEST_SUITE_P(HeadDims, CudaAttentionOptionsTensorCores,
                         ::testing::Combine(::testing::Values<int64_t>(64, 128), ::testing::Bool(), ::testing::Bool()));

// The cotangent dL of the row log-sum-exp (the backward's D - dL, the BoB's F and grad_dL = E) on
// every path: the default (sm_90a on a 9.x device: the fused sweeps at d = 64, the P·Vt passes
// at d = 128 with all cotangents, the E/F passes without Vt), sm_80 and generic (forced), plain
// and general-mask instances, bf16, against the CPU f64 within twice the generic kernels' error;
// and the generic kernels in f64 within 1e-12 of the CPU.
TEST(CudaAttentionOptionsEdges, LogSumExpCotangent) {
  GG_REQUIRE_GPU_OR_SKIP();
  using kernels::cuda::testing::AttentionPath;
  using kernels::cuda::testing::ScopedAttentionPath;
  for (int64_t d : {64, 128}) {
    const std::vector<OptCase> cases = {
        {"square_causal", 4, 4, 300, 300, d, true, {}, {}},
        {"square_full", 2, 2, 257, 257, d, false, {}, {}},
        {"gqa4_causal_window", 8, 2, 700, 700, d, true, 300, {}},
    };
    for (const OptCase& c : cases) {
      const OptInputs in = opt_inputs(c, 1, 1200 + d, DType::bf16);
      const AttentionOptions o = options_of(c);
      manual_seed(77);
      const Tensor dL = randn({1, c.Hq, c.Nq}, DType::f64);
      for (int cot : {7, 3, 4}) {
        const std::string what = describe(c) + " cot=" + std::to_string(cot);
        const Levels ref = run_levels(in, o, DType::f64, Device::cpu(), cot, dL);
        Levels exact, slow;
        {
          ScopedAttentionPath generic(AttentionPath::kGeneric);
          exact = run_levels(in, o, DType::f64, kGpu, cot, dL);
          slow = run_levels(in, o, DType::bf16, kGpu, cot, dL);
        }
        expect_levels_match(exact, ref, 1e-12, what + " generic f64");
        EXPECT_LE(scaled_error(exact.bob[4], ref.bob[4], scale_of({ref.bob[4]})), 1e-12) << what << " gdL";
        for (AttentionPath path : {AttentionPath::kAuto, AttentionPath::kSm80}) {
          ScopedAttentionPath forced(path);
          const Levels fast = run_levels(in, o, DType::bf16, kGpu, cot, dL);
          const std::string w = what + (path == AttentionPath::kAuto ? " default" : " sm80");
          expect_family_within(fast.bwd, slow.bwd, ref.bwd, DType::bf16, w + " bwd");
          expect_family_within({fast.bob.begin(), fast.bob.begin() + 4}, {slow.bob.begin(), slow.bob.begin() + 4},
                               {ref.bob.begin(), ref.bob.begin() + 4}, DType::bf16, w + " bob");
          expect_family_within({fast.bob[4]}, {slow.bob[4]}, {ref.bob[4]}, DType::bf16, w + " gdL");
        }
        if (cot == 4)  // no Qt, no Kt: G = 0, grad_dL = E = 0
          for (double x : slow.bob[4]) ASSERT_EQ(x, 0.0) << what;
      }
    }
  }
}

// The key sweeps of grouped heads split into pieces (attention/testing.h, ScopedTailSplitSms):
// B = 2, Hkv = 2, Nk = 1000 are 32 units of 128 keys, planned for 20 SMs (the plans are asserted),
// with Hq = 8 and Nq = 1000 or 700. Full masks (every unit sweeps the same steps): the last wave
// split; causal and windowed (units of different lengths): every unit in 2 pieces of two query
// heads each. The unsplit runs are planned for 8 SMs (32 units: 4 per SM, no split of either
// kind). Every level against the CPU f64 within twice the unsplit run's error; two split runs
// bitwise equal (the pieces' rows are summed in a fixed order); atomic mode within the same bound.
TEST(CudaAttentionOptionsEdges, GroupedTailSplit) {
  GG_REQUIRE_GPU_OR_SKIP();
  using kernels::cuda::testing::ScopedTailSplitSms;
  constexpr int kSms = 20, kWholeSms = 8;
  for (int tiles : {4 * 16, 4 * 32, 4 * 11, 4 * 22}) {  // steps per unit: backward (64 rows), BoB (32)
    ASSERT_GT(kernels::cuda::plan_tail_split(32, tiles, false, kSms).split_units, 0) << tiles;
    ASSERT_EQ(kernels::cuda::plan_tail_split(32, tiles, false, kWholeSms).split_units, 0) << tiles;
  }
  const auto group = kernels::cuda::plan_group_split(32, 4, kSms);
  ASSERT_EQ(group.whole, 0);
  ASSERT_EQ(group.split_units, 32);
  ASSERT_EQ(group.pieces, 2);
  ASSERT_EQ(kernels::cuda::plan_group_split(32, 4, kWholeSms).split_units, 0);
  const std::vector<OptCase> cases = {
      {"gqa4_split", 8, 2, 1000, 1000, 64, false, {}, {}},
      {"gqa4_split", 8, 2, 700, 1000, 128, false, {}, {}},
      {"gqa4_causal_split", 8, 2, 1000, 1000, 64, true, {}, {}},
      {"gqa4_causal_split", 8, 2, 700, 1000, 128, true, {}, {}},
      {"gqa4_window_split", 8, 2, 1000, 1000, 64, true, 200, {}},
      {"gqa4_window_split", 8, 2, 1000, 1000, 128, false, 150, 60}};
  for (const OptCase& c : cases) {
    const std::string what = describe(c);
    const OptInputs in = opt_inputs(c, 2, 900 + c.d + c.Nq, DType::bf16);
    const AttentionOptions o = options_of(c);
    const Levels ref = run_levels(in, o, DType::f64, Device::cpu(), 7);
    const Levels whole = expect_plan_within_base(in, o, ref, kWholeSms, kSms, what + " split");
    ScopedTailSplitSms split(kSms);
    gg::set_attention_deterministic(false);
    const Levels any = run_levels(in, o, DType::bf16, kGpu, 7);
    gg::set_attention_deterministic(true);
    expect_family_within(any.bwd, whole.bwd, ref.bwd, DType::bf16, what + " split atomic bwd");
    expect_family_within(any.bob, whole.bob, ref.bob, DType::bf16, what + " split atomic bob");
  }
}

// Grouped causal key sweeps split for their longest units (plan.h: plan_group_split's tail
// count): Hq 8 over one key/value head, N 2048 (16 units), whose first unit is 16/136 of the work:
// planned for 4 SMs (share 0.47: 2 pieces, asserted) against 1 SM (0.12: no split). Every level
// against the CPU f64 within twice the unsplit run's error, two split runs bitwise equal.
TEST(CudaAttentionOptionsEdges, GroupedLongestSplit) {
  GG_REQUIRE_GPU_OR_SKIP();
  using kernels::cuda::longest_key_unit_share;
  using kernels::cuda::plan_group_split;
  for (int rows : {32, 64, 128}) {  // the key sweeps' query tiles
    ASSERT_EQ(plan_group_split(16, 8, 1, longest_key_unit_share(2048, 2048, true, -1, -1, 1, rows, 1)).pieces, 1);
    ASSERT_EQ(plan_group_split(16, 8, 4, longest_key_unit_share(2048, 2048, true, -1, -1, 1, rows, 4)).pieces, 2);
  }
  for (int64_t d : {64, 128}) {
    const OptCase c{"mqa_causal_longest_split", 8, 1, 2048, 2048, d, true, {}, {}};
    const std::string what = describe(c);
    const OptInputs in = opt_inputs(c, 1, 1500 + d, DType::bf16);
    const AttentionOptions o = options_of(c);
    const Levels ref = run_levels(in, o, DType::f64, Device::cpu(), 7);
    expect_plan_within_base(in, o, ref, 1, 4, what + " split");
  }
}

// The fused sweeps' ordered additions in segments (plan.h: ordered_add_segments): queries far
// fewer than keys and no left bound, planned for 64 SMs (4 or 8 segments, asserted) and for 1 SM
// (one segment). Every level against the CPU f64 within twice the one-segment run's error, two
// segmented runs bitwise equal (the segments are summed in a fixed order). d = 64, bf16: the
// sm_90a fused backward and BoB.
TEST(CudaAttentionOptionsEdges, SegmentedAdditions) {
  GG_REQUIRE_GPU_OR_SKIP();
  if (!kernels::cuda::testing::sm90_path_available()) GTEST_SKIP() << "needs the sm_90a kernels";
  using kernels::cuda::ordered_add_segments;
  constexpr int kSms = 64;
  const std::vector<OptCase> cases = {{"rect_causal", 2, 2, 300, 4000, 64, true, {}, {}},
                                      {"rect_gqa_full", 4, 2, 300, 4000, 64, false, {}, {}},
                                      {"rect_right_window", 2, 2, 300, 4000, 64, false, {}, 30}};
  for (const OptCase& c : cases) {
    const std::string what = describe(c);
    const int group = static_cast<int>(c.Hq / c.Hkv);
    ASSERT_EQ(ordered_add_segments(c.Nq, c.Nk, group, false, kSms), group == 1 ? 8 : 4) << what;
    ASSERT_EQ(ordered_add_segments(c.Nq, c.Nk, group, false, 1), 1) << what;
    const OptInputs in = opt_inputs(c, 1, 1300 + c.Hq, DType::bf16);
    const AttentionOptions o = options_of(c);
    const Levels ref = run_levels(in, o, DType::f64, Device::cpu(), 7);
    expect_plan_within_base(in, o, ref, 1, kSms, what + " segmented");
  }
}

TEST(CudaAttentionOptionsEdges, Deterministic) {
  GG_REQUIRE_GPU_OR_SKIP();
  const OptCase c{"gqa_window", 8, 2, 300, 500, 64, true, 100, {}};
  const OptInputs in = opt_inputs(c, 1, 700, DType::bf16);
  const Levels a = run_levels(in, options_of(c), DType::bf16, kGpu, 7);
  const Levels b = run_levels(in, options_of(c), DType::bf16, kGpu, 7);
  EXPECT_EQ(a.O, b.O);
  EXPECT_EQ(a.L, b.L);
  EXPECT_EQ(a.bwd, b.bwd);
  EXPECT_EQ(a.bob, b.bob);
}

// The sm_90a forward under windows bounded on both sides runs persistent blocks (one per SM, each
// taking units in turn: its ring of K and V stages and its Q buffer carry over from unit to unit).
// Planned for 5 SMs (attention/testing.h, ScopedTailSplitSms) each block takes about ten units; O
// and L must be bitwise equal to the launch of one block per unit, rows that see no key O = 0 and
// L = -inf. d = 64 (three consumers, each taking only the tiles its rows see) and d = 128 (two in
// turns), bf16, grouped heads, Nq = Nk and both orders of Nq != Nk.
TEST(CudaAttentionOptionsEdges, PersistentWindowForward) {
  GG_REQUIRE_GPU_OR_SKIP();
  if (!kernels::cuda::testing::sm90_path_available()) GTEST_SKIP() << "needs the sm_90a kernels";
  using kernels::cuda::testing::ScopedTailSplitSms;
  constexpr int64_t B = 2;
  constexpr int kSms = 5, kOneUnitEach = 1 << 30;
  const std::vector<OptCase> cases = {{"d64_causal_window", 4, 2, 1000, 1000, 64, true, 200, {}},
                                      {"d64_two_sided_nq_gt_nk", 4, 1, 1000, 700, 64, false, 100, 20},
                                      {"d128_two_sided_nq_lt_nk", 4, 1, 700, 1000, 128, false, 150, 60}};
  for (const OptCase& c : cases) {
    const std::string what = describe(c);
    const int64_t rows = c.d == 64 ? 192 : 128;  // query rows per unit
    ASSERT_GT(B * c.Hq * ((c.Nq + rows - 1) / rows), 4 * kSms) << what;
    const OptInputs in = opt_inputs(c, B, 1300 + c.d + c.Nq, DType::bf16);
    auto put = [&](const Tensor& t) { return to(to(t, DType::bf16), kGpu); };
    const Tensor q = put(in.qkv[0]), k = put(in.qkv[1]), v = put(in.qkv[2]);
    Values O1, L1, Op, Lp;
    {
      ScopedTailSplitSms one(kOneUnitEach);
      const AttentionForward f = attention_forward(q, k, v, options_of(c));
      O1 = host_values(f.O);
      L1 = host_values(f.L);
    }
    {
      ScopedTailSplitSms few(kSms);
      const AttentionForward f = attention_forward(q, k, v, options_of(c));
      Op = host_values(f.O);
      Lp = host_values(f.L);
    }
    EXPECT_EQ(Op, O1) << what << " O";
    EXPECT_EQ(Lp, L1) << what << " L";
    // rows without keys (the window's shift leaves the first rows of Nq > Nk none)
    int64_t empty = 0;
    for (int64_t bh = 0; bh < B * c.Hq; ++bh)
      for (int64_t i = 0; i < c.Nq; ++i) {
        const int64_t at = i + c.Nk - c.Nq, right = c.causal ? 0 : c.right.value_or(c.Nk);  // i' (params.h)
        const bool sees = std::max<int64_t>(0, at - c.left.value_or(c.Nk)) <= std::min(c.Nk - 1, at + right);
        if (sees) {
          EXPECT_TRUE(std::isfinite(Lp[bh * c.Nq + i])) << what << " row " << i;
          continue;
        }
        ++empty;
        EXPECT_EQ(Lp[bh * c.Nq + i], -std::numeric_limits<double>::infinity()) << what << " row " << i;
        for (int64_t col = 0; col < c.d; ++col) EXPECT_EQ(Op[(bh * c.Nq + i) * c.d + col], 0.0) << what << " row " << i;
      }
    if (c.Nq > c.Nk) EXPECT_GT(empty, 0) << what;
  }
}

// ---------------------------------------------------------------------- non-finite inputs

// `in` with its Q, K, V, dO replaced by t (planted_inputs).
OptInputs with_qkvo(const OptInputs& in, const TensorList& t) {
  OptInputs r = in;
  r.qkv = {t[0], t[1], t[2]};
  r.dO = t[3];
  return r;
}

// The GPU paths a non-finite test covers: bf16 on the default path (sm_90a kernels on a 9.x
// device for d = 64 and 128, else sm_80), the sm_80 and the generic kernels (forced), and f32
// (generic).
struct GpuRun {
  const char* name;
  DType dtype;
  kernels::cuda::testing::AttentionPath path;
};
const std::vector<GpuRun>& nonfinite_runs() {
  using kernels::cuda::testing::AttentionPath;
  static const std::vector<GpuRun> runs = {{"bf16 default", DType::bf16, AttentionPath::kAuto},
                                           {"bf16 sm80", DType::bf16, AttentionPath::kSm80},
                                           {"bf16 generic", DType::bf16, AttentionPath::kGeneric},
                                           {"f32 generic", DType::f32, AttentionPath::kAuto}};
  return runs;
}
Levels run_on(const GpuRun& r, const OptInputs& in, const AttentionOptions& o) {
  kernels::cuda::testing::ScopedAttentionPath path(r.path);
  return run_levels(in, o, r.dtype, kGpu, 7);
}

// NaN and ±inf planted as in tests/test_attention.cpp's NonFiniteInputsMatchComposite
// (attention_chain.h, planted_inputs; there the CPU kernels match the composite entry by entry)
// on every path (nonfinite_runs), plain and general-mask instances, d = 64 and 128, against the
// CPU f64 kernels on the same rounded inputs. O and L: NaN and ±inf exactly where the CPU has
// them; orders 1 and 2: NaN where the CPU has NaN (a ±inf plant: non-finite where it is
// non-finite, as against the composite). Finite entries: within twice the same run's error on
// the inputs without the plant (or 2 units of bf16 rounding; f32: 1e-5), relative to that run's
// family scale; L within 1e-3. Rows that see no key: O = 0 and L = -inf exactly.
TEST(CudaAttentionNonFinite, EveryPathMatchesCpu) {
  GG_REQUIRE_GPU_OR_SKIP();
  int compared = 0;
  for (int64_t d : {64, 128}) {
    const std::vector<OptCase> cases = {
        {"full", 2, 2, 200, 200, d, false, {}, {}},
        {"causal", 2, 2, 200, 200, d, true, {}, {}},
        {"gqa_causal_nq_lt_nk", 4, 2, 150, 230, d, true, {}, {}},
        {"causal_empty_rows", 2, 2, 150, 100, d, true, {}, {}},
    };
    for (const OptCase& c : cases) {
      const OptInputs in = opt_inputs(c, 1, 1300 + d, DType::bf16);
      const AttentionOptions o = options_of(c);
      const OptInputs clean = with_qkvo(in, planted_inputs(c, in, {"none", -1, 0.0}, DType::bf16));
      const Levels clean_ref = run_levels(clean, o, DType::f64, Device::cpu(), 7);
      const double s0 = family_scale({clean_ref.O}), s1 = family_scale(clean_ref.bwd), s2 = family_scale(clean_ref.bob);
      std::vector<Levels> clean_runs;  // each output's bound comes from the run without the plant
      for (const GpuRun& r : nonfinite_runs()) clean_runs.push_back(run_on(r, clean, o));
      for (const Planted& pl : planted_cases()) {
        if (!planted_defined(c, pl)) continue;
        const OptInputs planted = with_qkvo(in, planted_inputs(c, in, pl, DType::bf16));
        const Levels ref = run_levels(planted, o, DType::f64, Device::cpu(), 7);
        for (size_t run = 0; run < nonfinite_runs().size(); ++run) {
          const GpuRun& r = nonfinite_runs()[run];
          const Levels& cl = clean_runs[run];
          const double floor = r.dtype == DType::f32 ? 1e-5 : rounding_floor(r.dtype);
          auto bound = [&](const Values& got, const Values& want, double scale) {
            return std::max(2 * scaled_error(got, want, scale), floor);
          };
          const std::string what = describe(c) + " " + r.name + ", " + pl.name;
          const Levels got = run_on(r, planted, o);
          const bool exact = std::isnan(pl.value);
          EXPECT_TRUE(same_nonfinite(got.O, ref.O, bound(cl.O, clean_ref.O, s0), s0)) << what << " O";
          EXPECT_TRUE(same_nonfinite(got.L, ref.L, 1e-3, 1.0)) << what << " L";
          for (size_t i = 0; i < 3; ++i)
            EXPECT_TRUE(same_nonfinite(got.bwd[i], ref.bwd[i], bound(cl.bwd[i], clean_ref.bwd[i], s1), s1, exact))
                << what << " bwd " << i;
          for (size_t i = 0; i < 4; ++i)
            EXPECT_TRUE(same_nonfinite(got.bob[i], ref.bob[i], bound(cl.bob[i], clean_ref.bob[i], s2), s2, exact))
                << what << " bob " << i;
          for (int64_t h = 0; h < c.Hq; ++h)
            for (int64_t i = 0; i < c.Nq; ++i) {
              if (row_sees_keys(c, i)) continue;
              EXPECT_EQ(got.L[h * c.Nq + i], -std::numeric_limits<double>::infinity()) << what << " row " << i;
              for (int64_t e = 0; e < c.d; ++e) EXPECT_EQ(got.O[(h * c.Nq + i) * c.d + e], 0.0) << what << " row " << i;
            }
          ++compared;
        }
      }
    }
  }
  EXPECT_GE(compared, 200);
}

// Rows that see no key keep O = 0 and L = -inf whatever the data (NaN in their own query, a
// NaN key and an infinite value elsewhere), on every path; the other rows' O and L as on the CPU
// (as tests/test_attention.cpp's RowsWithoutKeysIgnoreNonFiniteData checks against the composite).
TEST(CudaAttentionNonFinite, RowsWithoutKeysStayZero) {
  GG_REQUIRE_GPU_OR_SKIP();
  for (int64_t d : {64, 128}) {
    const OptCase c{"empty_rows", 4, 2, 150, 100, d, true, {}, {}};  // rows 0..49 see no key
    const OptInputs in = opt_inputs(c, 1, 1400 + d, DType::bf16);
    std::vector<Values> v;
    for (const Tensor& t : in.qkv) v.push_back(to(t, DType::f64).to_vector<double>());
    v[0][3] = v[0][(c.Nq - 1) * c.d + 1] = std::nan("");  // head 0: row 0 (no key), the last row
    v[1][70 * c.d + 2] = std::nan("");                     // kv head 0: key 70
    v[2][5] = std::numeric_limits<double>::infinity();     // kv head 0: key 0, seen by rows 50..149
    OptInputs planted = in;
    for (size_t i = 0; i < 3; ++i) planted.qkv[i] = from_vector(v[i], in.qkv[i].shape(), DType::f64);
    const Levels ref = run_levels(planted, options_of(c), DType::f64, Device::cpu(), 7);
    for (const GpuRun& r : nonfinite_runs()) {
      const std::string what = describe(c) + " " + r.name;
      const Levels got = run_on(r, planted, options_of(c));
      const double floor = r.dtype == DType::f32 ? 1e-5 : 4 * rounding_floor(r.dtype);
      EXPECT_TRUE(same_nonfinite(got.O, ref.O, floor, finite_scale({ref.O}))) << what << " O";
      EXPECT_TRUE(same_nonfinite(got.L, ref.L, 1e-3, 1.0)) << what << " L";
      int64_t empty = 0;
      for (int64_t h = 0; h < c.Hq; ++h)
        for (int64_t i = 0; i < c.Nq; ++i) {
          if (row_sees_keys(c, i)) continue;
          ++empty;
          EXPECT_EQ(got.L[h * c.Nq + i], -std::numeric_limits<double>::infinity()) << what << " row " << i;
          for (int64_t e = 0; e < c.d; ++e) EXPECT_EQ(got.O[(h * c.Nq + i) * c.d + e], 0.0) << what << " row " << i;
        }
      EXPECT_EQ(empty, c.Hq * 50) << what;
      EXPECT_TRUE(std::isnan(got.L[c.Nq - 1])) << what;
    }
  }
}

}  // namespace
}  // namespace gg::test
