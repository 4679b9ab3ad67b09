// Reductions. The forward moves the reduced dims last, makes the data contiguous and reduces
// rows (on the CPU, a sum that would need a transposed copy for that reads x in place instead);
// the backward of sum is expand, of max a masked expand, so both stay differentiable.
#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <utility>

#include "ops/common.h"

namespace gg {
namespace {

// Sorted, unique, wrapped dims; empty means all dims.
std::vector<int64_t> normalize_dims(const std::vector<int64_t>& dims, int64_t ndim, const char* op) {
  std::vector<int64_t> out;
  if (dims.empty()) {
    for (int64_t i = 0; i < ndim; ++i) out.push_back(i);
    return out;
  }
  // A 0-dim tensor accepts dim 0 or -1 and reduces to itself (as in PyTorch): no dim to reduce.
  for (int64_t d : dims) out.push_back(wrap_dim(d, ndim, op, ScalarDim::allow));
  std::sort(out.begin(), out.end());
  GG_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), ValueError, "gg::", op,
           ": dim appears more than once in the list of dims");
  if (ndim == 0) out.clear();
  return out;
}

Shape keepdim_shape(const Shape& s, const std::vector<int64_t>& dims) {
  Shape k = s;
  for (int64_t d : dims) k[static_cast<size_t>(d)] = 1;
  return k;
}

Shape reduced_shape(const Shape& s, const std::vector<int64_t>& dims, bool keepdim) {
  if (keepdim) return keepdim_shape(s, dims);
  Shape out;
  for (size_t i = 0; i < s.size(); ++i)
    if (!std::binary_search(dims.begin(), dims.end(), static_cast<int64_t>(i))) out.push_back(s[i]);
  return out;
}

Tensor reduce_fwd(kernels::ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim,
                  const char* name) {
  detail::check_floating(name, x);
  detail::check_cpu_dtype(name, x, false);
  std::vector<int64_t> perm;
  for (int64_t i = 0; i < x.dim(); ++i)
    if (!std::binary_search(dims.begin(), dims.end(), i)) perm.push_back(i);
  const size_t kept = perm.size();
  perm.insert(perm.end(), dims.begin(), dims.end());
  Tensor y = empty(reduced_shape(x.shape(), dims, keepdim), x.dtype(), x.device());
  Tensor xp;
  {
    NoGradGuard ng;
    xp = permute(x, perm);
  }
  if (op == kernels::ReduceOp::sum && x.device().is_cpu() && !xp.is_contiguous()) {
    // A sum over leading or middle dims (the backward of a broadcast): read x where it is.
    Shape out_strides(x.shape().size(), 0);
    int64_t s = 1;
    for (size_t i = kept; i-- > 0;) {
      out_strides[static_cast<size_t>(perm[i])] = s;
      s *= x.shape()[static_cast<size_t>(perm[i])];
    }
    dispatch::sum_strided({x.dtype(), x.raw_data(), y.raw_data(), detail::layout_of(x),
                           kernels::make_layout(x.shape(), out_strides)},
                          x.device());
    return y;
  }
  Tensor xc;
  {
    NoGradGuard ng;
    xc = contiguous(xp);
  }
  int64_t rows = 1, cols = 1;
  for (size_t i = 0; i < perm.size(); ++i) (i < kept ? rows : cols) *= x.shape()[static_cast<size_t>(perm[i])];
  GG_CHECK(op != kernels::ReduceOp::max || cols > 0, ValueError, "gg::", name,
           ": cannot take the max over an empty dimension of shape ", shape_str(x.shape()));
  dispatch::reduce_last({op, x.dtype(), xc.raw_data(), y.raw_data(), rows, cols}, x.device());
  return y;
}

}  // namespace

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims_in, bool keepdim) {
  detail::check_defined("sum", x, "input");
  std::vector<int64_t> dims = normalize_dims(dims_in, x.dim(), "sum");
  Tensor y = reduce_fwd(kernels::ReduceOp::sum, x, dims, keepdim, "sum");
  record("sum", {x}, {y}, {}, [xs = x.shape(), k = keepdim_shape(x.shape(), dims)](const BackwardArgs& g) -> TensorList {
    return {expand(reshape(g.grads[0], k), xs)};  // every summed element gets the same gradient
  }, [&](const JvpArgs& j) -> TensorList { return {sum(j.tangents[0], dims, keepdim)}; });
  return y;
}

Tensor sum(const Tensor& x) { return sum(x, {}, false); }

Tensor mean(const Tensor& x, const std::vector<int64_t>& dims_in, bool keepdim) {
  detail::check_defined("mean", x, "input");
  std::vector<int64_t> dims = normalize_dims(dims_in, x.dim(), "mean");
  int64_t count = 1;
  for (int64_t d : dims) count *= x.shape()[static_cast<size_t>(d)];
  return mul_scalar(sum(x, dims, keepdim), 1.0 / static_cast<double>(count));
}

