// Every op of the engine, as free functions in namespace gg. Each op computes its forward on
// the tensor's device and records a backward written in these same ops, so derivatives of any
// order follow. Shapes in comments use PyTorch's conventions.
//
// Rules shared by every op (tests/edge/ checks each):
// - Bad input is a typed exception (core/error.h) whose message starts with "gg::<op>:".
// - Dims: a dim in [-ndim, ndim) wraps as in Python. A 0-dim tensor has no dims: reductions,
//   softmax/log_softmax, squeeze and transpose accept dim 0 or -1 on it and treat it as one
//   element (as PyTorch); size, slice, cat and index_select raise IndexError/ShapeError naming
//   the op (PyTorch accepts index_select on a 0-dim tensor; gg does not).
// - Sizes: element and byte counts are overflow-checked (ShapeError); at most 8 dims.
// - NaN propagates through max, maximum and every arithmetic op.
// - Empty tensors are valid everywhere: sums give 0, means NaN, max over an empty dim is a
//   ValueError (there is no identity to return).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <tuple>
#include <type_traits>
#include <vector>

#include "../core/error.h"
#include "../core/indexing.h"
#include "../core/scalar.h"
#include "../core/tensor.h"

namespace gg {

// ---------------------------------------------------------------- type promotion (ops/promotion.cpp)
// gg::Scalar, a C++ number as an operand, is declared in core/scalar.h.

// PyTorch's type promotion, used by every binary op (arithmetic, pow, minimum/maximum,
// comparisons, where). Categories rank bool < integer < floating.
// - promote_types(a, b): the smallest dtype holding both: b8 < i64 < {f16, bf16} < f32 < f64,
//   with f16 and bf16 together giving f32.
// - result_type: operands are ranked dimensioned tensors > 0-dim tensors > C++ numbers. Within a
//   rank the dtypes promote; a lower rank changes the result only if its category is higher,
//   and then the two promote (a floating number counts as f32, the default dtype). So f32 ·
//   f64-0-dim is f32, f64 · 2.0 is f64, i64 · 2.5 is f32, i64 · f64-0-dim is f64, f16 · f32 is f32.
// The operands are cast to the result type before the op runs (b8 results are computed in i64
// and cast back); gradients flow back through the casts, so each input's gradient has its
// own dtype. tests/fixtures/promotion.csv, written by PyTorch, is the reference.
DType promote_types(DType a, DType b);
DType result_type(const Tensor& a, const Tensor& b);
DType result_type(const Tensor& a, const Scalar& b);
DType result_type(const Scalar& a, const Tensor& b);

// ---------------------------------------------------------------- factories (ops/factory.cpp)
void manual_seed(uint64_t seed);  // the default generator, used by randn/rand
Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
Tensor ones(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
Tensor full(const Shape& shape, double value, DType dtype = DType::f32, Device device = Device::cpu());
// start, end, step finite; step != 0 and pointing from start to end; ValueError otherwise.
Tensor arange(double start, double end, double step = 1.0, DType dtype = DType::f32, Device device = Device::cpu());
Tensor randn(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
Tensor rand(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());  // U[0, 1)
Tensor from_vector(const std::vector<double>& values, const Shape& shape, DType dtype = DType::f32,
                   Device device = Device::cpu());
// An i64 tensor, for indices and class targets.
Tensor from_indices(const std::vector<int64_t>& values, const Shape& shape, Device device = Device::cpu());
Tensor scalar_tensor(double value, DType dtype = DType::f32, Device device = Device::cpu());
// libtorch's torch::tensor: the listed values as a 1-D tensor ({1.0, 2.0}), nested lists as a
// 2-D one ({{1, 2}, {3, 4}}), one number as a 0-dim one. Integers give i64, booleans b8 and
// floating values f32 (libtorch's default dtype) unless `dtype` says otherwise; i64 values are
// stored exactly. The list's values must share one type; ragged rows are a ShapeError.
namespace detail {
template <typename T>
constexpr DType default_dtype() {
  return std::is_same_v<T, bool> ? DType::b8 : std::is_floating_point_v<T> ? DType::f32 : DType::i64;
}
Tensor tensor_from(const std::vector<double>& values, const Shape& shape, DType dtype, Device device);
Tensor tensor_from(const std::vector<int64_t>& values, const Shape& shape, DType dtype, Device device);
// The values of `rows` in row-major order, with their shape (rows, columns).
template <typename T>
std::vector<T> flatten_rows(std::initializer_list<std::initializer_list<T>> rows, Shape& shape) {
  std::vector<T> flat;
  size_t r = 0;
  for (const auto& row : rows) {
    GG_CHECK(row.size() == rows.begin()->size(), ShapeError, "gg::tensor: ragged rows: row ", r, " has ",
             row.size(), " values, row 0 has ", rows.begin()->size());
    flat.insert(flat.end(), row.begin(), row.end());
    ++r;
  }
  shape = {static_cast<int64_t>(rows.size()), static_cast<int64_t>(rows.size() ? rows.begin()->size() : 0)};
  return flat;
}
template <typename T>
Tensor tensor_from(const std::vector<T>& values, const Shape& shape, DType dtype, Device device) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
    return tensor_from(std::vector<int64_t>(values.begin(), values.end()), shape, dtype, device);
  else
    return tensor_from(std::vector<double>(values.begin(), values.end()), shape, dtype, device);
}
}  // namespace detail
// Templates, so that a list of lists never reads as a list of one-element braces.
template <typename T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
Tensor tensor(std::initializer_list<T> values, DType dtype = detail::default_dtype<T>(),
              Device device = Device::cpu()) {
  return detail::tensor_from(std::vector<T>(values), {static_cast<int64_t>(values.size())}, dtype, device);
}
template <typename T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
Tensor tensor(std::initializer_list<std::initializer_list<T>> rows, DType dtype = detail::default_dtype<T>(),
              Device device = Device::cpu()) {
  Shape shape;
  const std::vector<T> flat = detail::flatten_rows(rows, shape);
  return detail::tensor_from(flat, shape, dtype, device);
}
inline Tensor tensor(const std::vector<double>& values, DType dtype = DType::f32, Device device = Device::cpu()) {
  return detail::tensor_from(values, {static_cast<int64_t>(values.size())}, dtype, device);
}
inline Tensor tensor(const std::vector<int64_t>& values, DType dtype = DType::i64, Device device = Device::cpu()) {
  return detail::tensor_from(values, {static_cast<int64_t>(values.size())}, dtype, device);
}
inline Tensor tensor(double value, DType dtype = DType::f32, Device device = Device::cpu()) {
  return detail::tensor_from(std::vector<double>{value}, {}, dtype, device);
}
inline Tensor tensor(int value, DType dtype = DType::i64, Device device = Device::cpu()) {
  return detail::tensor_from(std::vector<int64_t>{value}, {}, dtype, device);
}
inline Tensor tensor(int64_t value, DType dtype = DType::i64, Device device = Device::cpu()) {
  return detail::tensor_from(std::vector<int64_t>{value}, {}, dtype, device);
}
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor randn_like(const Tensor& t);

// ------------------------------------------------------- copies and casts (ops/shape.cpp)
Tensor clone(const Tensor& x);        // a copy with its own storage (differentiable)
Tensor contiguous(const Tensor& x);   // x itself when already contiguous
Tensor to(const Tensor& x, DType dtype);  // cast (differentiable between floating types)
Tensor to(const Tensor& x, Device device);

// ------------------------------------------------------- elementwise (ops/elementwise.cpp)
// Binary ops broadcast and promote their operands (result_type above); a C++ number may stand
// for either operand. b8 operands: add is logical or, mul logical and (as PyTorch); sub refuses
// any b8 operand, div and pow a b8 result (PyTorch does the same), each with a DTypeError.
Tensor add(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, const Scalar& b);
Tensor add(const Scalar& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Scalar& b);
Tensor sub(const Scalar& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Scalar& b);
Tensor mul(const Scalar& a, const Tensor& b);
// i64 division truncates toward zero (-7 / 2 = -3, C++'s rule; PyTorch's torch.div would give
// a float and `//` floors). A zero divisor is a ValueError naming gg::div (PyTorch raises
// ZeroDivisionError on the CPU), and INT64_MIN / -1 wraps to INT64_MIN, on every backend.
// i64 +, - and * wrap around in two's complement (INT64_MAX + 1 = INT64_MIN), as in PyTorch.
Tensor div(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Scalar& b);
Tensor div(const Scalar& a, const Tensor& b);
// Elementwise maximum and minimum; NaN wins. Ties (a == b) share the gradient equally: 1/2 to
// each (as PyTorch). gg::max(a, b) and gg::min(a, b) are the same ops.
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Scalar& b);
Tensor maximum(const Scalar& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Scalar& b);
Tensor minimum(const Scalar& a, const Tensor& b);
Tensor max(const Tensor& a, const Tensor& b);
Tensor min(const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);  // cond: b8
Tensor where(const Tensor& cond, const Tensor& a, const Scalar& b);
Tensor where(const Tensor& cond, const Scalar& a, const Tensor& b);
Tensor neg(const Tensor& x);
// x^p. A floating result runs x^p elementwise (exactly x·x for p = 2); an i64 result (i64 base,
// integer exponent) multiplies exactly, and a negative integer exponent there is a ValueError
// (as PyTorch). The gradient to the exponent is 0 where x = 0 and p >= 0, and to x is 0 where
// p = 0 (PyTorch's choices).
Tensor pow(const Tensor& x, const Scalar& p);
Tensor pow(const Tensor& x, const Tensor& p);
Tensor pow(const Scalar& x, const Tensor& p);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor gelu(const Tensor& x);  // exact: x·Φ(x)
Tensor erf(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor sign(const Tensor& x);  // no gradient (zero almost everywhere)
Tensor log1p(const Tensor& x);  // log(1 + x), accurate for small x
Tensor expm1(const Tensor& x);  // exp(x) - 1, accurate for small x
// Rounding to an integer value, with a zero gradient (as PyTorch). round goes half to even
// (0.5 -> 0, 1.5 -> 2, -0.5 -> -0). An i64 input comes back as a copy.
Tensor floor(const Tensor& x);
Tensor ceil(const Tensor& x);
Tensor round(const Tensor& x);
// min(max(x, lo), hi), either bound optional (neither: ValueError); the dtype is x's promoted
// with the bounds. NaN in x or in a bound gives NaN, and lo > hi gives hi everywhere. The
// gradient passes where lo < x < hi and is 0 at the bounds themselves and at NaN (PyTorch's
// choice for number bounds).
Tensor clamp(const Tensor& x, const std::optional<Scalar>& lo, const std::optional<Scalar>& hi = std::nullopt);
Tensor clamp_min(const Tensor& x, const Scalar& lo);
Tensor clamp_max(const Tensor& x, const Scalar& hi);
// x with `value` where mask (b8, broadcasting with x) is true, in x's dtype. A tensor value must
// be 0-dim; the gradient reaches it from every filled element.
Tensor masked_fill(const Tensor& x, const Tensor& mask, const Scalar& value);
Tensor masked_fill(const Tensor& x, const Tensor& mask, const Tensor& value);
// x + s and x·s for a floating x, its dtype kept (the unary kernels behind x + 2.0).
Tensor add_scalar(const Tensor& x, double s);
Tensor mul_scalar(const Tensor& x, double s);
// Comparisons return b8 tensors and carry no gradient; the operands promote first.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, const Scalar& b);
Tensor ne(const Tensor& a, const Scalar& b);
Tensor lt(const Tensor& a, const Scalar& b);
Tensor le(const Tensor& a, const Scalar& b);
Tensor gt(const Tensor& a, const Scalar& b);
Tensor ge(const Tensor& a, const Scalar& b);
Tensor eq(const Scalar& a, const Tensor& b);
Tensor ne(const Scalar& a, const Tensor& b);
Tensor lt(const Scalar& a, const Tensor& b);
Tensor le(const Scalar& a, const Tensor& b);
Tensor gt(const Scalar& a, const Tensor& b);
Tensor ge(const Scalar& a, const Tensor& b);
// The same as operators, with a tensor or a C++ number on either side (x > 1.0, 0.5 <= x,
// a == b), as in libtorch; each is the function above, so the operands promote as PyTorch's do
// (an i64 tensor meets 1.5 in floating point: x > 1.5 is not x > 1).
Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator==(const Tensor& a, const Scalar& b);
Tensor operator!=(const Tensor& a, const Scalar& b);
Tensor operator<(const Tensor& a, const Scalar& b);
Tensor operator<=(const Tensor& a, const Scalar& b);
Tensor operator>(const Tensor& a, const Scalar& b);
Tensor operator>=(const Tensor& a, const Scalar& b);
Tensor operator==(const Scalar& a, const Tensor& b);
Tensor operator!=(const Scalar& a, const Tensor& b);
Tensor operator<(const Scalar& a, const Tensor& b);
Tensor operator<=(const Scalar& a, const Tensor& b);
Tensor operator>(const Scalar& a, const Tensor& b);
Tensor operator>=(const Scalar& a, const Tensor& b);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& x);
Tensor operator+(const Tensor& a, const Scalar& s);
Tensor operator+(const Scalar& s, const Tensor& a);
Tensor operator-(const Tensor& a, const Scalar& s);
Tensor operator-(const Scalar& s, const Tensor& a);
Tensor operator*(const Tensor& a, const Scalar& s);
Tensor operator*(const Scalar& s, const Tensor& a);
Tensor operator/(const Tensor& a, const Scalar& s);
Tensor operator/(const Scalar& s, const Tensor& a);

// ------------------------------------------------------- reductions (ops/reduce.cpp)
Tensor sum(const Tensor& x);  // all elements, shape []
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
// Maximum values, NaN propagating (like PyTorch's amax). The backward divides the gradient
// equally among the tied maxima of each reduced group (k ties get 1/k each), like amax and unlike
// torch.max(dim), which gives it all to one index.
Tensor max(const Tensor& x);
Tensor max(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor amax(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);  // = max(x, dims)
// Minimum values, the mirror of max/amax (NaN propagating, ties sharing the gradient).
Tensor min(const Tensor& x);
Tensor min(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor amin(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
// torch.max(x, dim): the largest values along one dim and their i64 indices, the first index
// among ties and the first NaN's where a group holds one. The gradient goes to the chosen
// element alone (amax shares it among ties). Floating x; an empty dim is a ValueError. A 0-dim
// x is its own maximum, at index 0.
std::tuple<Tensor, Tensor> max_dim(const Tensor& x, int64_t dim, bool keepdim = false);
std::tuple<Tensor, Tensor> min_dim(const Tensor& x, int64_t dim, bool keepdim = false);
// libtorch's spelling: gg::max(x, 1) and gg::min(x, 1) are max_dim and min_dim. An integer
// selects them; a braced list of dims, gg::max(x, {1}), still selects the amax form.
template <typename Dim, std::enable_if_t<std::is_integral_v<Dim> && !std::is_same_v<Dim, bool>, int> = 0>
std::tuple<Tensor, Tensor> max(const Tensor& x, Dim dim, bool keepdim = false) {
  return max_dim(x, static_cast<int64_t>(dim), keepdim);
}
template <typename Dim, std::enable_if_t<std::is_integral_v<Dim> && !std::is_same_v<Dim, bool>, int> = 0>
std::tuple<Tensor, Tensor> min(const Tensor& x, Dim dim, bool keepdim = false) {
  return min_dim(x, static_cast<int64_t>(dim), keepdim);
}
// The indices alone (i64, no gradient); without a dim, into the flattened x.
Tensor argmax(const Tensor& x);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& x);
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false);
// log Σ exp(x) over dims (empty: all), shifted by the max so that large x do not overflow; a
// group of -inf gives -inf, one holding +inf gives +inf, an empty group -inf.
Tensor logsumexp(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
// Variance and standard deviation over dims (empty: all): Σ (x - mean)² / (N - correction).
// correction 1 is the unbiased estimate (a bool `unbiased` converts to it); N - correction <= 0
// gives inf or NaN (as PyTorch). std's gradient is 0 where std is 0 (PyTorch's choice).
Tensor var(const Tensor& x, const std::vector<int64_t>& dims = {}, double correction = 1, bool keepdim = false);
Tensor std(const Tensor& x, const std::vector<int64_t>& dims = {}, double correction = 1, bool keepdim = false);
// Vector p-norm over dims (empty: all), p in {1, 2, inf} (ValueError otherwise); the
// Frobenius norm is the 2-norm over a matrix's two dims. Gradients at 0 are PyTorch's
// subgradients: 0 for p = 1 and 2; for inf, ties share the gradient and x = 0 gets 0.
Tensor norm(const Tensor& x, double p = 2, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor frobenius_norm(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
// |a - b| <= atol + rtol·|b| everywhere (broadcasting); equal values, infinities included, are
// close, NaN only to NaN with equal_nan. a and b must share a dtype (DTypeError, as PyTorch).
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false);
// Same shape and the same values (NaN equals nothing), across dtypes.
bool equal(const Tensor& a, const Tensor& b);
// Sums `x` down to `shape` (the reverse of broadcasting); x itself when the shapes match.
Tensor sum_to(const Tensor& x, const Shape& shape);

// ------------------------------------------------------- shapes and views (ops/shape.cpp)
Tensor reshape(const Tensor& x, const Shape& shape);  // one -1 allowed; a view when possible
Tensor flatten(const Tensor& x);
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1);  // view
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);  // view
Tensor expand(const Tensor& x, const Shape& shape);  // view, -1 keeps a size
Tensor squeeze(const Tensor& x, int64_t dim);
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);  // view
Tensor cat(const TensorList& xs, int64_t dim);
Tensor stack(const TensorList& xs, int64_t dim);
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);  // index: 1-D i64
Tensor embedding(const Tensor& weight, const Tensor& indices);  // weight (V, D), indices any i64 shape

