// The model, the test-time-training unroll, the meta-loss and Adam.
//
// The model is a small pre-LayerNorm causal transformer language model:
//
//   x = tok[token] + pos[position in chunk]                          (B, C, D)
//   per block:  x += Wo · attention(LN(x)·Wqkv, causal)               4 heads of D/4
//               x += W2 · gelu(LN(x)·W1 + b1) + b2                    hidden 4·D
//   logits = LN(x) · head    (head = tokᵀ with --tied)                (B, C, V)
//
// A sequence of T tokens is read in chunks of C. Attention is local to the chunk (a sliding
// window aligned with the chunks, as TTT-E2E pairs sliding-window attention with test-time
// training): whatever the model knows about earlier chunks it knows only through its weights.
//
// Test-time training (TTT-E2E, Tandon et al. 2025): the MLP weights {W1, b1, W2, b2} of the
// last `ttt_blocks` blocks are fast weights, one copy per sequence. Chunk c is predicted with
// the fast weights W_c; then SGD on chunk c's own next-token loss gives W_{c+1}:
//
//   W_0 = θ_mlp,   W_{c+1} = W_c − η ∇_W ℓ_c(W_c),   ℓ_c = mean CE of chunk c under W_c
//
// and the meta-loss is the mean of ℓ_c over all chunks. The outer loop meta-learns ALL of θ
// through this unroll. The outer gradient differentiates the inner gradients ∇_W ℓ_c, i.e. a
// backward pass (gg::grad with create_graph). When the fast MLP of block 1 feeds the attention
// of block 2 (ttt_blocks = 2, the default), the inner gradient runs through that attention's
// backward, so the outer gradient runs the fused backward-over-backward of causal attention.
// With ttt_blocks = 1 the inner gradient stops at the last block's MLP input (attention comes
// before the MLP in a block): still second order, but attention is only differentiated once.
//
// Per-sequence fast weights without copies: W (in, out) -> expand to (B, in, out), a stride-0
// view, and the MLP is a batched matmul. The inner loss is the SUM over sequences of each
// sequence's mean CE, so its gradient with respect to the expanded weights is the stack of the
// per-sequence gradients (the trick of examples/maml_sine/maml.h).
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "gradgrad.h"
#include "markov.h"

namespace ttt {

using gg::Tensor;
using gg::TensorList;

struct ModelConfig {
  int64_t vocab = 16, d_model = 64, heads = 4, blocks = 2, mlp_hidden = 256, chunk = 32;
  bool tied = false;                 // output head = token embeddingᵀ
  int64_t ttt_blocks = 2;            // fast weights: the MLPs of the last ttt_blocks blocks
  bool composite_attention = false;  // gg::attention_composite instead of the fused op (a check)
};

struct Block {
  Tensor ln1_w, ln1_b;  // (D)
  Tensor w_qkv;         // (D, 3D)
  Tensor w_o;           // (D, D)
  Tensor ln2_w, ln2_b;  // (D)
  Tensor w1, b1;        // (D, M), (1, M)
  Tensor w2, b2;        // (M, D), (1, D)
};

struct Model {
  ModelConfig cfg;
  Tensor tok;             // (V, D)
  Tensor pos;             // (C, D)
  std::vector<Block> blocks;
  Tensor lnf_w, lnf_b;    // (D)
  Tensor head;            // (D, V); undefined when tied

