// The attention regressor, its losses, and the MAML inner step, for T tasks at once.
//
//   tokens (T, S·N, 3) ─ embed: Linear(3, D) → gelu → Linear(D, D) ─┐
//   2 × pre-norm block:  h ← h + Wo·attention(LN(h)·Wq, LN(h)·Wk, LN(h)·Wv)   (H heads of D/H)
//                        h ← h + W2·gelu(W1·LN(h) + b1) + b2
//   readout: LN(h)·Wr + br → prediction (T, S·N, 1), read at the target tokens
//
// Attention runs over each sequence separately: (T, S·N, D) is viewed as (T·S, N, H, D/H) and
// permuted to (T·S, H, N, D/H), the (B, H, N, d) layout of gg::attention. --attention picks
// gg::attention (fused: no N×N buffer in the forward, the backward or the backward-over-backward)
// or gg::attention_composite (matmul + softmax: N×N scores and probabilities on the tape).
//
// Per-task weights use maml_sine's trick: the shared weights θ (in, out) are expanded to a
// stride-0 view (T, in, out), the support loss is the SUM of the per-task losses, so its
// gradient with respect to the expanded weights is the stack of the T per-task gradients, and
// θ'_t = θ_t − α·∇ is T differently adapted models in one batched graph.
#pragma once
#include <cmath>
#include <string>
#include <vector>

#include "episodes.h"
#include "gradgrad.h"

namespace mattn {

// Shared weights: (in, out) matrices and (1, out) biases. Per-task weights: (T, in, out), (T, 1, out).
using Params = std::vector<gg::Tensor>;

enum class AttentionOp { fused, composite };
inline const char* name(AttentionOp op) { return op == AttentionOp::fused ? "fused" : "composite"; }

struct ModelShape {
  int64_t d_model = 32, heads = 4, mlp = 64, blocks = 2;
  static constexpr int64_t kFeatures = 3;  // [x, y or 0, is_target]
  int64_t head_dim() const { return d_model / heads; }
};

// Layout of the parameter list: embedding, then kPerBlock tensors per block, then the readout.
constexpr size_t kEmbed = 4;     // We1 (3, D), be1 (1, D), We2 (D, D), be2 (1, D)
constexpr size_t kPerBlock = 8;  // Wq, Wk, Wv, Wo (D, D), W1 (D, M), b1 (1, M), W2 (M, D), b2 (1, D)
constexpr size_t kReadout = 2;   // Wr (D, 1), br (1, 1)

inline std::vector<std::string> param_names(const ModelShape& m) {
  std::vector<std::string> n = {"embed.W1", "embed.b1", "embed.W2", "embed.b2"};
  for (int64_t b = 0; b < m.blocks; ++b)
    for (const char* s : {"Wq", "Wk", "Wv", "Wo", "mlp.W1", "mlp.b1", "mlp.W2", "mlp.b2"})
      n.push_back("block" + std::to_string(b) + "." + s);
  n.push_back("readout.W");
  n.push_back("readout.b");
  return n;
}

// PyTorch's nn.Linear initialisation, U[−1/√in, 1/√in], for weights and biases alike.
inline Params init_params(const ModelShape& m, gg::DType dtype, gg::Device device) {
  Params p;
  auto add = [&](int64_t in, int64_t out, int64_t rows) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    p.push_back(((gg::rand({rows, out}, dtype, device) * 2.0 - 1.0) * bound).requires_grad_());
  };
  auto linear = [&](int64_t in, int64_t out) {
    add(in, out, in);  // weight (in, out)
    add(in, out, 1);   // bias (1, out)
  };
  const int64_t D = m.d_model, M = m.mlp;
  linear(ModelShape::kFeatures, D);
  linear(D, D);
  for (int64_t b = 0; b < m.blocks; ++b) {
    for (int i = 0; i < 4; ++i) add(D, D, D);  // Wq, Wk, Wv, Wo (no biases)
    linear(D, M);
    linear(M, D);
  }
  linear(D, 1);
  return p;
}

inline gg::Tensor attend(AttentionOp op, const gg::Tensor& q, const gg::Tensor& k, const gg::Tensor& v) {
  return op == AttentionOp::fused ? gg::attention(q, k, v) : gg::attention_composite(q, k, v);
}

