// Integer arithmetic, in-place writes, NaN and ties in reductions, matmul's vector rules,
// factories, neural-network ops, the autograd API, where, the tape drawing and the *_like
// factories.
#include <limits>

#include "harness.h"

namespace gg::edge {
namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
Tensor v(std::vector<double> x) { const auto n = static_cast<int64_t>(x.size()); return from_vector(x, {n}, DType::f64); }
Tensor m23() { return from_vector({0, 1, 2, 3, 4, 5}, {2, 3}, DType::f64); }
Tensor mask(std::vector<double> x) { return gt(v(std::move(x)), zeros({}, DType::f64)); }

// ---- integer arithmetic
CASE("int/div by zero is a ValueError") { THROWS(ValueError, "gg::div: integer division by zero (divisor b of shape [2] is 0 at flat index 1)", div(from_indices({4, 5}, {2}), from_indices({1, 0}, {2}))); }
CASE("int/div by a broadcast zero") { THROWS(ValueError, "gg::div: integer division by zero", div(from_indices({4, 5}, {2}), from_indices({0}, {}))); }
CASE("int/numbers keep i64 exact") {
  Tensor x = from_indices({0, 1, -7}, {3});
  CHECK(add(x, INT64_MAX - 1).to_vector<int64_t>() == std::vector<int64_t>({INT64_MAX - 1, INT64_MAX, INT64_MAX - 8}));
  CHECK((x * 3).dtype() == DType::i64);
  CHECK((x / 2).to_vector<int64_t>() == std::vector<int64_t>({0, 0, -3}));
  CHECK_VALUES(x * 0.5, {0, 0.5, -3.5});
  THROWS(ValueError, "gg::div: integer division by zero", x / 0);
  THROWS(ValueError, "gg::pow: an integer base to a negative integer power", pow(x, -1));
  CHECK(pow(x, 2).to_vector<int64_t>() == std::vector<int64_t>({0, 1, 49}));
}
CASE("compare/a number on either side") {
  Tensor x = v({1, 2, 3});
  CHECK_VALUES(lt(2.0, x), {0, 0, 1});
  CHECK_VALUES(gt(x, 2), {0, 0, 1});
  CHECK_VALUES(le(2, x), {0, 1, 1});
  CHECK_VALUES(ge(2.0, x), {1, 1, 0});
  CHECK_VALUES(eq(2, x), {0, 1, 0});
  CHECK_VALUES(ne(x, 2.5), {1, 1, 1});
  CHECK(gt(from_indices({1, 3}, {2}), 2.5).dtype() == DType::b8);
}
CASE("int/div by zero with an empty result is fine") { CHECK_SHAPE(div(from_indices({}, {0}), from_indices({0}, {1})), {0}); }
CASE("int/operator/ by zero") { THROWS(ValueError, "gg::div: integer division by zero", from_indices({1}, {1}) / from_indices({0}, {1})); }
CASE("int/INT64_MIN / -1 wraps") {
  Tensor y = div(from_indices({INT64_MIN, INT64_MAX}, {2}), from_indices({-1}, {1}));
  std::vector<int64_t> r = y.to_vector<int64_t>();
  CHECK(r[0] == INT64_MIN && r[1] == -INT64_MAX);
}
// i64 +, - and * wrap around as in PyTorch (torch.tensor([2**63 - 1]) + 1 is -2**63).
CASE("int/add, sub and mul wrap around") {
  Tensor big = from_indices({INT64_MAX, INT64_MIN, INT64_MAX}, {3});
  CHECK(add(big, from_indices({1, 0, 0}, {3})).to_vector<int64_t>() == std::vector<int64_t>({INT64_MIN, INT64_MIN, INT64_MAX}));
  CHECK(sub(big, from_indices({0, 1, 0}, {3})).to_vector<int64_t>() == std::vector<int64_t>({INT64_MAX, INT64_MAX, INT64_MAX}));
  CHECK(mul(big, from_indices({2, -1, 1}, {1, 3})).to_vector<int64_t>() == std::vector<int64_t>({-2, INT64_MIN, INT64_MAX}));
}
// PyTorch's torch.div returns a float for integer inputs (and `//` floors: -7 // 2 = -4); gg's i64
// division stays integral and truncates, as C++ does (ops/ops.h).
CASE("int/negative divisors truncate toward zero") {
  Tensor y = div(from_indices({7, -7, 7, -7, 0}, {5}), from_indices({-2, -2, 2, 2, -3}, {5}));
  CHECK(y.to_vector<int64_t>() == std::vector<int64_t>({-3, 3, 3, -3, 0}));
}
CASE("int/float div by zero is inf, not an error") { CHECK_VALUES(v({1, -1, 0}) / v({0, 0, 0}), {INFINITY, -INFINITY, kNaN}); }
CASE("int/float negative divisors") { CHECK_VALUES(v({7, -7}) / v({-2, -2}), {-3.5, 3.5}); }
CASE("int/maximum of i64") { CHECK(maximum(from_indices({3, -4}, {2}), from_indices({-1, 9}, {2})).to_vector<int64_t>() == std::vector<int64_t>({3, 9})); }
CASE("int/where on i64") {
  Tensor y = where(gt(v({1, -1}), v({0, 0})), from_indices({5, 6}, {2}), from_indices({7, 8}, {2}));
  CHECK(y.to_vector<int64_t>() == std::vector<int64_t>({5, 8}));
}

// ---- in-place writes
CASE("inplace/copy_ of its own transpose is refused") {
  Tensor x = from_vector({1, 2, 3, 4}, {2, 2}, DType::f64);
  THROWS(ValueError, "gg::copy_: src (shape [2, 2], strides [1, 2], offset 0) partially overlaps the destination", copy_(x, transpose(x, 0, 1)));
  CHECK_VALUES(x, {1, 2, 3, 4});
}
CASE("inplace/copy_ of a shifted slice of itself is refused") {
  Tensor x = v({1, 2, 3, 4});
  Tensor dst = slice(x, 0, 0, 3);
  THROWS(ValueError, "gg::copy_: src", copy_(dst, slice(x, 0, 1, 4)));
}
CASE("inplace/copy_ of itself is a no-op") {
  Tensor x = v({1, 2, 3});
  Tensor same = x;
  copy_(x, same);
  CHECK_VALUES(x, {1, 2, 3});
}
CASE("inplace/copy_ between interleaved columns") {
  Tensor x = m23();
  Tensor c0 = slice(x, 1, 0, 1);
  copy_(c0, slice(x, 1, 1, 2));
  CHECK_VALUES(x, {1, 1, 2, 4, 4, 5});
}
CASE("inplace/copy_ of overlapping strided views reads before writing") {
  Tensor x = v({0, 1, 2, 3, 4, 5, 6});
  Tensor dst = slice(x, 0, 0, 5, 2);  // elements 0, 2, 4
  copy_(dst, slice(x, 0, 2, 7, 2));   // elements 2, 4, 6
  CHECK_VALUES(x, {2, 1, 4, 3, 6, 5, 6});
}
CASE("inplace/copy_ from another tensor broadcasts") { Tensor x = m23(); copy_(x, v({7, 8, 9})); CHECK_VALUES(x, {7, 8, 9, 7, 8, 9}); }
CASE("inplace/copy_ converts dtypes") { Tensor x = zeros({2}, DType::f64); copy_(x, from_indices({3, -4}, {2})); CHECK_VALUES(x, {3, -4}); }
CASE("inplace/copy_ shape mismatch") { Tensor x = m23(); THROWS(ShapeError, "gg::copy_: shapes [2] and [2, 3] cannot be broadcast", copy_(x, v({1, 2}))); }
CASE("inplace/copy_ from a larger source") { Tensor x = v({1, 2, 3}); THROWS(ShapeError, "gg::copy_: src of shape [2, 3] does not broadcast to the destination's shape [3]", copy_(x, m23())); }
CASE("inplace/copy_ undefined src") { Tensor x = m23(); THROWS(ValueError, "gg::copy_: src is an undefined tensor", copy_(x, Tensor())); }
CASE("inplace/copy_ undefined destination") { Tensor x; THROWS(ValueError, "gg::copy_: self is an undefined tensor", copy_(x, m23())); }
CASE("inplace/copy_ into a broadcast view is refused") {
  Tensor x = expand(v({1}), {3});
  THROWS(ValueError, "gg::copy_: the destination (shape [3], strides [0]) has elements that share memory", copy_(x, v({1, 2, 3})));
}
CASE("inplace/add_ into a broadcast view is refused") { Tensor x = expand(v({1, 2}), {3, 2}); THROWS(ValueError, "gg::add_: the destination", add_(x, ones({3, 2}, DType::f64))); }
CASE("inplace/mul_ of a broadcast view is refused") { Tensor x = expand(v({1}), {2}); THROWS(ValueError, "gg::mul_: the destination", mul_(x, 2.0)); }
CASE("inplace/fill_ of a broadcast view is refused") { Tensor x = expand(v({1}), {2}); THROWS(ValueError, "gg::fill_: the destination", fill_(x, 2.0)); }
CASE("inplace/zero_ of a broadcast view is refused") { Tensor x = expand(v({1}), {2}); THROWS(ValueError, "gg::fill_: the destination", zero_(x)); }
CASE("inplace/fill_ of a broadcast view of size 1 is fine") { Tensor x = expand(v({1}), {1}); fill_(x, 4.0); CHECK_VALUES(x, {4}); }
CASE("inplace/add_ of its own transpose reads first") {
  Tensor x = from_vector({1, 2, 3, 4}, {2, 2}, DType::f64);
  add_(x, transpose(x, 0, 1));
  CHECK_VALUES(x, {2, 5, 5, 8});
}
CASE("inplace/add_ with alpha into a slice") { Tensor x = v({1, 2, 3}); Tensor s = slice(x, 0, 1, 3); add_(s, v({1, 1}), -2.0); CHECK_VALUES(x, {1, 0, 1}); }
CASE("inplace/add_ cannot grow the destination") { Tensor x = v({1}); THROWS(ShapeError, "gg::add_: cannot broadcast shape [2] into [1]", add_(x, v({1, 2}))); }
CASE("inplace/add_ undefined other") { Tensor x = v({1}); THROWS(ValueError, "gg::add_: other is an undefined tensor", add_(x, Tensor())); }
CASE("inplace/add_ on a tensor that requires grad") { Tensor x = v({1}).requires_grad_(); THROWS(AutogradError, "gg::add_: in-place update of a tensor that requires grad", add_(x, v({1}))); }
CASE("inplace/copy_ from a source that requires grad") { Tensor x = v({1}); THROWS(AutogradError, "gg::copy_: the source requires grad", copy_(x, v({2}).requires_grad_())); }
CASE("inplace/allowed under NoGradGuard") { Tensor x = v({1}).requires_grad_(); NoGradGuard ng; mul_(x, 3.0); CHECK_VALUES(x, {3}); }
CASE("inplace/bumps the version") { Tensor x = v({1}); const uint64_t before = x.version(); fill_(x, 2.0); CHECK(x.version() == before + 1); }
CASE("inplace/change to a saved tensor is detected") {
  Tensor x = v({1, 2}).requires_grad_();
  Tensor y = x * 1.0;
  Tensor z = y * y;  // saves y
  { NoGradGuard ng; mul_(y, 2.0); }
  THROWS(AutogradError, "a tensor needed for the gradient of 'mul' (saved tensor 0, shape [2]) was modified", grad(sum(z), x));
}

// ---- NaN and ties in reductions
CASE("nan/max with NaN first") { CHECK_VALUES(max(v({kNaN, 1, 2})), {kNaN}); }
CASE("nan/max with NaN in the middle") { CHECK_VALUES(max(v({1, kNaN, 2})), {kNaN}); }
CASE("nan/max with NaN last") { CHECK_VALUES(max(v({1, 2, kNaN})), {kNaN}); }
CASE("nan/max per row") { CHECK_VALUES(max(from_vector({1, 5, kNaN, 4, 3, 2}, {2, 3}, DType::f64), {1}), {kNaN, 4}); }
CASE("nan/max per column keepdim") {
  Tensor y = max(from_vector({1, kNaN, 2, 4, 0, 2}, {2, 3}, DType::f64), {0}, true);
  CHECK_SHAPE(y, {1, 3});
  CHECK_VALUES(y, {4, kNaN, 2});
}
CASE("nan/max of f32 with NaN last") { CHECK_VALUES(max(from_vector({1, 2, kNaN}, {3})), {kNaN}); }
CASE("nan/max of -inf") { CHECK_VALUES(max(v({-INFINITY, -INFINITY})), {-INFINITY}); }
CASE("nan/maximum with NaN either side") { CHECK_VALUES(maximum(v({kNaN, 1}), v({1, kNaN})), {kNaN, kNaN}); }
CASE("nan/sum propagates") { CHECK_VALUES(sum(v({1, kNaN})), {kNaN}); }
CASE("nan/softmax row with NaN") { CHECK_VALUES(softmax(v({0, kNaN}), 0), {kNaN, kNaN}); }
CASE("nan/relu of NaN") { CHECK_VALUES(relu(v({kNaN, -1, 2})), {kNaN, 0, 2}); }
CASE("ties/max backward shares equally among ties") {
  Tensor x = v({1, 3, 3, 0}).requires_grad_();
  CHECK_VALUES(grad(max(x), x), {0, 0.5, 0.5, 0});
}
CASE("ties/max backward per row, three ties") {
  Tensor x = from_vector({2, 2, 2, 1, 0, 1}, {2, 3}, DType::f64).requires_grad_();
  CHECK_NEAR_VALUES(grad(sum(max(x, {1})), x), 1e-15, {1.0 / 3, 1.0 / 3, 1.0 / 3, 0.5, 0, 0.5});
}
CASE("ties/maximum backward gives each side half") {
  Tensor a = v({2, 1, 3}).requires_grad_(), b = v({2, 2, 1}).requires_grad_();
  TensorList g = grad({sum(maximum(a, b))}, {a, b});
  CHECK_VALUES(g[0], {0.5, 0, 1});
  CHECK_VALUES(g[1], {0.5, 1, 0});
}
CASE("ties/maximum with broadcasting sums the halves") {
  Tensor a = v({1}).requires_grad_(), b = v({1, 1, 0}).requires_grad_();
  TensorList g = grad({sum(maximum(a, b))}, {a, b});
  CHECK_VALUES(g[0], {2});
  CHECK_VALUES(g[1], {0.5, 0.5, 0});
}
CASE("reduce/i64 sum is a DTypeError") { THROWS(DTypeError, "gg::sum: input must be a floating tensor, got i64", sum(from_indices({1}, {1}))); }
CASE("reduce/i64 max is a DTypeError") { THROWS(DTypeError, "gg::max: input must be a floating tensor", max(from_indices({1}, {1}))); }
CASE("reduce/undefined") { THROWS(ValueError, "gg::mean: input is an undefined tensor", mean(Tensor())); }
CASE("reduce/duplicate dims") { THROWS(ValueError, "gg::sum: dim appears more than once", sum(m23(), {1, -1})); }
CASE("reduce/keepdim shapes") {
  CHECK_SHAPE(sum(m23(), {1}, true), {2, 1});
  CHECK_SHAPE(mean(m23(), {0, 1}, true), {1, 1});
  CHECK_VALUES(max(m23(), {0}, true), {3, 4, 5});
}
CASE("reduce/sum of a broadcast view") { CHECK_VALUES(sum(expand(v({1, 2}), {3, 2}), {0}), {3, 6}); }
CASE("reduce/sum_to a non-broadcastable shape") { THROWS(ShapeError, "gg::sum_to: cannot sum shape [2, 3] down to [4]", sum_to(m23(), {4})); }

// ---- matmul
CASE("matmul/1-D x 1-D is the dot product") { Tensor y = matmul(v({1, 2, 3}), v({4, 5, 6})); CHECK_SHAPE(y, {}); CHECK_VALUES(y, {32}); }
CASE("matmul/dot backward") {
  Tensor a = v({1, 2, 3}).requires_grad_(), b = v({4, 5, 6}).requires_grad_();
  TensorList g = grad({matmul(a, b)}, {a, b});
  CHECK_VALUES(g[0], {4, 5, 6});
  CHECK_VALUES(g[1], {1, 2, 3});
}
CASE("matmul/dot gradgradcheck") {
  CHECK(gradgradcheck([](const TensorList& x) { return matmul(x[0], x[1]); },
                      {v({1, 2, 3}).requires_grad_(), v({-1, 0.5, 2}).requires_grad_()}).ok);
}
CASE("matmul/empty dot is 0") { CHECK_VALUES(matmul(v({}), v({})), {0}); }
CASE("matmul/dot length mismatch") { THROWS(ShapeError, "gg::matmul: vectors of different lengths: a is [3], b is [2]", matmul(v({1, 2, 3}), v({1, 2}))); }
CASE("matmul/1-D x 2-D") { Tensor y = matmul(v({1, 2}), m23()); CHECK_SHAPE(y, {3}); CHECK_VALUES(y, {6, 9, 12}); }
CASE("matmul/2-D x 1-D") { Tensor y = matmul(m23(), v({1, 0, -1})); CHECK_SHAPE(y, {2}); CHECK_VALUES(y, {-2, -2}); }
CASE("matmul/1-D x 3-D batch") { CHECK_SHAPE(matmul(v({1, 2}), ones({4, 2, 5}, DType::f64)), {4, 5}); }
CASE("matmul/0-dim operand") { THROWS(ShapeError, "gg::matmul: both operands need at least 1 dim, got [] and [3]", matmul(scalar_tensor(1, DType::f64), v({1, 2, 3}))); }
CASE("matmul/inner mismatch") { THROWS(ShapeError, "gg::matmul: shapes cannot be multiplied: a is [2, 3], b is [2, 3]", matmul(m23(), m23())); }
CASE("matmul/batch mismatch") { THROWS(ShapeError, "gg::matmul: shapes [2] and [3] cannot be broadcast", matmul(ones({2, 2, 3}), ones({3, 3, 2}))); }
CASE("matmul/i64") { THROWS(DTypeError, "gg::matmul: a must be a floating tensor, got i64", matmul(from_indices({1}, {1, 1}), from_indices({1}, {1, 1}))); }
CASE("matmul/dtype mismatch") { THROWS(DTypeError, "gg::matmul: dtypes differ", matmul(ones({1, 1}), ones({1, 1}, DType::f64))); }
CASE("matmul/undefined") { THROWS(ValueError, "gg::matmul: b is an undefined tensor", matmul(m23(), Tensor())); }
CASE("matmul/transposed views") { CHECK_VALUES(matmul(transpose(m23(), 0, 1), m23()), {9, 12, 15, 12, 17, 22, 15, 22, 29}); }

// ---- factories
CASE("arange/infinite end") { THROWS(ValueError, "gg::arange: start, end and step must be finite, got start 0, end inf", arange(0, INFINITY)); }
CASE("arange/NaN start") { THROWS(ValueError, "gg::arange: start, end and step must be finite", arange(kNaN, 1)); }
CASE("arange/infinite step") { THROWS(ValueError, "gg::arange: start, end and step must be finite", arange(0, 1, INFINITY)); }
CASE("arange/zero step") { THROWS(ValueError, "gg::arange: step must be non-zero", arange(0, 1, 0)); }
CASE("arange/sign inconsistent") { THROWS(ValueError, "gg::arange: the step's sign does not lead from start 0 to end 10 (step -1)", arange(0, 10, -1)); }
CASE("arange/too many elements") { THROWS(ValueError, "do not fit in int64", arange(0, 1e300, 1e-300)); }
CASE("arange/range overflowing double") { THROWS(ValueError, "do not fit in int64", arange(-1.5e308, 1.5e308, 1.0)); }
CASE("arange/empty range") { CHECK_SHAPE(arange(3, 3), {0}); }
CASE("arange/negative step") { CHECK_VALUES(arange(3, 0, -1, DType::f64), {3, 2, 1}); }
CASE("arange/fractional step") { CHECK_VALUES(arange(0, 1, 0.25, DType::f64), {0, 0.25, 0.5, 0.75}); }
CASE("arange/i64") { CHECK(arange(-2, 2, 1, DType::i64).to_vector<int64_t>() == std::vector<int64_t>({-2, -1, 0, 1})); }
CASE("factories/from_vector count mismatch") { THROWS(ShapeError, "gg::from_vector: got 2 values for shape [3] (3 elements)", from_vector({1, 2}, {3})); }
CASE("factories/from_indices count mismatch") { THROWS(ShapeError, "gg::from_indices: got 1 values for shape [2]", from_indices({1}, {2})); }
CASE("factories/randn i64") { THROWS(DTypeError, "gg::rand/randn: dtype must be floating, got i64", randn({2}, DType::i64)); }
CASE("factories/rand is in [0, 1)") {
  std::vector<double> r = rand({1000}, DType::f64).to_vector<double>();
  for (double x : r) CHECK(x >= 0 && x < 1);
}
CASE("factories/manual_seed reproduces") { manual_seed(7); Tensor a = randn({4}); manual_seed(7); CHECK_VALUES(randn({4}), a.to_vector<double>()); }
CASE("factories/full with NaN") { CHECK_VALUES(full({2}, kNaN, DType::f64), {kNaN, kNaN}); }
CASE("factories/ones_like of a view") { Tensor y = ones_like(transpose(m23(), 0, 1)); CHECK_SHAPE(y, {3, 2}); CHECK(y.is_contiguous()); }
CASE("factories/item of a 2-element tensor") { THROWS(ValueError, "gg::Tensor::item: tensor of shape [2] has 2 elements, expected 1", v({1, 2}).item()); }
CASE("factories/data with the wrong type") { THROWS(DTypeError, "gg::Tensor::data: tensor has dtype f64, requested f32", v({1}).data<float>()); }

// ---- neural-network ops
CASE("nn/layer_norm without weight and bias") {
  Tensor y = layer_norm(from_vector({1, 3, -1, 1}, {2, 2}, DType::f64), {2}, Tensor(), Tensor(), 0.0);
  CHECK_VALUES(y, {-1, 1, -1, 1});
}
CASE("nn/layer_norm over two dims") {
  Tensor y = layer_norm(from_vector({1, 3, 5, 7}, {1, 2, 2}, DType::f64), {2, 2}, Tensor(), Tensor(), 0.0);
  const double s = std::sqrt(5.0);
  CHECK_NEAR_VALUES(y, 1e-14, {-3 / s, -1 / s, 1 / s, 3 / s});
}
CASE("nn/layer_norm mismatched normalized_shape") { THROWS(ShapeError, "gg::layer_norm: normalized_shape [3] must match the trailing dims of the input shape [2, 2]", layer_norm(ones({2, 2}), {3})); }
CASE("nn/layer_norm empty normalized_shape") { THROWS(ShapeError, "gg::layer_norm: normalized_shape []", layer_norm(ones({2, 2}), {})); }
CASE("nn/layer_norm weight of the wrong shape") { THROWS(ShapeError, "gg::layer_norm: weight has shape [3], expected [2]", layer_norm(ones({2, 2}), {2}, ones({3}))); }
CASE("nn/layer_norm bias of the wrong shape") { THROWS(ShapeError, "gg::layer_norm: bias has shape [1], expected [2]", layer_norm(ones({2, 2}), {2}, Tensor(), ones({1}))); }
CASE("nn/layer_norm of a 0-dim input") { THROWS(ShapeError, "gg::layer_norm:", layer_norm(scalar_tensor(1), {1})); }
CASE("nn/layer_norm undefined") { THROWS(ValueError, "gg::layer_norm: input is an undefined tensor", layer_norm(Tensor(), {1})); }
CASE("nn/cross_entropy target out of range") { THROWS(IndexError, "gg::cross_entropy: target 3 at position 1 is out of range for 3 classes", cross_entropy(zeros({2, 3}), from_indices({0, 3}, {2}))); }
CASE("nn/cross_entropy negative target") { THROWS(IndexError, "gg::cross_entropy: target -1 at position 0", cross_entropy(zeros({2, 3}), from_indices({-1, 0}, {2}))); }
CASE("nn/cross_entropy f32 target") { THROWS(DTypeError, "gg::cross_entropy: target must be i64", cross_entropy(zeros({2, 3}), zeros({2}))); }
CASE("nn/cross_entropy 1-D logits") { THROWS(ShapeError, "gg::cross_entropy: logits must be (N, C), got [3]", cross_entropy(zeros({3}), from_indices({0}, {1}))); }
CASE("nn/cross_entropy target length") { THROWS(ShapeError, "gg::cross_entropy: target must be (N) = (2), got [3]", cross_entropy(zeros({2, 3}), from_indices({0, 0, 0}, {3}))); }
CASE("nn/cross_entropy of uniform logits is log C") { CHECK_NEAR_VALUES(cross_entropy(zeros({2, 4}, DType::f64), from_indices({1, 3}, {2})), 1e-15, {std::log(4.0)}); }
CASE("nn/mse_loss shape mismatch") { THROWS(ShapeError, "gg::mse_loss: input has shape [2] but target has shape [3]", mse_loss(ones({2}), ones({3}))); }
CASE("nn/mse_loss undefined target") { THROWS(ValueError, "gg::mse_loss: target is an undefined tensor", mse_loss(ones({2}), Tensor())); }
CASE("nn/mse_loss value") { CHECK_VALUES(mse_loss(v({1, 2}), v({0, 4})), {2.5}); }
CASE("nn/softmax of i64") { THROWS(DTypeError, "gg::softmax: input must be a floating tensor", softmax(from_indices({1}, {1}), 0)); }
CASE("nn/softmax undefined") { THROWS(ValueError, "gg::softmax: input is an undefined tensor", softmax(Tensor(), 0)); }
CASE("nn/softmax of -inf row entries") { CHECK_VALUES(softmax(v({-INFINITY, 0}), 0), {0, 1}); }
CASE("nn/attention_composite rank mismatch") { THROWS(ShapeError, "gg::attention_composite: q, k, v must have the same number (>= 2) of dims", attention_composite(ones({2, 2}), ones({1, 2, 2}), ones({1, 2, 2}))); }
CASE("nn/attention_composite head dim mismatch") { THROWS(ShapeError, "gg::attention_composite: q and k need the same head dim", attention_composite(ones({2, 3}), ones({2, 2}), ones({2, 2}))); }
CASE("nn/attention_composite length mismatch") { THROWS(ShapeError, "gg::attention_composite: k and v need the same length", attention_composite(ones({2, 2}), ones({3, 2}), ones({2, 2}))); }
CASE("nn/attention_composite undefined") { THROWS(ValueError, "gg::attention_composite: k is an undefined tensor", attention_composite(ones({2, 2}), Tensor(), ones({2, 2}))); }
CASE("nn/fused attention matches composite on a permuted input") {
  manual_seed(3);
  Tensor q = permute(randn({1, 5, 2, 4}, DType::f64), {0, 2, 1, 3}), k = randn({1, 2, 5, 4}, DType::f64), vv = randn({1, 2, 5, 4}, DType::f64);
  CHECK_NEAR_VALUES(attention(q, k, vv), 1e-12, attention_composite(q, k, vv).to_vector<double>());
}

// ---- the autograd API
CASE("autograd/grad of an output that needs no grad") { THROWS(AutogradError, "gg::grad:", grad(sum(v({1})), v({1}).requires_grad_())); }
CASE("autograd/grad with an unused input") {
  Tensor x = v({1}).requires_grad_(), y = v({2}).requires_grad_();
  THROWS(AutogradError, "gg::grad:", grad({sum(x * 2.0)}, {x, y}));
}
CASE("autograd/grad with allow_unused gives undefined") {
  Tensor x = v({1}).requires_grad_(), y = v({2}).requires_grad_();
  TensorList g = grad({sum(x * 2.0)}, {x, y}, {}, std::nullopt, /*create_graph=*/false, /*allow_unused=*/true);
  CHECK_VALUES(g[0], {2});
  CHECK(!g[1].defined());
}
CASE("autograd/second backward without retain_graph") {
  Tensor x = v({1, 2}).requires_grad_();
  Tensor y = sum(x * x);
  grad(y, x);
  THROWS(AutogradError, "trying to differentiate through the graph a second time (node 'mul')", grad(y, x));
}
CASE("autograd/retain_graph allows a second backward") {
  Tensor x = v({1, 2}).requires_grad_();
  Tensor y = sum(x * x);
  grad(y, x, Tensor(), /*retain_graph=*/true);
  CHECK_VALUES(grad(y, x), {2, 4});
}
CASE("autograd/non-scalar output without grad_output") { Tensor x = v({1, 2}).requires_grad_(); THROWS(ValueError, "gg::grad: grad can be implicitly created only for one-element outputs, but output 0 has shape [2]", grad(x * 2.0, x)); }
CASE("autograd/grad_output of the wrong shape") { Tensor x = v({1, 2}).requires_grad_(); THROWS(ShapeError, "gg::grad:", grad(x * 2.0, x, v({1, 2, 3}))); }
CASE("autograd/requires_grad_ on a non-leaf") { Tensor y = v({1}).requires_grad_() * 2.0; THROWS(AutogradError, "gg::Tensor::requires_grad_: only leaf tensors", y.requires_grad_()); }
CASE("autograd/backward accumulates into leaves") {
  Tensor x = v({1, 2}).requires_grad_();
  sum(x * 3.0).backward();
  sum(x * x).backward();
  CHECK_VALUES(x.grad(), {5, 7});
}
CASE("autograd/NoGradGuard records nothing") { Tensor x = v({1}).requires_grad_(); NoGradGuard ng; CHECK(!(x * 2.0).requires_grad()); }
CASE("autograd/detach cuts the tape") { Tensor x = v({1}).requires_grad_(); CHECK(!(x * 2.0).detach().requires_grad()); }
CASE("autograd/grad of grad of x^3") {
  Tensor x = scalar_tensor(2.0, DType::f64).requires_grad_();
  Tensor g = grad(x * x * x, x, Tensor(), std::nullopt, /*create_graph=*/true);
  CHECK_VALUES(grad(g, x), {12});
}
CASE("autograd/hvp shape mismatch") { THROWS(ShapeError, "gg::hvp: v has shape [3] but x has shape [2]", hvp([](const Tensor& x) { return sum(x); }, v({1, 2}), v({1, 2, 3}))); }
CASE("autograd/jvp shape mismatch") { THROWS(ShapeError, "gg::jvp: v has shape [1] but x has shape [2]", jvp([](const Tensor& x) { return x; }, v({1, 2}), v({1}))); }
CASE("autograd/hvp of an affine function is zero") { CHECK_VALUES(hvp([](const Tensor& x) { return sum(x * 2.0); }, v({1, 2}), v({1, 1})), {0, 0}); }
CASE("autograd/jvp of sin") { CHECK_NEAR_VALUES(jvp([](const Tensor& x) { return sin(x); }, v({0, 1}), v({1, 2})), 1e-15, {1, 2 * std::cos(1.0)}); }
CASE("autograd/hessian of x^T x") { CHECK_VALUES(hessian([](const Tensor& x) { return sum(x * x); }, v({1, 2})), {2, 0, 0, 2}); }
CASE("autograd/gradcheck finds a wrong derivative") {
  // x * detach(x): the tape sees derivative x, central differences see 2x.
  GradcheckResult r = gradcheck([](const TensorList& x) { return x[0] * x[0].detach(); }, {v({1.5}).requires_grad_()});
  CHECK(!r.ok);
}
CASE("autograd/gradcheck of a matmul on empty inputs") {
  CHECK(gradcheck([](const TensorList& x) { return matmul(x[0], x[1]); }, {zeros({2, 0}, DType::f64).requires_grad_(), zeros({0, 3}, DType::f64).requires_grad_()}).ok);
}

// ---- where
CASE("where/cond must be b8") { THROWS(DTypeError, "gg::where: cond must be b8, got f64", where(v({1}), v({1}), v({2}))); }
CASE("where/undefined cond") { THROWS(ValueError, "gg::where: cond is an undefined tensor", where(Tensor(), v({1}), v({2}))); }
CASE("where/undefined a") { THROWS(ValueError, "gg::where: a is an undefined tensor", where(mask({1}), Tensor(), v({2}))); }
CASE("where/undefined b") { THROWS(ValueError, "gg::where: b is an undefined tensor", where(mask({1}), v({1}), Tensor())); }
CASE("where/f64 with f32 promotes") { CHECK(where(mask({1}), v({1}), ones({1})).dtype() == DType::f64); }
CASE("where/a number as either value") {
  Tensor y = where(mask({1, 0}), v({5, 6}), 0);
  CHECK(y.dtype() == DType::f64);
  CHECK_VALUES(y, {5, 0});
  CHECK_VALUES(where(mask({1, 0}), 2.5, v({5, 6})), {2.5, 6});
  CHECK(where(mask({1, 0}), 2.5, from_indices({5, 6}, {2})).dtype() == DType::f32);
}
CASE("where/shape mismatch") { THROWS(ShapeError, "gg::where: shapes [2] and [3] cannot be broadcast", where(mask({1, 0}), v({1, 2, 3}), v({1}))); }
CASE("where/b8 values") {
  Tensor y = where(mask({1, 0}), mask({1, 1}), mask({0, 0}));
  CHECK(y.dtype() == DType::b8);
  CHECK_VALUES(y, {1, 0});
}
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