// ------------------------------------------------------- indexing (ops/index.cpp)
// libtorch's torch::indexing (core/indexing.h). Integers, Slices, None and Ellipsis give views;
// one tensor index per list, a b8 mask (over as many dims as it has) or i64 indices (of any
// shape; negative ones count from the end), gathers a copy. Differentiable to any order.
// Out-of-range indices and masks of the wrong shape are IndexErrors naming the op.
Tensor select(const Tensor& x, int64_t dim, int64_t index);  // view without dim
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);  // view
Tensor index(const Tensor& x, const std::vector<indexing::TensorIndex>& indices);
// x.index(indices) = value, in place (the rules of the in-place ops below): the value broadcasts
// to the indexed view; with a mask, to the view the indices before the mask select (only full
// slices may follow a mask). i64 index tensors are refused (ValueError).
Tensor& index_put_(Tensor& self, const std::vector<indexing::TensorIndex>& indices, const Tensor& value);
Tensor& index_put_(Tensor& self, const std::vector<indexing::TensorIndex>& indices, double value);

// ------------------------------------------------------- picking by index (ops/gather.cpp)
// out[i][j][k] = x[i][index[i][j][k]][k] for dim 1 (torch.gather): index is i64 with x's number
// of dims, no larger than x along the other dims; out has index's shape. Indices out of range
// are an IndexError naming the value.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// self with src[i][j][k] added at [i][index[i][j][k]][k] for dim 1 (torch.scatter_add):
// repeated indices add up. index no larger than src along any dim, nor than self off dim.
Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
// i64 one-hot rows of shape index.shape + [num_classes]; num_classes -1: max index + 1.
Tensor one_hot(const Tensor& index, int64_t num_classes = -1);
// The upper (triu: j - i >= diagonal) or lower (tril: j - i <= diagonal) triangle of the last
// two dims, zeros elsewhere; x needs at least 2 dims.
Tensor triu(const Tensor& x, int64_t diagonal = 0);
Tensor tril(const Tensor& x, int64_t diagonal = 0);