// Predictions at every token: (T, S·N, 1). Works with shared weights (matmul broadcasts them
// over the task dim) and with per-task ones.
inline gg::Tensor forward(const Params& p, const ModelShape& m, const Sequences& s, AttentionOp op) {
  const int64_t T = s.tasks(), S = s.per_task, N = s.length, D = m.d_model, H = m.heads, dh = m.head_dim();
  // (T, S·N, D) -> (T·S, H, N, dh): one attention batch entry per sequence.
  auto split_heads = [&](const gg::Tensor& x) { return gg::permute(gg::reshape(x, {T * S, N, H, dh}), {0, 2, 1, 3}); };
  auto merge_heads = [&](const gg::Tensor& x) { return gg::reshape(gg::permute(x, {0, 2, 1, 3}), {T, S * N, D}); };

  gg::Tensor h = gg::matmul(gg::gelu(gg::matmul(s.tokens, p[0]) + p[1]), p[2]) + p[3];  // (T, S·N, D)
  for (int64_t b = 0; b < m.blocks; ++b) {
    const gg::Tensor* w = &p[kEmbed + static_cast<size_t>(b) * kPerBlock];
    gg::Tensor a = gg::layer_norm(h, {D});
    gg::Tensor o = attend(op, split_heads(gg::matmul(a, w[0])), split_heads(gg::matmul(a, w[1])),
                          split_heads(gg::matmul(a, w[2])));  // (T·S, H, N, dh)
    h = h + gg::matmul(merge_heads(o), w[3]);
    a = gg::layer_norm(h, {D});
    h = h + gg::matmul(gg::gelu(gg::matmul(a, w[4]) + w[5]), w[6]) + w[7];
  }
  const size_t r = kEmbed + static_cast<size_t>(m.blocks) * kPerBlock;
  return gg::matmul(gg::layer_norm(h, {D}), p[r]) + p[r + 1];  // (T, S·N, 1)
}

// Σ_t MSE_t over each task's target tokens (the sum makes the gradient with respect to per-task
// weights the stack of per-task gradients).
inline gg::Tensor summed_task_loss(const Params& p, const ModelShape& m, const Sequences& s, AttentionOp op) {
  const gg::Tensor err = (forward(p, m, s, op) - s.y) * s.target;  // 0 on context tokens
  return gg::sum(err * err) / static_cast<double>(s.targets_per_task);
}

// Mean over tasks of the per-task MSE.
inline gg::Tensor mean_task_loss(const Params& p, const ModelShape& m, const Sequences& s, AttentionOp op) {
  return summed_task_loss(p, m, s, op) / static_cast<double>(s.tasks());
}

// Each task's MSE on its target tokens, as plain numbers, recording nothing.
inline std::vector<double> per_task_mse(const Params& p, const ModelShape& m, const Sequences& s, AttentionOp op) {
  gg::NoGradGuard no_grad;
  const gg::Tensor err = (forward(p, m, s, op) - s.y) * s.target;
  return (gg::sum(err * err, {1, 2}) / static_cast<double>(s.targets_per_task)).to_vector<double>();
}

// θ -> θ_t: one stride-0 copy per task, (r, c) -> (T, r, c).
inline Params per_task(const Params& shared, int64_t tasks) {
  Params out;
  for (const gg::Tensor& w : shared) out.push_back(gg::expand(w, {tasks, w.size(0), w.size(1)}));
  return out;
}

// One inner SGD step per task on the support loss: θ'_t = θ_t − α ∇θ_t L_t(support_t).
// create_graph keeps the inner backward (through attention's backward) on the tape: the outer
// gradient then runs through attention's backward-over-backward (second-order MAML).
inline Params sgd_step(const Params& task_params, const ModelShape& m, const Sequences& support, double alpha,
                       AttentionOp op, bool create_graph) {
  gg::GradOptions options;
  options.create_graph = create_graph;
  const gg::TensorList g = gg::grad({summed_task_loss(task_params, m, support, op)}, task_params, {}, options);
  Params adapted;
  for (size_t i = 0; i < task_params.size(); ++i) adapted.push_back(task_params[i] - g[i] * alpha);
  return adapted;
}

// The MAML objective: mean over tasks of the query loss after one inner step from θ.
inline gg::Tensor meta_loss(const Params& shared, const ModelShape& m, const Episode& e, double alpha, AttentionOp op,
                            bool second_order = true) {
  const Params adapted = sgd_step(per_task(shared, e.support.tasks()), m, e.support, alpha, op, second_order);
  return mean_task_loss(adapted, m, e.query, op);
}

// The meta-gradient: ∂ meta_loss / ∂θ for every shared weight.
inline gg::TensorList meta_gradient(const Params& shared, const ModelShape& m, const Episode& e, double alpha,
                                    AttentionOp op) {
  return gg::grad({meta_loss(shared, m, e, alpha, op)}, shared);
}

// Test-time adaptation: `steps` plain SGD steps per task on the support loss, nothing kept on
// the tape. Calls visit(step, params) after 0, 1, ..., steps steps.
template <typename Visit>
void fine_tune(const Params& shared, const ModelShape& m, const Sequences& support, double alpha, int steps,
               AttentionOp op, Visit visit) {
  Params p;
  for (const gg::Tensor& w : per_task(shared, support.tasks())) p.push_back(w.detach());
  visit(0, p);
  for (int step = 1; step <= steps; ++step) {
    for (gg::Tensor& w : p) w = w.detach().requires_grad_();  // fresh leaves: a one-step tape
    const gg::TensorList g = gg::grad({summed_task_loss(p, m, support, op)}, p);
    gg::NoGradGuard no_grad;
    for (size_t i = 0; i < p.size(); ++i) p[i] = p[i] - g[i] * alpha;
    visit(step, p);
  }
}

}  // namespace mattn