  // Every parameter once, in a fixed order (Adam, finite differences). M: Model or const Model.
  template <typename M, typename F> static void for_each(M& m, F f) {
    f(m.tok);
    f(m.pos);
    for (auto& b : m.blocks)
      for (auto* t : {&b.ln1_w, &b.ln1_b, &b.w_qkv, &b.w_o, &b.ln2_w, &b.ln2_b, &b.w1, &b.b1, &b.w2, &b.b2}) f(*t);
    f(m.lnf_w);
    f(m.lnf_b);
    if (!m.cfg.tied) f(m.head);
  }
  TensorList parameters() const {
    TensorList out;
    for_each(*this, [&](const Tensor& t) { out.push_back(t); });
    return out;
  }
  Model with_parameters(const TensorList& params) const {  // same config, these tensors
    Model m = *this;
    size_t i = 0;
    for_each(m, [&](Tensor& t) { t = params.at(i++); });
    return m;
  }
  int64_t first_ttt_block() const { return cfg.blocks - cfg.ttt_blocks; }
};

// GPT-2's initialisation: N(0, 0.02), the residual projections scaled by 1/√(2·blocks);
// LayerNorm weights 1, biases 0.
inline Model init_model(const ModelConfig& cfg, gg::DType dtype, gg::Device device) {
  const int64_t D = cfg.d_model, M = cfg.mlp_hidden;
  const double std = 0.02, residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(cfg.blocks));
  auto normal = [&](gg::Shape shape, double s) { return (gg::randn(shape, dtype, device) * s).requires_grad_(); };
  auto constant = [&](gg::Shape shape, double v) { return gg::full(shape, v, dtype, device).requires_grad_(); };
  Model m;
  m.cfg = cfg;
  m.tok = normal({cfg.vocab, D}, std);
  m.pos = normal({cfg.chunk, D}, std);
  for (int64_t l = 0; l < cfg.blocks; ++l) {
    Block b;
    b.ln1_w = constant({D}, 1.0);
    b.ln1_b = constant({D}, 0.0);
    b.w_qkv = normal({D, 3 * D}, std);
    b.w_o = normal({D, D}, residual_std);
    b.ln2_w = constant({D}, 1.0);
    b.ln2_b = constant({D}, 0.0);
    b.w1 = normal({D, M}, std);
    b.b1 = constant({1, M}, 0.0);
    b.w2 = normal({M, D}, residual_std);
    b.b2 = constant({1, D}, 0.0);
    m.blocks.push_back(b);
  }
  m.lnf_w = constant({D}, 1.0);
  m.lnf_b = constant({D}, 0.0);
  if (!cfg.tied) m.head = normal({D, cfg.vocab}, std);
  return m;
}

// The same values, off the tape (for test-time evaluation: only the fast weights take gradients).
inline Model detached(const Model& m) {
  TensorList p;
  for (const Tensor& t : m.parameters()) p.push_back(t.detach());
  return m.with_parameters(p);
}

// ------------------------------------------------------------------------------- data on device
// A batch cut into chunks: inputs (B, C) i64 and one-hot targets (B, C, V) in the model's dtype
// (the next token of every input position; the last one is the first token of the next chunk).
struct Chunks {
  std::vector<Tensor> inputs;   // each (B, C) i64
  std::vector<Tensor> targets;  // each (B, C, V)
  int64_t count() const { return static_cast<int64_t>(inputs.size()); }
};

inline Chunks make_chunks(const SequenceBatch& s, int64_t chunk, int64_t vocab, gg::DType dtype, gg::Device device) {
  Chunks out;
  const int64_t B = s.batch;
  for (int64_t start = 0; start + chunk <= s.length; start += chunk) {
    std::vector<int64_t> in(static_cast<size_t>(B * chunk));
    std::vector<double> onehot(static_cast<size_t>(B * chunk * vocab), 0.0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < chunk; ++t) {
        in[static_cast<size_t>(b * chunk + t)] = s.token(b, start + t);
        onehot[static_cast<size_t>((b * chunk + t) * vocab + s.token(b, start + t + 1))] = 1.0;
      }
    out.inputs.push_back(gg::from_indices(in, {B, chunk}, device));
    out.targets.push_back(gg::from_vector(onehot, {B, chunk, vocab}, dtype, device));
  }
  return out;
}

// ------------------------------------------------------------------------------- the model
// The MLP weights of one block, shared (w1 (D, M), b1 (1, M), ...) or per sequence
// (w1 (B, D, M), b1 (B, 1, M), ...): matmul and + broadcast either way.
struct MlpWeights {
  Tensor w1, b1, w2, b2;
};
using FastWeights = std::vector<MlpWeights>;  // one per TTT block, the last ttt_blocks blocks

inline TensorList flatten(const FastWeights& f) {
  TensorList out;
  for (const MlpWeights& w : f)
    for (const Tensor& t : {w.w1, w.b1, w.w2, w.b2}) out.push_back(t);
  return out;
}
inline FastWeights unflatten(const TensorList& t) {
  FastWeights f;
  for (size_t i = 0; i + 3 < t.size(); i += 4) f.push_back({t[i], t[i + 1], t[i + 2], t[i + 3]});
  return f;
}

// θ_mlp -> one stride-0 copy per sequence: (r, c) -> (B, r, c).
inline FastWeights per_sequence(const Model& m, int64_t B) {
  TensorList out;
  for (int64_t l = m.first_ttt_block(); l < m.cfg.blocks; ++l) {
    const Block& b = m.blocks[static_cast<size_t>(l)];
    for (const Tensor& t : {b.w1, b.b1, b.w2, b.b2}) out.push_back(gg::expand(t, {B, t.size(0), t.size(1)}));
  }
  return unflatten(out);
}

