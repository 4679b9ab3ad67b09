// gg::nn: parameter naming, the functional and stateful forms, f64 references, gradients to
// second order (gradcheck + gradgradcheck on inputs and parameters), per-task parameters, a
// MAML inner step differentiated through, and state-dict errors.
#include <gtest/gtest.h>

#include <cmath>

#include "gradgrad.h"
#include "test_util.h"

namespace gg::test {
namespace {

using nn::NamedTensors;
const nn::Init kF64{DType::f64, Device::cpu()};

std::vector<std::string> names_of(const NamedTensors& named) {
  std::vector<std::string> out;
  for (const auto& [n, t] : named) out.push_back(n);
  return out;
}

// Checks a module's first and second derivatives with respect to its input x (when floating)
// and every parameter, through the functional form.
void check_module(const nn::Module& m, const Tensor& x, bool x_differentiable = true) {
  const NamedTensors named = m.named_parameters();
  TensorList inputs = {x_differentiable ? leaf(x) : x};
  for (const auto& [n, t] : named) inputs.push_back(leaf(t));
  SingleFn f = [&](const TensorList& in) {
    const TensorList params(in.begin() + 1, in.end());
    Tensor y = m(nn::with_values(named, params), in[0]);
    return sum(y * y * 0.5 + sin(y));  // a scalar with a non-trivial second derivative in y
  };
  GradcheckResult r1 = gradcheck(f, inputs);
  EXPECT_TRUE(r1.ok) << r1.message;
  GradcheckResult r2 = gradgradcheck(f, inputs);
  EXPECT_TRUE(r2.ok) << r2.message;
}

TEST(NN, TransformerBlockNamesAreNestedAndOrdered) {
  nn::BlockConfig c;
  c.attention = {8, 2, /*causal=*/true};
  c.mlp_hidden = 16;
  nn::TransformerBlock block(c);
  const std::vector<std::string> want = {
      "ln1.weight", "ln1.bias",
      "attn.q_proj.weight", "attn.q_proj.bias", "attn.k_proj.weight", "attn.k_proj.bias",
      "attn.v_proj.weight", "attn.v_proj.bias", "attn.out_proj.weight", "attn.out_proj.bias",
      "ln2.weight", "ln2.bias",
      "mlp.layers.0.weight", "mlp.layers.0.bias", "mlp.layers.1.weight", "mlp.layers.1.bias"};
  const NamedTensors named = block.named_parameters();
  EXPECT_EQ(names_of(named), want);
  EXPECT_EQ(named[2].second.shape(), Shape({8, 8}));
  EXPECT_EQ(named[12].second.shape(), Shape({16, 8}));  // (out, in), as torch.nn.Linear
  for (const auto& [n, t] : named) EXPECT_TRUE(t.requires_grad() && t.is_leaf()) << n;
  // The list hands out the module's own tensors, not copies.
  EXPECT_TRUE(named[2].second.is_same(block.attn->q_proj->named_parameters()[0].second));
}

TEST(NN, LinearMatchesLoopReferenceInF64) {
  manual_seed(1);
  nn::Linear fc(3, 2, true, kF64);
  Tensor x = randn({4, 3}, DType::f64);
  const Values w = fc.named_parameters()[0].second.to_vector<double>(), b = fc.named_parameters()[1].second.to_vector<double>();
  const Values xv = x.to_vector<double>();
  Values want(8);
  for (int i = 0; i < 4; ++i)
    for (int o = 0; o < 2; ++o) {
      double s = b[o];
      for (int k = 0; k < 3; ++k) s += xv[i * 3 + k] * w[o * 3 + k];
      want[i * 2 + o] = s;
    }
  expect_close(fc(x).to_vector<double>(), want, 1e-14, 1e-14, "Linear");
  // Initialised like torch.nn.Linear: inside ±1/√in.
  for (double v : w) EXPECT_LE(std::abs(v), 1.0 / std::sqrt(3.0));
}

// Inputs that are broadcast views (stride 0 along rows or columns, as the backward of a sum or
// of a broadcast add produces) give the same result as their contiguous copies.
TEST(NN, LinearOnBroadcastViews) {
  manual_seed(8);
  nn::Linear fc(4, 3, true, kF64);
  for (const Tensor& x : {expand(randn({1, 4}, DType::f64), {5, 4}), expand(randn({5, 1}, DType::f64), {5, 4})})
    expect_close(fc(x).to_vector<double>(), fc(contiguous(x)).to_vector<double>(), 1e-14, 1e-14, "broadcast input");
}

TEST(NN, FunctionalCallUsesThePassedTensors) {
  manual_seed(2);
  nn::MLP mlp({3, 5, 2}, nn::Activation::tanh, true, kF64);
  Tensor x = randn({4, 3}, DType::f64);
  NamedTensors doubled;
  for (const auto& [n, t] : mlp.named_parameters()) doubled.emplace_back(n, t * 2.0);
  // Reference: the same MLP written out with the doubled tensors.
  const nn::Params p(doubled);
  Tensor h = tanh(matmul(x, transpose(p["layers.0.weight"], 0, 1)) + p["layers.0.bias"]);
  Tensor want = matmul(h, transpose(p["layers.1.weight"], 0, 1)) + p["layers.1.bias"];
  expect_close(mlp(doubled, x).to_vector<double>(), want.to_vector<double>(), 1e-14, 1e-14, "functional");
  EXPECT_GT(rel_error(mlp(x).to_vector<double>(), want.to_vector<double>()), 1e-3);  // the own weights differ
  EXPECT_THROW(mlp(NamedTensors{{"layers.0.weight", doubled[0].second}}, x), ValueError);
}

TEST(NN, LayerNormMatchesLoopReference) {
  manual_seed(3);
  nn::LayerNorm ln(4, 1e-5, kF64);
  Tensor x = randn({3, 4}, DType::f64);
  NamedTensors p = {{"weight", randn({4}, DType::f64)}, {"bias", randn({4}, DType::f64)}};
  const Values xv = x.to_vector<double>(), w = p[0].second.to_vector<double>(), b = p[1].second.to_vector<double>();
  Values want(12);
  for (int r = 0; r < 3; ++r) {
    double mu = 0, var = 0;
    for (int c = 0; c < 4; ++c) mu += xv[r * 4 + c] / 4;
    for (int c = 0; c < 4; ++c) var += (xv[r * 4 + c] - mu) * (xv[r * 4 + c] - mu) / 4;
    for (int c = 0; c < 4; ++c) want[r * 4 + c] = (xv[r * 4 + c] - mu) / std::sqrt(var + 1e-5) * w[c] + b[c];
  }
  expect_close(ln(p, x).to_vector<double>(), want, 1e-12, 1e-12, "LayerNorm");
}

TEST(NN, EmbeddingPicksRows) {
  manual_seed(4);
  nn::Embedding emb(5, 3, kF64);
  Tensor idx = from_indices({4, 0, 4}, {3});
  const Values w = emb.parameters()[0].to_vector<double>(), got = emb(idx).to_vector<double>();
  const int rows[] = {4, 0, 4};
  for (int i = 0; i < 3; ++i)
    for (int d = 0; d < 3; ++d) EXPECT_EQ(got[i * 3 + d], w[rows[i] * 3 + d]);
}

TEST(NN, AttentionIsCausalAndMatchesComposite) {
  manual_seed(5);
  nn::AttentionConfig c{8, 2, /*causal=*/true};
  nn::MultiheadAttention fused(c, kF64);
  c.composite = true;
  nn::MultiheadAttention composite(c, kF64);
  composite.load_state_dict(fused.state_dict());
  Tensor x = randn({2, 5, 8}, DType::f64);
  const Values y = fused(x).to_vector<double>();
  expect_close(y, composite(x).to_vector<double>(), 1e-12, 1e-12, "fused vs composite");
  // Changing the last token leaves every earlier position's output unchanged.
  Tensor x2 = clone(x);
  {
    Tensor last = slice(x2, 1, 4, 5);
    fill_(last, 3.0);
  }
  const Values y2 = fused(x2).to_vector<double>();
  for (int b = 0; b < 2; ++b)
    for (int n = 0; n < 5; ++n)
      for (int d = 0; d < 8; ++d) {
        const size_t i = static_cast<size_t>((b * 5 + n) * 8 + d);
        if (n < 4) {
          EXPECT_EQ(y[i], y2[i]) << "position " << n;
        }
      }
  EXPECT_GT(rel_error(y2, y), 1e-6);
}

TEST(NN, AttentionSegmentsAttendSeparately) {
  manual_seed(6);
  nn::AttentionConfig c{4, 2};
  nn::MultiheadAttention whole(c, kF64);
  c.segment = 3;
  nn::MultiheadAttention packed(c, kF64);
  packed.load_state_dict(whole.state_dict());
  Tensor a = randn({1, 3, 4}, DType::f64), b = randn({1, 3, 4}, DType::f64);
  const Values want = cat({whole(a), whole(b)}, 1).to_vector<double>();
  expect_close(packed(cat({a, b}, 1)).to_vector<double>(), want, 1e-12, 1e-12, "segments");
  EXPECT_THROW(packed(randn({1, 4, 4}, DType::f64)), ShapeError);
  // The segment can also be given per call.
  expect_close(whole.forward(nn::Params(whole.named_parameters()), cat({a, b}, 1), 3).to_vector<double>(), want,
               1e-12, 1e-12, "segments per call");
}

TEST(NN, LinearGradientsToSecondOrder) {
  manual_seed(10);
  check_module(nn::Linear(3, 2, true, kF64), randn({4, 3}, DType::f64));
}
TEST(NN, MLPGradientsToSecondOrder) {
  manual_seed(11);
  check_module(nn::MLP({3, 4, 2}, nn::Activation::gelu, true, kF64), randn({2, 3}, DType::f64));
}
TEST(NN, EmbeddingGradientsToSecondOrder) {
  manual_seed(12);
  check_module(nn::Embedding(4, 3, kF64), from_indices({1, 3, 1}, {3}), false);
}
TEST(NN, LayerNormGradientsToSecondOrder) {
  manual_seed(13);
  check_module(nn::LayerNorm(4, 1e-5, kF64), randn({3, 4}, DType::f64));
}
TEST(NN, MultiheadAttentionGradientsToSecondOrder) {
  manual_seed(14);
  check_module(nn::MultiheadAttention({4, 2, /*causal=*/true}, kF64), randn({1, 3, 4}, DType::f64));
}
TEST(NN, TransformerBlockGradientsToSecondOrder) {
  manual_seed(15);
  nn::BlockConfig c;
  c.attention = {4, 2, /*causal=*/true};
  c.mlp_hidden = 6;
  check_module(nn::TransformerBlock(c, kF64), randn({1, 3, 4}, DType::f64));
}

// Per-task parameters: the gradient of the summed per-task losses with respect to the expanded
// parameters is, task by task, the gradient of that task's loss alone.
TEST(NN, ExpandedParametersGivePerTaskGradients) {
  manual_seed(20);
  nn::MLP mlp({2, 3, 1}, nn::Activation::relu, true, kF64);
  const int64_t T = 3;
  Tensor x = randn({T, 4, 2}, DType::f64), y = randn({T, 4, 1}, DType::f64);
  const NamedTensors per_task = nn::expand_params(mlp.named_parameters(), T);
  EXPECT_EQ(per_task[0].second.shape(), Shape({T, 3, 2}));
  EXPECT_EQ(per_task[1].second.shape(), Shape({T, 1, 3}));
  Tensor err = mlp(per_task, x) - y;
  const TensorList g = grad({sum(err * err)}, nn::values(per_task));
  for (int64_t t = 0; t < T; ++t) {
    Tensor xt = slice(x, 0, t, t + 1), yt = slice(y, 0, t, t + 1);
    Tensor e = mlp(xt) - yt;
    const TensorList gt = grad({sum(e * e)}, mlp.parameters());
    for (size_t i = 0; i < g.size(); ++i)
      expect_close(slice(g[i], 0, t, t + 1).to_vector<double>(), gt[i].to_vector<double>(), 1e-12, 1e-13,
                   "task " + std::to_string(t) + " param " + per_task[i].first);
  }
}

// The MAML meta-gradient through one differentiable inner SGD step, against finite differences
// (gradcheck) and to one order more (gradgradcheck): the inner gradient is itself differentiated.
TEST(NN, MetaGradientThroughInnerStep) {
  manual_seed(21);
  nn::MLP mlp({1, 4, 1}, nn::Activation::tanh, true, kF64);
  const NamedTensors named = mlp.named_parameters();
  Tensor xs = randn({5, 1}, DType::f64), ys = sin(xs), xq = randn({5, 1}, DType::f64), yq = sin(xq);
  SingleFn meta = [&](const TensorList& theta) {
    Tensor inner = mse_loss(mlp(nn::with_values(named, theta), xs), ys);
    const TensorList g = grad({inner}, theta, {}, std::nullopt, /*create_graph=*/true);
    return mse_loss(mlp(nn::with_values(named, optim::sgd_update(theta, g, 0.1)), xq), yq);
  };
  TensorList theta;
  for (const Tensor& t : mlp.parameters()) theta.push_back(leaf(t));
  GradcheckResult r1 = gradcheck(meta, theta);
  EXPECT_TRUE(r1.ok) << r1.message;
  GradcheckResult r2 = gradgradcheck(meta, theta);
  EXPECT_TRUE(r2.ok) << r2.message;
}

TEST(NN, StateDictRoundTripAndErrors) {
  manual_seed(22);
  nn::MLP a({2, 3, 1}), b({2, 3, 1});
  const NamedTensors sd = a.state_dict();
  EXPECT_FALSE(sd[0].second.is_same(a.parameters()[0]));  // copies, not the parameters
  b.load_state_dict(sd);
  for (size_t i = 0; i < sd.size(); ++i)
    EXPECT_EQ(b.parameters()[i].to_vector<double>(), a.parameters()[i].to_vector<double>()) << sd[i].first;
  EXPECT_TRUE(b.parameters()[0].requires_grad());

  NamedTensors missing(sd.begin() + 1, sd.end());
  EXPECT_THROW(b.load_state_dict(missing), ValueError);
  EXPECT_NO_THROW(b.load_state_dict(missing, /*strict=*/false));
  NamedTensors extra = sd;
  extra.emplace_back("layers.9.weight", zeros({1}));
  EXPECT_THROW(b.load_state_dict(extra), ValueError);
  NamedTensors wrong = sd;
  wrong[0].second = zeros({2, 3});
  try {
    b.load_state_dict(wrong);
    ADD_FAILURE() << "no ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("layers.0.weight"), std::string::npos) << e.what();
  }
}

// All or nothing: a state rejected at its second entry, or for a missing last one, leaves even
// the first parameter as it was.
TEST(NN, LoadStateDictChangesNothingWhenRejected) {
  manual_seed(23);
  nn::MLP a({2, 3, 1}), b({2, 3, 1});
  const NamedTensors sd = a.state_dict();
  const Values first = b.parameters()[0].to_vector<double>();
  ASSERT_NE(first, sd[0].second.to_vector<double>());
  NamedTensors wrong = sd;
  wrong[1].second = zeros({4});
  EXPECT_THROW(b.load_state_dict(wrong), ShapeError);
  EXPECT_EQ(b.parameters()[0].to_vector<double>(), first);
  NamedTensors missing(sd.begin(), sd.end() - 1);
  EXPECT_THROW(b.load_state_dict(missing), ValueError);
  EXPECT_EQ(b.parameters()[0].to_vector<double>(), first);
}

TEST(NN, ZeroGradDropsGradients) {
  nn::Linear fc(2, 2);
  sum(fc(ones({1, 2}))).backward();
  EXPECT_TRUE(fc.parameters()[0].grad().defined());
  fc.zero_grad();
  for (const Tensor& p : fc.parameters()) EXPECT_FALSE(p.grad().defined());
}

}  // namespace
}  // namespace gg::test
