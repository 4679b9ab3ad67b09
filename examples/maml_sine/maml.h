// The model, the inner SGD step and the MAML meta-loss, for T tasks at once, on gg::nn and
// gg::optim.
//
// The key trick: how T tasks share one graph but adapt their own weights.
//
//   The network is a gg::nn::MLP, called functionally: net(params, x) with params any named
//   tensors of the right shapes. For a meta-batch of T tasks, gg::nn::expand_params makes a
//   per-task copy θ_t of every parameter, e.g. W2 (40, 40) -> (T, 40, 40): a view with batch
//   stride 0, so no memory is copied. The forward is a batched matmul, one graph for all tasks.
//
//   The inner loss is the SUM over tasks of each task's mean squared error. Task t's term
//   depends only on slice t of θ_t, so ∂(sum)/∂θ_t is the stack of the T per-task gradients,
//   and θ'_t = θ_t − α·∇ (gg::optim::sgd_update) is T differently adapted networks.
//
//   The outer (meta) loss is the mean over tasks of the query MSE at θ'_t. Its gradient with
//   respect to the shared θ flows back through θ'_t = θ_t − α·∇θ_t L_inner (create_graph: the
//   inner gradient is itself on the tape, giving the second-order term) and then through the
//   expand, whose backward sums the T per-task contributions into θ's shape.
#pragma once
#include <memory>
#include <vector>

#include "gradgrad.h"
#include "sine_tasks.h"

namespace maml {

// Named parameters of the network: shared ones ("layers.0.weight" (40, 1), "layers.0.bias"
// (40), ...) or per-task ones with a leading task dim ((T, 40, 1), (T, 1, 40), ...).
using Params = gg::nn::NamedTensors;
using Net = gg::nn::MLP;

constexpr int64_t kHidden = 40;

// The 1-40-40-1 ReLU network, initialised like PyTorch's nn.Linear (U[−1/√in, 1/√in]).
inline std::shared_ptr<Net> make_net(gg::DType dtype, gg::Device device) {
  return std::make_shared<Net>(std::vector<int64_t>{1, kHidden, kHidden, 1}, gg::nn::Activation::relu, true,
                               gg::nn::Init{dtype, device});
}

// Σ_t MSE_t: the per-task mean squared errors, summed over tasks (all tasks have the same N,
// so that is T · the overall mean). x: (T, N, 1).
inline gg::Tensor summed_task_loss(const Net& net, const Params& p, const Points& data) {
  return gg::mse_loss(net(p, data.x), data.y) * static_cast<double>(data.x.size(0));
}

// Each task's MSE as plain numbers (T values), without recording anything.
inline std::vector<double> per_task_mse(const Net& net, const Params& p, const Points& data) {
  gg::NoGradGuard no_grad;
  gg::Tensor err = net(p, data.x) - data.y;  // (T, N, 1)
  return gg::mean(err * err, {1, 2}).to_vector<double>();
}

enum class InnerGrad {
  second_order,  // keep the inner gradient on the tape (create_graph): exact MAML
  first_order,   // treat the inner gradient as a constant (FOMAML): no second derivatives
};

// One inner SGD step for every task: θ'_t = θ_t − α ∇θ_t L_t(support_t).
inline Params sgd_step(const Net& net, const Params& task_params, const Points& support, double alpha,
                       InnerGrad mode) {
  gg::GradOptions options;
  options.create_graph = mode == InnerGrad::second_order;
  const gg::TensorList theta = gg::nn::values(task_params);
  const gg::TensorList grads = gg::grad({summed_task_loss(net, task_params, support)}, theta, {}, options);
  return gg::nn::with_values(task_params, gg::optim::sgd_update(theta, grads, alpha));
}

// The MAML objective for a meta-batch: mean over tasks of the query MSE after one inner step.
inline gg::Tensor meta_loss(const Net& net, const Params& shared, const Points& support, const Points& query,
                            double alpha, InnerGrad mode) {
  const Params adapted = sgd_step(net, gg::nn::expand_params(shared, support.x.size(0)), support, alpha, mode);
  return gg::mse_loss(net(adapted, query.x), query.y);
}

// Test-time fine-tuning: `steps` plain SGD steps per task from the shared θ, nothing kept on
// the tape. Calls `visit(step, params)` after 0, 1, ..., steps steps.
template <typename Visit>
void fine_tune(const Net& net, const Params& shared, const Points& support, double alpha, int steps, Visit visit) {
  Params p;
  for (const auto& [name, t] : gg::nn::expand_params(shared, support.x.size(0))) p.emplace_back(name, t.detach());
  visit(0, p);
  for (int step = 1; step <= steps; ++step) {
    for (auto& [name, t] : p) t = t.detach().requires_grad_();  // fresh leaves: a one-step tape
    const gg::TensorList theta = gg::nn::values(p);
    const gg::TensorList grads = gg::grad({summed_task_loss(net, p, support)}, theta);
    gg::NoGradGuard no_grad;
    p = gg::nn::with_values(p, gg::optim::sgd_update(theta, grads, alpha));
    visit(step, p);
  }
}

}  // namespace maml
