// Neural-network ops: softmax and log-softmax (own kernels, backward in ops), and the
// composite ops built from other ops: cross-entropy, MSE, layer norm.
#include <cmath>
#include <limits>

#include "ops/common.h"

namespace gg {
namespace {

// Runs the last-axis softmax kernel on `dim` by viewing it as the last axis.
Tensor softmax_fwd(const Tensor& x, int64_t d, bool log, const char* name) {
  detail::check_defined(name, x, "input");
  detail::check_floating(name, x);
  detail::check_cpu_dtype(name, x, false);
  NoGradGuard ng;
  const int64_t last = x.dim() - 1;
  Tensor xt = contiguous(transpose(x, d, last));
  Tensor yt = detail::empty_like(xt);
  const int64_t cols = x.dim() == 0 ? 1 : x.shape()[static_cast<size_t>(d)];
  dispatch::softmax_last({x.dtype(), xt.raw_data(), yt.raw_data(), cols == 0 ? 0 : xt.numel() / cols, cols, log},
                         x.device());
  return transpose(yt, d, last);
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  detail::check_defined("softmax", x, "input");
  int64_t d = wrap_dim(dim, x.dim(), "softmax", ScalarDim::allow);
  Tensor y = softmax_fwd(x, d, false, "softmax");
  record("softmax", {x}, {y}, {y}, [d](const BackwardArgs& g) -> TensorList {
    const Tensor &gy = g.grads[0], &y = g.saved[0];
    return {y * (gy - sum(gy * y, {d}, true))};  // dx = y ∘ (dy − Σ dy∘y)
  }, [d](const JvpArgs& j) -> TensorList {  // ẏ = y ∘ (ẋ − Σ y∘ẋ): the same map (J is symmetric)
    const Tensor &tx = j.tangents[0], &y = j.outputs[0];
    return {y * (tx - sum(tx * y, {d}, true))};
  });
  return y;
}

Tensor log_softmax(const Tensor& x, int64_t dim) {
  detail::check_defined("log_softmax", x, "input");
  int64_t d = wrap_dim(dim, x.dim(), "log_softmax", ScalarDim::allow);
  Tensor y = softmax_fwd(x, d, true, "log_softmax");
  record("log_softmax", {x}, {y}, {y}, [d](const BackwardArgs& g) -> TensorList {
    const Tensor &gy = g.grads[0], &y = g.saved[0];
    return {gy - exp(y) * sum(gy, {d}, true)};  // dx = dy − softmax(x) Σ dy
  }, [d](const JvpArgs& j) -> TensorList {  // ẏ = ẋ − Σ softmax(x) ∘ ẋ
    const Tensor& tx = j.tangents[0];
    return {tx - sum(exp(j.outputs[0]) * tx, {d}, true)};
  });
  return y;
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target) {
  detail::check_defined("cross_entropy", logits, "logits");
  detail::check_defined("cross_entropy", target, "target");
  GG_CHECK(logits.dim() == 2, ShapeError, "gg::cross_entropy: logits must be (N, C), got ", shape_str(logits.shape()));
  GG_CHECK(target.dtype() == DType::i64, DTypeError, "gg::cross_entropy: target must be i64 class indices, got ",
           dtype_name(target.dtype()));
  GG_CHECK(target.dim() == 1 && target.size(0) == logits.size(0), ShapeError,
           "gg::cross_entropy: target must be (N) = (", logits.size(0), "), got ", shape_str(target.shape()));
  const int64_t n = logits.size(0), c = logits.size(1);
  std::vector<double> onehot(static_cast<size_t>(n * c), 0.0);
  std::vector<int64_t> t = target.to_vector<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    GG_CHECK(t[static_cast<size_t>(i)] >= 0 && t[static_cast<size_t>(i)] < c, IndexError, "gg::cross_entropy: target ",
             t[static_cast<size_t>(i)], " at position ", i, " is out of range for ", c, " classes");
    onehot[static_cast<size_t>(i * c + t[static_cast<size_t>(i)])] = 1.0;
  }
  // The target's log-probability is selected, not multiplied by a one-hot mask: another class's
  // log-probability may be -inf (a -inf logit), and -inf · 0 would make the loss NaN.
  Tensor mask = from_vector(onehot, {n, c}, DType::b8, logits.device());
  Tensor zero = zeros({}, logits.dtype(), logits.device());
  return neg(sum(where(mask, log_softmax(logits, 1), zero))) / static_cast<double>(n);
}

Tensor mse_loss(const Tensor& input, const Tensor& target) {
  detail::check_defined("mse_loss", input, "input");
  detail::check_defined("mse_loss", target, "target");
  GG_CHECK(input.shape() == target.shape(), ShapeError, "gg::mse_loss: input has shape ", shape_str(input.shape()),
           " but target has shape ", shape_str(target.shape()));
  Tensor diff = input - target;
  return mean(diff * diff);
}

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias, double eps) {
  detail::check_defined("layer_norm", x, "input");
  const size_t k = normalized_shape.size();
  bool ok = k >= 1 && k <= x.shape().size() &&
            std::equal(normalized_shape.begin(), normalized_shape.end(), x.shape().end() - static_cast<long>(k));
  GG_CHECK(ok, ShapeError, "gg::layer_norm: normalized_shape ", shape_str(normalized_shape),
           " must match the trailing dims of the input shape ", shape_str(x.shape()));
  for (const Tensor* p : {&weight, &bias})
    GG_CHECK(!p->defined() || p->shape() == normalized_shape, ShapeError, "gg::layer_norm: ",
             p == &weight ? "weight" : "bias", " has shape ", shape_str(p->shape()), ", expected ",
             shape_str(normalized_shape));
  std::vector<int64_t> dims;
  for (size_t i = 0; i < k; ++i) dims.push_back(x.dim() - 1 - static_cast<int64_t>(i));
  Tensor centred = x - mean(x, dims, true);
  Tensor var = mean(centred * centred, dims, true);  // biased, as in PyTorch
  Tensor y = centred / sqrt(var + eps);
  if (weight.defined()) y = y * weight;
  if (bias.defined()) y = y + bias;
  return y;
}

}  // namespace gg
