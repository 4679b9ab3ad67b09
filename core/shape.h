// Shape arithmetic shared by every layer: element counts, contiguous strides, broadcasting.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace gg {

using Shape = std::vector<int64_t>;

int64_t numel_of(const Shape& shape);
Shape contiguous_strides(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[2, 3]"
// Numpy broadcasting of two shapes; throws ShapeError naming `op` and both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// Wraps a possibly negative dim into [0, ndim); throws IndexError naming `op`.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);

}  // namespace gg