// ------------------------------------------------------- linear algebra (ops/linalg.cpp)
// (.., M, K) x (.., K, N) -> (.., M, N); batch dims broadcast; 1-D operands as in numpy:
// (K) x (K) is the dot product with a 0-dim result, (K) x (.., K, N) -> (.., N) and
// (.., M, K) x (K) -> (.., M). 0-dim operands are a ShapeError.
Tensor matmul(const Tensor& a, const Tensor& b);
// libtorch's mm: a (M, K) x b (K, N) -> (M, N); anything but two 2-D tensors is a ShapeError.
Tensor mm(const Tensor& a, const Tensor& b);

// ------------------------------------------------------- neural-network ops (ops/nn.cpp)
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
// logits (N, C), target (N) i64 class indices; mean over N.
Tensor cross_entropy(const Tensor& logits, const Tensor& target);
Tensor mse_loss(const Tensor& input, const Tensor& target);  // mean squared error
// Normalises over the trailing dims of `normalized_shape`; weight/bias may be undefined.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);

// Options of gg::attention, gg::attention_composite and the attention primitives.
//
// Masks. With Nq queries and Nk keys, query i sits at the aligned position i' = i + Nk - Nq
// (bottom-right alignment, as in FlashAttention: the last query lines up with the last key) and
// sees the keys j with  i' - window_left <= j <= i' + window_right.  An unset window is
// unbounded on that side. `causal` is window_right = 0, i.e. j <= i + Nk - Nq; at Nq = Nk it is
// the usual lower triangle. This differs from PyTorch's is_causal, which aligns the top left
// (j <= i) whenever Nq != Nk: for Nq < Nk, PyTorch's first query sees key 0 only, here it sees
// the first Nk - Nq + 1 keys (the natural mask for queries that continue a cached prefix).
// causal = true with window_right > 0 is a ValueError; with window_right = 0 it is redundant
// and allowed. Windows must be >= 0 (a ValueError otherwise).
//
// Rows that see no key (possible with causal or window_right when Nq > Nk, e.g. the first
// Nq - Nk queries under causal) give O = 0, L = -inf and zero gradients at every order, in the
// fused op and the composite alike (O = 0 and L = -inf whatever the data; the gradients when the
// data are finite).
//
// Non-finite data: NaN and ±inf propagate as through softmax(S)·V written out. A row whose
// visible scores hold a NaN or a +inf, or are all -inf, gets O and L NaN; a NaN or inf in a
// value reaches its column of O in every row that sees it; every derivative follows. The fused
// op's NaN entries are the composite's at every order; with ±inf an entry may be inf in one and
// NaN in the other, the derivatives' sums being grouped differently. A key a row does not see
// never enters its scores; its value, and NaN in gradients of pairs the mask hides, may still
// reach the row through 0·NaN products (the composite's dense ones, the fused op's tiles).
struct AttentionOptions {
  std::optional<double> scale;          // default 1/sqrt(d)
  bool causal = false;                  // window_right = 0: query i sees keys j <= i + Nk - Nq
  std::optional<int64_t> window_left = std::nullopt;   // keys before i' a query sees; unset: all
  std::optional<int64_t> window_right = std::nullopt;  // keys after i' a query sees; unset: all
};
// softmax(scale·Q·Kᵀ + mask)·V, built from the ops above (stores Nq×Nk scores): the ground truth.
// q (.., Nq, d), k (.., Nk, d), v (.., Nk, dv) with the same leading dims, or 4-D with grouped
// heads as for gg::attention (k and v are then expanded to Hq heads). Same options and masks.
Tensor attention_composite(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options = {});

