// Tensor's libtorch-style members (declared in core/tensor.h). The layering rule: core/ never
// includes ops/, so the members are defined here, each one line forwarding to the free function
// of ops/ops.h, which is the reference for what it computes, checks and records.
#include <limits>
#include <numeric>

#include "core/indexing.h"
#include "ops/common.h"

namespace gg {

Tensor& Tensor::operator=(const Tensor& src) && {
  copy_(src);
  return *this;
}
Tensor& Tensor::operator=(double value) && {
  fill_(value);
  return *this;
}

Tensor Tensor::sum() const { return gg::sum(*this); }
Tensor Tensor::sum(const std::vector<int64_t>& dims, bool keepdim) const { return gg::sum(*this, dims, keepdim); }
Tensor Tensor::mean() const { return gg::mean(*this); }
Tensor Tensor::mean(const std::vector<int64_t>& dims, bool keepdim) const { return gg::mean(*this, dims, keepdim); }
Tensor Tensor::max() const { return gg::max(*this); }
Tensor Tensor::min() const { return gg::min(*this); }
Tensor Tensor::max(const Tensor& other) const { return gg::maximum(*this, other); }
Tensor Tensor::min(const Tensor& other) const { return gg::minimum(*this, other); }
std::tuple<Tensor, Tensor> Tensor::max_dim(int64_t dim, bool keepdim) const { return gg::max_dim(*this, dim, keepdim); }
std::tuple<Tensor, Tensor> Tensor::min_dim(int64_t dim, bool keepdim) const { return gg::min_dim(*this, dim, keepdim); }
Tensor Tensor::amax(const std::vector<int64_t>& dims, bool keepdim) const { return gg::amax(*this, dims, keepdim); }
Tensor Tensor::amin(const std::vector<int64_t>& dims, bool keepdim) const { return gg::amin(*this, dims, keepdim); }
Tensor Tensor::argmax(std::optional<int64_t> dim, bool keepdim) const {
  return dim ? gg::argmax(*this, *dim, keepdim) : gg::argmax(*this);
}
Tensor Tensor::argmin(std::optional<int64_t> dim, bool keepdim) const {
  return dim ? gg::argmin(*this, *dim, keepdim) : gg::argmin(*this);
}
Tensor Tensor::logsumexp(const std::vector<int64_t>& dims, bool keepdim) const {
  return gg::logsumexp(*this, dims, keepdim);
}
Tensor Tensor::var(const std::vector<int64_t>& dims, double correction, bool keepdim) const {
  return gg::var(*this, dims, correction, keepdim);
}
Tensor Tensor::std(const std::vector<int64_t>& dims, double correction, bool keepdim) const {
  return gg::std(*this, dims, correction, keepdim);
}
Tensor Tensor::norm(double p, const std::vector<int64_t>& dims, bool keepdim) const {
  return gg::norm(*this, p, dims, keepdim);
}
bool Tensor::allclose(const Tensor& other, double rtol, double atol, bool equal_nan) const {
  return gg::allclose(*this, other, rtol, atol, equal_nan);
}
bool Tensor::equal(const Tensor& other) const { return gg::equal(*this, other); }

Tensor Tensor::reshape(const Shape& shape) const { return gg::reshape(*this, shape); }
Tensor Tensor::view(const Shape& shape) const {
  GG_CHECK(is_contiguous(), ShapeError, "gg::view: a tensor of shape ", shape_str(this->shape()), " with strides ",
           shape_str(strides()), " is not contiguous, so it cannot be viewed as ", shape_str(shape),
           " without a copy; use reshape");
  return gg::reshape(*this, shape);
}
Tensor Tensor::reshape_as(const Tensor& other) const { return gg::reshape(*this, other.shape()); }
Tensor Tensor::t() const {
  GG_CHECK(dim() <= 2, ShapeError, "gg::t: expects a tensor with at most 2 dims, got shape ", shape_str(shape()),
           "; use transpose(dim0, dim1)");
  return dim() < 2 ? *this : gg::transpose(*this, 0, 1);
}
Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const { return gg::transpose(*this, dim0, dim1); }
Tensor Tensor::permute(const std::vector<int64_t>& dims) const { return gg::permute(*this, dims); }
Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return gg::reshape(*this, {1});
  const int64_t s = wrap_dim(start_dim, dim(), "flatten"), e = wrap_dim(end_dim, dim(), "flatten");
  GG_CHECK(s <= e, ValueError, "gg::flatten: start_dim ", start_dim, " comes after end_dim ", end_dim,
           " for shape ", shape_str(shape()));
  Shape out(shape().begin(), shape().begin() + s);
  out.push_back(std::accumulate(shape().begin() + s, shape().begin() + e + 1, int64_t{1}, std::multiplies<>()));
  out.insert(out.end(), shape().begin() + e + 1, shape().end());
  return gg::reshape(*this, out);
}
Tensor Tensor::squeeze() const {
  Tensor y = *this;
  for (int64_t d = dim(); d-- > 0;)
    if (shape()[static_cast<size_t>(d)] == 1) y = gg::squeeze(y, d);
  return y;
}
Tensor Tensor::squeeze(int64_t dim) const { return gg::squeeze(*this, dim); }
Tensor Tensor::unsqueeze(int64_t dim) const { return gg::unsqueeze(*this, dim); }
Tensor Tensor::expand(const Shape& shape) const { return gg::expand(*this, shape); }
Tensor Tensor::expand_as(const Tensor& other) const { return gg::expand(*this, other.shape()); }
Tensor Tensor::clone() const { return gg::clone(*this); }
Tensor Tensor::contiguous() const { return gg::contiguous(*this); }

