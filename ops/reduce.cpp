// Reductions. The forward moves the reduced dims last, makes the data contiguous and reduces
// rows (on the CPU, a sum that would need a transposed copy for that reads x in place instead);
// the backward of sum is expand, of max a masked expand, so both stay differentiable.
#include <algorithm>

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
  });
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
  });
  return y;
}

Tensor max(const Tensor& x) { return max(x, {}, false); }

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
