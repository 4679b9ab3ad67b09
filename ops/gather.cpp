// Ops that pick or place elements by index or position: gather, scatter_add, one_hot, triu and
// tril (libtorch's indexing, x.index({...}), is ops/index.cpp). Each is written with
// index_select, index_add, where and comparisons, so the forward runs on every backend those
// run on and the backward is differentiable again (gather's adjoint is an index_add, whose
// adjoint is an index_select).
#include <algorithm>
#include <limits>

#include "ops/common.h"

namespace gg {
namespace {

// For each position of an index tensor of shape `ishape` (row-major), the flat offset into a
// contiguous tensor of `shape` of the element at that position with its coordinate along d
// replaced by the index value (`values`, null: the position itself).
std::vector<int64_t> flat_offsets(const Shape& shape, int64_t d, const Shape& ishape, const int64_t* values) {
  const std::vector<int64_t> stride = contiguous_strides(shape);
  const int64_t n = numel_of(ishape);
  std::vector<int64_t> out(static_cast<size_t>(n));
  std::vector<int64_t> coord(ishape.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (size_t k = 0; k < ishape.size(); ++k)
      off += (static_cast<int64_t>(k) == d && values ? values[i] : coord[k]) * stride[k];
    out[static_cast<size_t>(i)] = off;
    for (size_t k = ishape.size(); k-- > 0;) {  // next position, like an odometer
      if (++coord[k] < ishape[k]) break;
      coord[k] = 0;
    }
  }
  return out;
}

// index: i64, as many dims as the input, no larger than `bound` along every dim but d (and
// than `bound2`, if given, along every dim), values in [0, size of `bound` along d).
std::vector<int64_t> check_gather_index(const char* op, const Tensor& index, int64_t d, const Shape& bound,
                                        const char* bound_name, const Shape* bound2 = nullptr,
                                        const char* bound2_name = nullptr) {
  GG_CHECK(index.dtype() == DType::i64, DTypeError, "gg::", op, ": index must be i64, got ", dtype_name(index.dtype()));
  GG_CHECK(index.shape().size() == bound.size(), ShapeError, "gg::", op, ": index must have as many dims as ",
           bound_name, " (", bound.size(), "), got shape ", shape_str(index.shape()));
  for (size_t k = 0; k < bound.size(); ++k) {
    GG_CHECK(static_cast<int64_t>(k) == d || index.shape()[k] <= bound[k], ShapeError, "gg::", op, ": index of shape ",
             shape_str(index.shape()), " is larger than ", bound_name, " of shape ", shape_str(bound), " along dim ", k);
    GG_CHECK(!bound2 || index.shape()[k] <= (*bound2)[k], ShapeError, "gg::", op, ": index of shape ",
             shape_str(index.shape()), " is larger than ", bound2_name, " of shape ", shape_str(*bound2), " along dim ",
             k);
  }
  const int64_t size = bound.empty() ? 1 : bound[static_cast<size_t>(d)];
  std::vector<int64_t> values = index.to_vector<int64_t>();
  for (int64_t v : values)
    GG_CHECK(v >= 0 && v < size, IndexError, "gg::", op, ": index ", v, " is out of range for dim ", d, " of size ",
             size, " (", bound_name, " of shape ", shape_str(bound), ")");
  return values;
}

Tensor flat(const Tensor& x) { return reshape(x, {x.numel()}); }

}  // namespace

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  detail::check_defined("gather", x, "input");
  detail::check_defined("gather", index, "index");
  detail::check_same_device("gather", x, index);
  const int64_t d = wrap_dim(dim, x.dim(), "gather", ScalarDim::allow);
  const std::vector<int64_t> values = check_gather_index("gather", index, d, x.shape(), "input");
  const std::vector<int64_t> offsets = flat_offsets(x.shape(), d, index.shape(), values.data());
  Tensor at = from_indices(offsets, {static_cast<int64_t>(offsets.size())}, x.device());
  return reshape(index_select(flat(x), 0, at), index.shape());
}

Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  detail::check_defined("scatter_add", self, "input");
  detail::check_defined("scatter_add", index, "index");
  detail::check_defined("scatter_add", src, "src");
  detail::check_same_device("scatter_add", self, index);
  detail::check_same_device("scatter_add", self, src);
  detail::check_same_dtype("scatter_add", self, src);
  detail::check_floating("scatter_add", self);
  const int64_t d = wrap_dim(dim, self.dim(), "scatter_add", ScalarDim::allow);
  GG_CHECK(src.dim() == self.dim(), ShapeError, "gg::scatter_add: src must have as many dims as input (",
           self.dim(), "), got shape ", shape_str(src.shape()));
  const Shape src_shape = src.shape();
  const std::vector<int64_t> values =
      check_gather_index("scatter_add", index, d, self.shape(), "input", &src_shape, "src");
  const int64_t n = index.numel();
  Tensor to_self = from_indices(flat_offsets(self.shape(), d, index.shape(), values.data()), {n}, self.device());
  Tensor from_src = from_indices(flat_offsets(src.shape(), d, index.shape(), nullptr), {n}, self.device());
  Tensor added = detail::index_add_zeros(index_select(flat(src), 0, from_src), 0, to_self, {self.numel()});
  return self + reshape(added, self.shape());
}