Tensor mean(const Tensor& x) { return mean(x, {}, false); }

Tensor max(const Tensor& x, const std::vector<int64_t>& dims_in, bool keepdim) {
  detail::check_defined("max", x, "input");
  std::vector<int64_t> dims = normalize_dims(dims_in, x.dim(), "max");
  Tensor y = reduce_fwd(kernels::ReduceOp::max, x, dims, keepdim, "max");
  record("max", {x}, {y}, {x, y}, [dims, k = keepdim_shape(x.shape(), dims)](const BackwardArgs& g) -> TensorList {
    const Tensor &x = g.saved[0], &y = g.saved[1];
    // The gradient goes to the maximal elements, shared equally among ties (a constant mask).
    Tensor mask = to(eq(x, reshape(y, k).detach()), x.dtype());
    Tensor share = mask / sum(mask, dims, true);
    return {reshape(g.grads[0], k) * share};
  }, [&](const JvpArgs& j) -> TensorList {  // the mean tangent of the maximal elements
    const Tensor& x = j.inputs[0];
    Tensor mask = to(eq(x, reshape(j.outputs[0], keepdim_shape(x.shape(), dims)).detach()), x.dtype());
    return {sum(j.tangents[0] * mask, dims, keepdim) / sum(mask, dims, keepdim)};
  });
  return y;
}

Tensor max(const Tensor& x) { return max(x, {}, false); }

Tensor amax(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) { return max(x, dims, keepdim); }

Tensor amin(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  detail::check_defined("amin", x, "input");
  detail::check_floating("amin", x);
  for (int64_t d : normalize_dims(dims, x.dim(), "amin"))
    GG_CHECK(x.size(d) > 0, ValueError, "gg::amin: cannot take the min over an empty dimension of shape ",
             shape_str(x.shape()));
  return neg(max(neg(x), dims, keepdim));
}

Tensor min(const Tensor& x) { return amin(x, {}, false); }
Tensor min(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) { return amin(x, dims, keepdim); }

namespace {
// The one reduced dim of a (values, indices) reduction, wrapped; refuses an empty one.
int64_t index_dim(const char* op, const Tensor& x, int64_t dim) {
  detail::check_defined(op, x, "input");
  detail::check_floating(op, x);
  const int64_t d = wrap_dim(dim, x.dim(), op, ScalarDim::allow);
  GG_CHECK(x.dim() == 0 || x.size(d) > 0, ValueError, "gg::", op, ": cannot reduce over dim ", d,
           " of size 0 (shape ", shape_str(x.shape()), ")");
  return d;
}

// The first index along d of the largest element (of the first NaN, where the group holds one).
Tensor first_argmax(const Tensor& x, int64_t d, bool keepdim) {
  NoGradGuard ng;
  if (x.dim() == 0) return zeros({}, DType::i64, x.device());
  const Tensor m = max(x, {d}, true);
  // hit: the maxima, or the NaNs (a group with a NaN has max NaN, which equals nothing)
  const Tensor hit = to(eq(x, m), DType::f64) + to(ne(x, x), DType::f64);
  Shape along(x.shape().size(), 1);
  along[static_cast<size_t>(d)] = x.size(d);
  const Tensor pos = reshape(arange(0, static_cast<double>(x.size(d)), 1, DType::f64, x.device()), along);
  const Tensor candidates = where(gt(hit, 0.0), pos, std::numeric_limits<double>::infinity());
  return to(neg(max(neg(candidates), {d}, keepdim)), DType::i64);
}

std::tuple<Tensor, Tensor> values_at(const Tensor& x, const Tensor& index, int64_t d, bool keepdim) {
  if (x.dim() == 0) return {clone(x), index};
  const Tensor idx = keepdim ? index : unsqueeze(index, d);
  Tensor values = gather(x, d, idx);
  return {keepdim ? values : squeeze(values, d), index};
}
}  // namespace

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  return first_argmax(x, index_dim("argmax", x, dim), keepdim);
}

Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) {
  const int64_t d = index_dim("argmin", x, dim);
  NoGradGuard ng;
  return first_argmax(neg(x), d, keepdim);
}

Tensor argmax(const Tensor& x) {
  detail::check_defined("argmax", x, "input");
  return argmax(reshape(x, {x.numel()}), 0, false);
}

Tensor argmin(const Tensor& x) {
  detail::check_defined("argmin", x, "input");
  return argmin(reshape(x, {x.numel()}), 0, false);
}

std::tuple<Tensor, Tensor> max_dim(const Tensor& x, int64_t dim, bool keepdim) {
  const int64_t d = index_dim("max", x, dim);
  return values_at(x, first_argmax(x, d, keepdim), d, keepdim);
}

