// In-place updates. They bump the storage version so autograd can detect a saved tensor that
// changed, and they refuse tensors that require grad while grad mode is on.
#include "ops/common.h"

namespace gg {
namespace {

void check_inplace(const char* op, const Tensor& self, const Tensor& other = Tensor()) {
  detail::check_defined(op, self, "self");
  if (!GradMode::is_enabled()) return;
  GG_CHECK(!self.requires_grad(), AutogradError, "gg::", op, ": in-place update of a tensor that requires grad (shape ",
           shape_str(self.shape()), ") is not supported while grad mode is on; do it under gg::NoGradGuard "
           "(e.g. an optimizer step) or work out of place");
  GG_CHECK(!other.defined() || !other.requires_grad(), AutogradError, "gg::", op,
           ": the source requires grad, which an in-place update cannot record; work out of place");
}

Tensor& write(Tensor& self, const Tensor& value) {
  detail::copy_into(self, value);
  self.impl().storage->bump_version();
  return self;
}

}  // namespace

Tensor& add_(Tensor& self, const Tensor& other, double alpha) {
  check_inplace("add_", self, other);
  NoGradGuard ng;
  Tensor r = self + (alpha == 1.0 ? other : other * alpha);
  GG_CHECK(r.shape() == self.shape(), ShapeError, "gg::add_: cannot broadcast shape ", shape_str(other.shape()),
           " into ", shape_str(self.shape()));
  return write(self, r);
}

Tensor& mul_(Tensor& self, double s) {
  check_inplace("mul_", self);
  NoGradGuard ng;
  return write(self, self * s);
}

Tensor& fill_(Tensor& self, double value) {
  check_inplace("fill_", self);
  return write(self, full(self.shape(), value, self.dtype(), self.device()));
}

Tensor& zero_(Tensor& self) { return fill_(self, 0.0); }

Tensor& copy_(Tensor& self, const Tensor& src) {
  check_inplace("copy_", self, src);
  NoGradGuard ng;
  return write(self, expand(src, self.shape()));
}

}  // namespace gg