Tensor one_hot(const Tensor& index, int64_t num_classes) {
  detail::check_defined("one_hot", index, "index");
  GG_CHECK(index.dtype() == DType::i64, DTypeError, "gg::one_hot: index must be i64, got ", dtype_name(index.dtype()));
  GG_CHECK(num_classes >= -1, ValueError, "gg::one_hot: num_classes must be -1 (from the data) or >= 0, got ",
           num_classes);
  const std::vector<int64_t> values = index.to_vector<int64_t>();
  if (num_classes == -1) {
    GG_CHECK(!values.empty(), ValueError, "gg::one_hot: cannot infer num_classes from an empty index of shape ",
             shape_str(index.shape()), "; pass num_classes");
    const int64_t largest = *std::max_element(values.begin(), values.end());
    GG_CHECK(largest < std::numeric_limits<int64_t>::max(), ValueError, "gg::one_hot: class ", largest,
             " leaves no room for num_classes = class + 1");
    num_classes = largest + 1;
  }
  for (int64_t v : values)
    GG_CHECK(v >= 0 && v < num_classes, IndexError, "gg::one_hot: class ", v, " is out of range for ", num_classes,
             " classes");
  Tensor classes = arange(0, static_cast<double>(num_classes), 1, DType::i64, index.device());
  return to(eq(unsqueeze(index, -1), classes), DType::i64);
}

namespace {
// x where j - i (column minus row of the last two dims) is >= diagonal (upper) or <= diagonal
// (lower), 0 elsewhere.
Tensor triangle(const char* op, const Tensor& x, int64_t diagonal, bool upper) {
  detail::check_defined(op, x, "input");
  GG_CHECK(x.dim() >= 2, ShapeError, "gg::", op, ": input must have at least 2 dims, got shape ", shape_str(x.shape()));
  const int64_t rows = x.size(-2), cols = x.size(-1);
  Tensor r = reshape(arange(0, static_cast<double>(rows), 1, DType::i64, x.device()), {rows, 1});
  Tensor c = arange(0, static_cast<double>(cols), 1, DType::i64, x.device());
  Tensor offset = c - r;  // (rows, cols): j - i
  Tensor keep = upper ? ge(offset, diagonal) : le(offset, diagonal);
  return where(keep, x, zeros({}, x.dtype(), x.device()));
}
}  // namespace

Tensor triu(const Tensor& x, int64_t diagonal) { return triangle("triu", x, diagonal, true); }
Tensor tril(const Tensor& x, int64_t diagonal) { return triangle("tril", x, diagonal, false); }

}  // namespace gg
