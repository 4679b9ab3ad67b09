// In-place updates. They bump the storage version so autograd can detect a saved tensor that
// changed, and they refuse tensors that require grad while grad mode is on.
//
// Memory rules (as in PyTorch): the destination may not have elements that share memory (a
// broadcast view with stride 0, or any view whose elements overlap), since which write wins
// would be arbitrary; and copy_'s source may not partially overlap the destination (e.g. a
// transpose of the destination itself), since the copy would read values it already wrote.
// Both are ValueErrors naming the op. A source that is exactly the destination is allowed (a
// no-op), and a source that shares memory with the destination in a way too irregular to decide
// cheaply (strided views of one storage) is read through a temporary copy, so the result is
// always that of reading all of src before writing.
#include <algorithm>
#include <numeric>

#include "ops/common.h"

namespace gg {
namespace {

void check_inplace(const char* op, const Tensor& self, const Tensor& other = Tensor()) {
  detail::check_defined(op, self, "self");
  if (detail::forward_ad_active())  // forward mode has no in-place rules: the tangent would go stale
    GG_CHECK(!detail::has_open_tangent(self) && !detail::has_open_tangent(other), AutogradError, "gg::", op,
             ": in-place update of a dual tensor (", detail::has_open_tangent(self) ? "the destination" : "the source",
             " carries a forward-mode tangent, shape ", shape_str(self.shape()), "); work out of place");
  if (!GradMode::is_enabled()) return;
  GG_CHECK(!self.requires_grad(), AutogradError, "gg::", op, ": in-place update of a tensor that requires grad (shape ",
           shape_str(self.shape()), ") is not supported while grad mode is on; do it under gg::NoGradGuard "
           "(e.g. an optimizer step) or work out of place");
  GG_CHECK(!other.defined() || !other.requires_grad(), AutogradError, "gg::", op,
           ": the source requires grad, which an in-place update cannot record; work out of place");
}

// Dims of size > 1 sorted by stride: the view's elements are distinct exactly when each stride
// is at least the extent spanned by the smaller dims (sufficient; views made by gg ops never
// overlap otherwise, except expand's stride 0).
bool has_internal_overlap(const Tensor& t) {
  if (t.numel() <= 1) return false;
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size)
  for (size_t i = 0; i < t.shape().size(); ++i)
    if (t.shape()[i] > 1) dims.emplace_back(t.strides()[i], t.shape()[i]);
  std::sort(dims.begin(), dims.end());
  int64_t extent = 1;  // elements spanned by the dims so far
  for (const auto& [stride, size] : dims) {
    if (stride < extent) return true;
    extent = stride * (size - 1) + extent;
  }
  return false;
}

// A view whose elements fill [offset, offset + numel) exactly (a permutation of a contiguous
// block); only such views have an overlap status decidable from their ranges.
bool is_dense(const Tensor& t) {
  if (has_internal_overlap(t)) return false;
  int64_t span = 1;
  for (size_t i = 0; i < t.shape().size(); ++i)
    if (t.shape()[i] > 1) span += t.strides()[i] * (t.shape()[i] - 1);
  return span == t.numel();
}

// [first, last] element range touched by a non-empty view.
std::pair<int64_t, int64_t> element_range(const Tensor& t) {
  int64_t last = t.offset();
  for (size_t i = 0; i < t.shape().size(); ++i) last += t.strides()[i] * (t.shape()[i] - 1);
  return {t.offset(), last};
}

void check_destination(const char* op, const Tensor& self) {
  GG_CHECK(!has_internal_overlap(self), ValueError, "gg::", op, ": the destination (shape ", shape_str(self.shape()),
           ", strides ", shape_str(self.strides()), ") has elements that share memory (e.g. a broadcast view from "
           "expand); clone it first");
}

Tensor& write(Tensor& self, const Tensor& value) {
  detail::copy_into(self, value);
  self.impl().storage->bump_version();
  return self;
}

// The promoted result of an in-place op must cast back to the destination without leaving its
// category (PyTorch's can_cast): an f32 destination takes an f64 result, an i64 one no float.
void check_castable(const char* op, const Tensor& self, const Tensor& result) {
  auto category = [](DType t) { return t == DType::b8 ? 0 : t == DType::i64 ? 1 : 2; };
  GG_CHECK(category(result.dtype()) <= category(self.dtype()), DTypeError, "gg::", op, ": the result type ",
           dtype_name(result.dtype()), " cannot be written into a ", dtype_name(self.dtype()), " destination");
}

// Writes r, computed from self and other (undefined for a number), back into self: other must
// broadcast to self's shape, and r's dtype must cast back into self's.
Tensor& write_result(const char* op, Tensor& self, const Tensor& other, const Tensor& r) {
  GG_CHECK(r.shape() == self.shape(), ShapeError, "gg::", op, ": cannot broadcast shape ", shape_str(other.shape()),
           " into ", shape_str(self.shape()));
  check_castable(op, self, r);
  return write(self, r);
}

}  // namespace

