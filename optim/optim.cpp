#include "optim/optim.h"

#include <cmath>
#include <string>

#include "autograd/grad_mode.h"
#include "core/error.h"
#include "ops/ops.h"

namespace gg::optim {

Optimizer::Optimizer(TensorList params, double learning_rate)
    : lr(learning_rate), params_(std::move(params)), steps_(params_.size(), 0) {
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    GG_CHECK(p.defined(), ValueError, "gg::optim: parameter ", i, " is undefined");
    GG_CHECK(is_floating(p.dtype()), DTypeError, "gg::optim: parameter ", i, " is ", dtype_name(p.dtype()),
             ", a floating type is needed");
    GG_CHECK(p.is_leaf(), ValueError, "gg::optim: parameter ", i, " (shape ", shape_str(p.shape()),
             ") is not a leaf; pass the tensors that hold the weights");
  }
  GG_CHECK(std::isfinite(learning_rate) && learning_rate >= 0, ValueError, "gg::optim: lr must be finite and >= 0, got ",
           learning_rate);
}

void Optimizer::step() {
  TensorList grads;
  grads.reserve(params_.size());
  for (const Tensor& p : params_) grads.push_back(p.grad());
  step(grads);
}

void Optimizer::step(const TensorList& grads) {
  GG_CHECK(grads.size() == params_.size(), ValueError, "gg::optim::step: ", grads.size(), " gradients for ",
           params_.size(), " parameters");
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!grads[i].defined()) continue;
    GG_CHECK(grads[i].shape() == params_[i].shape(), ShapeError, "gg::optim::step: gradient ", i, " has shape ",
             shape_str(grads[i].shape()), ", its parameter ", shape_str(params_[i].shape()));
    ++steps_[i];
    update(i, grads[i].detach());
  }
}

void Optimizer::zero_grad() {
  for (Tensor& p : params_) p.zero_grad();
}

// ------------------------------------------------------------------------------ SGD
SGD::SGD(TensorList params, const SGDOptions& o) : Optimizer(std::move(params), o.lr), options(o), buf_(params_.size()) {
  GG_CHECK(o.momentum >= 0 && o.weight_decay >= 0, ValueError, "gg::optim::SGD: momentum (", o.momentum,
           ") and weight_decay (", o.weight_decay, ") must be >= 0");
  GG_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), ValueError,
           "gg::optim::SGD: nesterov needs momentum > 0 and dampening 0, got momentum ", o.momentum, ", dampening ",
           o.dampening);
}

void SGD::update(size_t i, const Tensor& grad) {
  Tensor& p = params_[i];
  Tensor g = options.weight_decay != 0 ? grad + p * options.weight_decay : grad;
  if (options.momentum != 0) {
    Tensor& b = buf_[i];
    if (!b.defined()) {
      b = clone(g);
    } else {
      mul_(b, options.momentum);
      add_(b, g, 1.0 - options.dampening);
    }
    g = options.nesterov ? g + b * options.momentum : b;
  }
  add_(p, g, -lr);
}

// ------------------------------------------------------------------------------ Adam, AdamW
Adam::Adam(TensorList params, const AdamOptions& o)
    : Optimizer(std::move(params), o.lr), options(o), m_(params_.size()), v_(params_.size()) {
  GG_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1, ValueError,
           "gg::optim::Adam: betas must lie in [0, 1), got ", o.beta1, " and ", o.beta2);
  GG_CHECK(o.eps >= 0 && o.weight_decay >= 0, ValueError, "gg::optim::Adam: eps (", o.eps, ") and weight_decay (",
           o.weight_decay, ") must be >= 0");
}

void Adam::adam_update(size_t i, const Tensor& g) {
  Tensor& p = params_[i];
  if (!m_[i].defined()) {
    m_[i] = zeros_like(p);
    v_[i] = zeros_like(p);
  }
  const double t = static_cast<double>(steps_[i]);
  const double c1 = 1.0 - std::pow(options.beta1, t), c2 = 1.0 - std::pow(options.beta2, t);
  mul_(m_[i], options.beta1);
  add_(m_[i], g, 1.0 - options.beta1);
  mul_(v_[i], options.beta2);
  add_(v_[i], g * g, 1.0 - options.beta2);
  add_(p, m_[i] / (sqrt(v_[i] / c2) + options.eps), -lr / c1);
}

void Adam::update(size_t i, const Tensor& grad) {
  adam_update(i, options.weight_decay != 0 ? grad + params_[i] * options.weight_decay : grad);
}

AdamW::AdamW(TensorList params, const AdamOptions& o) : Adam(std::move(params), o) {}

void AdamW::update(size_t i, const Tensor& grad) {
  if (options.weight_decay != 0) mul_(params_[i], 1.0 - lr * options.weight_decay);
  adam_update(i, grad);
}

double clip_grad_norm(TensorList& grads, double max_norm, double norm_type, bool error_if_nonfinite) {
  GG_CHECK(norm_type > 0, ValueError, "gg::optim::clip_grad_norm: norm_type must be positive or infinity, got ",
           norm_type);
  NoGradGuard no_grad;
  const bool inf_norm = std::isinf(norm_type);
  // Per gradient: max |g| (p = inf), Σ g² (p = 2) or Σ |g|^p; then combined across gradients.
  double acc = 0.0;
  for (const Tensor& g : grads) {
    if (!g.defined() || g.numel() == 0) continue;
    if (inf_norm) {
      const double m = max(abs(g)).item();
      acc = std::isnan(m) || m > acc ? m : acc;  // NaN sticks (std::max would drop it)
    } else {
      acc += (norm_type == 2.0 ? sum(g * g) : sum(pow(abs(g), norm_type))).item();
    }
  }
  const double norm = inf_norm ? acc : norm_type == 2.0 ? std::sqrt(acc) : std::pow(acc, 1.0 / norm_type);
  GG_CHECK(!error_if_nonfinite || std::isfinite(norm), ValueError,
           "gg::optim::clip_grad_norm: the total norm of order ", norm_type, " of the gradients is ",
           std::isnan(norm) ? "nan" : std::to_string(norm),
           ", so they cannot be clipped (error_if_nonfinite = false scales them by it anyway)");
  if (max_norm > 0) {
    // A NaN coefficient must reach the gradients, so the clamp keeps it (std::min would give 1);
    // a coefficient of exactly 1 changes nothing and is skipped.
    const double coef = max_norm / (norm + 1e-6);
    const double clamped = coef > 1.0 ? 1.0 : coef;
    if (clamped != 1.0)
      for (Tensor& g : grads)
        if (g.defined()) g = g * clamped;
  }
  return norm;
}

TensorList sgd_update(const TensorList& params, const TensorList& grads, double lr) {
  GG_CHECK(params.size() == grads.size(), ValueError, "gg::optim::sgd_update: ", grads.size(), " gradients for ",
           params.size(), " parameters");
  TensorList out;
  out.reserve(params.size());
  for (size_t i = 0; i < params.size(); ++i) out.push_back(grads[i].defined() ? params[i] - grads[i] * lr : params[i]);
  return out;
}

}  // namespace gg::optim
