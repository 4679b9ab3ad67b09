// Higher-order helpers built on gg::grad with create_graph: the usual vocabulary of
// functional autodiff libraries (JAX, torch.func).
#pragma once
#include <functional>

#include "../core/tensor.h"

namespace gg {

using ScalarFn = std::function<Tensor(const Tensor&)>;  // x -> one-element tensor
using TensorFn = std::function<Tensor(const Tensor&)>;  // x -> y

// Hessian-vector product H(x)·v of a scalar function, by differentiating ⟨∇f(x), v⟩.
Tensor hvp(const ScalarFn& f, const Tensor& x, const Tensor& v);
// Jacobian-vector product J(x)·v, by the double-VJP trick: u ↦ Jᵀu is linear in u, so
// differentiating ⟨Jᵀu, v⟩ with respect to u gives J·v.
Tensor jvp(const TensorFn& f, const Tensor& x, const Tensor& v);
// The full Hessian of a scalar function, shape (numel(x), numel(x)), one HVP per column:
// for small x.
Tensor hessian(const ScalarFn& f, const Tensor& x);

}  // namespace gg
