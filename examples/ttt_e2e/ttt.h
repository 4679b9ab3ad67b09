// The model (on gg::nn), the test-time-training unroll and the meta-loss.
//
// The model is a small pre-LayerNorm causal transformer language model:
//
//   x = tok[token] + pos[position in chunk]                          (B, C, D)
//   per block (gg::nn::TransformerBlock):
//               x += out_proj · attention(LN(x)·Wq, LN(x)·Wk, LN(x)·Wv, causal)   4 heads of D/4
//               x += W2 · gelu(W1 · LN(x) + b1) + b2                  hidden 4·D
//   logits = LN(x) · headᵀ   (head = tok with --tied)                 (B, C, V)
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
// Per-sequence fast weights without copies: W (out, in) -> expand to (B, out, in), a stride-0
// view (gg::nn::expand_params), and the MLP is a batched matmul. The inner loss is the SUM over sequences of each
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

using Params = gg::nn::NamedTensors;

// The network as a gg::nn module: tok (Embedding V×D), pos (C×D), blocks.0.. (TransformerBlock:
// causal attention without projection biases, GELU MLP), lnf (LayerNorm), head (Linear D→V
// without bias; absent when tied). It is called functionally, with the parameters passed in, so
// the MLPs of the TTT blocks can be per-sequence fast weights.
class LM : public gg::nn::Module {
 public:
  LM(const ModelConfig& c, gg::nn::Init init) : cfg(c) {
    using namespace gg::nn;
    const int64_t D = c.d_model;
    tok = register_module("tok", std::make_shared<Embedding>(c.vocab, D, init));
    register_parameter("pos", gg::zeros({c.chunk, D}, init.dtype, init.device));
    auto list = register_module("blocks", std::make_shared<ModuleList>());
    BlockConfig b;
    b.attention = {D, c.heads, /*causal=*/true, /*bias=*/false, c.composite_attention};
    b.mlp_hidden = c.mlp_hidden;
    b.activation = Activation::gelu;
    for (int64_t l = 0; l < c.blocks; ++l) {
      blocks.push_back(std::make_shared<TransformerBlock>(b, init));
      list->append(blocks.back());
    }
    lnf = register_module("lnf", std::make_shared<LayerNorm>(D, 1e-5, init));
    if (!c.tied) head = register_module("head", std::make_shared<Linear>(D, c.vocab, false, init));
  }

  // Logits (B, C, V) for one chunk of tokens (B, C) i64. Attention is causal within the chunk.
  using gg::nn::Module::forward;
  Tensor forward(const gg::nn::Params& p, const Tensor& input) const override {
    const int64_t C = input.size(1);
    Tensor x = tok->forward(p.sub("tok"), input) + gg::slice(p["pos"], 0, 0, C);  // (B, C, D)
    const gg::nn::Params bp = p.sub("blocks");
    for (size_t l = 0; l < blocks.size(); ++l) x = blocks[l]->forward(bp.sub(std::to_string(l)), x);
    x = lnf->forward(p.sub("lnf"), x);
    if (cfg.tied) return gg::matmul(x, gg::transpose(p["tok.weight"], 0, 1));
    return head->forward(p.sub("head"), x);
  }

  // The names of the fast weights: the MLPs of the last ttt_blocks blocks.
  std::vector<std::string> fast_names() const {
    std::vector<std::string> out;
    for (int64_t l = cfg.blocks - cfg.ttt_blocks; l < cfg.blocks; ++l)
      for (const char* n : {"layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias"})
        out.push_back("blocks." + std::to_string(l) + ".mlp." + n);
    return out;
  }

  ModelConfig cfg;
  std::shared_ptr<gg::nn::Embedding> tok;
  std::vector<std::shared_ptr<gg::nn::TransformerBlock>> blocks;
  std::shared_ptr<gg::nn::LayerNorm> lnf;
  std::shared_ptr<gg::nn::Linear> head;
};

// A network and the tensors it runs with (its own parameters, copies, or shifted ones).
struct Model {
  ModelConfig cfg;
  std::shared_ptr<const LM> net;
  Params params;