// ------------------------------------------------------- fused attention (ops/attention.cpp)
// softmax(scale·Q·Kᵀ + mask)·V without any Nq×Nk buffer in the forward, the backward or the
// backward-over-backward. Differentiable to any order: orders 1 and 2 run fused kernels, order
// 3 and up fall back to differentiating attention_composite.
//   q: (B, Hq, Nq, d);  k, v: (B, Hkv, Nk, d);  result (B, Hq, Nq, d).
// Grouped-query / multi-query attention: Hq must be a multiple of Hkv, and query head h uses
// key/value head h / (Hq / Hkv) (PyTorch's enable_gqa, FlashAttention). The gradients of k and
// v sum over their group of query heads inside the kernels. Masks: see AttentionOptions.
// Bad shapes, dtypes or options raise ShapeError / DTypeError / ValueError naming the op. On
// CUDA, bf16/f16 with d in {32, 64, 128} run the tensor-core kernels with every option (sm_90a
// kernels on Hopper for d 64 and 128, sm_80 kernels otherwise); other dtypes and head dims run
// the generic CUDA kernels, exact but not tensor-core fast (kernels/cuda/attention/traits.cuh).
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options = {});

// The three recorded primitives behind gg::attention, public for tests and for users who
// want the pieces. attention_forward returns O and the row log-sum-exp L = log Σ_j exp(S_ij)
// (B, Hq, Nq), f32 for bf16/f16 inputs, -inf for a row that sees no key; both are
// differentiable outputs (L's gradient reaches q and k; blocks of keys computed apart merge by
// it: O = Σ_b exp(L_b - L) O_b, L = log Σ_b exp(L_b)). The backward and BoB take O and L as
// saved values (no gradient flows into them there) and the cotangent dL of L (undefined: none).
// Absent (undefined) cotangents qt/kt/vt drop their terms. dO, qt are q-shaped; kt, vt are
// k-shaped; dL and gdL are L-shaped.
struct AttentionForward {
  Tensor O;  // (B, Hq, Nq, d)
  Tensor L;  // (B, Hq, Nq)
};
AttentionForward attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options = {});
TensorList attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& O, const Tensor& L,
                              const Tensor& dO, const AttentionOptions& options = {},
                              const Tensor& dL = {});  // {dQ, dK, dV}
