// The fused attention JVP kernel (kernels/cpu/attention_jvp.cpp), called directly, and through
// the forward-mode rule of gg::attention, which runs it where nothing is recorded. Its O, L, Ȯ,
// L̇ against
//   - an explicit f64 reference written in gg ops: S, P, Ṡ, Ṗ = P∘(Ṡ − rowsum(P∘Ṡ)), Ȯ = Ṗ·V + P·V̇,
//     L̇ = rowsum(P∘Ṡ), to 1e-12 relative to each output's scale;
//   - central differences of attention_composite in f64 along the tangent direction;
//   - attention_fwd's O and L, bit for bit;
// under every mask option (causal, one- and two-sided windows, rows that see no key), grouped and
// multi-query heads, Nq != Nk, sizes that cut the 64-row tiles, every subset of tangents (absent
// = nullptr, equal to zeros passed explicitly), and non-finite data. f32 is held to twice the
// composite's own f32 error against f64. The CPU kernels exist for f32 and f64 only (bf16/f16
// run on CUDA), so there is no 16-bit case here.
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "attention_chain.h"
#include "kernels/cpu/attention.h"
#include "test_util.h"

namespace gg::test {
namespace {

namespace kc = gg::kernels::cpu;

struct JvpOut {
  Values O, L, Od, Ld;
};

// The inputs of one case: Q, K, V and their tangents Q̇, K̇, V̇ (f64; the kernel's dtype is chosen
// at the call).
struct JvpInputs {
  TensorList x;  // q, k, v
  TensorList t;  // q̇, k̇, v̇
};

JvpInputs jvp_inputs(const OptCase& c, int64_t B, uint64_t seed) {
  const OptInputs in = opt_inputs(c, B, seed);
  return {in.qkv, in.tilde};  // tilde is (q-, k-, k-shaped): reused as the tangents
}

kernels::AttentionShape shape_of(const OptCase& c, int64_t B, double scale) {
  kernels::AttentionShape p{B, c.Hq, c.Nq, c.d, scale, c.causal};
  p.Hkv = c.Hkv;
  p.Nk = c.Nk;
  p.window_left = c.left.value_or(-1);
  p.window_right = c.right.value_or(-1);
  return p;
}

double default_scale(const OptCase& c) { return 1.0 / std::sqrt(static_cast<double>(c.d)); }

// The kernel in T on x and t (converted to T); t[i] undefined: nullptr. `use` selects which
// tangents are passed (bit i: t[i]); the others are nullptr.
template <typename T>
JvpOut run_jvp(const kernels::AttentionShape& p, const TensorList& x, const TensorList& t, int use = 7) {
  constexpr DType dt = std::is_same_v<T, double> ? DType::f64 : DType::f32;
  std::vector<std::vector<T>> in;
  for (const Tensor& a : x) in.push_back(to(a, dt).to_vector<T>());
  std::vector<std::vector<T>> tan(3);
  const T* tp[3] = {nullptr, nullptr, nullptr};
  for (size_t i = 0; i < 3; ++i)
    if ((use >> i) & 1 && t[i].defined()) {
      tan[i] = to(t[i], dt).to_vector<T>();
      tp[i] = tan[i].data();
    }
  const size_t nq = static_cast<size_t>(p.B * p.H * p.N);
  std::vector<T> O(nq * static_cast<size_t>(p.d), T(7)), Od(O.size(), T(7)), L(nq, T(7)), Ld(nq, T(7));
  kc::attention_jvp<T>(p, in[0].data(), in[1].data(), in[2].data(), tp[0], tp[1], tp[2], O.data(), L.data(),
                       Od.data(), Ld.data());
  auto vals = [](const std::vector<T>& v) { return Values(v.begin(), v.end()); };
  return {vals(O), vals(L), vals(Od), vals(Ld)};
}

template <typename T>
std::pair<std::vector<T>, std::vector<T>> run_fwd(const kernels::AttentionShape& p, const TensorList& x) {
  constexpr DType dt = std::is_same_v<T, double> ? DType::f64 : DType::f32;
  std::vector<std::vector<T>> in;
  for (const Tensor& a : x) in.push_back(to(a, dt).to_vector<T>());
  const size_t nq = static_cast<size_t>(p.B * p.H * p.N);
  std::vector<T> O(nq * static_cast<size_t>(p.d)), L(nq);
  kc::attention_fwd<T>(p, in[0].data(), in[1].data(), in[2].data(), O.data(), L.data());
  return {O, L};
}

// Which keys query i sees, written out from the definition in ops.h (not AttentionShape's).
bool sees(const OptCase& c, int64_t i, int64_t j) {
  const int64_t at = i + c.Nk - c.Nq;
  if (c.causal && j > at) return false;
  if (c.left && j < at - *c.left) return false;
  if (c.right && j > at + *c.right) return false;
  return true;
}

// (B, Hkv, Nk, d) -> (B, Hq, Nk, d): query head h reads kv head h / (Hq / Hkv).
Tensor expand_heads(const Tensor& k, const OptCase& c) {
  Values idx;
  for (int64_t h = 0; h < c.Hq; ++h) idx.push_back(static_cast<double>(h / (c.Hq / c.Hkv)));
  return index_select(k, 1, from_vector(idx, {c.Hq}, DType::i64));
}

// The JVP written plainly in f64 gg ops. Absent tangents are zeros.
JvpOut reference_jvp(const OptCase& c, double scale, const TensorList& x, const TensorList& t) {
  const double inf = std::numeric_limits<double>::infinity();
  Values add(static_cast<size_t>(c.Nq * c.Nk)), vis(add.size()), empty_row(static_cast<size_t>(c.Nq), 0.0);
  for (int64_t i = 0; i < c.Nq; ++i) {
    bool any = false;
    for (int64_t j = 0; j < c.Nk; ++j) any = any || sees(c, i, j);
    empty_row[static_cast<size_t>(i)] = any ? 0.0 : 1.0;
    for (int64_t j = 0; j < c.Nk; ++j) {
      const size_t e = static_cast<size_t>(i * c.Nk + j);
      vis[e] = sees(c, i, j) ? 1.0 : 0.0;
      add[e] = sees(c, i, j) || !any ? 0.0 : -inf;  // a row without keys: scores kept (then zeroed)
    }
  }
  const Tensor mask_add = from_vector(add, {c.Nq, c.Nk}, DType::f64);
  const Tensor visible = from_vector(vis, {c.Nq, c.Nk}, DType::f64);
  auto f64 = [](const Tensor& a, const Tensor& like) { return a.defined() ? to(a, DType::f64) : zeros(like.shape(), DType::f64); };
  const Tensor q = to(x[0], DType::f64), k = expand_heads(to(x[1], DType::f64), c), v = expand_heads(to(x[2], DType::f64), c);
  const Tensor qd = f64(t[0], x[0]), kd = expand_heads(f64(t[1], x[1]), c), vd = expand_heads(f64(t[2], x[2]), c);
  const Tensor S = matmul(q, transpose(k, -1, -2)) * scale + mask_add;
  const Tensor P = softmax(S, -1) * visible;  // rows without keys: P = 0
  const Tensor Sd = (matmul(qd, transpose(k, -1, -2)) + matmul(q, transpose(kd, -1, -2))) * scale;
  const Tensor mu = sum(P * Sd, {-1}, /*keepdim=*/true);
  const Tensor Pd = P * (Sd - mu);
  const Tensor Od = matmul(Pd, v) + matmul(P, vd);
  const Tensor none = unsqueeze(from_vector(empty_row, {c.Nq}, DType::f64), -1);  // (Nq, 1)
  const Tensor L = where(eq(sum(none, {-1}), 1.0), full({c.Nq}, -inf, DType::f64), logsumexp(S, {-1}));
  return {matmul(P, v).to_vector<double>(), L.to_vector<double>(), Od.to_vector<double>(),
          sum(mu, {-1}).to_vector<double>()};
}

// attention_composite's O and L at x + h·t (absent tangents: zero).
JvpOut composite_at(const OptCase& c, double scale, const TensorList& x, const TensorList& t, double h) {
  TensorList y;
  for (size_t i = 0; i < 3; ++i) y.push_back(t[i].defined() ? x[i] + t[i] * h : x[i]);
  const AttentionForward f = attention_composite_forward(y[0], y[1], y[2], {scale, c.causal, c.left, c.right});
  return {f.O.to_vector<double>(), f.L.to_vector<double>(), {}, {}};
}

double scale_of(const Values& v) {
  double m = 1e-300;
  for (double a : v)
    if (std::isfinite(a)) m = std::max(m, std::abs(a));
  return m;
}

// max |a - b| / max |b|, comparing L entries that are -inf in both as equal.
double rel_err(const Values& a, const Values& b) {
  EXPECT_EQ(a.size(), b.size());
  double num = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (std::isinf(b[i]) && a[i] == b[i]) continue;
    num = std::max(num, std::abs(a[i] - b[i]));
  }
  return num / scale_of(b);
}

// The option cases of the attention tests (one tile each: masks cut inside the tile) and larger
// ones whose masks and sizes cut the 64-row tiles, so that whole key blocks are skipped or taken
// unmasked and the running max rescales across blocks.
const std::vector<OptCase>& jvp_cases() {
  static const std::vector<OptCase> cases = [] {
    std::vector<OptCase> v = option_cases();
    v.push_back({"full_square", 1, 1, 9, 9, 4, false, {}, {}});
    v.push_back({"causal_square", 2, 2, 9, 9, 4, true, {}, {}});
    v.push_back({"tiles_full", 2, 1, 130, 150, 64, false, {}, {}});  // threaded (worth_threads)
    v.push_back({"tiles_causal_nq_lt_nk", 2, 2, 100, 200, 8, true, {}, {}});
    v.push_back({"tiles_gqa_window", 4, 2, 200, 130, 32, false, 70, 20});  // threaded
    v.push_back({"tiles_mqa_left_causal_empty_rows", 3, 1, 200, 90, 8, true, 40, {}});
    v.push_back({"tiles_right_empty_rows", 2, 2, 150, 70, 8, false, {}, 5});
    return v;
  }();
  return cases;
}

class JvpKernel : public ::testing::TestWithParam<size_t> {};

// Every subset of tangents: the f64 kernel against the explicit reference to 1e-12, O and L
// equal to attention_fwd's bit for bit, nullptr equal to zeros passed explicitly.
TEST_P(JvpKernel, MatchesExplicitReferenceAndForward) {
  const OptCase& c = jvp_cases()[GetParam()];
  const int64_t B = 2;
  const JvpInputs in = jvp_inputs(c, B, 500 + GetParam());
  const double scale = default_scale(c);
  const kernels::AttentionShape p = shape_of(c, B, scale);
  const auto fwd = run_fwd<double>(p, in.x);
  for (int use = 0; use < 8; ++use) {
    TensorList t(3);
    for (size_t i = 0; i < 3; ++i)
      if ((use >> i) & 1) t[i] = in.t[i];
    const std::string what = describe(c) + " tangents " + std::to_string(use);
    const JvpOut got = run_jvp<double>(p, in.x, t);
    const JvpOut want = reference_jvp(c, scale, in.x, t);
    EXPECT_EQ(got.O, Values(fwd.first.begin(), fwd.first.end())) << what;
    EXPECT_EQ(got.L, Values(fwd.second.begin(), fwd.second.end())) << what;
    EXPECT_LE(rel_err(got.O, want.O), 1e-12) << what << " O";
    EXPECT_LE(rel_err(got.L, want.L), 1e-12) << what << " L";
    EXPECT_LE(rel_err(got.Od, want.Od), 1e-12) << what << " Od";
    if (use & 3) {
      EXPECT_LE(rel_err(got.Ld, want.Ld), 1e-12) << what << " Ld";
      EXPECT_GT(scale_of(want.Ld), 1e-2) << what;  // compared at an ordinary size, not zeros
    } else {
      for (double a : got.Ld) ASSERT_EQ(a, 0.0) << what;  // no Q̇, K̇: L̇ = 0 exactly
    }
    // (Rows that each see one key have P = 1 and Ṗ = 0: Ȯ = P·V̇ only.)
    const bool one_key_rows = c.left == 0 && (c.right == 0 || c.causal);
    if (use & 4 || (use && !one_key_rows)) EXPECT_GT(scale_of(want.Od), 1e-2) << what;
    // Absent tangents equal zeros passed explicitly (x + 0 = x, e·0 = 0: bitwise).
    TensorList z(3);
    for (size_t i = 0; i < 3; ++i) z[i] = t[i].defined() ? t[i] : zeros(in.t[i].shape(), DType::f64);
    const JvpOut zs = run_jvp<double>(p, in.x, z);
    EXPECT_EQ(got.Od, zs.Od) << what;
    EXPECT_EQ(got.Ld, zs.Ld) << what;
    // Rows that see no key: O = 0, L = -inf, Ȯ = 0, L̇ = 0 exactly.
    for (int64_t bh = 0; bh < B * c.Hq; ++bh)
      for (int64_t i = 0; i < c.Nq; ++i)
        if (!row_sees_keys(c, i)) {
          const size_t r = static_cast<size_t>(bh * c.Nq + i);
          ASSERT_EQ(got.L[r], -std::numeric_limits<double>::infinity()) << what;
          ASSERT_EQ(got.Ld[r], 0.0) << what;
          for (int64_t e = 0; e < c.d; ++e) {
            ASSERT_EQ(got.O[r * static_cast<size_t>(c.d) + static_cast<size_t>(e)], 0.0) << what;
            ASSERT_EQ(got.Od[r * static_cast<size_t>(c.d) + static_cast<size_t>(e)], 0.0) << what;
          }
        }
  }
}

// Central differences of attention_composite along (q̇, k̇, v̇): with step h the error is about
// h²/6·|f'''| (truncation) + ε·|f|/h (rounding). At h = 1e-5 and unit-size data (third
// derivatives of order 1-10 here) both are ~1e-10 of the outputs' scale; 1e-8 leaves a margin
// of ~100 while any missing term of the JVP (μ·O, P·V̇, one half of Ṡ) is an O(1) error.
TEST_P(JvpKernel, MatchesFiniteDifferencesOfComposite) {
  const OptCase& c = jvp_cases()[GetParam()];
  const int64_t B = 1;
  const JvpInputs in = jvp_inputs(c, B, 600 + GetParam());
  const double scale = 0.7 / std::sqrt(static_cast<double>(c.d)), h = 1e-5;
  const JvpOut got = run_jvp<double>(shape_of(c, B, scale), in.x, in.t);
  const JvpOut up = composite_at(c, scale, in.x, in.t, h), down = composite_at(c, scale, in.x, in.t, -h);
  Values fd_O(up.O.size()), fd_L(up.L.size());
  for (size_t i = 0; i < fd_O.size(); ++i) fd_O[i] = (up.O[i] - down.O[i]) / (2 * h);
  for (size_t i = 0; i < fd_L.size(); ++i)  // L = -inf at rows without keys: L̇ = 0
    fd_L[i] = std::isinf(up.L[i]) && up.L[i] == down.L[i] ? 0.0 : (up.L[i] - down.L[i]) / (2 * h);
  EXPECT_LE(rel_err(got.Od, fd_O), 1e-8) << describe(c);
  EXPECT_LE(rel_err(got.Ld, fd_L), 1e-8) << describe(c);
  EXPECT_GT(scale_of(fd_O), 1e-2) << describe(c);
}

INSTANTIATE_TEST_SUITE_P(Attention, JvpKernel, ::testing::Range<size_t>(0, jvp_cases().size()),
                         [](const auto& info) { return std::string(jvp_cases()[info.param].name); });

// Forward mode through gg::attention: with nothing to record and no outer dual level, the op's
// rule runs this kernel; with inputs that require grad it keeps the composite formula (whose
// tangents can be differentiated). Both give the same Ȯ and L̇ in f64, every option case.
TEST(AttentionJvp, OpRuleUsesTheKernelWhereNothingIsRecorded) {
  for (const OptCase& c : jvp_cases()) {
    const JvpInputs in = jvp_inputs(c, 2, 900);
    const AttentionOptions o = options_of(c);
    auto tangents = [&](bool record) {
      fwd::DualLevel level;
      TensorList x(3);
      for (size_t i = 0; i < 3; ++i) {
        Tensor p = in.x[i].detach();
        if (record) p.requires_grad_(true);
        x[i] = fwd::make_dual(p, in.t[i]);
      }
      const AttentionForward f = attention_forward(x[0], x[1], x[2], o);
      return std::pair<Values, Values>{fwd::unpack_dual(f.O).tangent.to_vector<double>(),
                                       fwd::unpack_dual(f.L).tangent.to_vector<double>()};
    };
    const auto fused = tangents(false), composite = tangents(true);
    EXPECT_LE(rel_err(fused.first, composite.first), 1e-12) << describe(c) << " Od";
    EXPECT_LE(rel_err(fused.second, composite.second), 1e-12) << describe(c) << " Ld";
  }
}

// Each tangent alone, against central differences in that input alone (the terms do not leak
// into one another).
TEST(AttentionJvp, EachTangentAloneMatchesFiniteDifferences) {
  const OptCase c{"gqa_window", 4, 2, 70, 90, 8, false, 15, 4};
  const JvpInputs in = jvp_inputs(c, 1, 640);
  const double scale = default_scale(c), h = 1e-5;
  for (size_t which = 0; which < 3; ++which) {
    TensorList t(3);
    t[which] = in.t[which];
    const JvpOut got = run_jvp<double>(shape_of(c, 1, scale), in.x, t);
    const JvpOut up = composite_at(c, scale, in.x, t, h), down = composite_at(c, scale, in.x, t, -h);
    Values fd_O(up.O.size()), fd_L(up.L.size());
    for (size_t i = 0; i < fd_O.size(); ++i) fd_O[i] = (up.O[i] - down.O[i]) / (2 * h);
    for (size_t i = 0; i < fd_L.size(); ++i) fd_L[i] = (up.L[i] - down.L[i]) / (2 * h);
    EXPECT_LE(rel_err(got.Od, fd_O), 1e-8) << which;
    if (which < 2) EXPECT_LE(rel_err(got.Ld, fd_L), 1e-8) << which;
  }
}

// f32: the kernel's error against the f64 JVP (of the same f32-rounded inputs) is at most twice
// the composite's: gg::jvp of t ↦ attention_composite(x + t·ẋ) in f32, and its L through
// attention_composite_forward.
TEST(AttentionJvp, F32WithinTwiceCompositeError) {
  const std::vector<OptCase> cases = {
      {"full", 2, 2, 200, 200, 64, false, {}, {}},
      {"causal", 2, 2, 200, 200, 64, true, {}, {}},
      {"gqa_window_nq_lt_nk", 4, 2, 150, 230, 32, false, 60, 10},
      {"mqa_causal_empty_rows", 3, 1, 160, 100, 16, true, {}, {}},
  };
  uint64_t seed = 700;
  for (const OptCase& c : cases)
    for (bool offset : {false, true}) {
    JvpInputs in = jvp_inputs(c, 1, seed++);
    if (offset) {  // keys about a common mean m and Q̇ along m: Ṡ ≈ a large per-row constant
      const Tensor m = randn({1, 1, 1, c.d}, DType::f64);
      in.x[1] = in.x[1] * 0.3 + m;
      in.t[0] = in.t[0] * 0.3 + m * 4.0;
    }
    for (Tensor* a : {&in.x[0], &in.x[1], &in.x[2], &in.t[0], &in.t[1], &in.t[2]}) *a = to(to(*a, DType::f32), DType::f64);
    const double scale = default_scale(c);
    const kernels::AttentionShape p = shape_of(c, 1, scale);
    const JvpOut exact = run_jvp<double>(p, in.x, in.t);
    const JvpOut k32 = run_jvp<float>(p, in.x, in.t);
    // The composite's JVP in f32, as the tape computes it (double VJP through the composite).
    TensorList x32, t32;
    for (size_t i = 0; i < 3; ++i) {
      x32.push_back(to(in.x[i], DType::f32));
      t32.push_back(to(in.t[i], DType::f32));
    }
    const AttentionOptions o{scale, c.causal, c.left, c.right};
    auto along = [&](bool lse) {
      return [&, lse](const Tensor& s) {
        const AttentionForward f = attention_composite_forward(x32[0] + t32[0] * s, x32[1] + t32[1] * s,
                                                               x32[2] + t32[2] * s, o);
        if (!lse) return f.O;
        // L̇ is 0 at rows without keys (L = -inf there): keep L finite for the tape.
        return where(eq(f.L, -std::numeric_limits<double>::infinity()), zeros(f.L.shape(), DType::f32), f.L);
      };
    };
    const Tensor s0 = zeros({}, DType::f32), one = full({}, 1.0, DType::f32);
    const Values cOd = jvp(along(false), s0, one).to_vector<double>();
    const Values cLd = jvp(along(true), s0, one).to_vector<double>();
    const double kO = rel_err(k32.Od, exact.Od), cO = rel_err(cOd, exact.Od);
    const double kL = rel_err(k32.Ld, exact.Ld), cL = rel_err(cLd, exact.Ld);
    char errors[128];
    std::snprintf(errors, sizeof errors, "Od %.3g vs %.3g, Ld %.3g vs %.3g", kO, cO, kL, cL);
    RecordProperty(std::string(c.name) + (offset ? "_offset" : "") + "_f32_error_kernel_vs_composite", errors);
    EXPECT_LE(kO, 2 * cO) << describe(c) << ": kernel " << kO << ", composite " << cO;
    EXPECT_LE(kL, 2 * cL) << describe(c) << ": kernel " << kL << ", composite " << cL;
    EXPECT_LE(kO, 1e-5) << describe(c);
    EXPECT_LE(rel_err(k32.O, exact.O), 1e-5) << describe(c);
    // O and L are attention_fwd's in f32 too.
    const auto fwd = run_fwd<float>(p, in.x);
    EXPECT_EQ(k32.O, Values(fwd.first.begin(), fwd.first.end())) << describe(c);
    EXPECT_EQ(k32.L, Values(fwd.second.begin(), fwd.second.end())) << describe(c);
  }
}

// Non-finite data, under the full mask (every row sees every key, so no 0·NaN crosses a hidden
// pair): Ȯ and L̇ are non-finite exactly where the explicit reference's are (NaN and ±inf taken
// alike, as the sums are grouped differently), equal elsewhere. Planted in column 0 of the last
// query row (Q, Q̇) or of key 0 (K, V, K̇, V̇); K's column 0 is positive, so ±inf in Q makes its
// row's scores ±inf.
TEST(AttentionJvp, NonFiniteDataLikeTheReference) {
  const OptCase c{"full", 2, 1, 9, 11, 4, false, {}, {}};
  const JvpInputs base = jvp_inputs(c, 1, 800);
  const double scale = default_scale(c), inf = std::numeric_limits<double>::infinity();
  const kernels::AttentionShape p = shape_of(c, 1, scale);
  int planted = 0;
  for (int input = 0; input < 6; ++input)
    for (double value : {std::nan(""), inf, -inf}) {
      TensorList all = {base.x[0], base.x[1], base.x[2], base.t[0], base.t[1], base.t[2]};
      std::vector<Values> v;
      for (const Tensor& a : all) v.push_back(a.to_vector<double>());
      for (size_t at = 0; at < v[1].size(); at += static_cast<size_t>(c.d)) v[1][at] = std::abs(v[1][at]) + 0.5;
      const bool query_side = input == 0 || input == 3;
      v[static_cast<size_t>(input)][query_side ? static_cast<size_t>((c.Nq - 1) * c.d) : 0] = value;
      for (size_t i = 0; i < 6; ++i) all[i] = from_vector(v[i], all[i].shape(), DType::f64);
      const TensorList x = {all[0], all[1], all[2]}, t = {all[3], all[4], all[5]};
      const JvpOut got = run_jvp<double>(p, x, t), want = reference_jvp(c, scale, x, t);
      const std::string what = "input " + std::to_string(input) + " value " + std::to_string(value);
      bool any = false;
      for (double a : want.Od) any = any || !std::isfinite(a);
      planted += any;
      EXPECT_TRUE(same_nonfinite(got.O, want.O, 1e-12, scale_of(want.O), false)) << what << " O";
      EXPECT_TRUE(same_nonfinite(got.Od, want.Od, 1e-12, scale_of(want.Od), false)) << what << " Od";
      EXPECT_TRUE(same_nonfinite(got.Ld, want.Ld, 1e-12, scale_of(want.Ld), false)) << what << " Ld";
    }
  EXPECT_EQ(planted, 18);  // every plant reaches Ȯ
}

// A key a row does not see never enters the row's Ṡ: NaN in K̇ of the last key (under causal only
// the last row sees it) leaves every other row's Ȯ and L̇ finite and equal to the reference's
// without the NaN. (A NaN in V or V̇ of a hidden key may still cross through 0·NaN in the tile
// products, as in the forward and the composite.)
TEST(AttentionJvp, HiddenKeysNeverEnterScoreTangents) {
  const OptCase c{"causal", 1, 1, 9, 9, 4, true, {}, {}};
  const JvpInputs in = jvp_inputs(c, 1, 820);
  const double scale = default_scale(c);
  Values kd = in.t[1].to_vector<double>();
  kd[static_cast<size_t>(8 * c.d + 1)] = std::nan("");
  const TensorList t = {in.t[0], from_vector(kd, in.t[1].shape(), DType::f64), in.t[2]};
  const JvpOut got = run_jvp<double>(shape_of(c, 1, scale), in.x, t), want = reference_jvp(c, scale, in.x, in.t);
  for (size_t i = 0; i < 9; ++i) {
    EXPECT_EQ(std::isnan(got.Ld[i]), i == 8) << i;
    for (size_t e = 0; e < 4; ++e) {
      const double a = got.Od[i * 4 + e];
      if (i == 8)
        EXPECT_TRUE(std::isnan(a)) << i;
      else
        EXPECT_NEAR(a, want.Od[i * 4 + e], 1e-12 * scale_of(want.Od)) << i;
    }
  }
}

// A row that sees no key gives O = 0, L = -inf, Ȯ = 0, L̇ = 0 whatever its data, NaN included.
TEST(AttentionJvp, RowsWithoutKeysIgnoreTheirData) {
  const OptCase c{"causal_nq_gt_nk", 2, 2, 13, 7, 5, true, {}, {}};
  const JvpInputs in = jvp_inputs(c, 1, 810);
  TensorList x = in.x, t = in.t;
  Values q = x[0].to_vector<double>(), qd = t[0].to_vector<double>();
  for (size_t e = 0; e < 5; ++e) q[e] = qd[e + 5] = std::nan("");  // rows 0 and 1 of head 0
  x[0] = from_vector(q, x[0].shape(), DType::f64);
  t[0] = from_vector(qd, t[0].shape(), DType::f64);
  const JvpOut got = run_jvp<double>(shape_of(c, 1, default_scale(c)), x, t);
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(got.L[r], -std::numeric_limits<double>::infinity());
    EXPECT_EQ(got.Ld[r], 0.0);
    for (size_t e = 0; e < 5; ++e) {
      EXPECT_EQ(got.O[r * 5 + e], 0.0);
      EXPECT_EQ(got.Od[r * 5 + e], 0.0);
    }
  }
}

}  // namespace
}  // namespace gg::test
