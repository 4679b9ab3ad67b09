// The transforms of autograd/functional.h. Each one follows Note [transforms compose] there:
// make inner variables (inner_inputs), run f in grad mode, differentiate with gg::grad, and
// keep or drop the graph of the last gg::grad by whether the caller's tape tracks the inputs.
#include "autograd/functional.h"

#include "autograd/engine.h"
#include "autograd/forward_ad.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "ops/ops.h"

namespace gg::func {
namespace {

// Whether the caller's tape tracks some of these tensors, so results must stay on it.
bool on_outer_tape(const TensorList& xs) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor& x : xs)
    if (x.defined() && x.requires_grad()) return true;
  return false;
}

// The variables a transform differentiates with respect to. On the outer tape an input that
// requires grad gets an alias recorded on it (identity backward), so whatever is computed from
// the alias is a function of the input; any other input gets a fresh leaf.
TensorList inner_inputs(const char* what, const TensorList& xs, bool outer) {
  TensorList in;
  in.reserve(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& x = xs[i];
    GG_CHECK(x.defined(), ValueError, "gg::func::", what, ": input ", i, " is undefined");
    Tensor alias = x.detach();
    if (outer && x.requires_grad()) {
      record("func_input", {x}, {alias}, {}, [](const BackwardArgs& g) -> TensorList { return {g.grads[0]}; },
             [](const JvpArgs& j) -> TensorList { return {j.tangents[0]}; });
    } else {
      alias.requires_grad_(true);
      detail::copy_tangents(x, alias);  // a dual input stays dual (a transform inside forward mode)
    }
    in.push_back(alias);
  }
  return in;
}

// A result handed back to the caller: on the outer tape as computed, otherwise without history
// (but with its tangents, when the transform runs inside forward mode).
Tensor result(const Tensor& t, bool outer) {
  if (outer || !t.defined()) return t;
  Tensor r = t.detach();
  detail::copy_tangents(t, r);
  return r;
}
TensorList results(const TensorList& ts, bool outer) {
  TensorList out;
  out.reserve(ts.size());
  for (const Tensor& t : ts) out.push_back(result(t, outer));
  return out;
}

// Gradients that gg::grad left undefined (an input the outputs do not use) become zeros.
TensorList zeros_where_unused(TensorList gs, const TensorList& like) {
  for (size_t i = 0; i < gs.size(); ++i)
    if (!gs[i].defined()) gs[i] = zeros_like(like[i]);
  return gs;
}
TensorList all_zeros(const TensorList& like) { return zeros_where_unused(TensorList(like.size()), like); }

void check_scalar(const char* what, const Tensor& y) {
  GG_CHECK(y.defined(), ValueError, "gg::func::", what, ": f returned an undefined tensor");
  GG_CHECK(y.numel() == 1, ValueError, "gg::func::", what, ": f must return a one-element tensor, but returned shape ",
           shape_str(y.shape()));
}

// vs must pair with xs one to one, shape for shape and dtype for dtype.
void check_like(const char* what, const char* vname, const TensorList& vs, const char* xname, const TensorList& xs) {
  GG_CHECK(vs.size() == xs.size(), ValueError, "gg::func::", what, ": got ", vs.size(), " ", vname, " for ", xs.size(),
           " ", xname);
  for (size_t i = 0; i < xs.size(); ++i) {
    GG_CHECK(vs[i].defined(), ValueError, "gg::func::", what, ": ", vname, "[", i, "] is undefined");
    GG_CHECK(vs[i].shape() == xs[i].shape(), ShapeError, "gg::func::", what, ": ", vname, "[", i, "] has shape ",
             shape_str(vs[i].shape()), " but ", xname, "[", i, "] has shape ", shape_str(xs[i].shape()));
    GG_CHECK(vs[i].dtype() == xs[i].dtype(), DTypeError, "gg::func::", what, ": ", vname, "[", i, "] has dtype ",
             dtype_name(vs[i].dtype()), " but ", xname, "[", i, "] has dtype ", dtype_name(xs[i].dtype()));
  }
}