TensorList attention_backward_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& O,
                                       const Tensor& L, const Tensor& dO, const Tensor& qt, const Tensor& kt,
                                       const Tensor& vt, const AttentionOptions& options = {},
                                       const Tensor& dL = {});  // {gQ, gK, gV, gdO, gdL}
// Write-into forms of the three primitives, for callers that own the memory (another
// framework's allocator): the same checks and kernels, the results written into the given
// tensors, which must be contiguous with exactly the shape, dtype and device the allocating form
// returns (O, dQ, gQ, gdO: q's; dK, dV, gK, gV: k's shape in q's dtype; L, gdL: (B, Hq, Nq) in
// L's dtype; gdL may be undefined: not computed); anything else is a ShapeError, DTypeError,
// DeviceError or ValueError naming the op and the argument. Outputs must not overlap inputs.
// Not recorded on the tape, whatever the grad mode: the caller differentiates them itself.
void attention_forward_out(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& O, const Tensor& L,
                           const AttentionOptions& options = {});
void attention_backward_out(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& O, const Tensor& L,
                            const Tensor& dO, const Tensor& dQ, const Tensor& dK, const Tensor& dV,
                            const AttentionOptions& options = {}, const Tensor& dL = {});
void attention_backward_backward_out(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& O,
                                     const Tensor& L, const Tensor& dO, const Tensor& qt, const Tensor& kt,
                                     const Tensor& vt, const Tensor& gQ, const Tensor& gK, const Tensor& gV,
                                     const Tensor& gdO, const Tensor& gdL, const AttentionOptions& options = {},
                                     const Tensor& dL = {});
