#include "autograd/gradcheck.h"

#include <cmath>
#include <sstream>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "ops/ops.h"

namespace gg {
namespace {

// A fresh leaf holding `values` in the shape of `like`, requiring grad as `like` does.
Tensor leaf_from(const Tensor& like, const std::vector<double>& values) {
  Tensor t = from_vector(values, like.shape(), like.dtype(), like.device());
  if (like.requires_grad()) t.requires_grad_(true);
  return t;
}

std::vector<std::vector<double>> evaluate(const MultiFn& f, const TensorList& inputs) {
  std::vector<std::vector<double>> out;
  for (const Tensor& y : f(inputs)) out.push_back(y.defined() ? y.to_vector<double>() : std::vector<double>());
  return out;
}

}  // namespace

GradcheckResult gradcheck(const MultiFn& f, const TensorList& inputs, const GradcheckOptions& o) {
  std::vector<std::vector<double>> values;
  std::vector<size_t> diff;  // inputs that require grad
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    if (x.requires_grad())
      GG_CHECK(x.dtype() == DType::f64, DTypeError, "gg::gradcheck: input ", i, " requires grad and must be f64, got ",
               dtype_name(x.dtype()));
    values.push_back(x.to_vector<double>());
    if (x.requires_grad()) diff.push_back(i);
  }
  GG_CHECK(!diff.empty(), ValueError, "gg::gradcheck: no input requires grad");

  TensorList leaves;
  for (size_t i = 0; i < inputs.size(); ++i) leaves.push_back(leaf_from(inputs[i], values[i]));
  TensorList outputs = f(leaves);

  // Numerical Jacobian, column by column: num[out][in][elem] is d out / d x_in[elem] (a vector).
  std::vector<std::vector<std::vector<std::vector<double>>>> num(outputs.size());
  for (auto& per_out : num) per_out.resize(inputs.size());
  for (size_t i : diff) {
    for (size_t e = 0; e < values[i].size(); ++e) {
      std::vector<double> plus = values[i], minus = values[i];
      plus[e] += o.eps;
      minus[e] -= o.eps;
      TensorList args_p = leaves, args_m = leaves;
      args_p[i] = leaf_from(inputs[i], plus);
      args_m[i] = leaf_from(inputs[i], minus);
      auto yp = evaluate(f, args_p), ym = evaluate(f, args_m);
      for (size_t k = 0; k < outputs.size(); ++k) {
        std::vector<double> col(yp[k].size());
        for (size_t r = 0; r < col.size(); ++r) col[r] = (yp[k][r] - ym[k][r]) / (2 * o.eps);
        num[k][i].push_back(std::move(col));
      }
    }
  }

  GradcheckResult res;
  TensorList diff_leaves;
  for (size_t i : diff) diff_leaves.push_back(leaves[i]);
  for (size_t k = 0; k < outputs.size(); ++k) {
    const Tensor& y = outputs[k];
    if (!y.defined()) continue;
    const int64_t ny = y.numel();
    for (int64_t r = 0; r < ny; ++r) {
      // Row r of the Jacobian of output k: the gradient of y[r].
      TensorList analytic(diff.size());
      if (y.requires_grad()) {
        std::vector<double> onehot(static_cast<size_t>(ny), 0.0);
        onehot[static_cast<size_t>(r)] = 1.0;
        analytic = grad({y}, diff_leaves, {from_vector(onehot, y.shape(), y.dtype(), y.device())},
                        /*retain_graph=*/true, /*create_graph=*/false, /*allow_unused=*/true);
      }
      for (size_t j = 0; j < diff.size(); ++j) {
        size_t i = diff[j];
        std::vector<double> a = analytic[j].defined() ? analytic[j].to_vector<double>()
                                                      : std::vector<double>(values[i].size(), 0.0);
        for (size_t e = 0; e < a.size(); ++e) {
          double n = num[k][i][e][static_cast<size_t>(r)], err = std::abs(a[e] - n);
          res.max_abs_error = std::max(res.max_abs_error, err);
          if (res.ok && !(err <= o.atol + o.rtol * std::abs(n))) {
            std::ostringstream os;
            os.precision(10);
            os << "gradcheck: Jacobian mismatch for output " << k << " element " << r << " w.r.t. input " << i
               << " element " << e << ": analytical " << a[e] << ", numerical " << n;
            res.ok = false;
            res.message = os.str();
          }
        }
      }
    }
  }
  return res;
}

GradcheckResult gradcheck(const SingleFn& f, const TensorList& inputs, const GradcheckOptions& o) {
  return gradcheck(MultiFn([&](const TensorList& xs) { return TensorList{f(xs)}; }), inputs, o);
}

GradcheckResult gradgradcheck(const MultiFn& f, const TensorList& inputs, const GradcheckOptions& o) {
  TensorList outs = f(inputs);
  TensorList cotangents;
  for (const Tensor& y : outs) {
    Tensor v = randn(y.shape(), DType::f64, y.device());
    v.requires_grad_(true);
    cotangents.push_back(v);
  }
  const size_t n_in = inputs.size();
  MultiFn first_order = [&, n_in](const TensorList& args) -> TensorList {
    TensorList xs(args.begin(), args.begin() + static_cast<long>(n_in));
    TensorList vs(args.begin() + static_cast<long>(n_in), args.end());
    TensorList diff_xs;
    for (const Tensor& x : xs)
      if (x.requires_grad()) diff_xs.push_back(x);
    TensorList ys = f(xs);
    TensorList gs = grad(ys, diff_xs, vs, std::nullopt, /*create_graph=*/true, /*allow_unused=*/true);
    for (size_t j = 0; j < gs.size(); ++j)
      if (!gs[j].defined()) gs[j] = zeros_like(diff_xs[j]);
    return gs;
  };
  TensorList all = inputs;
  all.insert(all.end(), cotangents.begin(), cotangents.end());
  return gradcheck(first_order, all, o);
}

GradcheckResult gradgradcheck(const SingleFn& f, const TensorList& inputs, const GradcheckOptions& o) {
  return gradgradcheck(MultiFn([&](const TensorList& xs) { return TensorList{f(xs)}; }), inputs, o);
}

}  // namespace gg
