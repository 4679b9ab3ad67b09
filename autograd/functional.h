// Function transforms built on gg::grad and forward mode (autograd/forward_ad.h): torch.func's vocabulary (grad, vjp, jvp, jacrev,
// jacfwd, hessian, hvp) over one tensor, a list of tensors, or named tensors (a module's
// named_parameters(); f then takes the named tensors), in namespace gg::func. The single-tensor gg::hvp, gg::jvp and
// gg::hessian at the bottom are the same transforms in their older spelling.
//
// Note [transforms compose]: every transform differentiates with respect to an inner variable
// made from each input x. When grad mode is on and some input (or, for jvp/hvp, a tangent)
// requires grad, the inner variable is an alias of x recorded on the tape and every gg::grad
// inside runs with create_graph, so the results are functions of the inputs that can be
// differentiated again: hessian(grad(f)), an HVP inside a training loss, jacrev of jacrev.
// Otherwise the inner variable is a fresh leaf and the results carry no graph (no cost beyond
// the transform itself). Tensors that f closes over are constants of the transform unless an
// input requires grad; pass them as inputs (the list and named forms) to differentiate through
// them. Transforms run f in grad mode even under NoGradGuard.
//
// Jacobians and Hessians are laid out as in torch.func: the derivative of an output of shape S
// with respect to an input of shape T has shape S + T (so a Hessian of x has x.shape + x.shape).
// Built one row (jacrev, hessian) or one column (jacfwd) at a time: for small inputs.
#pragma once
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "../core/tensor.h"

namespace gg {

using ScalarFn = std::function<Tensor(const Tensor&)>;  // x -> one-element tensor
using TensorFn = std::function<Tensor(const Tensor&)>;  // x -> y

namespace func {

// Ordered (name, tensor) pairs: the same type as gg::nn::NamedTensors, so a module's
// named_parameters() goes in and gradients come back under the same names.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

using ListScalarFn = std::function<Tensor(const TensorList&)>;         // xs -> one-element tensor
using ListFn = std::function<TensorList(const TensorList&)>;           // xs -> ys
using NamedScalarFn = std::function<Tensor(const NamedTensors&)>;      // params -> one-element tensor
using NamedTensorFn = std::function<Tensor(const NamedTensors&)>;      // params -> y
using VjpFn = std::function<TensorList(const TensorList& cotangents)>;  // one per output -> one per input

// ---------------------------------------------------------------- gradients of scalar functions

// ∇f at xs, one gradient per input (zeros for an input f does not use). f must return a
// one-element tensor (ValueError otherwise).
TensorList grad(const ListScalarFn& f, const TensorList& xs);
Tensor grad(const ScalarFn& f, const Tensor& x);
NamedTensors grad(const NamedScalarFn& f, const NamedTensors& params);

// f(xs) and ∇f(xs) from one evaluation of f.
std::pair<Tensor, TensorList> value_and_grad(const ListScalarFn& f, const TensorList& xs);
std::pair<Tensor, NamedTensors> value_and_grad(const NamedScalarFn& f, const NamedTensors& params);

// ---------------------------------------------------------------- products with J and H

// f(xs) and the function u ↦ Jᵀu (one cotangent per output, shaped like it); the function can be
// called any number of times. A cotangent that requires grad makes its result differentiable
// with respect to it too.
struct VjpResult {
  TensorList outputs;
  VjpFn vjp_fn;
};
VjpResult vjp(const ListFn& f, const TensorList& xs);
// By name: f(params) and u ↦ ∂⟨u, f⟩/∂params, a gradient per parameter name.
struct NamedVjpResult {
  Tensor output;
  std::function<NamedTensors(const Tensor& cotangent)> vjp_fn;
};
NamedVjpResult vjp(const NamedTensorFn& f, const NamedTensors& params);

// f(xs) and J·v (one tangent per input, shaped like it; one result per output), by forward mode:
// one pass of f with xs carrying the tangents (autograd/forward_ad.h), about the cost of f.
struct JvpResult {
  TensorList outputs;
  TensorList tangents;  // J·v
};
JvpResult jvp(const ListFn& f, const TensorList& xs, const TensorList& vs);
// By name: f(params) and Σ_p ∂f/∂p · v_p, with vs named like params.
std::pair<Tensor, Tensor> jvp(const NamedTensorFn& f, const NamedTensors& params, const NamedTensors& vs);

// H·v for a scalar f: one product per input, Σ_j ∂²f/∂x_i∂x_j · v_j, by forward over reverse:
// ∇f computed from xs carrying the tangents v arrives with the tangent H·v (one forward and one
// backward, each with its tangent beside it).
TensorList hvp(const ListScalarFn& f, const TensorList& xs, const TensorList& vs);
Tensor hvp(const ScalarFn& f, const Tensor& x, const Tensor& v);
NamedTensors hvp(const NamedScalarFn& f, const NamedTensors& params, const NamedTensors& vs);

// ---------------------------------------------------------------- whole Jacobians and Hessians

// jac[i][j] = ∂ys[i]/∂xs[j], shape ys[i].shape + xs[j].shape. jacrev takes one VJP per output
// element, jacfwd one JVP per input element; both give the same tensors.
std::vector<TensorList> jacrev(const ListFn& f, const TensorList& xs);
std::vector<TensorList> jacfwd(const ListFn& f, const TensorList& xs);
Tensor jacrev(const TensorFn& f, const Tensor& x);
Tensor jacfwd(const TensorFn& f, const Tensor& x);
// By name: ∂y/∂p for each parameter p, shape y.shape + p.shape.
NamedTensors jacrev(const NamedTensorFn& f, const NamedTensors& params);
NamedTensors jacfwd(const NamedTensorFn& f, const NamedTensors& params);

// h[i][j] = ∂²f/∂xs[i]∂xs[j], shape xs[i].shape + xs[j].shape, for a scalar f (jacrev of grad).
std::vector<TensorList> hessian(const ListScalarFn& f, const TensorList& xs);
Tensor hessian(const ScalarFn& f, const Tensor& x);
// By name: h[i].second[j].second = ∂²f/∂p_i∂p_j, rows and columns named like params.
using NamedHessian = std::vector<std::pair<std::string, NamedTensors>>;
NamedHessian hessian(const NamedScalarFn& f, const NamedTensors& params);

}  // namespace func

// The single-tensor transforms in their first spelling (Note [transforms compose] applies).
// H(x)·v of a scalar function.
Tensor hvp(const ScalarFn& f, const Tensor& x, const Tensor& v);
// J(x)·v, by forward mode (func::jvp).
Tensor jvp(const TensorFn& f, const Tensor& x, const Tensor& v);
// The Hessian of a scalar function flattened to (numel(x), numel(x)).
Tensor hessian(const ScalarFn& f, const Tensor& x);

}  // namespace gg
