// The CPU fused attention beyond the sizes of tests/test_attention.cpp: head dims 5, 32 and 128
// at N = 200, permuted (non-contiguous) inputs, and f32 against f64 at every fused level
// (forward, backward, backward-over-backward). References: attention_composite in f64 (the
// fused op's ground truth) and the f64 fused op for the f32 runs. Then the argument checks and
// small cases with known outputs.
#include <limits>

#include "harness.h"

namespace gg::edge {
Tensor leafify(const Tensor& t, DType dt);

namespace {

double max_rel(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double num = 0, den = 1e-30;
  for (size_t i = 0; i < x.size(); ++i) {
    num = std::max(num, std::abs(x[i] - y[i]));
    den = std::max(den, std::abs(y[i]));
  }
  return num / den;
}

// q, k, v of shape (B, H, N, d) built as permuted views of (B, N, H, d) tensors, like the output
// of a fused QKV projection.
TensorList permuted_inputs(int64_t N, int64_t d, DType dt, uint64_t seed) {
  manual_seed(seed);
  TensorList out;
  for (int i = 0; i < 3; ++i) out.push_back(leafify(permute(randn({1, N, 2, d}, DType::f64), {0, 2, 1, 3}), dt));
  return out;
}

// Levels 0 to 2 of the fused op and of the composite for the same inputs and cotangents.
struct Levels {
  Tensor o;
  TensorList d1;  // dQ, dK, dV
  TensorList d2;  // second order: gradients of <d1, w> with respect to q, k, v
};

Levels levels(const TensorList& x, bool fused, bool causal, uint64_t seed) {
  const AttentionOptions opt{std::nullopt, causal};
  Tensor o = fused ? attention(x[0], x[1], x[2], opt) : attention_composite(x[0], x[1], x[2], opt);
  manual_seed(seed);
  Tensor dO = randn(o.shape(), DType::f64).to(o.dtype());
  TensorList d1 = grad({o}, x, {dO}, std::nullopt, /*create_graph=*/true);
  Tensor penalty = sum(d1[0] * d1[0]) + sum(d1[1] * d1[2]);
  TensorList d2 = grad({penalty}, x);
  return {o.detach(), {d1[0].detach(), d1[1].detach(), d1[2].detach()}, d2};
}

}  // namespace

// A leaf in the requested dtype that keeps the permuted (B, H, N, d) layout of t.
Tensor leafify(const Tensor& t, DType dt) {
  Tensor c = dt == t.dtype() ? t : permute(to(permute(t, {0, 2, 1, 3}), dt), {0, 2, 1, 3});
  c = c.detach();
  c.requires_grad_(true);
  return c;
}

namespace {
const bool registered = [] {
  for (int64_t d : {5, 32, 128})
    for (bool causal : {false, true}) {
      const std::string tag = "d=" + std::to_string(d) + (causal ? " causal" : "");
      add_case("attention/fused matches composite, N=200 permuted inputs, " + tag, [d, causal] {
        TensorList x = permuted_inputs(200, d, DType::f64, 11 + static_cast<uint64_t>(d));
        CHECK(!x[0].is_contiguous());
        Levels f = levels(x, true, causal, 5), c = levels(x, false, causal, 5);
        CHECK(max_rel(f.o, c.o) < 1e-12);
        for (int i = 0; i < 3; ++i) CHECK(max_rel(f.d1[static_cast<size_t>(i)], c.d1[static_cast<size_t>(i)]) < 1e-11);
        for (int i = 0; i < 3; ++i) CHECK(max_rel(f.d2[static_cast<size_t>(i)], c.d2[static_cast<size_t>(i)]) < 1e-10);
      });
      add_case("attention/f32 fused forward, backward and BoB against f64, N=200, " + tag, [d, causal] {
        TensorList x64 = permuted_inputs(200, d, DType::f64, 23 + static_cast<uint64_t>(d));
        TensorList x32 = permuted_inputs(200, d, DType::f32, 23 + static_cast<uint64_t>(d));
        Levels a = levels(x32, true, causal, 9), b = levels(x64, true, causal, 9);
        CHECK(a.o.dtype() == DType::f32 && a.d2[0].dtype() == DType::f32);
        CHECK(max_rel(a.o, b.o) < 1e-5);
        for (int i = 0; i < 3; ++i) CHECK(max_rel(a.d1[static_cast<size_t>(i)], b.d1[static_cast<size_t>(i)]) < 1e-4);
        for (int i = 0; i < 3; ++i) CHECK(max_rel(a.d2[static_cast<size_t>(i)], b.d2[static_cast<size_t>(i)]) < 1e-3);
      });
    }
  return true;
}();
}  // namespace

namespace {

Tensor v(std::vector<double> x) { const auto n = static_cast<int64_t>(x.size()); return from_vector(x, {n}, DType::f64); }
Tensor qkv(Shape s = {1, 1, 3, 2}) { return ones(s, DType::f64); }

// ---- fused attention argument checks
CASE("attention/undefined k") { THROWS(ValueError, "gg::attention: k is an undefined tensor", attention(qkv(), Tensor(), qkv())); }
CASE("attention/3-D q") { THROWS(ShapeError, "gg::attention: q must be (B, Hq, Nq, d), got shape [1, 3, 2]", attention(qkv({1, 3, 2}), qkv({1, 3, 2}), qkv({1, 3, 2}))); }
CASE("attention/v of another length than k") { THROWS(ShapeError, "gg::attention: v must have k's shape (B, Hkv, Nk, d)", attention(qkv(), qkv({1, 1, 4, 2}), qkv())); }
CASE("attention/i64 inputs") {
  Tensor i = from_indices(std::vector<int64_t>(6, 1), {1, 1, 3, 2});
  THROWS(DTypeError, "gg::attention: q must be a floating tensor", attention(i, i, i));
}
CASE("attention/dtype mismatch") { THROWS(DTypeError, "gg::attention: dtypes differ", attention(qkv(), ones({1, 1, 3, 2}), qkv())); }
CASE("attention/head dim 0 gives an infinite default scale") { THROWS(ValueError, "gg::attention: scale must be finite, got inf", attention(qkv({1, 1, 3, 0}), qkv({1, 1, 3, 0}), qkv({1, 1, 3, 0}))); }
CASE("attention/NaN scale") { THROWS(ValueError, "gg::attention: scale must be finite, got nan", attention(qkv(), qkv(), qkv(), {std::numeric_limits<double>::quiet_NaN(), false})); }
CASE("attention_composite/head dim 0 gives an infinite default scale") { THROWS(ValueError, "gg::attention_composite: scale must be finite, got inf", attention_composite(qkv({1, 1, 3, 0}), qkv({1, 1, 3, 0}), qkv({1, 1, 3, 0}))); }
CASE("attention_composite/NaN scale") { THROWS(ValueError, "gg::attention_composite: scale must be finite, got nan", attention_composite(qkv(), qkv(), qkv(), {std::numeric_limits<double>::quiet_NaN(), false})); }
CASE("attention/backward with a wrong L") {
  AttentionForward f = attention_forward(qkv(), qkv(), qkv());
  THROWS(ShapeError, "gg::attention_backward:", attention_backward(qkv(), qkv(), qkv(), f.O, ones({1, 1, 2}, DType::f64), qkv()));
}
CASE("attention/backward with an undefined dO") {
  AttentionForward f = attention_forward(qkv(), qkv(), qkv());
  THROWS(ValueError, "gg::attention_backward: dO is an undefined tensor", attention_backward(qkv(), qkv(), qkv(), f.O, f.L, Tensor()));
}
CASE("attention/BoB row sums with a 3-D q") {
  AttentionForward f = attention_forward(qkv(), qkv(), qkv());
  THROWS(ShapeError, "gg::attention_bob_row_sums: q must be (B, Hq, Nq, d)", attention_bob_row_sums(qkv({1, 3, 2}), qkv(), qkv(), f.O, f.L, qkv(), qkv(), qkv(), qkv()));
}
CASE("attention/BoB from row sums with an undefined F") {
  AttentionForward f = attention_forward(qkv(), qkv(), qkv());
  THROWS(ValueError, "gg::attention_bob_from_row_sums: F is an undefined tensor", attention_bob_from_row_sums(qkv(), qkv(), qkv(), f.O, f.L, qkv(), qkv(), qkv(), qkv(), f.L, Tensor()));
}
CASE("attention/BoB row sums without cotangents are zeros") {
  AttentionForward f = attention_forward(qkv(), qkv(), qkv());
  CHECK_VALUES(attention_bob_row_sums(qkv(), qkv(), qkv(), f.O, f.L, qkv(), Tensor(), Tensor(), Tensor())[1], {0, 0, 0});
}
CASE("attention/uniform keys average the values") {
  Tensor val = from_vector({1, 2, 3, 4, 5, 6}, {1, 1, 3, 2}, DType::f64);
  CHECK_VALUES(attention(qkv(), qkv(), val), {3, 4, 3, 4, 3, 4});
}
CASE("attention/causal first row sees only itself") {
  Tensor val = from_vector({1, 2, 3, 4, 5, 6}, {1, 1, 3, 2}, DType::f64);
  CHECK_VALUES(slice(attention(qkv(), qkv(), val, {std::nullopt, true}), 2, 0, 1), {1, 2});
}
CASE("attention/N = 1") { CHECK_VALUES(attention(qkv({1, 1, 1, 2}), qkv({1, 1, 1, 2}), reshape(v({5, 6}), {1, 1, 1, 2})), {5, 6}); }

}  // namespace
}  // namespace gg::edge
