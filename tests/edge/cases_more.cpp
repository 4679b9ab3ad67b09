// where, the fused attention's argument checks, the tape drawing and the *_like factories.
#include <limits>

#include "harness.h"

namespace gg::edge {
namespace {

Tensor v(std::vector<double> x) { const auto n = static_cast<int64_t>(x.size()); return from_vector(x, {n}, DType::f64); }
Tensor mask(std::vector<double> x) { return gt(v(std::move(x)), zeros({}, DType::f64)); }
Tensor qkv(Shape s = {1, 1, 3, 2}) { return ones(s, DType::f64); }

// ---- where
CASE("where/cond must be b8") { THROWS(DTypeError, "gg::where: cond must be b8, got f64", where(v({1}), v({1}), v({2}))); }
CASE("where/undefined cond") { THROWS(ValueError, "gg::where: cond is an undefined tensor", where(Tensor(), v({1}), v({2}))); }
CASE("where/undefined a") { THROWS(ValueError, "gg::where: a is an undefined tensor", where(mask({1}), Tensor(), v({2}))); }
CASE("where/undefined b") { THROWS(ValueError, "gg::where: b is an undefined tensor", where(mask({1}), v({1}), Tensor())); }
CASE("where/dtype mismatch") { THROWS(DTypeError, "gg::where: dtypes differ", where(mask({1}), v({1}), ones({1}))); }
CASE("where/shape mismatch") { THROWS(ShapeError, "gg::where: shapes [2] and [3] cannot be broadcast", where(mask({1, 0}), v({1, 2, 3}), v({1}))); }
CASE("where/b8 values") { THROWS(DTypeError, "gg::where: the CPU backend does not compute in b8", where(mask({1}), mask({1}), mask({0}))); }
CASE("where/0-dim everything") { CHECK_VALUES(where(gt(scalar_tensor(1), scalar_tensor(0)), scalar_tensor(3, DType::f64), scalar_tensor(4, DType::f64)), {3}); }
CASE("where/broadcast values") { CHECK_VALUES(where(mask({1, -1, 1}), v({7}), v({1, 2, 3})), {7, 2, 7}); }
CASE("where/NaN in the unselected branch") { CHECK_VALUES(where(mask({1, -1}), v({1, NAN}), v({NAN, 2})), {1, 2}); }
CASE("where/empty") { CHECK_SHAPE(where(gt(zeros({0}), zeros({})), zeros({0}), zeros({1})), {0}); }
CASE("where/backward routes by the mask") {
  Tensor a = v({1, 2, 3}).requires_grad_(), b = v({4, 5, 6}).requires_grad_();
  TensorList g = grad({sum(where(mask({1, -1, 1}), a, b))}, {a, b});
  CHECK_VALUES(g[0], {1, 0, 1});
  CHECK_VALUES(g[1], {0, 1, 0});
}

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
CASE("attention/backward with a wrong L") {
  AttentionForward f = attention_forward(qkv(), qkv(), qkv());
  THROWS(ShapeError, "gg::attention_backward:", attention_backward(qkv(), qkv(), qkv(), f.O, ones({1, 1, 2}, DType::f64), qkv()));
}
CASE("attention/backward with an undefined dO") {
  AttentionForward f = attention_forward(qkv(), qkv(), qkv());
  THROWS(ValueError, "gg::attention_backward: dO is an undefined tensor", attention_backward(qkv(), qkv(), qkv(), f.O, f.L, Tensor()));
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

// ---- the tape drawing and the *_like factories
CASE("to_dot/of no roots") { CHECK(to_dot(TensorList{}).find("digraph") != std::string::npos); }
CASE("to_dot/of a leaf") { CHECK(to_dot({v({1}).requires_grad_()}).find("digraph") != std::string::npos); }
CASE("like/zeros_like of a transposed view") { Tensor y = zeros_like(transpose(from_vector({1, 2, 3, 4, 5, 6}, {2, 3}), 0, 1)); CHECK_SHAPE(y, {3, 2}); CHECK_VALUES(y, std::vector<double>(6, 0.0)); }
CASE("like/randn_like keeps the dtype") { CHECK(randn_like(zeros({2}, DType::f64)).dtype() == DType::f64); }
CASE("like/randn_like of i64") { THROWS(DTypeError, "gg::rand/randn: dtype must be floating, got i64", randn_like(from_indices({1}, {1}))); }
CASE("like/ones_like of an empty tensor") { CHECK_SHAPE(ones_like(zeros({0, 2})), {0, 2}); }
CASE("like/zeros_like of an undefined tensor") { THROWS(ValueError, "gg::zeros_like: input is an undefined tensor", zeros_like(Tensor())); }
CASE("like/ones_like of an undefined tensor") { THROWS(ValueError, "gg::ones_like: input is an undefined tensor", ones_like(Tensor())); }
CASE("like/randn_like of an undefined tensor") { THROWS(ValueError, "gg::randn_like: input is an undefined tensor", randn_like(Tensor())); }
CASE("flatten/of an empty tensor") { CHECK_SHAPE(flatten(zeros({3, 0, 2})), {0}); }
CASE("contiguous/of an empty transposed view is itself") { Tensor x = transpose(zeros({3, 0}), 0, 1); CHECK(contiguous(x).is_same(x)); }

}  // namespace
}  // namespace gg::edge
