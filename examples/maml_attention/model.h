// The attention regressor, its losses, and the MAML inner step, for T tasks at once, on gg::nn.
//
//   tokens (T, S·N, 3) ─ embed: MLP 3 → D → D (gelu) ─┐
//   2 × gg::nn::TransformerBlock (pre-norm):  h ← h + attn(LN(h));  h ← h + mlp(LN(h))
//        attention: H heads of D/H, no projection biases, over each sequence of N tokens alone
//   readout: Linear(D, 1) on LN(h) → prediction (T, S·N, 1), read at the target tokens
//
// Attention runs over each sequence separately: the S sequences of a task are packed along one
// axis and the blocks are called with segment = N (gg::nn::MultiheadAttention). --attention
// picks gg::attention (fused: no N×N buffer in the forward, the backward or the
// backward-over-backward) or gg::attention_composite (matmul + softmax: N×N scores on the tape);
// the two are two Regressor objects that share no tensors: the parameters are passed in
// (functional call), so the same θ runs through either.
//
// Per-task weights use maml_sine's trick (gg::nn::expand_params): stride-0 views with a leading
// task dim, the support loss is the SUM of the per-task losses, so its gradient with respect to
// the expanded weights is the stack of the T per-task gradients, and θ'_t = θ_t − α·∇ is T
// differently adapted models in one batched graph.
#pragma once
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "episodes.h"
#include "gradgrad.h"

namespace mattn {

using Params = gg::nn::NamedTensors;

enum class AttentionOp { fused, composite };
inline const char* name(AttentionOp op) { return op == AttentionOp::fused ? "fused" : "composite"; }

struct ModelShape {
  int64_t d_model = 32, heads = 4, mlp = 64, blocks = 2;
  static constexpr int64_t kFeatures = 3;  // [x, y or 0, is_target]
  int64_t head_dim() const { return d_model / heads; }
};

class Regressor : public gg::nn::Module {
 public:
  Regressor(const ModelShape& m, AttentionOp op, gg::nn::Init init = {}) : shape(m) {
    using namespace gg::nn;
    embed = register_module("embed", std::make_shared<MLP>(std::vector<int64_t>{ModelShape::kFeatures, m.d_model,
                                                                                m.d_model},
                                                            Activation::gelu, true, init));
    auto list = register_module("blocks", std::make_shared<ModuleList>());
    BlockConfig c;
    c.attention = {m.d_model, m.heads, /*causal=*/false, /*bias=*/false, op == AttentionOp::composite};
    c.mlp_hidden = m.mlp;
    c.activation = Activation::gelu;
    for (int64_t b = 0; b < m.blocks; ++b) {
      blocks.push_back(std::make_shared<TransformerBlock>(c, init));
      list->append(blocks.back());
    }
    ln_f = register_module("ln_f", std::make_shared<LayerNorm>(m.d_model, 1e-5, init));
    readout = register_module("readout", std::make_shared<Linear>(m.d_model, 1, true, init));
  }

  // Predictions at every token, (T, S·N, 1), for sequences of `length` tokens packed along dim 1.
  gg::Tensor predict(const gg::nn::Params& p, const gg::Tensor& tokens, int64_t length) const {
    gg::Tensor h = embed->forward(p.sub("embed"), tokens);  // (T, S·N, D)
    const gg::nn::Params bp = p.sub("blocks");
    for (size_t b = 0; b < blocks.size(); ++b) h = blocks[b]->forward(bp.sub(std::to_string(b)), h, length);
    return readout->forward(p.sub("readout"), ln_f->forward(p.sub("ln_f"), h));
  }
  gg::Tensor predict(const Params& p, const Sequences& s) const { return predict(gg::nn::Params(p), s.tokens, s.length); }

  using gg::nn::Module::forward;
  // Module's interface: tokens (T, S·N, 3) taken as one sequence per row.
  gg::Tensor forward(const gg::nn::Params& p, const gg::Tensor& tokens) const override {
    return predict(p, tokens, tokens.size(1));
  }

