// Helpers shared by the op files (not part of the public API).
#pragma once
#include "../autograd/grad_mode.h"
#include "../autograd/node.h"
#include "../core/error.h"
#include "../kernels/params.h"
#include "dispatch.h"
#include "ops.h"

namespace gg::detail {

inline void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  GG_CHECK(a.device() == b.device(), DeviceError, "gg::", op, ": tensors are on different devices: ",
           a.device().str(), " and ", b.device().str());
}
inline void check_same_dtype(const char* op, const Tensor& a, const Tensor& b) {
  GG_CHECK(a.dtype() == b.dtype(), DTypeError, "gg::", op, ": dtypes differ: ", dtype_name(a.dtype()),
           " (shape ", shape_str(a.shape()), ") and ", dtype_name(b.dtype()), " (shape ", shape_str(b.shape()), ")");
}
inline void check_floating(const char* op, const Tensor& x, const char* arg = "input") {
  GG_CHECK(is_floating(x.dtype()), DTypeError, "gg::", op, ": ", arg, " must be a floating tensor, got ",
           dtype_name(x.dtype()));
}
// The CPU kernels compute in f32, f64 (and i64 for binary ops and where); bf16/f16 live on the GPU.
inline void check_cpu_dtype(const char* op, const Tensor& x, bool allow_i64) {
  if (!x.device().is_cpu()) return;
  const DType t = x.dtype();
  GG_CHECK(t == DType::f32 || t == DType::f64 || (allow_i64 && t == DType::i64), DTypeError, "gg::", op,
           ": the CPU backend does not compute in ", dtype_name(t), " (supported: f32, f64",
           allow_i64 ? ", i64" : "", ")");
}
inline void check_defined(const char* op, const Tensor& x, const char* arg) {
  GG_CHECK(x.defined(), ValueError, "gg::", op, ": ", arg, " is an undefined tensor");
}
inline void check_max_dims(const char* op, const Shape& s) {
  GG_CHECK(static_cast<int>(s.size()) <= kernels::kMaxDims, ShapeError, "gg::", op, ": at most ",
           kernels::kMaxDims, " dims are supported, got shape ", shape_str(s));
}

inline kernels::Layout layout_of(const Tensor& t) { return kernels::make_layout(t.shape(), t.strides()); }

// Layout of `t` read as if broadcast to `shape` (stride 0 along broadcast dims).
kernels::Layout broadcast_layout(const Tensor& t, const Shape& shape);

// Copies src (any layout) into dst (any layout) of the same shape, converting dtypes.
void copy_into(const Tensor& dst, const Tensor& src);

// The same data as `x` through a new recorded identity node: gradients taken with respect to
// the alias stop there (partial derivatives), while the alias stays connected to x's history.
Tensor alias(const Tensor& x);

// Adds rows of `g` (outer, n_idx, inner) into a zero tensor of `shape` at `index` along dim d:
// the adjoint of index_select, recorded (its backward is index_select). ops/shape.cpp.
Tensor index_add_zeros(const Tensor& g, int64_t d, const Tensor& index, const Shape& shape);

// Forward mode: a + b for two tangent terms of an output of `shape`, either undefined (a zero
// term: JVP rules get undefined tangents for inputs without one); a lone term broadcast to shape.
inline Tensor tangent_sum(const Tensor& a, const Tensor& b, const Shape& shape) {
  if (a.defined() && b.defined()) return a + b;
  const Tensor& t = a.defined() ? a : b;
  return t.defined() ? expand(t, shape) : t;
}

// An uninitialised contiguous tensor like `t`.
inline Tensor empty_like(const Tensor& t) { return empty(t.shape(), t.dtype(), t.device()); }

}  // namespace gg::detail