Tensor Tensor::exp() const { return gg::exp(*this); }
Tensor Tensor::log() const { return gg::log(*this); }
Tensor Tensor::sqrt() const { return gg::sqrt(*this); }
Tensor Tensor::abs() const { return gg::abs(*this); }
Tensor Tensor::neg() const { return gg::neg(*this); }
Tensor Tensor::tanh() const { return gg::tanh(*this); }
Tensor Tensor::sigmoid() const { return gg::sigmoid(*this); }
Tensor Tensor::relu() const { return gg::relu(*this); }
Tensor Tensor::sin() const { return gg::sin(*this); }
Tensor Tensor::cos() const { return gg::cos(*this); }
Tensor Tensor::sign() const { return gg::sign(*this); }
Tensor Tensor::log1p() const { return gg::log1p(*this); }
Tensor Tensor::expm1() const { return gg::expm1(*this); }
Tensor Tensor::floor() const { return gg::floor(*this); }
Tensor Tensor::ceil() const { return gg::ceil(*this); }
Tensor Tensor::round() const { return gg::round(*this); }
Tensor Tensor::pow(const Scalar& exponent) const { return gg::pow(*this, exponent); }
Tensor Tensor::pow(const Tensor& exponent) const { return gg::pow(*this, exponent); }
Tensor Tensor::clamp(const std::optional<Scalar>& lo, const std::optional<Scalar>& hi) const {
  return gg::clamp(*this, lo, hi);
}
Tensor Tensor::clamp_min(const Scalar& lo) const { return gg::clamp_min(*this, lo); }
Tensor Tensor::clamp_max(const Scalar& hi) const { return gg::clamp_max(*this, hi); }
Tensor Tensor::maximum(const Tensor& other) const { return gg::maximum(*this, other); }
Tensor Tensor::minimum(const Tensor& other) const { return gg::minimum(*this, other); }
Tensor Tensor::softmax(int64_t dim) const { return gg::softmax(*this, dim); }
Tensor Tensor::log_softmax(int64_t dim) const { return gg::log_softmax(*this, dim); }
Tensor Tensor::matmul(const Tensor& other) const { return gg::matmul(*this, other); }
Tensor Tensor::mm(const Tensor& other) const { return gg::mm(*this, other); }
Tensor Tensor::add(const Tensor& other, double alpha) const { return *this + (alpha == 1.0 ? other : other * alpha); }
Tensor Tensor::add(const Scalar& other) const { return *this + other; }
Tensor Tensor::sub(const Tensor& other, double alpha) const { return *this - (alpha == 1.0 ? other : other * alpha); }
Tensor Tensor::sub(const Scalar& other) const { return *this - other; }
Tensor Tensor::mul(const Tensor& other) const { return *this * other; }
Tensor Tensor::mul(const Scalar& other) const { return *this * other; }
Tensor Tensor::div(const Tensor& other) const { return *this / other; }
Tensor Tensor::div(const Scalar& other) const { return *this / other; }
Tensor Tensor::eq(const Tensor& other) const { return gg::eq(*this, other); }
Tensor Tensor::eq(const Scalar& other) const { return gg::eq(*this, other); }
Tensor Tensor::ne(const Tensor& other) const { return gg::ne(*this, other); }
Tensor Tensor::ne(const Scalar& other) const { return gg::ne(*this, other); }
Tensor Tensor::lt(const Tensor& other) const { return gg::lt(*this, other); }
Tensor Tensor::lt(const Scalar& other) const { return gg::lt(*this, other); }
Tensor Tensor::le(const Tensor& other) const { return gg::le(*this, other); }
Tensor Tensor::le(const Scalar& other) const { return gg::le(*this, other); }
Tensor Tensor::gt(const Tensor& other) const { return gg::gt(*this, other); }
Tensor Tensor::gt(const Scalar& other) const { return gg::gt(*this, other); }
Tensor Tensor::ge(const Tensor& other) const { return gg::ge(*this, other); }
Tensor Tensor::ge(const Scalar& other) const { return gg::ge(*this, other); }
Tensor Tensor::masked_fill(const Tensor& mask, const Scalar& value) const { return gg::masked_fill(*this, mask, value); }
Tensor Tensor::masked_fill(const Tensor& mask, const Tensor& value) const { return gg::masked_fill(*this, mask, value); }
Tensor Tensor::triu(int64_t diagonal) const { return gg::triu(*this, diagonal); }
Tensor Tensor::tril(int64_t diagonal) const { return gg::tril(*this, diagonal); }