// Σ_i ⟨ws[i], ys[i]⟩ differentiated with respect to `in`, over the pairs where ys[i] is on the
// tape (the others contribute nothing); zeros where no gradient arrives.
TensorList contract_grad(const TensorList& ys, const TensorList& ws, const TensorList& in, bool retain, bool create) {
  TensorList outs, grads;
  for (size_t i = 0; i < ys.size(); ++i)
    if (ys[i].defined() && ys[i].requires_grad()) {
      outs.push_back(ys[i]);
      grads.push_back(ws[i]);
    }
  if (outs.empty()) return all_zeros(in);
  // A recorded gradient (create) is differentiated later through the forward's saved tensors.
  return zeros_where_unused(gg::grad(outs, in, grads, retain || create, create, /*allow_unused=*/true), in);
}

// A tensor shaped like `like` with 1 at flat index k and 0 elsewhere.
Tensor basis(const Tensor& like, int64_t k) {
  std::vector<double> values(static_cast<size_t>(like.numel()), 0.0);
  values[static_cast<size_t>(k)] = 1.0;
  return from_vector(values, like.shape(), like.dtype(), like.device());
}

Shape concat_shapes(const Shape& a, const Shape& b) {
  Shape s = a;
  s.insert(s.end(), b.begin(), b.end());
  return s;
}

// Rows r_k (one per element of an output of shape S, each shaped like inputs[j]) to the block
// ∂y/∂x_j of shape S + x_j.shape.
Tensor rows_to_block(const TensorList& rows, const Shape& out_shape, const Tensor& input) {
  const Shape shape = concat_shapes(out_shape, input.shape());
  if (rows.empty()) return zeros(shape, input.dtype(), input.device());
  return reshape(stack(rows, 0), shape);
}

// Columns c_k (one per element of an input of shape T, each shaped like the output y) to the
// block ∂y/∂x of shape y.shape + T.
Tensor columns_to_block(const TensorList& cols, const Tensor& y, const Tensor& input) {
  const Shape shape = concat_shapes(y.shape(), input.shape());
  if (cols.empty()) return zeros(shape, y.dtype(), y.device());
  const int64_t dim = static_cast<int64_t>(y.shape().size());
  return reshape(stack(cols, dim), shape);
}

// A single-tensor function as a function of a one-element list.
ListScalarFn scalar_on_list(const ScalarFn& f) {
  return [f](const TensorList& xs) { return f(xs[0]); };
}
ListFn tensor_on_list(const TensorFn& f) {
  return [f](const TensorList& xs) { return TensorList{f(xs[0])}; };
}

TensorList values_of(const NamedTensors& named) {
  TensorList v;
  v.reserve(named.size());
  for (const auto& [name, t] : named) v.push_back(t);
  return v;
}
NamedTensors named_like(const NamedTensors& names, const TensorList& values) {
  NamedTensors out;
  out.reserve(names.size());
  for (size_t i = 0; i < names.size(); ++i) out.emplace_back(names[i].first, values[i]);
  return out;
}
ListScalarFn on_names(const NamedScalarFn& f, const NamedTensors& names) {
  return [f, names](const TensorList& xs) { return f(named_like(names, xs)); };
}
ListFn list_on_names(const NamedTensorFn& f, const NamedTensors& names) {
  return [f, names](const TensorList& xs) { return TensorList{f(named_like(names, xs))}; };
}

// Tangents by name must follow the parameters' names, in order.
void check_names(const char* what, const NamedTensors& vs, const NamedTensors& params) {
  GG_CHECK(vs.size() == params.size(), ValueError, "gg::func::", what, ": got ", vs.size(), " tangents for ",
           params.size(), " parameters");
  for (size_t i = 0; i < params.size(); ++i)
    GG_CHECK(vs[i].first == params[i].first, ValueError, "gg::func::", what, ": tangent ", i, " is named '",
             vs[i].first, "' but parameter ", i, " is '", params[i].first, "'");
}

