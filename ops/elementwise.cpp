// Elementwise ops. Each forward is one kernel call; each backward is a line of gg ops
// (so it records when create_graph is on). Binary ops broadcast; their backward sums the
// gradient back down to each input's shape (sum_to).
#include <cmath>
#include <optional>

#include "ops/common.h"

namespace gg {
namespace detail {

kernels::Layout broadcast_layout(const Tensor& t, const Shape& shape) {
  kernels::Layout l;
  l.ndim = static_cast<int>(shape.size());
  const size_t lead = shape.size() - t.shape().size();
  for (size_t i = 0; i < shape.size(); ++i) {
    l.sizes[i] = shape[i];
    if (i < lead) l.strides[i] = 0;
    else l.strides[i] = t.shape()[i - lead] == 1 ? 0 : t.strides()[i - lead];
  }
  return l;
}

void copy_into(const Tensor& dst, const Tensor& src) {
  check_same_device("copy", dst, src);
  GG_CHECK(dst.shape() == src.shape(), ShapeError, "gg::copy: destination shape ", shape_str(dst.shape()),
           " differs from source shape ", shape_str(src.shape()));
  dispatch::copy({src.dtype(), dst.dtype(), src.raw_data(), dst.raw_data(), layout_of(src), layout_of(dst)},
                 dst.device());
}

}  // namespace detail

namespace {
using kernels::BinaryOp;
using kernels::UnaryOp;

// True when t's elements fill [offset, offset + numel) exactly in some order of its dims, as in
// a transpose or permute of a contiguous tensor: stride 0 or overlap is excluded. Such a view
// can go through an elementwise kernel as a flat array, with a result laid out like it.
bool is_dense_permutation(const Tensor& t) {
  struct Dim {
    int64_t stride, size;
  };
  Dim dims[kernels::kMaxDims];
  int n = 0;
  for (size_t i = 0; i < t.shape().size(); ++i) {  // insertion sort by stride (at most kMaxDims)
    if (t.shape()[i] == 1) continue;
    int j = n++;
    for (; j > 0 && dims[j - 1].stride > t.strides()[i]; --j) dims[j] = dims[j - 1];
    dims[j] = {t.strides()[i], t.shape()[i]};
  }
  int64_t expected = 1;
  for (int i = 0; i < n; ++i) {
    if (dims[i].stride != expected) return false;
    expected *= dims[i].size;
  }
  return true;
}

// A new tensor with t's shape and strides (t dense, see above) and its own storage; `dtype`
// may differ from t's.
Tensor empty_with_layout_of(const Tensor& t, DType dtype) {
  return make_view(empty({t.numel()}, dtype, t.device()), t.shape(), t.strides(), 0);
}

// The CPU fast path for a non-contiguous dense input: no copy to contiguous memory first.
// (Other devices keep the copy, so their results stay contiguous.)
bool flat_on_cpu(const Tensor& x) { return x.device().is_cpu() && !x.is_contiguous() && is_dense_permutation(x); }

Tensor unary_fwd(UnaryOp op, const Tensor& x, const char* name, double alpha = 0.0) {
  detail::check_defined(name, x, "input");
  detail::check_floating(name, x);
  detail::check_cpu_dtype(name, x, false);
  Tensor xc, y;
  if (flat_on_cpu(x)) {
    xc = x;
    y = empty_with_layout_of(x, x.dtype());
  } else {
    NoGradGuard ng;
    xc = contiguous(x);
    y = detail::empty_like(xc);
  }
  dispatch::unary({op, x.dtype(), xc.raw_data(), y.raw_data(), y.numel(), alpha}, x.device());
  return y;
}

// The result has a's dtype, or out_dtype (b8 for comparisons).
Tensor binary_fwd(BinaryOp op, const Tensor& a, const Tensor& b, const char* name,
                  std::optional<DType> out_dtype = std::nullopt) {
  detail::check_defined(name, a, "a");
  detail::check_defined(name, b, "b");
  detail::check_same_device(name, a, b);
  detail::check_same_dtype(name, a, b);
  GG_CHECK(a.dtype() != DType::b8, DTypeError, "gg::", name, ": b8 operands are not supported (cast them first)");
  detail::check_cpu_dtype(name, a, true);
  if (a.shape() == b.shape() && a.strides() == b.strides() && flat_on_cpu(a)) {
    // Both laid out alike (e.g. two transposed gradients): one flat run, result laid out alike.
    Tensor y = empty_with_layout_of(a, out_dtype.value_or(a.dtype()));
    const kernels::Layout flat = kernels::make_layout({a.numel()}, {1});
    dispatch::binary({op, a.dtype(), a.raw_data(), b.raw_data(), y.raw_data(), flat, flat}, a.device());
    return y;
  }
  Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  detail::check_max_dims(name, shape);
  Tensor y = empty(shape, out_dtype.value_or(a.dtype()), a.device());
  dispatch::binary({op, a.dtype(), a.raw_data(), b.raw_data(), y.raw_data(), detail::broadcast_layout(a, shape),
                    detail::broadcast_layout(b, shape)},
                   a.device());
  return y;
}

Tensor cmp(BinaryOp op, const Tensor& a, const Tensor& b, const char* name) {
  return binary_fwd(op, a, b, name, DType::b8);
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor y = binary_fwd(BinaryOp::add, a, b, "add");
  record("add", {a, b}, {y}, {}, [sa = a.shape(), sb = b.shape()](const BackwardArgs& g) -> TensorList {
    return {g.needs[0] ? sum_to(g.grads[0], sa) : Tensor(), g.needs[1] ? sum_to(g.grads[0], sb) : Tensor()};
  });
  return y;
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor y = binary_fwd(BinaryOp::sub, a, b, "sub");
  record("sub", {a, b}, {y}, {}, [sa = a.shape(), sb = b.shape()](const BackwardArgs& g) -> TensorList {
    return {g.needs[0] ? sum_to(g.grads[0], sa) : Tensor(), g.needs[1] ? sum_to(neg(g.grads[0]), sb) : Tensor()};
  });
  return y;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor y = binary_fwd(BinaryOp::mul, a, b, "mul");
  record("mul", {a, b}, {y}, {a, b}, [sa = a.shape(), sb = b.shape()](const BackwardArgs& g) -> TensorList {
    const Tensor &gy = g.grads[0], &a = g.saved[0], &b = g.saved[1];
    return {g.needs[0] ? sum_to(gy * b, sa) : Tensor(), g.needs[1] ? sum_to(gy * a, sb) : Tensor()};
  });
  return y;
}

Tensor div(const Tensor& a, const Tensor& b) {
  if (a.defined() && b.defined() && !is_floating(b.dtype()) && a.dtype() == b.dtype()) {
    // Integer division by zero is an error (PyTorch raises ZeroDivisionError on the CPU), checked
    // before the kernel so every backend behaves the same. Only a divisor element that meets a
    // dividend counts: none does when the broadcast result is empty.
    const Shape out = broadcast_shapes(a.shape(), b.shape(), "div");
    if (numel_of(out) > 0) {
      const std::vector<int64_t> bv = b.to_vector<int64_t>();
      for (size_t i = 0; i < bv.size(); ++i)
        GG_CHECK(bv[i] != 0, ValueError, "gg::div: integer division by zero (divisor b of shape ",
                 shape_str(b.shape()), " is 0 at flat index ", i, ")");
    }
  }
  Tensor y = binary_fwd(BinaryOp::div, a, b, "div");
  record("div", {a, b}, {y}, {a, b}, [sa = a.shape(), sb = b.shape()](const BackwardArgs& g) -> TensorList {
    const Tensor &gy = g.grads[0], &a = g.saved[0], &b = g.saved[1];
    return {g.needs[0] ? sum_to(gy / b, sa) : Tensor(),          // d(a/b)/da = 1/b
            g.needs[1] ? sum_to(neg(gy * a / (b * b)), sb) : Tensor()};  // d(a/b)/db = -a/b²
  });
  return y;
}

Tensor maximum(const Tensor& a, const Tensor& b) {
  Tensor y = binary_fwd(BinaryOp::maximum, a, b, "maximum");
  record("maximum", {a, b}, {y}, {a, b}, [sa = a.shape(), sb = b.shape()](const BackwardArgs& g) -> TensorList {
    const Tensor &a = g.saved[0], &b = g.saved[1];
    // share of the gradient going to a: 1 where a > b, 1/2 on ties, 0 elsewhere (a constant)
    Tensor share_a = to(gt(a, b), a.dtype()) + to(eq(a, b), a.dtype()) * 0.5;
    return {g.needs[0] ? sum_to(g.grads[0] * share_a, sa) : Tensor(),
            g.needs[1] ? sum_to(g.grads[0] * (1.0 - share_a), sb) : Tensor()};
  });
  return y;
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  detail::check_defined("where", cond, "cond");
  GG_CHECK(cond.dtype() == DType::b8, DTypeError, "gg::where: cond must be b8, got ", dtype_name(cond.dtype()));
  detail::check_defined("where", a, "a");
  detail::check_defined("where", b, "b");
  detail::check_same_device("where", cond, a);
  detail::check_same_device("where", a, b);
  detail::check_same_dtype("where", a, b);
  detail::check_cpu_dtype("where", a, true);
  Shape shape = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  detail::check_max_dims("where", shape);
  Tensor y = empty(shape, a.dtype(), a.device());
  dispatch::where({a.dtype(), static_cast<const uint8_t*>(cond.raw_data()), a.raw_data(), b.raw_data(), y.raw_data(),
                   detail::broadcast_layout(cond, shape), detail::broadcast_layout(a, shape),
                   detail::broadcast_layout(b, shape)},
                  a.device());
  record("where", {a, b}, {y}, {}, [cond, sa = a.shape(), sb = b.shape()](const BackwardArgs& g) -> TensorList {
    Tensor zero = zeros({}, g.grads[0].dtype(), g.grads[0].device());
    return {g.needs[0] ? sum_to(where(cond, g.grads[0], zero), sa) : Tensor(),
            g.needs[1] ? sum_to(where(cond, zero, g.grads[0]), sb) : Tensor()};
  });
  return y;
}

Tensor neg(const Tensor& x) {
  Tensor y = unary_fwd(UnaryOp::neg, x, "neg");
  record("neg", {x}, {y}, {}, [](const BackwardArgs& g) -> TensorList { return {neg(g.grads[0])}; });
  return y;
}

Tensor add_scalar(const Tensor& x, double s) {
  Tensor y = unary_fwd(UnaryOp::add_scalar, x, "add_scalar", s);
  record("add_scalar", {x}, {y}, {}, [](const BackwardArgs& g) -> TensorList { return {g.grads[0]}; });
  return y;
}

Tensor mul_scalar(const Tensor& x, double s) {
  Tensor y = unary_fwd(UnaryOp::mul_scalar, x, "mul_scalar", s);
  record("mul_scalar", {x}, {y}, {}, [s](const BackwardArgs& g) -> TensorList { return {mul_scalar(g.grads[0], s)}; });
  return y;
}

Tensor pow(const Tensor& x, double p) {
  Tensor y = unary_fwd(UnaryOp::pow_scalar, x, "pow", p);
  record("pow", {x}, {y}, {x}, [p](const BackwardArgs& g) -> TensorList {
    if (p == 0.0) return {zeros_like(g.grads[0])};
    return {g.grads[0] * mul_scalar(pow(g.saved[0], p - 1.0), p)};  // d x^p = p x^(p-1)
  });
  return y;
}

Tensor exp(const Tensor& x) {
  Tensor y = unary_fwd(UnaryOp::exp, x, "exp");
  record("exp", {x}, {y}, {y}, [](const BackwardArgs& g) -> TensorList { return {g.grads[0] * g.saved[0]}; });
  return y;
}

Tensor log(const Tensor& x) {
  Tensor y = unary_fwd(UnaryOp::log, x, "log");
  record("log", {x}, {y}, {x}, [](const BackwardArgs& g) -> TensorList { return {g.grads[0] / g.saved[0]}; });
  return y;
}

Tensor sqrt(const Tensor& x) {
  Tensor y = unary_fwd(UnaryOp::sqrt, x, "sqrt");
  record("sqrt", {x}, {y}, {y}, [](const BackwardArgs& g) -> TensorList {
    return {g.grads[0] / (g.saved[0] * 2.0)};  // d sqrt(x) = 1 / (2 sqrt(x))
  });
  return y;
}

Tensor tanh(const Tensor& x) {
  Tensor y = unary_fwd(UnaryOp::tanh, x, "tanh");
  record("tanh", {x}, {y}, {y}, [](const BackwardArgs& g) -> TensorList {
    const Tensor& y = g.saved[0];
    return {g.grads[0] * (1.0 - y * y)};  // d tanh = 1 - tanh²
  });
  return y;
}

Tensor sigmoid(const Tensor& x) {
  Tensor y = unary_fwd(UnaryOp::sigmoid, x, "sigmoid");
  record("sigmoid", {x}, {y}, {y}, [](const BackwardArgs& g) -> TensorList {
    const Tensor& y = g.saved[0];
    return {g.grads[0] * y * (1.0 - y)};  // d σ = σ (1 - σ)
  });
  return y;
}

Tensor relu(const Tensor& x) {
  Tensor y = unary_fwd(UnaryOp::relu, x, "relu");
  record("relu", {x}, {y}, {x}, [](const BackwardArgs& g) -> TensorList {
    return {g.grads[0] * unary_fwd(UnaryOp::step, g.saved[0], "relu")};  // 1[x > 0], a constant
  });
  return y;
}

Tensor erf(const Tensor& x) {
  Tensor y = unary_fwd(UnaryOp::erf, x, "erf");
  record("erf", {x}, {y}, {x}, [](const BackwardArgs& g) -> TensorList {
    const Tensor& x = g.saved[0];
    return {g.grads[0] * exp(neg(x * x)) * 1.1283791670955126};  // 2/√π e^(-x²)
  });
  return y;
}

Tensor gelu(const Tensor& x) {
  Tensor y = unary_fwd(UnaryOp::gelu, x, "gelu");
  record("gelu", {x}, {y}, {x}, [](const BackwardArgs& g) -> TensorList {
    const Tensor& x = g.saved[0];
    Tensor cdf = (erf(x * 0.7071067811865476) + 1.0) * 0.5;    // Φ(x)
    Tensor pdf = exp(x * x * -0.5) * 0.3989422804014327;        // φ(x) = e^(-x²/2)/√(2π)
    return {g.grads[0] * (cdf + x * pdf)};                      // d (x Φ(x)) = Φ + x φ
  });
  return y;
}

Tensor sin(const Tensor& x) {
  Tensor y = unary_fwd(UnaryOp::sin, x, "sin");
  record("sin", {x}, {y}, {x}, [](const BackwardArgs& g) -> TensorList { return {g.grads[0] * cos(g.saved[0])}; });
  return y;
}

Tensor cos(const Tensor& x) {
  Tensor y = unary_fwd(UnaryOp::cos, x, "cos");
  record("cos", {x}, {y}, {x}, [](const BackwardArgs& g) -> TensorList { return {neg(g.grads[0] * sin(g.saved[0]))}; });
  return y;
}

Tensor abs(const Tensor& x) {
  Tensor y = unary_fwd(UnaryOp::abs, x, "abs");
  record("abs", {x}, {y}, {x}, [](const BackwardArgs& g) -> TensorList { return {g.grads[0] * sign(g.saved[0])}; });
  return y;
}

Tensor sign(const Tensor& x) { return unary_fwd(UnaryOp::sign, x, "sign"); }

Tensor eq(const Tensor& a, const Tensor& b) { return cmp(BinaryOp::eq, a, b, "eq"); }
Tensor ne(const Tensor& a, const Tensor& b) { return cmp(BinaryOp::ne, a, b, "ne"); }
Tensor lt(const Tensor& a, const Tensor& b) { return cmp(BinaryOp::lt, a, b, "lt"); }
Tensor le(const Tensor& a, const Tensor& b) { return cmp(BinaryOp::le, a, b, "le"); }
Tensor gt(const Tensor& a, const Tensor& b) { return cmp(BinaryOp::gt, a, b, "gt"); }
Tensor ge(const Tensor& a, const Tensor& b) { return cmp(BinaryOp::ge, a, b, "ge"); }

namespace {
// A comparison of x with the number s: s in x's dtype, or both in f64 when x is i64 and s is
// not a whole number that fits (rounding s to an integer would change the answer).
Tensor cmp_scalar(BinaryOp op, const Tensor& x, double s, const char* name) {
  detail::check_defined(name, x, "input");
  const bool exact = x.dtype() != DType::i64 || (std::nearbyint(s) == s && std::abs(s) < 9.0e18);
  if (!exact) return cmp(op, to(x, DType::f64), scalar_tensor(s, DType::f64, x.device()), name);
  return cmp(op, x, scalar_tensor(s, x.dtype(), x.device()), name);
}
}  // namespace

Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
Tensor operator==(const Tensor& a, double s) { return cmp_scalar(BinaryOp::eq, a, s, "eq"); }
Tensor operator!=(const Tensor& a, double s) { return cmp_scalar(BinaryOp::ne, a, s, "ne"); }
Tensor operator<(const Tensor& a, double s) { return cmp_scalar(BinaryOp::lt, a, s, "lt"); }
Tensor operator<=(const Tensor& a, double s) { return cmp_scalar(BinaryOp::le, a, s, "le"); }
Tensor operator>(const Tensor& a, double s) { return cmp_scalar(BinaryOp::gt, a, s, "gt"); }
Tensor operator>=(const Tensor& a, double s) { return cmp_scalar(BinaryOp::ge, a, s, "ge"); }
// s < a is a > s, and so on: the number moves to the right, the comparison turns around.
Tensor operator==(double s, const Tensor& a) { return a == s; }
Tensor operator!=(double s, const Tensor& a) { return a != s; }
Tensor operator<(double s, const Tensor& a) { return a > s; }
Tensor operator<=(double s, const Tensor& a) { return a >= s; }
Tensor operator>(double s, const Tensor& a) { return a < s; }
Tensor operator>=(double s, const Tensor& a) { return a <= s; }

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& x) { return neg(x); }
Tensor operator+(const Tensor& a, double s) { return add_scalar(a, s); }
Tensor operator+(double s, const Tensor& a) { return add_scalar(a, s); }
Tensor operator-(const Tensor& a, double s) { return add_scalar(a, -s); }
Tensor operator-(double s, const Tensor& a) { return add_scalar(neg(a), s); }
Tensor operator*(const Tensor& a, double s) { return mul_scalar(a, s); }
Tensor operator*(double s, const Tensor& a) { return mul_scalar(a, s); }
Tensor operator/(const Tensor& a, double s) { return mul_scalar(a, 1.0 / s); }
Tensor operator/(double s, const Tensor& a) { return mul_scalar(pow(a, -1.0), s); }

}  // namespace gg