// The BoB in two stages, for keys that arrive in blocks (dist::attention's ring): given the whole
// rows' O and L (merged over the blocks), attention_bob_row_sums returns this block's part of the
// BoB's row scalars {E, F} (L-shaped; the parts add up over the blocks), and
// attention_bob_from_row_sums, given the whole rows' E and F, this block's parts of {gQ, gK, gV,
// gdO} (gQ and gdO add up over the blocks). Not recorded: the caller differentiates no further.
TensorList attention_bob_row_sums(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& O, const Tensor& L,
                                  const Tensor& dO, const Tensor& qt, const Tensor& kt, const Tensor& vt,
                                  const AttentionOptions& options = {});
TensorList attention_bob_from_row_sums(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& O,
                                       const Tensor& L, const Tensor& dO, const Tensor& qt, const Tensor& kt,
                                       const Tensor& vt, const Tensor& E, const Tensor& F,
                                       const AttentionOptions& options = {});
// Forward mode of attention_forward: the tangents {Ȯ, L̇} of O and L along tangents qt, kt, vt of
// q, k, v (shaped like them; undefined: zero): Ṡ = scale·(q̇Kᵀ + qK̇ᵀ) under the mask, Ṗ = P ∘ (Ṡ − rowsum(P ∘ Ṡ)),
// Ȯ = ṖV + PV̇, L̇ = rowsum(P ∘ Ṡ), with the options of gg::attention: the JVP rule gg::attention
// runs under gg::fwd (autograd/forward_ad.h). Where the tangents need no derivatives (nothing
// recorded, no outer dual level), f32/f64 on the CPU run the fused kernel (no Nq×Nk buffer);
// elsewhere differentiable ops (Nq×Nk buffers, exact).
AttentionForward attention_forward_jvp(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& qt,
                                       const Tensor& kt, const Tensor& vt, const AttentionOptions& options = {});
