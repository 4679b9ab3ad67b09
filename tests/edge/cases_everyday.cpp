// The everyday ops of ops/ops.h (clamp, masked_fill, max/min with indices, argmax, logsumexp,
// var/std, norm, gather/scatter_add, one_hot, triu/tril, allclose/equal): undefined and empty
// inputs, NaN and inf, ties, bad dims and indices, and the gradients PyTorch chooses at kinks.
#include <limits>
#include <tuple>

#include "harness.h"

namespace gg::edge {
namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();
Tensor v(std::vector<double> x) { const auto n = static_cast<int64_t>(x.size()); return from_vector(x, {n}, DType::f64); }
Tensor m23() { return from_vector({0, 1, 2, 3, 4, 5}, {2, 3}, DType::f64); }
Tensor mask(std::vector<double> x) { return gt(v(std::move(x)), 0.0); }

// ---- clamp
CASE("clamp/no bounds") { THROWS(ValueError, "gg::clamp: at least one of the bounds", clamp(v({1}), std::nullopt)); }
CASE("clamp/undefined") { THROWS(ValueError, "gg::clamp: input is an undefined tensor", clamp(Tensor(), 0.0, 1.0)); }
CASE("clamp/values, NaN through") { CHECK_VALUES(clamp(v({-2, 0.5, 3, kNaN}), -1.0, 1.0), {-1, 0.5, 1, kNaN}); }
CASE("clamp/a NaN bound gives NaN") { CHECK_VALUES(clamp(v({-2, 0.5}), kNaN, 1.0), {kNaN, kNaN}); }
CASE("clamp/lo above hi gives hi") { CHECK_VALUES(clamp(v({-2, 0.5, 3}), 2.0, 1.0), {1, 1, 1}); }
CASE("clamp/gradient is 0 at the bounds and at NaN") {
  Tensor x = v({-1, 0, 1, 2, kNaN}).requires_grad_();
  CHECK_VALUES(grad(sum(clamp(x, 0.0, 1.0)), x), {0, 0, 0, 0, 0});
  Tensor y = v({-1, 0.5, 2}).requires_grad_();
  CHECK_VALUES(grad(sum(clamp(y, 0.0, 1.0)), y), {0, 1, 0});
}
CASE("clamp/i64 stays i64, a float bound promotes") {
  Tensor i = from_indices({-3, 5}, {2});
  CHECK(clamp(i, 0, 2).dtype() == DType::i64);
  CHECK_VALUES(clamp(i, 0, 2), {0, 2});
  CHECK(clamp(i, 0.5, std::nullopt).dtype() == DType::f32);
}
CASE("clamp/empty") { CHECK_SHAPE(clamp(zeros({0, 3}, DType::f64), 0.0, 1.0), {0, 3}); }
CASE("clamp/b8") { THROWS(DTypeError, "gg::clamp: not defined for a b8 input", clamp(mask({1}), 0, 1)); }

// ---- masked_fill
CASE("masked_fill/values and broadcasting") {
  CHECK_VALUES(masked_fill(m23(), gt(v({1, -1, 1}), 0.0), -7.0), {-7, 1, -7, -7, 4, -7});
}
CASE("masked_fill/keeps the input dtype") { CHECK(masked_fill(ones({2}), mask({1, 0}), 2.5).dtype() == DType::f32); }
CASE("masked_fill/mask must be b8") { THROWS(DTypeError, "gg::masked_fill: mask must be b8, got f64", masked_fill(m23(), m23(), 1.0)); }
CASE("masked_fill/shapes") { THROWS(ShapeError, "gg::masked_fill: shapes [2, 3] and [2]", masked_fill(m23(), mask({1, 0}), 1.0)); }
CASE("masked_fill/a tensor value must be 0-dim") {
  THROWS(ShapeError, "gg::masked_fill: value must be a 0-dim tensor, got shape [1]", masked_fill(m23(), mask({1, 0, 1}), v({1})));
}
CASE("masked_fill/the gradient reaches a tensor value") {
  Tensor val = scalar_tensor(2.0, DType::f64).requires_grad_();
  CHECK_VALUES(grad(sum(masked_fill(m23(), mask({1, 0, 1}), val)), val), {4});
}
CASE("masked_fill/empty") { CHECK_SHAPE(masked_fill(zeros({0, 3}, DType::f64), mask({1, 0, 1}), 1.0), {0, 3}); }

// ---- max/min with indices, argmax/argmin
CASE("max_dim/ties give the first index") {
  auto [values, indices] = max(from_vector({1, 3, 3, 2, 5, 5}, {2, 3}, DType::f64), 1);
  CHECK_VALUES(values, {3, 5});
  CHECK(indices.dtype() == DType::i64);
  CHECK_VALUES(indices, {1, 1});
}
CASE("max_dim/NaN wins, at its first index") {
  auto [values, indices] = max(v({1, kNaN, 3, kNaN}), 0);
  CHECK_VALUES(values, {kNaN});
  CHECK_VALUES(indices, {1});
  CHECK_VALUES(std::get<1>(min(v({1, kNaN, -3}), 0)), {1});
}
CASE("max_dim/the gradient goes to the chosen index alone") {
  Tensor x = v({1, 3, 3, 2}).requires_grad_();
  CHECK_VALUES(grad(std::get<0>(max(x, 0)), x), {0, 1, 0, 0});
  CHECK_VALUES(grad(std::get<0>(min(x, 0)), x), {1, 0, 0, 0});
}
CASE("max_dim/keepdim") {
  auto [values, indices] = max(m23(), 0, true);
  CHECK_SHAPE(values, {1, 3});
  CHECK_SHAPE(indices, {1, 3});
  CHECK_VALUES(indices, {1, 1, 1});
}
CASE("max_dim/empty dim") {
  THROWS(ValueError, "gg::max: cannot reduce over dim 1 of size 0 (shape [2, 0])", max(zeros({2, 0}, DType::f64), 1));
}
CASE("max_dim/empty other dim") { CHECK_SHAPE(std::get<0>(max(zeros({0, 3}, DType::f64), 1)), {0}); }
CASE("max_dim/bad dim") { THROWS(IndexError, "gg::max: dim 2 is out of range", max(m23(), 2)); }
CASE("max_dim/i64") { THROWS(DTypeError, "gg::min: input must be a floating tensor", min(from_indices({1}, {1}), 0)); }
CASE("max_dim/0-dim") {
  auto [values, indices] = max(scalar_tensor(2.5, DType::f64), 0);
  CHECK_VALUES(values, {2.5});
  CHECK_VALUES(indices, {0});
}
CASE("max_dim/a braced dim list is still amax") { CHECK_SHAPE(max(m23(), {1}), {2}); }
CASE("argmax/flattened") { CHECK_VALUES(argmax(m23()), {5}); CHECK_VALUES(argmin(m23()), {0}); }
CASE("argmax/per dim") { CHECK_VALUES(argmax(m23(), 0), {1, 1, 1}); CHECK_VALUES(argmin(m23(), -1, true), {0, 0}); }
CASE("argmax/empty") { THROWS(ValueError, "gg::argmax: cannot reduce over dim 0 of size 0", argmax(zeros({0}, DType::f64))); }
CASE("argmax/undefined") { THROWS(ValueError, "gg::argmax: input is an undefined tensor", argmax(Tensor(), 0)); }
CASE("amin/empty dim") { THROWS(ValueError, "gg::amin: cannot take the min over an empty dimension of shape [0, 3]", min(zeros({0, 3}, DType::f64))); }
CASE("amin/values") { CHECK_VALUES(amin(m23(), {1}), {0, 3}); CHECK_VALUES(min(v({2, kNaN})), {kNaN}); }
CASE("max/min of two tensors") { CHECK_VALUES(max(v({1, 5}), v({3, 2})), {3, 5}); CHECK_VALUES(min(v({1, 5}), v({3, 2})), {1, 2}); }
CASE("minimum/ties share the gradient") {
  Tensor a = v({1, 2}).requires_grad_(), b = v({1, 3}).requires_grad_();
  TensorList g = grad({sum(minimum(a, b))}, {a, b});
  CHECK_VALUES(g[0], {0.5, 1});
  CHECK_VALUES(g[1], {0.5, 0});
}

// ---- logsumexp
CASE("logsumexp/large values do not overflow") { CHECK_NEAR_VALUES(logsumexp(v({1000, 1000})), 1e-15, {1000 + std::log(2.0)}); }
CASE("logsumexp/-inf group") { CHECK_VALUES(logsumexp(v({-kInf, -kInf})), {-kInf}); }
CASE("logsumexp/+inf") { CHECK_VALUES(logsumexp(v({1, kInf})), {kInf}); }
CASE("logsumexp/NaN") { CHECK_VALUES(logsumexp(v({1, kNaN})), {kNaN}); }
CASE("logsumexp/empty group") { CHECK_VALUES(logsumexp(zeros({2, 0}, DType::f64), {1}), {-kInf, -kInf}); }
CASE("logsumexp/gradient is softmax") { Tensor x = v({0, std::log(3.0)}).requires_grad_(); CHECK_NEAR_VALUES(grad(logsumexp(x), x), 1e-15, {0.25, 0.75}); }
CASE("logsumexp/bad dim") { THROWS(IndexError, "gg::logsumexp: dim 2 is out of range", logsumexp(m23(), {2})); }

// ---- var, std
CASE("var/unbiased and biased") { CHECK_VALUES(var(v({1, 2, 3, 4})), {5.0 / 3}); CHECK_VALUES(var(v({1, 2, 3, 4}), {}, false), {1.25}); }
CASE("var/one element is NaN") { CHECK_VALUES(var(v({3})), {kNaN}); CHECK_VALUES(gg::std(v({3})), {kNaN}); }
CASE("var/empty is NaN") { CHECK_VALUES(var(zeros({0}, DType::f64)), {kNaN}); }
CASE("std/gradient at a constant input is 0") {
  Tensor x = v({2, 2, 2}).requires_grad_();
  CHECK_VALUES(grad(gg::std(x), x), {0, 0, 0});
}
CASE("std/keepdim shape") { CHECK_SHAPE(gg::std(m23(), {1}, 1, true), {2, 1}); }
CASE("var/i64") { THROWS(DTypeError, "gg::var: input must be a floating tensor", var(from_indices({1, 2}, {2}))); }

// ---- norm
CASE("norm/p values") {
  CHECK_VALUES(norm(v({3, -4})), {5});
  CHECK_VALUES(norm(v({3, -4}), 1), {7});
  CHECK_VALUES(norm(v({3, -4}), kInf), {4});
  CHECK_VALUES(frobenius_norm(from_vector({1, 2, 2, 4}, {2, 2}, DType::f64)), {5});
}
CASE("norm/bad p") { THROWS(ValueError, "gg::norm: p must be 1, 2 or inf, got 3", norm(v({1}), 3)); }
CASE("norm/gradient at 0 is 0") {
  Tensor x = v({0, 0}).requires_grad_();
  CHECK_VALUES(grad(norm(x), x), {0, 0});
  CHECK_VALUES(grad(norm(x, 1), x), {0, 0});
  CHECK_VALUES(grad(norm(x, kInf), x), {0, 0});
}
CASE("norm/empty") { CHECK_VALUES(norm(zeros({0}, DType::f64)), {0}); THROWS(ValueError, "gg::norm: the inf-norm of an empty group", norm(zeros({0}, DType::f64), kInf)); }
CASE("norm/NaN") { CHECK_VALUES(norm(v({1, kNaN})), {kNaN}); }

// ---- gather, scatter_add
CASE("gather/values") { CHECK_VALUES(gather(m23(), 1, from_indices({2, 2, 0, 1}, {2, 2})), {2, 2, 3, 4}); }
CASE("gather/index out of range") {
  THROWS(IndexError, "gg::gather: index 3 is out of range for dim 1 of size 3", gather(m23(), 1, from_indices({3}, {1, 1})));
  THROWS(IndexError, "gg::gather: index -1 is out of range", gather(m23(), 1, from_indices({-1}, {1, 1})));
}
CASE("gather/index rank") { THROWS(ShapeError, "gg::gather: index must have as many dims as input (2), got shape [2]", gather(m23(), 1, from_indices({0, 1}, {2}))); }
CASE("gather/index too large off dim") { THROWS(ShapeError, "gg::gather: index of shape [3, 1] is larger than input", gather(m23(), 1, from_indices({0, 0, 0}, {3, 1}))); }
CASE("gather/index dtype") { THROWS(DTypeError, "gg::gather: index must be i64, got f64", gather(m23(), 1, m23())); }
CASE("gather/any dtype") {
  Tensor y = gather(from_indices({5, 6, 7}, {3}), 0, from_indices({2, 0}, {2}));
  CHECK(y.dtype() == DType::i64);
  CHECK_VALUES(y, {7, 5});
}
CASE("gather/empty index") { CHECK_SHAPE(gather(m23(), 1, from_indices({}, {2, 0})), {2, 0}); }
CASE("gather/bad dim") { THROWS(IndexError, "gg::gather: dim 2 is out of range", gather(m23(), 2, from_indices({0}, {1, 1}))); }
CASE("scatter_add/repeated indices add up") {
  Tensor y = scatter_add(zeros({2, 3}, DType::f64), 1, from_indices({0, 0, 2, 2}, {2, 2}), from_vector({1, 2, 3, 4}, {2, 2}, DType::f64));
  CHECK_VALUES(y, {3, 0, 0, 0, 0, 7});
}
CASE("scatter_add/gradients") {
  Tensor self = zeros({2, 3}, DType::f64).requires_grad_(), src = from_vector({1, 2, 3, 4}, {2, 2}, DType::f64).requires_grad_();
  Tensor w = from_vector({1, 2, 3, 4, 5, 6}, {2, 3}, DType::f64);
  TensorList g = grad({sum(scatter_add(self, 1, from_indices({0, 0, 2, 1}, {2, 2}), src) * w)}, {self, src});
  CHECK_VALUES(g[0], {1, 2, 3, 4, 5, 6});
  CHECK_VALUES(g[1], {1, 1, 6, 5});
}
CASE("scatter_add/dtypes differ") { THROWS(DTypeError, "gg::scatter_add: dtypes differ", scatter_add(m23(), 1, from_indices({0}, {1, 1}), ones({1, 1}))); }
CASE("scatter_add/out of range") { THROWS(IndexError, "gg::scatter_add: index 5 is out of range", scatter_add(m23(), 1, from_indices({5}, {1, 1}), m23())); }
CASE("scatter_add/index larger than src") { THROWS(ShapeError, "larger than src", scatter_add(m23(), 1, from_indices({0, 0}, {1, 2}), ones({1, 1}, DType::f64))); }

// ---- one_hot
CASE("one_hot/values") {
  Tensor y = one_hot(from_indices({2, 0}, {2}));
  CHECK(y.dtype() == DType::i64);
  CHECK_SHAPE(y, {2, 3});
  CHECK_VALUES(y, {0, 0, 1, 1, 0, 0});
}
CASE("one_hot/num_classes") { CHECK_SHAPE(one_hot(from_indices({1}, {1, 1}), 4), {1, 1, 4}); }
CASE("one_hot/out of range") { THROWS(IndexError, "gg::one_hot: class 4 is out of range for 4 classes", one_hot(from_indices({4}, {1}), 4)); }
CASE("one_hot/negative") { THROWS(IndexError, "gg::one_hot: class -1 is out of range", one_hot(from_indices({-1}, {1}))); }
CASE("one_hot/empty needs num_classes") {
  THROWS(ValueError, "gg::one_hot: cannot infer num_classes from an empty index", one_hot(from_indices({}, {0})));
  CHECK_SHAPE(one_hot(from_indices({}, {0}), 3), {0, 3});
}
CASE("one_hot/largest class") {
  THROWS(ValueError, "gg::one_hot: class 9223372036854775807 leaves no room", one_hot(from_indices({INT64_MAX}, {1})));
}
CASE("one_hot/dtype") { THROWS(DTypeError, "gg::one_hot: index must be i64, got f64", one_hot(v({1}))); }

// ---- triu, tril
CASE("triu/values") { CHECK_VALUES(triu(m23()), {0, 1, 2, 0, 4, 5}); CHECK_VALUES(tril(m23(), -1), {0, 0, 0, 3, 0, 0}); }
CASE("triu/far diagonals") { CHECK_VALUES(triu(m23(), 5), {0, 0, 0, 0, 0, 0}); CHECK_VALUES(tril(m23(), 5), {0, 1, 2, 3, 4, 5}); }
CASE("triu/needs 2 dims") { THROWS(ShapeError, "gg::triu: input must have at least 2 dims, got shape [3]", triu(v({1, 2, 3}))); }
CASE("triu/empty") { CHECK_SHAPE(tril(zeros({0, 3}, DType::f64)), {0, 3}); }
CASE("triu/i64 and b8 keep their dtype") {
  CHECK(triu(from_indices({1, 2, 3, 4}, {2, 2})).dtype() == DType::i64);
  CHECK(tril(gt(ones({2, 2}), 0.0)).dtype() == DType::b8);
}

// ---- allclose, equal
CASE("allclose/tolerances") {
  CHECK(allclose(v({1, 2}), v({1 + 1e-9, 2})));
  CHECK(!allclose(v({1, 2}), v({1.1, 2})));
  CHECK(allclose(v({1, 2}), v({1.1, 2}), 0.2));
}
CASE("allclose/inf and NaN") {
  CHECK(allclose(v({kInf, -kInf}), v({kInf, -kInf})));
  CHECK(!allclose(v({kInf}), v({-kInf})));
  CHECK(!allclose(v({kInf}), v({1e308})));
  CHECK(!allclose(v({kNaN}), v({kNaN})));
  CHECK(allclose(v({kNaN}), v({kNaN}), 1e-5, 1e-8, true));
}
CASE("allclose/broadcasts") { CHECK(allclose(m23() * 0.0, scalar_tensor(0.0, DType::f64))); }
CASE("allclose/dtypes differ") { THROWS(DTypeError, "gg::allclose: dtypes differ: f64 and f32", allclose(v({1}), ones({1}))); }
CASE("allclose/negative tolerance") { THROWS(ValueError, "gg::allclose: rtol and atol must be >= 0", allclose(v({1}), v({1}), -1)); }
CASE("equal/values and shapes") {
  CHECK(equal(m23(), m23()));
  CHECK(!equal(m23(), reshape(m23(), {3, 2})));
  CHECK(!equal(v({kNaN}), v({kNaN})));
  CHECK(equal(v({1, 2}), from_indices({1, 2}, {2})));
  CHECK(equal(zeros({0}, DType::f64), zeros({0}, DType::f64)));
}
CASE("equal/i64 beyond 2^53 is exact") {
  Tensor a = from_indices({(int64_t{1} << 62)}, {1}), b = from_indices({(int64_t{1} << 62) + 1}, {1});
  CHECK(!equal(a, b));
  CHECK(equal(a, a));
  CHECK(!allclose(a, b, 0, 0));
  CHECK(allclose(a, b, 0, 1));
}
CASE("equal/undefined") { THROWS(ValueError, "gg::equal: b is an undefined tensor", equal(v({1}), Tensor())); }

}  // namespace
}  // namespace gg::edge