std::tuple<Tensor, Tensor> min_dim(const Tensor& x, int64_t dim, bool keepdim) {
  const int64_t d = index_dim("min", x, dim);
  Tensor index;
  {
    NoGradGuard ng;
    index = first_argmax(neg(x), d, keepdim);
  }
  return values_at(x, index, d, keepdim);
}

Tensor logsumexp(const Tensor& x, const std::vector<int64_t>& dims_in, bool keepdim) {
  detail::check_defined("logsumexp", x, "input");
  detail::check_floating("logsumexp", x);
  const std::vector<int64_t> dims = normalize_dims(dims_in, x.dim(), "logsumexp");
  int64_t count = 1;
  for (int64_t d : dims) count *= x.size(d);
  if (count == 0) return log(sum(exp(x), dims, keepdim));  // log 0 = -inf, as PyTorch
  // Shift by the group's max (a constant: the result's gradient does not depend on it); an
  // infinite max shifts by 0, so that a group of -inf gives -inf and +inf gives +inf.
  Tensor shift;
  {
    NoGradGuard ng;
    const Tensor m = max(x, dims, true);
    shift = where(eq(abs(m), std::numeric_limits<double>::infinity()), 0.0, m);
  }
  const Tensor out = log(sum(exp(x - shift), dims, keepdim));
  return out + (keepdim ? shift : reshape(shift, out.shape()));
}

namespace {
int64_t group_size(const Tensor& x, const std::vector<int64_t>& dims) {
  int64_t count = 1;
  for (int64_t d : dims) count *= x.size(d);
  return count;
}
// 1 / max(0, N - correction): inf when nothing is left (the result is then inf or NaN, as PyTorch).
double var_scale(const Tensor& x, const std::vector<int64_t>& dims, double correction) {
  return 1.0 / std::max(0.0, static_cast<double>(group_size(x, dims)) - correction);
}
}  // namespace

Tensor var(const Tensor& x, const std::vector<int64_t>& dims_in, double correction, bool keepdim) {
  detail::check_defined("var", x, "input");
  detail::check_floating("var", x);
  const std::vector<int64_t> dims = normalize_dims(dims_in, x.dim(), "var");
  const Tensor centered = x - mean(x, dims, true);
  return sum(centered * centered, dims, keepdim) * var_scale(x, dims, correction);
}

Tensor std(const Tensor& x, const std::vector<int64_t>& dims_in, double correction, bool keepdim) {
  detail::check_defined("std", x, "input");
  detail::check_floating("std", x);
  const std::vector<int64_t> dims = normalize_dims(dims_in, x.dim(), "std");
  Tensor y;
  {
    NoGradGuard ng;
    y = sqrt(var(x, dims, correction, keepdim));
  }
  const double scale = var_scale(x, dims, correction);
  record("std", {x}, {y}, {x, y}, [dims, scale, k = keepdim_shape(x.shape(), dims)](const BackwardArgs& g) -> TensorList {
    const Tensor &x = g.saved[0], &y = g.saved[1];
    // d std = d var / (2 std), and 0 where std = 0 (PyTorch's choice); d var = 2 (x - mean) / (N - c)
    const Tensor g_var = where(eq(y, 0.0), 0.0, g.grads[0] / (y * 2.0));
    return {reshape(g_var, k) * (x - mean(x, dims, true)) * (2.0 * scale)};
  }, [&](const JvpArgs& j) -> TensorList {  // std˙ = Σ (x − mean) ẋ / ((N − c) std), 0 where std = 0
    const Tensor &x = j.inputs[0], &y = j.outputs[0];
    const Tensor dvar = sum((x - mean(x, dims, true)) * j.tangents[0], dims, keepdim) * scale;
    return {where(eq(y, 0.0), 0.0, dvar / y)};
  });
  return y;
}

Tensor norm(const Tensor& x, double p, const std::vector<int64_t>& dims_in, bool keepdim) {
  detail::check_defined("norm", x, "input");
  detail::check_floating("norm", x);
  const std::vector<int64_t> dims = normalize_dims(dims_in, x.dim(), "norm");
  const double inf = std::numeric_limits<double>::infinity();
  GG_CHECK(p == 1 || p == 2 || p == inf, ValueError, "gg::norm: p must be 1, 2 or inf, got ", p);
  if (p == 1) return sum(abs(x), dims, keepdim);  // gradient sign(x): 0 at 0
  if (p == inf) {
    GG_CHECK(group_size(x, dims) > 0, ValueError, "gg::norm: the inf-norm of an empty group is undefined (shape ",
             shape_str(x.shape()), ")");
    return max(abs(x), dims, keepdim);  // ties share the gradient, as PyTorch
  }
  Tensor y;
  {
    NoGradGuard ng;
    y = sqrt(sum(x * x, dims, keepdim));
  }
  record("norm", {x}, {y}, {x, y}, [k = keepdim_shape(x.shape(), dims)](const BackwardArgs& g) -> TensorList {
    const Tensor &x = g.saved[0], &y = g.saved[1];
    // d ‖x‖ = x / ‖x‖, and 0 where ‖x‖ = 0 (PyTorch's subgradient)
    return {x * reshape(where(eq(y, 0.0), 0.0, g.grads[0] / y), k)};
  }, [&](const JvpArgs& j) -> TensorList {  // ‖x‖˙ = Σ x ẋ / ‖x‖, 0 where ‖x‖ = 0
    const Tensor &x = j.inputs[0], &y = j.outputs[0];
    return {where(eq(y, 0.0), 0.0, sum(x * j.tangents[0], dims, keepdim) / y)};
  });
  return y;
}