inline Tensor mlp(const Tensor& x, const MlpWeights& w) {  // x (B, C, D) -> (B, C, D)
  return gg::matmul(gg::gelu(gg::matmul(x, w.w1) + w.b1), w.w2) + w.b2;
}

inline Tensor self_attention(const ModelConfig& cfg, const Block& blk, const Tensor& x) {  // (B, C, D)
  const int64_t B = x.size(0), C = x.size(1), D = cfg.d_model, H = cfg.heads;
  const Tensor qkv = gg::matmul(x, blk.w_qkv);  // (B, C, 3D)
  auto heads = [&](int64_t part) {              // (B, C, D) slice -> (B, H, C, D/H)
    return gg::permute(gg::reshape(gg::slice(qkv, 2, part * D, (part + 1) * D), {B, C, H, D / H}), {0, 2, 1, 3});
  };
  const gg::AttentionOptions causal{std::nullopt, /*causal=*/true};
  const Tensor o = cfg.composite_attention ? gg::attention_composite(heads(0), heads(1), heads(2), causal)
                                           : gg::attention(heads(0), heads(1), heads(2), causal);  // (B, H, C, D/H)
  return gg::matmul(gg::reshape(gg::permute(o, {0, 2, 1, 3}), {B, C, D}), blk.w_o);
}

// Logits (B, C, V) for one chunk of tokens (B, C), with `fast` as the MLPs of the TTT blocks.
inline Tensor forward_chunk(const Model& m, const FastWeights& fast, const Tensor& input) {
  const int64_t C = input.size(1), D = m.cfg.d_model;
  Tensor x = gg::embedding(m.tok, input) + gg::slice(m.pos, 0, 0, C);  // (B, C, D)
  for (int64_t l = 0; l < m.cfg.blocks; ++l) {
    const Block& blk = m.blocks[static_cast<size_t>(l)];
    x = x + self_attention(m.cfg, blk, gg::layer_norm(x, {D}, blk.ln1_w, blk.ln1_b));
    const MlpWeights w = l >= m.first_ttt_block() ? fast[static_cast<size_t>(l - m.first_ttt_block())]
                                                  : MlpWeights{blk.w1, blk.b1, blk.w2, blk.b2};
    x = x + mlp(gg::layer_norm(x, {D}, blk.ln2_w, blk.ln2_b), w);
  }
  x = gg::layer_norm(x, {D}, m.lnf_w, m.lnf_b);
  return gg::matmul(x, m.cfg.tied ? gg::transpose(m.tok, 0, 1) : m.head);  // (B, C, V)
}

// Each sequence's mean next-token cross-entropy over the chunk: (B).
inline Tensor per_sequence_ce(const Tensor& logits, const Tensor& onehot) {  // (B, C, V) both
  return gg::neg(gg::sum(gg::log_softmax(logits, 2) * onehot, {1, 2})) / static_cast<double>(logits.size(1));
}

// ------------------------------------------------------------------------------- training loss
enum class Order {
  none,          // no inner steps: ordinary language-model training
  first_order,   // inner gradients are constants (used only to show what the second-order term adds)
  second_order,  // exact: the inner backward is recorded and differentiated (TTT-E2E)
};

struct InnerLoop {
  double lr = 1.0;  // η, plain SGD on each sequence's own fast weights
  int steps = 1;    // SGD steps per chunk
};

// W ← W − η ∇_W Σ_b ℓ_c,b(W), `steps` times. `loss` is Σ_b ℓ_c,b at the current W (already
// computed by the caller for the prediction, so the first step reuses that forward).
inline FastWeights inner_steps(const Model& m, FastWeights fast, const Chunks& data, int64_t c, Tensor loss,
                               const InnerLoop& inner, Order order) {
  gg::GradOptions options;
  options.create_graph = order == Order::second_order;
  options.retain_graph = 1;  // the outer backward still needs this chunk's forward
  for (int s = 0; s < inner.steps; ++s) {
    if (s > 0) loss = gg::sum(per_sequence_ce(forward_chunk(m, fast, data.inputs[c]), data.targets[c]));
    const TensorList w = flatten(fast);
    const TensorList g = gg::grad({loss}, w, {}, options);
    TensorList next;
    for (size_t i = 0; i < w.size(); ++i) next.push_back(w[i] - g[i] * inner.lr);
    fast = unflatten(next);
  }
  return fast;
}

