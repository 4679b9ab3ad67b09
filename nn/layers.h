// The layers of gg::nn. Each one is a Module (nn/module.h): call it with its own parameters,
// fc(x), or with parameters passed in by name, fc(params, x).
//
// Weights follow PyTorch's layouts (Linear: weight (out, in), bias (out)), so state dicts map
// one to one onto torch's. Linear, MLP, LayerNorm, MultiheadAttention and TransformerBlock also
// accept per-task parameters from gg::nn::expand_params ((T, out, in), (T, 1, out)) with inputs
// of shape (T, N, features): matmul and + broadcast over the task dim. (Embedding does not:
// gg::embedding takes one (V, D) table.)
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "../core/device.h"
#include "../core/dtype.h"
#include "module.h"

namespace gg::nn {

struct Init {
  DType dtype = DType::f32;
  Device device = Device::cpu();
};

// y = x·Wᵀ + b. Initialised like torch.nn.Linear: W and b ~ U[−1/√in, 1/√in].
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, Init init = {});
  using Module::forward;
  Tensor forward(const Params& p, const Tensor& x) const override;
  int64_t in_features, out_features;
  bool has_bias;
};

enum class Activation { relu, gelu, tanh };
Tensor activate(Activation a, const Tensor& x);

// Linear layers of the given sizes (at least two) with `activation` between them (not after
// the last). Children "layers.0", "layers.1", ...
class MLP : public Module {
 public:
  MLP(const std::vector<int64_t>& sizes, Activation activation = Activation::relu, bool bias = true, Init init = {});
  using Module::forward;
  Tensor forward(const Params& p, const Tensor& x) const override;
  Activation activation;
  std::vector<std::shared_ptr<Linear>> layers;
};

// Rows of weight (num, dim) picked by i64 indices of any shape. weight ~ N(0, 1), as in torch.
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, Init init = {});
  using Module::forward;
  Tensor forward(const Params& p, const Tensor& indices) const override;
  int64_t num_embeddings, embedding_dim;
};

// Normalises the last dim; weight (dim) = 1, bias (dim) = 0. Per-task (T, 1, dim) weights work too.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, double eps = 1e-5, Init init = {});
  using Module::forward;
  Tensor forward(const Params& p, const Tensor& x) const override;
  int64_t dim;
  double eps;
};

struct AttentionConfig {
  int64_t d_model = 64, heads = 4;
  bool causal = false;
  bool bias = true;            // biases on the four projections
  bool composite = false;      // gg::attention_composite (N×N buffers) instead of the fused gg::attention
  int64_t segment = 0;         // > 0: tokens attend only within consecutive segments of this length
                               // (several sequences packed along one axis); 0: the whole sequence
};

// Self-attention over x (B, N, D): q, k, v = x·Wqᵀ, x·Wkᵀ, x·Wvᵀ split into `heads` heads, the
// fused gg::attention (differentiable to any order; orders 1 and 2 fused), heads merged, out_proj.
// Children q_proj, k_proj, v_proj, out_proj (Linear D -> D).
class MultiheadAttention : public Module {
 public:
  explicit MultiheadAttention(const AttentionConfig& config, Init init = {});
  using Module::forward;
  Tensor forward(const Params& p, const Tensor& x) const override { return forward(p, x, config.segment); }
  // The same with another segment length for this call (0: the whole sequence).
  Tensor forward(const Params& p, const Tensor& x, int64_t segment) const;
  AttentionConfig config;
  std::shared_ptr<Linear> q_proj, k_proj, v_proj, out_proj;
};

struct BlockConfig {
  AttentionConfig attention;   // d_model, heads, causal, ...
  int64_t mlp_hidden = 256;
  Activation activation = Activation::gelu;
};

// A pre-LayerNorm transformer block:  x += attn(ln1(x));  x += mlp(ln2(x)).
// Children ln1, attn, ln2, mlp (MLP d_model -> mlp_hidden -> d_model).
class TransformerBlock : public Module {
 public:
  explicit TransformerBlock(const BlockConfig& config, Init init = {});
  using Module::forward;
  Tensor forward(const Params& p, const Tensor& x) const override { return forward(p, x, config.attention.segment); }
  Tensor forward(const Params& p, const Tensor& x, int64_t segment) const;  // see MultiheadAttention
  BlockConfig config;
  std::shared_ptr<LayerNorm> ln1, ln2;
  std::shared_ptr<MultiheadAttention> attn;
  std::shared_ptr<MLP> mlp;
};

}  // namespace gg::nn