// One forward-mode pass (autograd/forward_ad.h) for the transform `what`: f at xs carrying
// tangents vs at a fresh dual level (an undefined tangent: that input enters without one, a zero
// tangent no rule has to multiply); returns f's outputs and their tangents J·v (zeros where an
// output has none). The inputs enter through inner_inputs when the caller's tape tracks them (so
// the outputs and tangents stay functions of xs and vs), as they are otherwise.
struct ForwardPass {
  TensorList outputs, tangents;
};
ForwardPass forward_pass(const char* what, const ListFn& f, const TensorList& xs, const TensorList& vs,
                         bool outer) {
  fwd::DualLevel level;
  const TensorList in = outer ? inner_inputs(what, xs, true) : xs;
  TensorList duals;
  for (size_t i = 0; i < xs.size(); ++i) duals.push_back(vs[i].defined() ? fwd::make_dual(in[i], vs[i], level) : in[i]);
  const TensorList ys = f(duals);
  ForwardPass r;
  for (const Tensor& y : ys) {
    GG_CHECK(y.defined(), ValueError, "gg::func::", what, ": f returned an undefined tensor");
    fwd::Dual d = fwd::unpack_dual(y, level);
    r.outputs.push_back(result(d.primal, outer));
    r.tangents.push_back(result(d.tangent.defined() ? d.tangent : zeros_like(y), outer));
  }
  return r;  // closing the level erases the level's tangents from everything f made
}

}  // namespace

// ---------------------------------------------------------------- grad

std::pair<Tensor, TensorList> value_and_grad(const ListScalarFn& f, const TensorList& xs) {
  const bool outer = on_outer_tape(xs);
  EnableGradGuard enable;
  const TensorList in = inner_inputs("grad", xs, outer);
  const Tensor y = f(in);
  check_scalar("grad", y);
  TensorList g = contract_grad({y}, {ones_like(y)}, in, /*retain=*/false, /*create=*/outer);
  return {result(y, outer), g};
}

TensorList grad(const ListScalarFn& f, const TensorList& xs) { return value_and_grad(f, xs).second; }

Tensor grad(const ScalarFn& f, const Tensor& x) { return grad(scalar_on_list(f), TensorList{x})[0]; }

std::pair<Tensor, NamedTensors> value_and_grad(const NamedScalarFn& f, const NamedTensors& params) {
  auto [y, g] = value_and_grad(on_names(f, params), values_of(params));
  return {y, named_like(params, g)};
}

NamedTensors grad(const NamedScalarFn& f, const NamedTensors& params) { return value_and_grad(f, params).second; }

// ---------------------------------------------------------------- vjp, jvp, hvp

VjpResult vjp(const ListFn& f, const TensorList& xs) {
  const bool outer = on_outer_tape(xs);
  EnableGradGuard enable;
  const TensorList in = inner_inputs("vjp", xs, outer);
  const TensorList ys = f(in);
  VjpFn fn = [ys, in, outer](const TensorList& cotangents) {
    check_like("vjp", "cotangents", cotangents, "outputs", ys);
    // Called later, perhaps under NoGradGuard: the grad mode of this call decides.
    const bool create = GradMode::is_enabled() && (outer || on_outer_tape(cotangents));
    return results(contract_grad(ys, cotangents, in, /*retain=*/true, create), create);
  };
  return {results(ys, outer), fn};
}

// True forward mode: one pass of f carrying the tangents (no graph kept unless the caller's tape
// tracks xs or vs, when f runs in grad mode so that the results are differentiable again).
JvpResult jvp(const ListFn& f, const TensorList& xs, const TensorList& vs) {
  check_like("jvp", "v", vs, "x", xs);
  const bool outer = on_outer_tape(xs) || on_outer_tape(vs);
  EnableGradGuard enable;
  ForwardPass p = forward_pass("jvp", f, xs, vs, outer);
  return {p.outputs, p.tangents};
}

