// The attention chain that the CPU and GPU attention tests compare: O, the first-order
// gradients, the BoB and (optionally) a third order, for the fused op or the composite; the
// option cases (grouped heads, Nq != Nk, windows) and their inputs.
#pragma once
#include <limits>
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "test_util.h"

namespace gg::test {
inline namespace attention_chain {

using AttnFn = Tensor (*)(const Tensor&, const Tensor&, const Tensor&, const AttentionOptions&);

struct Chain {
  Values O;
  std::vector<Values> first;   // dQ, dK, dV
  std::vector<Values> second;  // gQ, gK, gV, gdO
  std::vector<Values> third;   // gradient of <W, second> with respect to (Q, K, V, dO), when asked
};

// O, then (dQ, dK, dV) for cotangent dO with create_graph, then the gradient of
// <Qt,dQ> + <Kt,dK> + <Vt,dV> with respect to (Q, K, V, dO). Absent cotangents are skipped.
// With four weights `w` (shaped like Q, K, V, dO), also the third-order gradient of
// <w, (gQ, gK, gV, gdO)> with respect to (Q, K, V, dO).
inline Chain run_chain(AttnFn f, const TensorList& qkv, const Tensor& dO_in, const TensorList& tilde, const AttentionOptions& o,
                const TensorList& w = {}) {
  TensorList x;
  for (const Tensor& t : qkv) x.push_back(leaf(t));
  Tensor dO = leaf(dO_in);
  Tensor O = f(x[0], x[1], x[2], o);
  TensorList d = grad({O}, x, {dO}, std::nullopt, /*create_graph=*/true);
  Chain c;
  c.O = O.to_vector<double>();
  for (const Tensor& t : d) c.first.push_back(t.to_vector<double>());
  Tensor inner;
  for (size_t i = 0; i < 3; ++i)
    if (tilde[i].defined()) inner = inner.defined() ? inner + sum(tilde[i] * d[i]) : sum(tilde[i] * d[i]);
  if (!inner.defined()) return c;
  const TensorList wrt = {x[0], x[1], x[2], dO};
  TensorList g = grad({inner}, wrt, {}, std::nullopt, /*create_graph=*/!w.empty(), /*allow_unused=*/true);
  for (size_t i = 0; i < g.size(); ++i)
    c.second.push_back(g[i].defined() ? g[i].to_vector<double>() : Values(static_cast<size_t>(wrt[i].numel()), 0.0));
  if (w.empty()) return c;
  Tensor outer;
  for (size_t i = 0; i < g.size(); ++i)
    if (g[i].defined() && g[i].requires_grad()) outer = outer.defined() ? outer + sum(w[i] * g[i]) : sum(w[i] * g[i]);
  TensorList h = outer.defined() ? grad({outer}, wrt, {}, std::nullopt, /*create_graph=*/false, /*allow_unused=*/true) : TensorList(4);
  for (size_t i = 0; i < h.size(); ++i)
    c.third.push_back(h[i].defined() ? h[i].to_vector<double>() : Values(static_cast<size_t>(wrt[i].numel()), 0.0));
  return c;
}
inline Chain run_chain(AttnFn f, const TensorList& qkv, const Tensor& dO_in, const TensorList& tilde, bool causal) {
  return run_chain(f, qkv, dO_in, tilde, AttentionOptions{std::nullopt, causal});
}

inline Tensor fused(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) { return attention(q, k, v, o); }
inline Tensor composite(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  return attention_composite(q, k, v, o);
}

// O and the row log-sum-exp L in one output, O + 0.5·L + 0.1·L² (L broadcast over d; rows
// without keys, L = -inf, add 0), so that every derivative also runs through L and dL depends on L.
inline Tensor with_lse(const AttentionForward& f) {
  const Tensor none = eq(f.L, full(f.L.shape(), -std::numeric_limits<double>::infinity(), f.L.dtype(), f.L.device()));
  const Tensor L = where(none, zeros(f.L.shape(), f.L.dtype(), f.L.device()), f.L);
  return f.O + unsqueeze(to(L * 0.5 + L * L * 0.1, f.O.dtype()), -1);
}
inline Tensor fused_lse(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  return with_lse(attention_forward(q, k, v, o));
}
inline Tensor composite_lse(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  return with_lse(attention_composite_forward(q, k, v, o));
}

// Largest magnitude over a family of outputs (e.g. dQ, dK, dV). Errors are judged relative to
// it, because some outputs are exactly zero in exact arithmetic (dQ and dK when N = 1) and
// both implementations then return rounding noise of order 1e-17 · the family's scale.
inline double family_scale(const std::vector<Values>& vs) {
  double m = 1e-300;  // an all-zero family compares as equal when the other is zero too
  for (const Values& v : vs)
    for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

inline void expect_chains_equal(const Chain& a, const Chain& b, double tol, const std::string& what) {
  EXPECT_LE(rel_error(a.O, b.O, family_scale({b.O}) * 1e-3), tol) << what << " order 0";
  const double s1 = family_scale(b.first), s2 = family_scale(b.second);
  for (size_t i = 0; i < a.first.size(); ++i)
    EXPECT_LE(rel_error(a.first[i], b.first[i], s1), tol) << what << " order 1, output " << i;
  ASSERT_EQ(a.second.size(), b.second.size()) << what;
  for (size_t i = 0; i < a.second.size(); ++i)
    EXPECT_LE(rel_error(a.second[i], b.second[i], s2), tol) << what << " order 2, output " << i;
  ASSERT_EQ(a.third.size(), b.third.size()) << what;
  const double s3 = family_scale(b.third);
  for (size_t i = 0; i < a.third.size(); ++i)
    EXPECT_LE(rel_error(a.third[i], b.third[i], s3), tol) << what << " order 3, output " << i;
}

// Largest finite magnitude over a family (the scale of a family that holds NaN or inf entries).
inline double finite_scale(const std::vector<Values>& vs) {
  double m = 1e-300;
  for (const Values& v : vs)
    for (double x : v)
      if (std::isfinite(x)) m = std::max(m, std::abs(x));
  return m;
}

// `got` against `want` where either may hold non-finite entries: NaN exactly where `want` has
// NaN, the same infinity where it has one, and elsewhere finite and within tol · scale. With
// exact = false, any non-finite value where `want` is non-finite (NaN and ±inf interchangeable).
inline ::testing::AssertionResult same_nonfinite(const Values& got, const Values& want, double tol, double scale,
                                                 bool exact = true) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << got.size() << " entries, expected " << want.size();
  for (size_t i = 0; i < got.size(); ++i) {
    const double a = got[i], b = want[i];
    const bool ok = !std::isfinite(b) && !exact ? !std::isfinite(a)
                    : std::isnan(b)             ? std::isnan(a)
                    : std::isinf(b)             ? a == b
                                                : std::isfinite(a) && std::abs(a - b) <= tol * scale;
    if (!ok) return ::testing::AssertionFailure() << "entry " << i << " is " << a << ", expected " << b;
  }
  return ::testing::AssertionSuccess();
}

inline bool all_finite(const Chain& c) {
  for (const auto* vs : {&c.first, &c.second, &c.third})
    for (const Values& g : *vs)
      for (double v : g)
        if (!std::isfinite(v)) return false;
  for (double v : c.O)
    if (!std::isfinite(v)) return false;
  return true;
}

struct OptCase {
  const char* name;
  int64_t Hq, Hkv, Nq, Nk, d;
  bool causal;
  std::optional<int64_t> left, right;
};

inline AttentionOptions options_of(const OptCase& c, std::optional<double> scale = std::nullopt) {
  return {scale, c.causal, c.left, c.right};
}

struct OptInputs {
  TensorList qkv, tilde;
  Tensor dO;
  TensorList w;  // order-3 weights, shaped like Q, K, V, dO
};

inline OptInputs opt_inputs(const OptCase& c, int64_t B, uint64_t seed, DType dtype = DType::f64,
                            Device device = Device::cpu()) {
  manual_seed(seed);
  const Shape qs = {B, c.Hq, c.Nq, c.d}, ks = {B, c.Hkv, c.Nk, c.d};
  auto r = [&](const Shape& s) { return to(to(randn(s, DType::f64), dtype), device); };
  OptInputs in;
  in.qkv = {r(qs), r(ks), r(ks)};
  in.dO = r(qs);
  in.tilde = {r(qs), r(ks), r(ks)};
  in.w = {r(qs), r(ks), r(ks), r(qs)};
  return in;
}

inline std::string nullable(const std::optional<int64_t>& w) { return w ? std::to_string(*w) : "none"; }

inline std::string describe(const OptCase& c) {
  return std::string(c.name) + " (Hq=" + std::to_string(c.Hq) + " Hkv=" + std::to_string(c.Hkv) +
         " Nq=" + std::to_string(c.Nq) + " Nk=" + std::to_string(c.Nk) + " d=" + std::to_string(c.d) +
         " causal=" + std::to_string(c.causal) + " left=" + nullable(c.left) + " right=" + nullable(c.right) + ")";
}

inline const std::vector<OptCase>& option_cases() {
  static const std::vector<OptCase> cases = {
      {"gqa2", 4, 2, 7, 7, 5, false, {}, {}},
      {"gqa3_causal", 6, 2, 7, 7, 5, true, {}, {}},
      {"mqa", 3, 1, 7, 13, 5, false, {}, {}},
      {"nq_lt_nk", 2, 2, 7, 13, 5, false, {}, {}},
      {"nq_gt_nk", 2, 2, 13, 7, 5, false, {}, {}},
      {"causal_nq_lt_nk", 2, 2, 7, 13, 5, true, {}, {}},
      {"causal_nq_gt_nk_empty_rows", 2, 2, 13, 7, 5, true, {}, {}},
      {"left", 2, 2, 7, 13, 5, false, 3, {}},
      {"right", 2, 2, 13, 7, 5, false, {}, 2},
      {"two_sided", 2, 2, 7, 13, 5, false, 2, 1},
      {"two_sided_square", 2, 2, 9, 9, 5, false, 1, 3},
      {"left_causal", 2, 2, 13, 7, 5, true, 2, {}},
      {"left_causal_nq_lt_nk", 2, 2, 7, 13, 5, true, 4, 0},
      {"zero_width", 2, 2, 7, 13, 5, false, 0, 0},
      {"right_empty_rows", 2, 2, 13, 7, 5, false, 1, 1},
      {"mqa_causal_window_empty_rows", 3, 1, 13, 7, 5, true, 2, {}},
      {"gqa2_two_sided_nq_gt_nk", 4, 2, 13, 7, 5, false, 3, 2},
      {"gqa3_left_nq_lt_nk", 6, 2, 7, 13, 5, false, 2, {}},
  };
  return cases;
}

// ---------------------------------------------------------------------------------------------
// Non-finite inputs (ops.h, AttentionOptions). One entry is planted in column 0 of head 0 (B = 1):
// in the last query row (which sees every key under the cases' masks), in key 0 (seen by every
// row that sees a key) or in dO's last row; K's column 0 is made positive, so that ±inf in Q's
// column 0 makes every score of its row ±inf (a row of -inf scores: softmax's 0/0, NaN).
// Under a mask only plants whose non-finite rows see every key are compared (planted_defined):
// ±inf in K makes NaN only the rows whose query has one sign, and a key planted where rows see
// no key reaches those rows' gradients through 0·NaN products in both implementations, but not
// in the same entries.

struct Planted {
  const char* name;
  int input;  // 0 Q, 1 K, 2 V, 3 dO
  double value;
};

inline const std::vector<Planted>& planted_cases() {
  constexpr double inf = std::numeric_limits<double>::infinity();
  static const std::vector<Planted> cases = {
      {"Q nan", 0, std::nan("")}, {"Q +inf", 0, inf}, {"Q -inf", 0, -inf}, {"K nan", 1, std::nan("")},
      {"K +inf", 1, inf},         {"K -inf", 1, -inf}, {"V nan", 2, std::nan("")}, {"V +inf", 2, inf},
      {"V -inf", 2, -inf},        {"dO nan", 3, std::nan("")}, {"dO +inf", 3, inf},
  };
  return cases;
}

// Does query row i of `c` see a key (the mask of ops.h, written out)?
inline bool row_sees_keys(const OptCase& c, int64_t i) {
  const int64_t at = i + c.Nk - c.Nq, right = c.causal ? 0 : c.right.value_or(c.Nk);
  return std::max<int64_t>(0, at - c.left.value_or(c.Nk)) <= std::min(c.Nk - 1, at + right);
}
inline bool has_rows_without_keys(const OptCase& c) {
  for (int64_t i = 0; i < c.Nq; ++i)
    if (!row_sees_keys(c, i)) return true;
  return false;
}

// Whether the fused op and the composite agree entry by entry on `pl` under `c`'s mask.
inline bool planted_defined(const OptCase& c, const Planted& pl) {
  if (has_rows_without_keys(c)) return pl.input == 0 || pl.input == 3;
  const bool masked = c.causal || c.left || c.right;
  return !masked || pl.input != 1 || std::isnan(pl.value);
}

// in's Q, K, V, dO (B = 1) as f64 with K's column 0 made positive and `pl` planted (none where
// pl.input < 0), each rounded to `round_to` (NaN and inf stay).
inline TensorList planted_inputs(const OptCase& c, const OptInputs& in, const Planted& pl,
                                 DType round_to = DType::f64) {
  TensorList t = {in.qkv[0], in.qkv[1], in.qkv[2], in.dO};
  std::vector<Values> v;
  for (const Tensor& x : t) v.push_back(to(to(x, Device::cpu()), DType::f64).to_vector<double>());
  for (size_t at = 0; at < v[1].size(); at += static_cast<size_t>(c.d)) v[1][at] = std::abs(v[1][at]) + 0.5;
  const bool query_side = pl.input == 0 || pl.input == 3;
  const size_t at = query_side ? static_cast<size_t>((c.Nq - 1) * c.d) : 0;
  if (pl.input >= 0) v[static_cast<size_t>(pl.input)][at] = pl.value;
  for (size_t i = 0; i < t.size(); ++i) t[i] = to(from_vector(v[i], t[i].shape(), round_to), DType::f64);
  return t;
}

}  // namespace attention_chain
}  // namespace gg::test
