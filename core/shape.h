// Shape arithmetic shared by every layer: element counts, contiguous strides, broadcasting,
// dim wrapping. Every size computation goes through the overflow-checked helpers here, so a
// shape whose element count, strides or byte count do not fit in int64 is a ShapeError, never
// a wrapped-around count.
#pragma once
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace gg {

using Shape = std::vector<int64_t>;

// The product of the sizes. Throws ShapeError naming `op` for a negative size, or when the
// product of the non-zero sizes does not fit in int64 (so the contiguous strides of any shape
// that passes are representable too; a shape such as [0, 2^62, 4] is refused although it has
// no elements, where PyTorch accepts some such shapes).
int64_t numel_of(const Shape& shape, const char* op = "numel");
// numel * element size in bytes, checked the same way.
int64_t nbytes_of(const Shape& shape, size_t element_size, const char* op = "numel");
Shape contiguous_strides(const Shape& shape);  // checked like numel_of
std::string shape_str(const Shape& shape);  // "[2, 3]"
// Writes shape_str(shape), so `std::cout << x.shape()` prints "[2, 3]". Shape is a std::vector,
// so the operator is found from code in namespace gg or with `using namespace gg`.
std::ostream& operator<<(std::ostream& os, const Shape& shape);
// Numpy broadcasting of two shapes; throws ShapeError naming `op` and both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

// Dim wrapping. A dim in [-ndim, ndim) maps to [0, ndim); anything else is an IndexError naming
// `op`, the dim and the valid range. A 0-dim tensor has no dims: by default (`refuse`, used by
// indexing ops such as size, slice, cat, index_select) any dim is an IndexError saying so.
// Ops that treat a 0-dim tensor as a one-element row (reductions, softmax, squeeze, transpose)
// pass `allow`: then 0 and -1 are accepted and 0 is returned, and the op must not read
// shape()[0] (as in PyTorch, which wraps dims of a scalar the same way).
enum class ScalarDim { refuse, allow };
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op, ScalarDim scalar = ScalarDim::refuse);

}  // namespace gg