Tensor Tensor::operator[](int64_t index) const { return gg::select(*this, 0, index); }
Tensor Tensor::operator[](const Tensor& index) const { return gg::index(*this, {index}); }
Tensor Tensor::index(const std::vector<indexing::TensorIndex>& indices) const { return gg::index(*this, indices); }
Tensor Tensor::select(int64_t dim, int64_t index) const { return gg::select(*this, dim, index); }
Tensor Tensor::slice(int64_t dim, std::optional<int64_t> start, std::optional<int64_t> end, int64_t step) const {
  return gg::slice(*this, dim, start.value_or(0), end.value_or(std::numeric_limits<int64_t>::max()), step);
}
Tensor Tensor::narrow(int64_t dim, int64_t start, int64_t length) const {
  return gg::narrow(*this, dim, start, length);
}
Tensor Tensor::index_select(int64_t dim, const Tensor& index) const { return gg::index_select(*this, dim, index); }
Tensor Tensor::gather(int64_t dim, const Tensor& index) const { return gg::gather(*this, dim, index); }
Tensor Tensor::scatter_add(int64_t dim, const Tensor& index, const Tensor& src) const {
  return gg::scatter_add(*this, dim, index, src);
}

// The free in-place functions take the handle by reference; a copy of it names the same data.
const Tensor& Tensor::add_(const Tensor& other, double alpha) const {
  Tensor self = *this;
  gg::add_(self, other, alpha);
  return *this;
}
const Tensor& Tensor::add_(const Scalar& other) const {
  Tensor self = *this;
  gg::add_(self, other);
  return *this;
}
const Tensor& Tensor::sub_(const Tensor& other, double alpha) const {
  Tensor self = *this;
  gg::sub_(self, other, alpha);
  return *this;
}
const Tensor& Tensor::sub_(const Scalar& other) const {
  Tensor self = *this;
  gg::sub_(self, other);
  return *this;
}
const Tensor& Tensor::mul_(const Tensor& other) const {
  Tensor self = *this;
  gg::mul_(self, other);
  return *this;
}
const Tensor& Tensor::mul_(const Scalar& other) const {
  Tensor self = *this;
  gg::mul_(self, other);
  return *this;
}
const Tensor& Tensor::div_(const Tensor& other) const {
  Tensor self = *this;
  gg::div_(self, other);
  return *this;
}
const Tensor& Tensor::div_(const Scalar& other) const {
  Tensor self = *this;
  gg::div_(self, other);
  return *this;
}
const Tensor& Tensor::zero_() const {
  Tensor self = *this;
  gg::zero_(self);
  return *this;
}
const Tensor& Tensor::fill_(double value) const {
  Tensor self = *this;
  gg::fill_(self, value);
  return *this;
}
const Tensor& Tensor::copy_(const Tensor& src) const {
  Tensor self = *this;
  gg::copy_(self, src);
  return *this;
}
const Tensor& Tensor::index_put_(const std::vector<indexing::TensorIndex>& indices, const Tensor& value) const {
  Tensor self = *this;
  gg::index_put_(self, indices, value);
  return *this;
}
const Tensor& Tensor::index_put_(const std::vector<indexing::TensorIndex>& indices, double value) const {
  Tensor self = *this;
  gg::index_put_(self, indices, value);
  return *this;
}

}  // namespace gg