  ModelShape shape;
  std::shared_ptr<gg::nn::MLP> embed;
  std::vector<std::shared_ptr<gg::nn::TransformerBlock>> blocks;
  std::shared_ptr<gg::nn::LayerNorm> ln_f;
  std::shared_ptr<gg::nn::Linear> readout;
};

// Σ_t MSE_t over each task's target tokens (the sum makes the gradient with respect to per-task
// weights the stack of per-task gradients).
inline gg::Tensor summed_task_loss(const Regressor& net, const Params& p, const Sequences& s) {
  const gg::Tensor err = (net.predict(p, s) - s.y) * s.target;  // 0 on context tokens
  return gg::sum(err * err) / static_cast<double>(s.targets_per_task);
}

// Mean over tasks of the per-task MSE.
inline gg::Tensor mean_task_loss(const Regressor& net, const Params& p, const Sequences& s) {
  return summed_task_loss(net, p, s) / static_cast<double>(s.tasks());
}

// Each task's MSE on its target tokens, as plain numbers, recording nothing.
inline std::vector<double> per_task_mse(const Regressor& net, const Params& p, const Sequences& s) {
  gg::NoGradGuard no_grad;
  const gg::Tensor err = (net.predict(p, s) - s.y) * s.target;
  return (gg::sum(err * err, {1, 2}) / static_cast<double>(s.targets_per_task)).to_vector<double>();
}

// One inner SGD step per task on the support loss: θ'_t = θ_t − α ∇θ_t L_t(support_t).
// create_graph keeps the inner backward (through attention's backward) on the tape: the outer
// gradient then runs through attention's backward-over-backward (second-order MAML).
inline Params sgd_step(const Regressor& net, const Params& task_params, const Sequences& support, double alpha,
                       bool create_graph) {
  gg::GradOptions options;
  options.create_graph = create_graph;
  const gg::TensorList theta = gg::nn::values(task_params);
  const gg::TensorList g = gg::grad({summed_task_loss(net, task_params, support)}, theta, {}, options);
  return gg::nn::with_values(task_params, gg::optim::sgd_update(theta, g, alpha));
}

// The MAML objective: mean over tasks of the query loss after one inner step from θ.
inline gg::Tensor meta_loss(const Regressor& net, const Params& shared, const Episode& e, double alpha,
                            bool second_order = true) {
  const Params adapted = sgd_step(net, gg::nn::expand_params(shared, e.support.tasks()), e.support, alpha, second_order);
  return mean_task_loss(net, adapted, e.query);
}

// The meta-gradient: ∂ meta_loss / ∂θ for every shared weight, in the order of `shared`.
inline gg::TensorList meta_gradient(const Regressor& net, const Params& shared, const Episode& e, double alpha) {
  return gg::grad({meta_loss(net, shared, e, alpha)}, gg::nn::values(shared));
}

// Test-time adaptation: `steps` plain SGD steps per task on the support loss, nothing kept on
// the tape. Calls visit(step, params) after 0, 1, ..., steps steps.
template <typename Visit>
void fine_tune(const Regressor& net, const Params& shared, const Sequences& support, double alpha, int steps,
               Visit visit) {
  Params p;
  for (const auto& [n, w] : gg::nn::expand_params(shared, support.tasks())) p.emplace_back(n, w.detach());
  visit(0, p);
  for (int step = 1; step <= steps; ++step) {
    for (auto& [n, w] : p) w = w.detach().requires_grad_();  // fresh leaves: a one-step tape
    const gg::TensorList theta = gg::nn::values(p);
    const gg::TensorList g = gg::grad({summed_task_loss(net, p, support)}, theta);
    gg::NoGradGuard no_grad;
    p = gg::nn::with_values(p, gg::optim::sgd_update(theta, g, alpha));
    visit(step, p);
  }
}

}  // namespace mattn