Tensor& add_(Tensor& self, const Tensor& other, double alpha) {
  check_inplace("add_", self, other);
  detail::check_defined("add_", other, "other");
  check_destination("add_", self);
  NoGradGuard ng;
  return write_result("add_", self, other, self + (alpha == 1.0 ? other : other * alpha));
}

Tensor& add_(Tensor& self, const Scalar& s) {
  check_inplace("add_", self);
  check_destination("add_", self);
  NoGradGuard ng;
  return write_result("add_", self, Tensor(), self + s);
}

Tensor& sub_(Tensor& self, const Tensor& other, double alpha) {
  check_inplace("sub_", self, other);
  detail::check_defined("sub_", other, "other");
  check_destination("sub_", self);
  NoGradGuard ng;
  return write_result("sub_", self, other, self - (alpha == 1.0 ? other : other * alpha));
}

Tensor& sub_(Tensor& self, const Scalar& s) {
  check_inplace("sub_", self);
  check_destination("sub_", self);
  NoGradGuard ng;
  return write_result("sub_", self, Tensor(), self - s);
}

Tensor& mul_(Tensor& self, const Tensor& other) {
  check_inplace("mul_", self, other);
  detail::check_defined("mul_", other, "other");
  check_destination("mul_", self);
  NoGradGuard ng;
  return write_result("mul_", self, other, self * other);
}

Tensor& mul_(Tensor& self, const Scalar& s) {
  check_inplace("mul_", self);
  check_destination("mul_", self);
  NoGradGuard ng;
  return write_result("mul_", self, Tensor(), self * s);
}

Tensor& div_(Tensor& self, const Tensor& other) {
  check_inplace("div_", self, other);
  detail::check_defined("div_", other, "other");
  check_destination("div_", self);
  NoGradGuard ng;
  return write_result("div_", self, other, self / other);
}

Tensor& div_(Tensor& self, const Scalar& s) {
  check_inplace("div_", self);
  check_destination("div_", self);
  NoGradGuard ng;
  return write_result("div_", self, Tensor(), self / s);
}

Tensor& fill_(Tensor& self, double value) {
  check_inplace("fill_", self);
  check_destination("fill_", self);
  return write(self, full(self.shape(), value, self.dtype(), self.device()));
}

Tensor& zero_(Tensor& self) { return fill_(self, 0.0); }

Tensor& copy_(Tensor& self, const Tensor& src) {
  check_inplace("copy_", self, src);
  detail::check_defined("copy_", src, "src");
  GG_CHECK(self.device() == src.device(), DeviceError, "gg::copy_: src is on ", src.device().str(),
           ", the destination on ", self.device().str());
  check_destination("copy_", self);
  GG_CHECK(broadcast_shapes(src.shape(), self.shape(), "copy_") == self.shape(), ShapeError,
           "gg::copy_: src of shape ", shape_str(src.shape()), " does not broadcast to the destination's shape ",
           shape_str(self.shape()));
  NoGradGuard ng;
  Tensor s = expand(src, self.shape());
  const bool shared = self.numel() > 0 && s.numel() > 0 && self.impl().storage == s.impl().storage;
  if (shared) {
    const bool same = self.offset() == s.offset() && self.strides() == s.strides() && self.dtype() == s.dtype();
    if (same) return write(self, s);  // every element copied onto itself
    const auto [a0, a1] = element_range(self);
    const auto [b0, b1] = element_range(s);
    const bool disjoint = a1 < b0 || b1 < a0;
    if (!disjoint) {
      GG_CHECK(!(is_dense(self) && is_dense(s)), ValueError, "gg::copy_: src (shape ", shape_str(src.shape()),
               ", strides ", shape_str(src.strides()), ", offset ", src.offset(),
               ") partially overlaps the destination (strides ", shape_str(self.strides()), ", offset ",
               self.offset(), "); clone src first");
      s = clone(s);  // too irregular to decide: read everything before writing
    }
  }
  return write(self, s);
}

}  // namespace gg
