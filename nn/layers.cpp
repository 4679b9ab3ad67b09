#include "nn/layers.h"

#include <cmath>
#include <string>

#include "core/error.h"
#include "ops/ops.h"

namespace gg::nn {
namespace {

Tensor uniform(const Shape& shape, double bound, const Init& init) {
  return (rand(shape, init.dtype, init.device) * 2.0 - 1.0) * bound;
}

}  // namespace

// ------------------------------------------------------------------------------ Linear
Linear::Linear(int64_t in, int64_t out, bool bias, Init init) : in_features(in), out_features(out), has_bias(bias) {
  GG_CHECK(in >= 1 && out >= 1, ValueError, "gg::nn::Linear: in_features and out_features must be >= 1, got ", in,
           " and ", out);
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  register_parameter("weight", uniform({out, in}, bound, init));
  if (bias) register_parameter("bias", uniform({out}, bound, init));
}

Tensor Linear::forward(const Params& p, const Tensor& x) const {
  const Tensor& w = p["weight"];
  GG_CHECK(x.defined() && x.dim() >= 1 && x.size(-1) == w.size(-1), ShapeError, "gg::nn::Linear: input ",
           x.defined() ? shape_str(x.shape()) : std::string("(undefined)"), " does not end in in_features = ",
           w.size(-1), " (weight '", p.prefix(), "weight' has shape ", shape_str(w.shape()), ")");
  Tensor y = matmul(x, transpose(w, -1, -2));
  if (has_bias) y = y + p["bias"];
  return y;
}

// ------------------------------------------------------------------------------ MLP
Tensor activate(Activation a, const Tensor& x) {
  switch (a) {
    case Activation::relu: return relu(x);
    case Activation::gelu: return gelu(x);
    case Activation::tanh: return tanh(x);
  }
  return x;
}

MLP::MLP(const std::vector<int64_t>& sizes, Activation act, bool bias, Init init) : activation(act) {
  GG_CHECK(sizes.size() >= 2, ValueError, "gg::nn::MLP: needs at least two sizes (in, out), got ", sizes.size());
  auto list = std::make_shared<ModuleList>();
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    layers.push_back(std::make_shared<Linear>(sizes[i], sizes[i + 1], bias, init));
    list->append(layers.back());
  }
  register_module("layers", list);
}

Tensor MLP::forward(const Params& p, const Tensor& x) const {
  const Params lp = p.sub("layers");
  Tensor h = x;
  for (size_t i = 0; i < layers.size(); ++i) {
    h = layers[i]->forward(lp.sub(std::to_string(i)), h);
    if (i + 1 < layers.size()) h = activate(activation, h);
  }
  return h;
}

// ------------------------------------------------------------------------------ Embedding
Embedding::Embedding(int64_t num, int64_t dim, Init init) : num_embeddings(num), embedding_dim(dim) {
  GG_CHECK(num >= 1 && dim >= 1, ValueError, "gg::nn::Embedding: sizes must be >= 1, got ", num, " and ", dim);
  register_parameter("weight", randn({num, dim}, init.dtype, init.device));
}

Tensor Embedding::forward(const Params& p, const Tensor& indices) const { return embedding(p["weight"], indices); }

// ------------------------------------------------------------------------------ LayerNorm
LayerNorm::LayerNorm(int64_t d, double e, Init init) : dim(d), eps(e) {
  GG_CHECK(d >= 1, ValueError, "gg::nn::LayerNorm: dim must be >= 1, got ", d);
  register_parameter("weight", ones({d}, init.dtype, init.device));
  register_parameter("bias", zeros({d}, init.dtype, init.device));
}

Tensor LayerNorm::forward(const Params& p, const Tensor& x) const {
  const Tensor &w = p["weight"], &b = p["bias"];
  if (w.dim() == 1 && b.dim() == 1) return layer_norm(x, {dim}, w, b, eps);
  return layer_norm(x, {dim}, Tensor(), Tensor(), eps) * w + b;  // per-task (T, 1, dim) weights
}

// ------------------------------------------------------------------------------ attention
MultiheadAttention::MultiheadAttention(const AttentionConfig& c, Init init) : config(c) {
  GG_CHECK(c.d_model >= 1 && c.heads >= 1 && c.d_model % c.heads == 0, ValueError,
           "gg::nn::MultiheadAttention: d_model (", c.d_model, ") must be a positive multiple of heads (", c.heads, ")");
  GG_CHECK(c.segment >= 0, ValueError, "gg::nn::MultiheadAttention: segment must be >= 0, got ", c.segment);
  q_proj = register_module("q_proj", std::make_shared<Linear>(c.d_model, c.d_model, c.bias, init));
  k_proj = register_module("k_proj", std::make_shared<Linear>(c.d_model, c.d_model, c.bias, init));
  v_proj = register_module("v_proj", std::make_shared<Linear>(c.d_model, c.d_model, c.bias, init));
  out_proj = register_module("out_proj", std::make_shared<Linear>(c.d_model, c.d_model, c.bias, init));
}

Tensor MultiheadAttention::forward(const Params& p, const Tensor& x, int64_t segment) const {
  const int64_t D = config.d_model, H = config.heads, dh = D / H;
  GG_CHECK(x.defined() && x.dim() == 3 && x.size(2) == D, ShapeError, "gg::nn::MultiheadAttention: input must be (B, N, ",
           D, "), got ", x.defined() ? shape_str(x.shape()) : std::string("(undefined)"));
  GG_CHECK(segment >= 0, ValueError, "gg::nn::MultiheadAttention: segment must be >= 0, got ", segment);
  const int64_t B = x.size(0), L = x.size(1), N = segment > 0 ? segment : L;
  GG_CHECK(L % N == 0, ShapeError, "gg::nn::MultiheadAttention: sequence length ", L,
           " is not a multiple of segment = ", N);
  const int64_t S = L / N;  // segments per row
  // (B, L, D) -> (B·S, H, N, dh): one attention batch entry per segment.
  auto split = [&](const Tensor& t) { return permute(reshape(t, {B * S, N, H, dh}), {0, 2, 1, 3}); };
  const Tensor q = split(q_proj->forward(p.sub("q_proj"), x));
  const Tensor k = split(k_proj->forward(p.sub("k_proj"), x));
  const Tensor v = split(v_proj->forward(p.sub("v_proj"), x));
  const AttentionOptions options{std::nullopt, config.causal};
  const Tensor o = config.composite ? attention_composite(q, k, v, options) : attention(q, k, v, options);
  return out_proj->forward(p.sub("out_proj"), reshape(permute(o, {0, 2, 1, 3}), {B, L, D}));
}

// ------------------------------------------------------------------------------ block
TransformerBlock::TransformerBlock(const BlockConfig& c, Init init) : config(c) {
  const int64_t D = c.attention.d_model;
  ln1 = register_module("ln1", std::make_shared<LayerNorm>(D, 1e-5, init));
  attn = register_module("attn", std::make_shared<MultiheadAttention>(c.attention, init));
  ln2 = register_module("ln2", std::make_shared<LayerNorm>(D, 1e-5, init));
  mlp = register_module("mlp", std::make_shared<MLP>(std::vector<int64_t>{D, c.mlp_hidden, D}, c.activation, true, init));
}

Tensor TransformerBlock::forward(const Params& p, const Tensor& x, int64_t segment) const {
  Tensor h = x + attn->forward(p.sub("attn"), ln1->forward(p.sub("ln1"), x), segment);
  return h + mlp->forward(p.sub("mlp"), ln2->forward(p.sub("ln2"), h));
}

}  // namespace gg::nn
