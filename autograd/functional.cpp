#include "autograd/functional.h"

#include "autograd/engine.h"
#include "ops/ops.h"

namespace gg {
namespace {
Tensor fresh_leaf(const Tensor& x) {
  Tensor leaf = x.detach();
  leaf.requires_grad_(true);
  return leaf;
}
}  // namespace

Tensor hvp(const ScalarFn& f, const Tensor& x, const Tensor& v) {
  GG_CHECK(v.shape() == x.shape(), ShapeError, "gg::hvp: v has shape ", shape_str(v.shape()), " but x has shape ",
           shape_str(x.shape()));
  Tensor xl = fresh_leaf(x);
  Tensor g = grad(f(xl), xl, Tensor(), std::nullopt, /*create_graph=*/true);
  if (!g.requires_grad()) return zeros_like(x);  // f is affine in x: the Hessian is zero
  Tensor hv = grad(g, xl, v, std::nullopt, /*create_graph=*/false, /*allow_unused=*/true);  // Σ_i v_i ∂g_i/∂x = H·v (H symmetric)
  return hv.defined() ? hv : zeros_like(x);
}

Tensor jvp(const TensorFn& f, const Tensor& x, const Tensor& v) {
  GG_CHECK(v.shape() == x.shape(), ShapeError, "gg::jvp: v has shape ", shape_str(v.shape()), " but x has shape ",
           shape_str(x.shape()));
  Tensor xl = fresh_leaf(x);
  Tensor y = f(xl);
  Tensor u = zeros_like(y).requires_grad_(true);  // the value of u does not matter: Jᵀu is linear in u
  Tensor jt_u = grad(y, xl, u, std::nullopt, /*create_graph=*/true);
  Tensor jv = grad(jt_u, u, v, std::nullopt, /*create_graph=*/false, /*allow_unused=*/true);
  return jv.defined() ? jv : zeros_like(y);
}

Tensor hessian(const ScalarFn& f, const Tensor& x) {
  const int64_t n = x.numel();
  Tensor xl = fresh_leaf(x);
  Tensor g = flatten(grad(f(xl), xl, Tensor(), /*retain_graph=*/true, /*create_graph=*/true));
  if (n == 0) return zeros({0, 0}, x.dtype(), x.device());  // no rows to stack
  TensorList rows;
  for (int64_t i = 0; i < n; ++i) {
    Tensor gi = slice(g, 0, i, i + 1);
    Tensor row = gi.requires_grad() ? grad(gi, xl, Tensor(), /*retain_graph=*/true, /*create_graph=*/false, /*allow_unused=*/true) : Tensor();
    rows.push_back(row.defined() ? flatten(row) : zeros({n}, x.dtype(), x.device()));
  }
  return stack(rows, 0);
}

}  // namespace gg
