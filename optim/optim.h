// gg::optim: first-order optimizers over a list of parameters, with state per parameter.
//
//   optim::Adam opt(model.parameters(), {/*lr=*/1e-3});
//   loss.backward();  opt.step();  opt.zero_grad();        // gradients from .grad()
//   opt.step(gg::grad({loss}, params));                    // or gradients passed in
//
// Updates run under NoGradGuard and modify the parameters in place (their storage version is
// bumped, so a graph that saved a parameter notices). The formulas are those of PyTorch's
// documentation for torch.optim.SGD, Adam and AdamW (maximize, amsgrad and foreach left out).
// `lr` is a public field: learning-rate schedules are plain functions (optim/schedule.h)
// whose value is assigned before each step.
#pragma once
#include <vector>

#include "../core/tensor.h"

namespace gg::optim {

class Optimizer {
 public:
  explicit Optimizer(TensorList params, double lr);
  virtual ~Optimizer() = default;

  // One update from each parameter's .grad(); parameters without a gradient are skipped.
  void step();
  // One update from the given gradients, one per parameter (an undefined one skips it).
  void step(const TensorList& grads);
  // Drops every parameter's .grad().
  void zero_grad();

  const TensorList& params() const { return params_; }
  // How many updates parameter i has received (its own count, as in PyTorch's per-parameter state).
  int64_t steps(size_t i) const { return steps_.at(i); }

  double lr;

 protected:
  // Updates params_[i] from gradient g; called under NoGradGuard with steps_[i] already counted.
  virtual void update(size_t i, const Tensor& g) = 0;
  TensorList params_;
  std::vector<int64_t> steps_;
};

struct SGDOptions {
  double lr = 1e-2;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;  // L2: g ← g + λθ
  bool nesterov = false;
};

// g ← g + λθ;  b ← μb + (1 − τ)g (b = g on the first step);  g ← g + μb (nesterov) or b;  θ ← θ − lr·g
class SGD : public Optimizer {
 public:
  SGD(TensorList params, const SGDOptions& options = {});
  const Tensor& momentum_buffer(size_t i) const { return buf_.at(i); }  // undefined before the first step
  SGDOptions options;

 protected:
  void update(size_t i, const Tensor& g) override;
  TensorList buf_;
};

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // Adam: L2 added to the gradient; AdamW: decoupled (θ ← θ − lr·λ·θ)
};

// g ← g + λθ;  m ← β1·m + (1 − β1)·g;  v ← β2·v + (1 − β2)·g²;
// θ ← θ − lr · (m / (1 − β1ᵗ)) / (√(v / (1 − β2ᵗ)) + ε)
class Adam : public Optimizer {
 public:
  Adam(TensorList params, const AdamOptions& options = {});
  const Tensor& exp_avg(size_t i) const { return m_.at(i); }
  const Tensor& exp_avg_sq(size_t i) const { return v_.at(i); }
  AdamOptions options;

 protected:
  void update(size_t i, const Tensor& g) override;
  void adam_update(size_t i, const Tensor& g);
  TensorList m_, v_;
};

// Adam with decoupled weight decay (Loshchilov & Hutter 2019): θ ← θ − lr·λ·θ, then Adam's
// update with no L2 term. weight_decay defaults to 1e-2, as in PyTorch.
class AdamW : public Adam {
 public:
  AdamW(TensorList params, const AdamOptions& options = with_default_decay());
  static AdamOptions with_default_decay() {
    AdamOptions o;
    o.weight_decay = 1e-2;
    return o;
  }

 protected:
  void update(size_t i, const Tensor& g) override;
};

// torch.nn.utils.clip_grad_norm_: ‖g‖ is the p-norm (p = norm_type) of all the gradients
// together, as one vector; each gradient is replaced by g · min(1, max_norm / (‖g‖ + 1e-6)) and
// ‖g‖ (before clipping) is returned. p may be any positive number or infinity (the largest |g|).
// A non-finite norm is handled as PyTorch does: with error_if_nonfinite a ValueError naming the
// norm, otherwise the gradients are scaled by the coefficient anyway (a NaN norm makes them all
// NaN; an infinite one gives 0, and NaN where they were infinite). Undefined entries are skipped;
// max_norm <= 0 only measures (gradgrad's own convention; PyTorch would zero or negate them).
// Runs under NoGradGuard.
double clip_grad_norm(TensorList& grads, double max_norm, double norm_type = 2.0, bool error_if_nonfinite = false);

// A plain, differentiable SGD step: θ − lr·g for each pair (no in-place update, nothing
// detached). With gradients from gg::grad(..., create_graph=true) this is the inner step of
// MAML or test-time training, and an outer gradient runs through it.
TensorList sgd_update(const TensorList& params, const TensorList& grads, double lr);

}  // namespace gg::optim
