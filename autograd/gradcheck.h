// Finite-difference checks of analytical derivatives, public so users can check their own
// functions. f64 only: central differences in f32 are too coarse to judge anything.
#pragma once
#include <functional>
#include <string>

#include "../core/tensor.h"

namespace gg {

struct GradcheckOptions {
  double eps = 1e-6;   // central-difference step
  double atol = 1e-5;  // pass when |analytic - numeric| <= atol + rtol·|numeric|, elementwise
  double rtol = 1e-3;
};

struct GradcheckResult {
  bool ok = true;
  double max_abs_error = 0.0;  // over all compared Jacobian entries
  std::string message;         // the first failing entry, when !ok
  explicit operator bool() const { return ok; }
};

using MultiFn = std::function<TensorList(const TensorList&)>;
using SingleFn = std::function<Tensor(const TensorList&)>;

// Compares the Jacobian of f with respect to every input that requires grad, built row by row
// with gg::grad, against central differences.
GradcheckResult gradcheck(const MultiFn& f, const TensorList& inputs, const GradcheckOptions& options = {});
GradcheckResult gradcheck(const SingleFn& f, const TensorList& inputs, const GradcheckOptions& options = {});

// Checks second derivatives: runs gradcheck on (inputs, v) -> grad(f(inputs), inputs, v,
// create_graph) for a random cotangent v, so the backward itself is differentiated.
GradcheckResult gradgradcheck(const MultiFn& f, const TensorList& inputs, const GradcheckOptions& options = {});
GradcheckResult gradgradcheck(const SingleFn& f, const TensorList& inputs, const GradcheckOptions& options = {});

}  // namespace gg