Tensor frobenius_norm(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return norm(x, 2, dims, keepdim);
}

namespace {
// a and b broadcast together, as f64 values on the host.
std::pair<std::vector<double>, std::vector<double>> broadcast_values(const char* op, const Tensor& a, const Tensor& b) {
  detail::check_defined(op, a, "a");
  detail::check_defined(op, b, "b");
  detail::check_same_device(op, a, b);
  const Shape s = broadcast_shapes(a.shape(), b.shape(), op);
  NoGradGuard ng;
  return {contiguous(expand(a, s)).to_vector<double>(), contiguous(expand(b, s)).to_vector<double>()};
}
}  // namespace

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  detail::check_defined("allclose", a, "a");
  detail::check_defined("allclose", b, "b");
  GG_CHECK(a.dtype() == b.dtype(), DTypeError, "gg::allclose: dtypes differ: ", dtype_name(a.dtype()), " and ",
           dtype_name(b.dtype()), " (PyTorch refuses them too; cast one first)");
  GG_CHECK(rtol >= 0 && atol >= 0, ValueError, "gg::allclose: rtol and atol must be >= 0, got rtol ", rtol, ", atol ",
           atol);
  const auto [av, bv] = broadcast_values("allclose", a, b);
  // i64 values above 2^53 can round to one double: equality is decided on the integers.
  std::vector<int64_t> ai, bi;
  if (a.dtype() == DType::i64) {
    NoGradGuard ng;
    const Shape s = broadcast_shapes(a.shape(), b.shape(), "allclose");
    ai = contiguous(expand(a, s)).to_vector<int64_t>();
    bi = contiguous(expand(b, s)).to_vector<int64_t>();
  }
  for (size_t i = 0; i < av.size(); ++i) {
    const double x = av[i], y = bv[i];
    if (ai.empty() ? x == y : ai[i] == bi[i]) continue;  // equal values, infinities of one sign included
    if (std::isnan(x) || std::isnan(y)) {
      if (equal_nan && std::isnan(x) && std::isnan(y)) continue;
      return false;
    }
    if (std::isinf(x) || std::isinf(y)) return false;  // an infinity is close only to itself
    const double diff = ai.empty() ? std::abs(x - y)
                                   : static_cast<double>(std::abs(static_cast<long double>(ai[i]) - bi[i]));
    if (!(diff <= atol + rtol * std::abs(y))) return false;
  }
  return true;
}

bool equal(const Tensor& a, const Tensor& b) {
  detail::check_defined("equal", a, "a");
  detail::check_defined("equal", b, "b");
  detail::check_same_device("equal", a, b);
  if (a.shape() != b.shape()) return false;
  if (a.dtype() == DType::i64 && b.dtype() == DType::i64) {  // exactly, beyond 2^53 too
    NoGradGuard ng;
    return contiguous(a).to_vector<int64_t>() == contiguous(b).to_vector<int64_t>();
  }
  const auto [av, bv] = broadcast_values("equal", a, b);
  for (size_t i = 0; i < av.size(); ++i)
    if (!(av[i] == bv[i])) return false;  // NaN equals nothing
  return true;
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  GG_CHECK(x.dim() >= static_cast<int64_t>(shape.size()), ShapeError, "gg::sum_to: cannot sum shape ",
           shape_str(x.shape()), " down to ", shape_str(shape));
  const size_t lead = x.shape().size() - shape.size();
  std::vector<int64_t> dims;
  for (size_t i = 0; i < x.shape().size(); ++i) {
    if (i < lead) {
      dims.push_back(static_cast<int64_t>(i));
      continue;
    }
    int64_t want = shape[i - lead], have = x.shape()[i];
    GG_CHECK(want == have || want == 1, ShapeError, "gg::sum_to: cannot sum shape ", shape_str(x.shape()),
             " down to ", shape_str(shape));
    if (want == 1 && have != 1) dims.push_back(static_cast<int64_t>(i));
  }
  Tensor r = dims.empty() ? x : sum(x, dims, true);
  return reshape(r, shape);
}

}  // namespace gg
