#include "core/shape.h"

#include <algorithm>
#include <ostream>

#include "core/error.h"

namespace gg {

int64_t numel_of(const Shape& shape, const char* op) {
  int64_t nonzero = 1;
  bool empty = false;
  for (int64_t s : shape) {
    GG_CHECK(s >= 0, ShapeError, "gg::", op, ": negative size ", s, " in shape ", shape_str(shape));
    if (s == 0) {
      empty = true;
      continue;
    }
    GG_CHECK(!__builtin_mul_overflow(nonzero, s, &nonzero), ShapeError, "gg::", op, ": the shape ", shape_str(shape),
             " has more elements than int64 can count");
  }
  return empty ? 0 : nonzero;
}

int64_t nbytes_of(const Shape& shape, size_t element_size, const char* op) {
  const int64_t n = numel_of(shape, op);
  int64_t bytes = 0;
  GG_CHECK(!__builtin_mul_overflow(n, static_cast<int64_t>(element_size), &bytes), ShapeError, "gg::", op,
           ": the shape ", shape_str(shape), " (", n, " elements of ", element_size,
           " bytes) needs more bytes than int64 can count");
  return bytes;
}

Shape contiguous_strides(const Shape& shape) {
  numel_of(shape, "contiguous_strides");  // validates: every partial product below fits
  Shape strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::ostream& operator<<(std::ostream& os, const Shape& shape) { return os << shape_str(shape); }

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    GG_CHECK(da == db || da == 1 || db == 1, ShapeError, "gg::", op, ": shapes ", shape_str(a),
             " and ", shape_str(b), " cannot be broadcast together (dim ", i, ": ", da, " vs ", db,
             ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op, ScalarDim scalar) {
  if (ndim == 0) {
    GG_CHECK(scalar == ScalarDim::allow, IndexError, "gg::", op, ": dim ", dim,
             " given for a 0-dim tensor, which has no dims");
    GG_CHECK(dim == 0 || dim == -1, IndexError, "gg::", op, ": dim ", dim,
             " is out of range for a 0-dim tensor (expected 0 or -1)");
    return 0;
  }
  GG_CHECK(dim >= -ndim && dim < ndim, IndexError, "gg::", op, ": dim ", dim, " is out of range for a tensor of ",
           ndim, " dims (expected ", -ndim, "..", ndim - 1, ")");
  return dim < 0 ? dim + ndim : dim;
}

}  // namespace gg