  TensorList parameters() const { return gg::nn::values(params); }
  Model with_parameters(const TensorList& values) const {  // same network, these tensors
    Model m = *this;
    m.params = gg::nn::with_values(params, values);
    return m;
  }
  // The same tensors through a network of another configuration (e.g. composite attention).
  Model with_config(const ModelConfig& c) const {
    Model m = *this;
    m.cfg = c;
    m.net = std::make_shared<const LM>(c, gg::nn::Init{params[0].second.dtype(), params[0].second.device()});
    return m;
  }
};

// GPT-2's initialisation: N(0, 0.02), the residual projections (attention out_proj, MLP output)
// scaled by 1/√(2·blocks); LayerNorm weights 1, biases 0, MLP biases 0.
inline Model init_model(const ModelConfig& cfg, gg::DType dtype, gg::Device device) {
  Model m{cfg, std::make_shared<const LM>(cfg, gg::nn::Init{dtype, device}), {}};
  const double std = 0.02, residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(cfg.blocks));
  auto ends_with = [](const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  };
  for (const auto& [name, t] : m.net->named_parameters()) {
    Tensor v;
    if (ends_with(name, "ln1.weight") || ends_with(name, "ln2.weight") || name == "lnf.weight")
      v = gg::ones(t.shape(), dtype, device);
    else if (ends_with(name, ".bias"))
      v = gg::zeros(t.shape(), dtype, device);
    else if (ends_with(name, "out_proj.weight") || ends_with(name, "mlp.layers.1.weight"))
      v = gg::randn(t.shape(), dtype, device) * residual_std;
    else
      v = gg::randn(t.shape(), dtype, device) * std;
    m.params.emplace_back(name, v.requires_grad_());
  }
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
// Fast weights: the named MLP tensors of the TTT blocks, shared ("blocks.1.mlp.layers.0.weight"
// (M, D), ...) or per sequence ((B, M, D), (B, 1, M), ...): the MLP broadcasts either way.
using FastWeights = Params;

// θ_mlp -> one stride-0 copy per sequence (gg::nn::expand_params).
inline FastWeights per_sequence(const Model& m, int64_t B) {
  const gg::nn::Params all(m.params);
  FastWeights f;
  for (const std::string& n : m.net->fast_names()) f.emplace_back(n, all[n]);
  return gg::nn::expand_params(f, B);
}

// Logits (B, C, V) for one chunk of tokens (B, C), with `fast` in place of the TTT blocks' MLPs.
inline Tensor forward_chunk(const Model& m, const FastWeights& fast, const Tensor& input) {
  Params p = m.params;
  for (auto& [name, t] : p)
    for (const auto& [fname, ft] : fast)
      if (name == fname) t = ft;
  return m.net->forward(gg::nn::Params(p), input);
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
  options.retain_graph = true;  // the outer backward still needs this chunk's forward
  for (int s = 0; s < inner.steps; ++s) {
    if (s > 0) loss = gg::sum(per_sequence_ce(forward_chunk(m, fast, data.inputs[c]), data.targets[c]));
    const TensorList w = gg::nn::values(fast);
    const TensorList g = gg::grad({loss}, w, {}, options);
    fast = gg::nn::with_values(fast, gg::optim::sgd_update(w, g, inner.lr));
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
      TensorList w = gg::nn::values(fast);
      for (Tensor& t : w) t = t.detach().requires_grad_();  // fresh leaves: a one-step tape
      fast = gg::nn::with_values(fast, w);
      const Tensor per_seq = per_sequence_ce(forward_chunk(m, fast, data.inputs[c]), data.targets[c]);
      if (s == 0) losses.push_back(per_seq.to_vector<double>());
      const TensorList g = gg::grad({gg::sum(per_seq)}, w);
      gg::NoGradGuard no_grad;
      fast = gg::nn::with_values(fast, gg::optim::sgd_update(w, g, lr));
    }
  }
  return losses;
}

}  // namespace ttt