// Forward over reverse: the gradient of f is computed from inputs carrying the tangents vs, so
// each op of the backward carries its tangent too and the gradient arrives with tangent H·v: one
// backward, with a tangent beside it (about the cost of two gradients, no second graph).
TensorList hvp(const ListScalarFn& f, const TensorList& xs, const TensorList& vs) {
  check_like("hvp", "v", vs, "x", xs);
  const bool outer = on_outer_tape(xs) || on_outer_tape(vs);
  EnableGradGuard enable;
  fwd::DualLevel level;
  const TensorList in = inner_inputs("hvp", xs, outer);
  TensorList duals;
  for (size_t i = 0; i < in.size(); ++i) duals.push_back(fwd::make_dual(in[i], vs[i], level));
  const Tensor y = f(duals);
  check_scalar("hvp", y);
  const TensorList g = contract_grad({y}, {ones_like(y)}, duals, /*retain=*/false, /*create=*/outer);
  TensorList hv;
  for (size_t i = 0; i < g.size(); ++i) {
    const Tensor t = fwd::unpack_dual(g[i], level).tangent;
    hv.push_back(result(t.defined() ? t : zeros_like(xs[i]), outer));  // H·v
  }
  return hv;
}

Tensor hvp(const ScalarFn& f, const Tensor& x, const Tensor& v) { return hvp(scalar_on_list(f), TensorList{x}, {v})[0]; }

NamedTensors hvp(const NamedScalarFn& f, const NamedTensors& params, const NamedTensors& vs) {
  check_names("hvp", vs, params);
  return named_like(params, hvp(on_names(f, params), values_of(params), values_of(vs)));
}

NamedVjpResult vjp(const NamedTensorFn& f, const NamedTensors& params) {
  VjpResult r = vjp(list_on_names(f, params), values_of(params));
  VjpFn fn = r.vjp_fn;
  return {r.outputs[0], [fn, params](const Tensor& u) { return named_like(params, fn({u})); }};
}

std::pair<Tensor, Tensor> jvp(const NamedTensorFn& f, const NamedTensors& params, const NamedTensors& vs) {
  check_names("jvp", vs, params);
  JvpResult r = jvp(list_on_names(f, params), values_of(params), values_of(vs));
  return {r.outputs[0], r.tangents[0]};
}

// ---------------------------------------------------------------- Jacobians and Hessians

std::vector<TensorList> jacrev(const ListFn& f, const TensorList& xs) {
  const bool outer = on_outer_tape(xs);
  EnableGradGuard enable;
  const TensorList in = inner_inputs("jacrev", xs, outer);
  const TensorList ys = f(in);
  std::vector<TensorList> jac(ys.size());
  for (size_t i = 0; i < ys.size(); ++i) {
    std::vector<TensorList> rows(xs.size());  // rows[j][k] = ∂ys[i][k]/∂xs[j]
    for (int64_t k = 0; k < ys[i].numel(); ++k) {
      const TensorList r = contract_grad({ys[i]}, {basis(ys[i], k)}, in, /*retain=*/true, /*create=*/outer);
      for (size_t j = 0; j < xs.size(); ++j) rows[j].push_back(r[j]);
    }
    for (size_t j = 0; j < xs.size(); ++j) jac[i].push_back(result(rows_to_block(rows[j], ys[i].shape(), xs[j]), outer));
  }
  return jac;
}

