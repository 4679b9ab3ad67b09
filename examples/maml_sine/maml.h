// The model, the inner SGD step, the MAML meta-loss and Adam, for T tasks at once.
//
// The key trick: how T tasks share one graph but adapt their own weights.
//
//   The network's parameters θ are ordinary tensors, e.g. W2 of shape (40, 40). For a
//   meta-batch of T tasks we make a per-task copy θ_t = expand(θ, (T, 40, 40)): a view with
//   batch stride 0, so no memory is copied. The forward pass is a batched matmul
//   (T, K, 40) x (T, 40, 40), one graph for all tasks.
//
//   The inner loss is the SUM over tasks of each task's mean squared error. Task t's term
//   depends only on slice t of θ_t, so ∂(sum)/∂θ_t is the stack of the T per-task gradients,
//   shape (T, 40, 40), and θ'_t = θ_t − α·∇ is T differently adapted networks.
//
//   The outer (meta) loss is the mean over tasks of the query MSE at θ'_t. Its gradient with
//   respect to the shared θ flows back through θ'_t = θ_t − α·∇θ_t L_inner (create_graph: the
//   inner gradient is itself on the tape, giving the second-order term) and then through the
//   expand, whose backward sums the T per-task contributions into θ's shape.
#pragma once
#include <cmath>
#include <vector>

#include "gradgrad.h"
#include "sine_tasks.h"

namespace maml {

// {W1, b1, W2, b2, W3, b3} of the 1-40-40-1 ReLU network. Shared parameters have shapes
// (in, out) and (1, out); per-task parameters have a leading task dim: (T, in, out), (T, 1, out).
using Params = std::vector<gg::Tensor>;

constexpr int64_t kHidden = 40;

// PyTorch's nn.Linear initialisation: weights and biases ~ U[−1/√in, 1/√in].
inline Params init_mlp(gg::DType dtype, gg::Device device) {
  const int64_t sizes[] = {1, kHidden, kHidden, 1};
  Params p;
  for (int layer = 0; layer < 3; ++layer) {
    const int64_t in = sizes[layer], out = sizes[layer + 1];
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    gg::Tensor w = (gg::rand({in, out}, dtype, device) * 2.0 - 1.0) * bound;
    gg::Tensor b = (gg::rand({1, out}, dtype, device) * 2.0 - 1.0) * bound;
    p.push_back(w.requires_grad_());
    p.push_back(b.requires_grad_());
  }
  return p;
}

// x: (T, N, 1) -> prediction (T, N, 1). Works for shared parameters (matmul broadcasts them
// over the task dim) and for per-task ones alike.
inline gg::Tensor forward(const Params& p, const gg::Tensor& x) {
  gg::Tensor h = gg::relu(gg::matmul(x, p[0]) + p[1]);  // (T, N, 40)
  h = gg::relu(gg::matmul(h, p[2]) + p[3]);             // (T, N, 40)
  return gg::matmul(h, p[4]) + p[5];                    // (T, N, 1)
}

// θ -> θ_t: one stride-0 copy per task, (r, c) -> (T, r, c).
inline Params per_task(const Params& shared, int64_t tasks) {
  Params out;
  for (const gg::Tensor& p : shared) out.push_back(gg::expand(p, {tasks, p.size(0), p.size(1)}));
  return out;
}

// Σ_t MSE_t: the per-task mean squared errors, summed over tasks (all tasks have the same N,
// so that is T · the overall mean).
inline gg::Tensor summed_task_loss(const Params& p, const Points& data) {
  return gg::mse_loss(forward(p, data.x), data.y) * static_cast<double>(data.x.size(0));
}

// Each task's MSE as plain numbers (T values), without recording anything.
inline std::vector<double> per_task_mse(const Params& p, const Points& data) {
  gg::NoGradGuard no_grad;
  gg::Tensor err = forward(p, data.x) - data.y;  // (T, N, 1)
  return gg::mean(err * err, {1, 2}).to_vector<double>();
}

enum class InnerGrad {
  second_order,  // keep the inner gradient on the tape (create_graph): exact MAML
  first_order,   // treat the inner gradient as a constant (FOMAML): no second derivatives
};

// One inner SGD step for every task: θ'_t = θ_t − α ∇θ_t L_t(support_t).
inline Params sgd_step(const Params& task_params, const Points& support, double alpha, InnerGrad mode) {
  gg::GradOptions options;
  options.create_graph = mode == InnerGrad::second_order;
  const gg::TensorList grads = gg::grad({summed_task_loss(task_params, support)}, task_params, {}, options);
  Params adapted;
  for (size_t i = 0; i < task_params.size(); ++i) adapted.push_back(task_params[i] - grads[i] * alpha);
  return adapted;
}

// The MAML objective for a meta-batch: mean over tasks of the query MSE after one inner step.
inline gg::Tensor meta_loss(const Params& shared, const Points& support, const Points& query, double alpha,
                            InnerGrad mode) {
  const Params adapted = sgd_step(per_task(shared, support.x.size(0)), support, alpha, mode);
  return gg::mse_loss(forward(adapted, query.x), query.y);
}

// Test-time fine-tuning: `steps` plain SGD steps per task from the shared θ, nothing kept on
// the tape. Calls `visit(step, params)` after 0, 1, ..., steps steps.
template <typename Visit>
void fine_tune(const Params& shared, const Points& support, double alpha, int steps, Visit visit) {
  Params p;
  for (const gg::Tensor& s : per_task(shared, support.x.size(0))) p.push_back(s.detach());
  visit(0, p);
  for (int step = 1; step <= steps; ++step) {
    for (gg::Tensor& t : p) t = t.detach().requires_grad_();  // fresh leaves: a one-step tape
    const gg::TensorList grads = gg::grad({summed_task_loss(p, support)}, p);
    gg::NoGradGuard no_grad;
    for (size_t i = 0; i < p.size(); ++i) p[i] = p[i] - grads[i] * alpha;
    visit(step, p);
  }
}

// Adam (Kingma & Ba 2015) over a list of parameters, updated in place under NoGradGuard.
class Adam {
 public:
  Adam(Params params, double lr, double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-8)
      : params_(std::move(params)), lr_(lr), beta1_(beta1), beta2_(beta2), eps_(eps) {
    for (const gg::Tensor& p : params_) {
      m_.push_back(gg::zeros_like(p));
      v_.push_back(gg::zeros_like(p));
    }
  }

  void step(const gg::TensorList& grads) {
    gg::NoGradGuard no_grad;
    ++t_;
    const double correction1 = 1.0 - std::pow(beta1_, t_), correction2 = 1.0 - std::pow(beta2_, t_);
    for (size_t i = 0; i < params_.size(); ++i) {
      const gg::Tensor& g = grads[i];
      gg::mul_(m_[i], beta1_);
      gg::add_(m_[i], g, 1.0 - beta1_);  // m ← β1·m + (1 − β1)·g
      gg::mul_(v_[i], beta2_);
      gg::add_(v_[i], g * g, 1.0 - beta2_);  // v ← β2·v + (1 − β2)·g²
      // θ ← θ − lr · m̂ / (√v̂ + ε), with the bias-corrected m̂ = m / c1, v̂ = v / c2.
      gg::add_(params_[i], m_[i] / (gg::sqrt(v_[i] / correction2) + eps_), -lr_ / correction1);
    }
  }

 private:
  Params params_, m_, v_;
  double lr_, beta1_, beta2_, eps_;
  int t_ = 0;
};

}  // namespace maml