// The (meta-)training objective: mean over chunks of the mean CE of chunk c, predicted with the
// fast weights after TTT on chunks 0 .. c−1. With Order::none it is ordinary LM training.
inline Tensor meta_loss(const Model& m, const Chunks& data, const InnerLoop& inner, Order order) {
  const int64_t B = data.inputs[0].size(0);
  FastWeights fast = per_sequence(m, B);
  Tensor total;
  for (int64_t c = 0; c < data.count(); ++c) {
    const Tensor per_seq = per_sequence_ce(forward_chunk(m, fast, data.inputs[c]), data.targets[c]);  // (B)
    const Tensor loss = gg::mean(per_seq);
    total = c == 0 ? loss : total + loss;
    if (order != Order::none && inner.steps > 0 && c + 1 < data.count())
      fast = inner_steps(m, fast, data, c, gg::sum(per_seq), inner, order);
  }
  return total / static_cast<double>(data.count());
}

// ------------------------------------------------------------------------------- test time
// losses[c][b]: sequence b's mean CE on chunk c, predicted after `steps` SGD steps (rate lr) on
// each earlier chunk (steps = 0: no TTT). Nothing but the fast weights is put on the tape.
inline std::vector<std::vector<double>> test_time_losses(const Model& model, const Chunks& data, double lr,
                                                         int steps) {
  const Model m = detached(model);
  const int64_t B = data.inputs[0].size(0);
  FastWeights fast = per_sequence(m, B);
  std::vector<std::vector<double>> losses;
  for (int64_t c = 0; c < data.count(); ++c) {
    if (steps == 0 || c + 1 == data.count()) {
      gg::NoGradGuard no_grad;
      losses.push_back(per_sequence_ce(forward_chunk(m, fast, data.inputs[c]), data.targets[c]).to_vector<double>());
      continue;
    }
    for (int s = 0; s < steps; ++s) {
      TensorList w = flatten(fast);
      for (Tensor& t : w) t = t.detach().requires_grad_();  // fresh leaves: a one-step tape
      const Tensor per_seq = per_sequence_ce(forward_chunk(m, unflatten(w), data.inputs[c]), data.targets[c]);
      if (s == 0) losses.push_back(per_seq.to_vector<double>());
      const TensorList g = gg::grad({gg::sum(per_seq)}, w);
      gg::NoGradGuard no_grad;
      for (size_t i = 0; i < w.size(); ++i) w[i] = w[i] - g[i] * lr;
      fast = unflatten(w);
    }
  }
  return losses;
}

// ------------------------------------------------------------------------------- optimiser
// Adam (Kingma & Ba 2015) with global-norm gradient clipping, updated in place under NoGradGuard.
class Adam {
 public:
  Adam(TensorList params, double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-8)
      : params_(std::move(params)), beta1_(beta1), beta2_(beta2), eps_(eps) {
    for (const Tensor& p : params_) {
      m_.push_back(gg::zeros_like(p));
      v_.push_back(gg::zeros_like(p));
    }
  }

  // Returns the gradient's global norm before clipping.
  double step(const TensorList& grads, double lr, double clip) {
    gg::NoGradGuard no_grad;
    double sq = 0.0;
    for (const Tensor& g : grads) sq += gg::sum(g * g).item();
    const double norm = std::sqrt(sq);
    const double scale = clip > 0 && norm > clip ? clip / norm : 1.0;
    ++t_;
    const double c1 = 1.0 - std::pow(beta1_, t_), c2 = 1.0 - std::pow(beta2_, t_);
    for (size_t i = 0; i < params_.size(); ++i) {
      const Tensor g = grads[i] * scale;
      gg::mul_(m_[i], beta1_);
      gg::add_(m_[i], g, 1.0 - beta1_);  // m ← β1·m + (1 − β1)·g
      gg::mul_(v_[i], beta2_);
      gg::add_(v_[i], g * g, 1.0 - beta2_);  // v ← β2·v + (1 − β2)·g²
      gg::add_(params_[i], m_[i] / (gg::sqrt(v_[i] / c2) + eps_), -lr / c1);  // θ ← θ − lr·m̂/(√v̂ + ε)
    }
    return norm;
  }

 private:
  TensorList params_, m_, v_;
  double beta1_, beta2_, eps_;
  int t_ = 0;
};

}  // namespace ttt