// One forward-mode pass (jvp) per input element, each giving a column of every block: n passes
// of f for n input elements, against jacrev's one backward per output element.
std::vector<TensorList> jacfwd(const ListFn& f, const TensorList& xs) {
  for (size_t j = 0; j < xs.size(); ++j)
    GG_CHECK(xs[j].defined(), ValueError, "gg::func::jacfwd: input ", j, " is undefined");
  const bool outer = on_outer_tape(xs);
  EnableGradGuard enable;
  TensorList ys;  // f's outputs, for the shapes of the blocks (from a plain evaluation if no column runs)
  std::vector<std::vector<TensorList>> cols(xs.size());  // cols[j][i][k] = ∂ys[i]/∂xs[j][k]
  for (size_t j = 0; j < xs.size(); ++j)
    for (int64_t k = 0; k < xs[j].numel(); ++k) {
      TensorList vs(xs.size());  // the other inputs carry no tangent
      vs[j] = basis(xs[j], k);
      ForwardPass p = forward_pass("jacfwd", f, xs, vs, outer);
      if (ys.empty()) ys = p.outputs;
      cols[j].resize(p.tangents.size());
      for (size_t i = 0; i < p.tangents.size(); ++i) cols[j][i].push_back(p.tangents[i]);
    }
  if (ys.empty()) ys = f(xs);
  std::vector<TensorList> jac(ys.size(), TensorList(xs.size()));
  for (size_t j = 0; j < xs.size(); ++j) {
    cols[j].resize(ys.size());
    for (size_t i = 0; i < ys.size(); ++i) jac[i][j] = result(columns_to_block(cols[j][i], ys[i], xs[j]), outer);
  }
  return jac;
}

Tensor jacrev(const TensorFn& f, const Tensor& x) { return jacrev(tensor_on_list(f), TensorList{x})[0][0]; }
Tensor jacfwd(const TensorFn& f, const Tensor& x) { return jacfwd(tensor_on_list(f), TensorList{x})[0][0]; }

std::vector<TensorList> hessian(const ListScalarFn& f, const TensorList& xs) {
  // jacrev of the gradient: jacrev's inner variables require grad, so the gradient is recorded
  // (create_graph) and each of jacrev's rows differentiates it once more.
  return jacrev([&f](const TensorList& in) {
    const Tensor y = f(in);
    check_scalar("hessian", y);
    return contract_grad({y}, {ones_like(y)}, in, /*retain=*/true, /*create=*/true);
  }, xs);
}

NamedTensors jacrev(const NamedTensorFn& f, const NamedTensors& params) {
  return named_like(params, jacrev(list_on_names(f, params), values_of(params))[0]);
}
NamedTensors jacfwd(const NamedTensorFn& f, const NamedTensors& params) {
  return named_like(params, jacfwd(list_on_names(f, params), values_of(params))[0]);
}

NamedHessian hessian(const NamedScalarFn& f, const NamedTensors& params) {
  const std::vector<TensorList> h = hessian(on_names(f, params), values_of(params));
  NamedHessian out;
  for (size_t i = 0; i < params.size(); ++i) out.emplace_back(params[i].first, named_like(params, h[i]));
  return out;
}

Tensor hessian(const ScalarFn& f, const Tensor& x) { return hessian(scalar_on_list(f), TensorList{x})[0][0]; }

}  // namespace gg::func

namespace gg {

Tensor hvp(const ScalarFn& f, const Tensor& x, const Tensor& v) {
  GG_CHECK(v.shape() == x.shape(), ShapeError, "gg::hvp: v has shape ", shape_str(v.shape()), " but x has shape ",
           shape_str(x.shape()));
  return func::hvp(f, x, v);
}

Tensor jvp(const TensorFn& f, const Tensor& x, const Tensor& v) {
  GG_CHECK(v.shape() == x.shape(), ShapeError, "gg::jvp: v has shape ", shape_str(v.shape()), " but x has shape ",
           shape_str(x.shape()));
  return func::jvp([&f](const TensorList& xs) { return TensorList{f(xs[0])}; }, {x}, {v}).tangents[0];
}

Tensor hessian(const ScalarFn& f, const Tensor& x) {
  const int64_t n = x.numel();
  return reshape(func::hessian(f, x), {n, n});
}

}  // namespace gg