// Its write-into form (the rules of the write-into forms above): Ȯ into Ot (q's shape and dtype),
// L̇ into Lt ((B, Hq, Nq) in L's dtype). On the CPU the fused kernel writes them (f32 and f64;
// other dtypes are a DTypeError); on CUDA the composite formula is computed and copied in. Not
// recorded, and tangents of open dual levels on the arguments are ignored.
void attention_forward_jvp_out(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& qt,
                               const Tensor& kt, const Tensor& vt, const Tensor& Ot, const Tensor& Lt,
                               const AttentionOptions& options = {});
// attention_composite's O and L (the same L as attention_forward's, in q's dtype): the ground
// truth for L and its derivatives.
AttentionForward attention_composite_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const AttentionOptions& options = {});

// How the fused attention's backward and backward-over-backward add up dQ (grad_Q, grad_dO) on
// the GPU, where key blocks each contribute a part: deterministic (the default; a fixed order,
// every run bitwise equal) or faster (atomic additions in any order, last bits varying from run
// to run, as in PyTorch's flash and cuDNN backwards). The environment variable
// GG_ATTENTION_DETERMINISTIC=0 sets the initial value to false (read once, at start-up). On a
// build without CUDA the flag is only recorded: the CPU kernels are always deterministic.
void set_attention_deterministic(bool deterministic);
bool attention_deterministic();

// ------------------------------------------------------- in place (ops/inplace.cpp)
// Modify storage and bump its version. Refused on tensors that require grad while grad mode
// is on (use NoGradGuard for optimizer updates). A destination whose elements share memory (a
// broadcast view from expand) is a ValueError, and so is a copy_ source that partially
// overlaps the destination (e.g. its own transpose), as in PyTorch (ops/inplace.cpp). add_,
// sub_, mul_ and div_ compute in the promoted type (result_type above) and cast back, which must
// not leave the destination's category (an f32 destination takes an f64 result, an i64 one no
// float, so an i64 x += 1 works and x += 1.5 is a DTypeError, as in PyTorch); the other operand
// must broadcast to the destination's shape (ShapeError otherwise).
Tensor& add_(Tensor& self, const Tensor& other, double alpha = 1.0);  // self += alpha·other
Tensor& add_(Tensor& self, const Scalar& s);
Tensor& sub_(Tensor& self, const Tensor& other, double alpha = 1.0);  // self -= alpha·other
Tensor& sub_(Tensor& self, const Scalar& s);
Tensor& mul_(Tensor& self, const Tensor& other);
Tensor& mul_(Tensor& self, const Scalar& s);
Tensor& div_(Tensor& self, const Tensor& other);
Tensor& div_(Tensor& self, const Scalar& s);
Tensor& fill_(Tensor& self, double value);
Tensor& zero_(Tensor& self);
Tensor& copy_(Tensor& self, const Tensor& src);
// The same on a temporary handle, e.g. zero_(x.grad()): the data change, the handle is returned.
inline Tensor add_(Tensor&& self, const Tensor& other, double alpha = 1.0) { return add_(self, other, alpha); }
inline Tensor add_(Tensor&& self, const Scalar& s) { return add_(self, s); }
inline Tensor sub_(Tensor&& self, const Tensor& other, double alpha = 1.0) { return sub_(self, other, alpha); }
inline Tensor sub_(Tensor&& self, const Scalar& s) { return sub_(self, s); }
inline Tensor mul_(Tensor&& self, const Tensor& other) { return mul_(self, other); }
inline Tensor mul_(Tensor&& self, const Scalar& s) { return mul_(self, s); }
inline Tensor div_(Tensor&& self, const Tensor& other) { return div_(self, other); }
inline Tensor div_(Tensor&& self, const Scalar& s) { return div_(self, s); }
inline Tensor fill_(Tensor&& self, double value) { return fill_(self, value); }
inline Tensor zero_(Tensor&& self) { return zero_(self); }
inline Tensor copy_(Tensor&& self, const Tensor& src) { return copy_(self, src); }

}  // namespace gg
