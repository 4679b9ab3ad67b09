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

// ---- type promotion of the operands (ops/ops.h, result_type)

// The dtype a binary kernel computes in for a result of dtype r: b8 values compute as i64.
DType compute_dtype(DType r) { return r == DType::b8 ? DType::i64 : r; }

void check_operands(const char* name, const Tensor& a, const Tensor& b) {
  detail::check_defined(name, a, "a");
  detail::check_defined(name, b, "b");
  detail::check_same_device(name, a, b);
}

// a and b cast to the compute dtype of result r (recorded casts: gradients flow back through
// them in each operand's own dtype).
struct Operands {
  Tensor a, b;
  DType result;
};
Operands promote(const Tensor& a, const Tensor& b, DType r) {
  const DType c = compute_dtype(r);
  return {to(a, c), to(b, c), r};
}

// A computed result in the dtype its operands promoted to (b8 results come back from i64).
Tensor finish(const Tensor& y, DType r) {
  if (y.dtype() == r) return y;
  NoGradGuard ng;
  return to(y, r);
}

// A C++ number as a 0-dim tensor of its own category (bool b8, integer i64 exactly, floating f64).
// A fill kernel writes it (no host copy, so CUDA graphs can capture it) unless an integer is
// too large for a double to hold exactly.
Tensor scalar_operand(const Scalar& s, Device device) {
  constexpr int64_t kExact = int64_t{1} << 53;
  const int64_t i = s.to_int64();
  if (s.dtype() == DType::i64 && (i > kExact || i < -kExact)) return from_indices({i}, {}, device);
  return scalar_tensor(s.to_double(), s.dtype(), device);
}

void refuse_b8_sub(const Tensor& a, const Tensor& b) {
  GG_CHECK(a.dtype() != DType::b8 && b.dtype() != DType::b8, DTypeError,
           "gg::sub: subtraction with a b8 operand is not supported (got ", dtype_name(a.dtype()), " and ",
           dtype_name(b.dtype()), "); use logical ops or cast to another dtype first");
}

void refuse_b8_result(const char* name, const Tensor& a, const Tensor& b, DType r) {
  GG_CHECK(r != DType::b8, DTypeError, "gg::", name, ": not defined for b8 operands (got ", dtype_name(a.dtype()),
           " and ", dtype_name(b.dtype()), "); cast them to i64 or a floating dtype first");
}

// compute(a, b) on a and b promoted to the result type r (compute records the op's own node),
// its result in dtype r.
template <typename F>
Tensor promoted(const Tensor& a, const Tensor& b, DType r, F compute) {
  Operands o = promote(a, b, r);
  return finish(compute(o.a, o.b), r);
}

Tensor cmp(BinaryOp op, const Tensor& a, const Tensor& b, const char* name) {
  check_operands(name, a, b);
  Operands o = promote(a, b, result_type(a, b));
  return binary_fwd(op, o.a, o.b, name, DType::b8);
}

Tensor cmp(BinaryOp op, const Tensor& a, const Scalar& b, const char* name) {
  detail::check_defined(name, a, "a");
  Operands o = promote(a, scalar_operand(b, a.device()), result_type(a, b));
  return binary_fwd(op, o.a, o.b, name, DType::b8);
}

// The recorded ops on operands of one dtype.
Tensor add_same(const Tensor& a, const Tensor& b) {
  Tensor y = binary_fwd(BinaryOp::add, a, b, "add");
  record("add", {a, b}, {y}, {}, [sa = a.shape(), sb = b.shape()](const BackwardArgs& g) -> TensorList {
    return {g.needs[0] ? sum_to(g.grads[0], sa) : Tensor(), g.needs[1] ? sum_to(g.grads[0], sb) : Tensor()};
  }, [](const JvpArgs& j) -> TensorList {
    return {detail::tangent_sum(j.tangents[0], j.tangents[1], j.outputs[0].shape())};
  });
  return y;
}

Tensor sub_same(const Tensor& a, const Tensor& b) {
  Tensor y = binary_fwd(BinaryOp::sub, a, b, "sub");
  record("sub", {a, b}, {y}, {}, [sa = a.shape(), sb = b.shape()](const BackwardArgs& g) -> TensorList {
    return {g.needs[0] ? sum_to(g.grads[0], sa) : Tensor(), g.needs[1] ? sum_to(neg(g.grads[0]), sb) : Tensor()};
  }, [](const JvpArgs& j) -> TensorList {
    const Tensor& tb = j.tangents[1];
    return {detail::tangent_sum(j.tangents[0], tb.defined() ? neg(tb) : tb, j.outputs[0].shape())};
  });
  return y;
}

Tensor mul_same(const Tensor& a, const Tensor& b) {
  Tensor y = binary_fwd(BinaryOp::mul, a, b, "mul");
  record("mul", {a, b}, {y}, {a, b}, [sa = a.shape(), sb = b.shape()](const BackwardArgs& g) -> TensorList {
    const Tensor &gy = g.grads[0], &a = g.saved[0], &b = g.saved[1];
    return {g.needs[0] ? sum_to(gy * b, sa) : Tensor(), g.needs[1] ? sum_to(gy * a, sb) : Tensor()};
  }, [](const JvpArgs& j) -> TensorList {  // (a b)˙ = ȧ b + a ḃ
    const Tensor &ta = j.tangents[0], &tb = j.tangents[1];
    return {detail::tangent_sum(ta.defined() ? ta * j.inputs[1] : ta, tb.defined() ? j.inputs[0] * tb : tb,
                                j.outputs[0].shape())};
  });
  return y;
}

Tensor div_same(const Tensor& a, const Tensor& b) {
  if (!is_floating(b.dtype())) {
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
  }, [](const JvpArgs& j) -> TensorList {  // (a/b)˙ = (ȧ − (a/b) ḃ) / b
    const Tensor &ta = j.tangents[0], &tb = j.tangents[1], &y = j.outputs[0], &b = j.inputs[1];
    if (!tb.defined()) return {ta / b};
    return {(ta.defined() ? ta - y * tb : neg(y * tb)) / b};
  });
  return y;
}

// maximum (is_max) or minimum; the gradient goes to the chosen operand, half to each on ties.
Tensor extremum_same(const Tensor& a, const Tensor& b, bool is_max) {
  const char* name = is_max ? "maximum" : "minimum";
  Tensor y = binary_fwd(is_max ? BinaryOp::maximum : BinaryOp::minimum, a, b, name);
  record(name, {a, b}, {y}, {a, b}, [is_max, sa = a.shape(), sb = b.shape()](const BackwardArgs& g) -> TensorList {
    const Tensor &a = g.saved[0], &b = g.saved[1];
    // share of the gradient going to a: 1 where a wins, 1/2 on ties, 0 elsewhere (a constant)
    Tensor share_a = to(is_max ? gt(a, b) : lt(a, b), a.dtype()) + to(eq(a, b), a.dtype()) * 0.5;
    return {g.needs[0] ? sum_to(g.grads[0] * share_a, sa) : Tensor(),
            g.needs[1] ? sum_to(g.grads[0] * (1.0 - share_a), sb) : Tensor()};
  }, [is_max](const JvpArgs& j) -> TensorList {  // the chosen operand's tangent, the mean of both on ties
    const Tensor &a = j.inputs[0], &b = j.inputs[1];
    Tensor share_a = to(is_max ? gt(a, b) : lt(a, b), a.dtype()) + to(eq(a, b), a.dtype()) * 0.5;
    const Tensor &ta = j.tangents[0], &tb = j.tangents[1];
    return {detail::tangent_sum(ta.defined() ? ta * share_a : ta, tb.defined() ? tb * (1.0 - share_a) : tb,
                                j.outputs[0].shape())};
  });
  return y;
}

Tensor pow_same(const Tensor& a, const Tensor& b) {
  if (!is_floating(b.dtype())) {
    // Integers to negative powers have no integer result (PyTorch refuses them too).
    const Shape out = broadcast_shapes(a.shape(), b.shape(), "pow");
    if (numel_of(out) > 0) {
      const std::vector<int64_t> bv = b.to_vector<int64_t>();
      for (size_t i = 0; i < bv.size(); ++i)
        GG_CHECK(bv[i] >= 0, ValueError, "gg::pow: an integer base to a negative integer power (exponent of shape ",
                 shape_str(b.shape()), " is ", bv[i], " at flat index ", i, ")");
    }
  }
  Tensor y = binary_fwd(BinaryOp::pow, a, b, "pow");
  record("pow", {a, b}, {y}, {a, b}, [sa = a.shape(), sb = b.shape()](const BackwardArgs& g) -> TensorList {
    const Tensor &gy = g.grads[0], &a = g.saved[0], &b = g.saved[1];
    Tensor zero = zeros({}, gy.dtype(), gy.device());
    Tensor ga, gb;
    if (g.needs[0])  // d a^b / da = b a^(b-1), 0 where b = 0
      ga = sum_to(where(eq(b, zero), zero, gy * b * pow(a, b - 1.0)), sa);
    if (g.needs[1])  // d a^b / db = a^b log a, 0 where a = 0 and b >= 0
      gb = sum_to(where(eq(a, zero), where(ge(b, zero), zero, gy * pow(a, b) * log(a)), gy * pow(a, b) * log(a)), sb);
    return {ga, gb};
  }, [](const JvpArgs& j) -> TensorList {  // ȧ b a^(b−1) + ḃ a^b log a, with the backward's zeros
    const Tensor &a = j.inputs[0], &b = j.inputs[1], &y = j.outputs[0];
    Tensor zero = zeros({}, y.dtype(), y.device());
    Tensor ta, tb;
    if (j.tangents[0].defined()) ta = where(eq(b, zero), zero, j.tangents[0] * b * pow(a, b - 1.0));
    if (j.tangents[1].defined())
      tb = where(eq(a, zero), where(ge(b, zero), zero, j.tangents[1] * y * log(a)), j.tangents[1] * y * log(a));
    return {detail::tangent_sum(ta, tb, y.shape())};
  });
  return y;
}

// Tensor-number forms: the number joins as a 0-dim operand of its own category, under the
// result type the pair promotes to.
template <typename Op>
Tensor with_scalar(const char* name, const Tensor& a, const Scalar& b, Op op) {
  detail::check_defined(name, a, "a");
  return op(a, scalar_operand(b, a.device()), result_type(a, b));
}
template <typename Op>
Tensor with_scalar(const char* name, const Scalar& a, const Tensor& b, Op op) {
  detail::check_defined(name, b, "b");
  return op(scalar_operand(a, b.device()), b, result_type(a, b));
}

Tensor add_r(const Tensor& a, const Tensor& b, DType r) { return promoted(a, b, r, add_same); }
Tensor sub_r(const Tensor& a, const Tensor& b, DType r) {
  refuse_b8_sub(a, b);
  return promoted(a, b, r, sub_same);
}
Tensor mul_r(const Tensor& a, const Tensor& b, DType r) { return promoted(a, b, r, mul_same); }
Tensor div_r(const Tensor& a, const Tensor& b, DType r) {
  refuse_b8_result("div", a, b, r);
  return promoted(a, b, r, div_same);
}
Tensor maximum_r(const Tensor& a, const Tensor& b, DType r) {
  return promoted(a, b, r, [](const Tensor& x, const Tensor& y) { return extremum_same(x, y, true); });
}
Tensor minimum_r(const Tensor& a, const Tensor& b, DType r) {
  return promoted(a, b, r, [](const Tensor& x, const Tensor& y) { return extremum_same(x, y, false); });
}
Tensor pow_r(const Tensor& a, const Tensor& b, DType r) {
  refuse_b8_result("pow", a, b, r);
  return promoted(a, b, r, pow_same);
}

}  // namespace

#define GG_BINARY_PUBLIC(name)                                                                              \
  Tensor name(const Tensor& a, const Tensor& b) {                                                           \
    check_operands(#name, a, b);                                                                            \
    return name##_r(a, b, result_type(a, b));                                                              \
  }                                                                                                         \
  Tensor name(const Tensor& a, const Scalar& b) { return with_scalar(#name, a, b, name##_r); }              \
  Tensor name(const Scalar& a, const Tensor& b) { return with_scalar(#name, a, b, name##_r); }
GG_BINARY_PUBLIC(add)
GG_BINARY_PUBLIC(sub)
GG_BINARY_PUBLIC(mul)
GG_BINARY_PUBLIC(div)
GG_BINARY_PUBLIC(maximum)
GG_BINARY_PUBLIC(minimum)
#undef GG_BINARY_PUBLIC

Tensor max(const Tensor& a, const Tensor& b) { return maximum(a, b); }
Tensor min(const Tensor& a, const Tensor& b) { return minimum(a, b); }

Tensor pow(const Tensor& x, const Tensor& p) {
  check_operands("pow", x, p);
  return pow_r(x, p, result_type(x, p));
}
Tensor pow(const Scalar& x, const Tensor& p) { return with_scalar("pow", x, p, pow_r); }

Tensor where(const Tensor& cond, const Tensor& a_in, const Tensor& b_in) {
  detail::check_defined("where", cond, "cond");
  GG_CHECK(cond.dtype() == DType::b8, DTypeError, "gg::where: cond must be b8, got ", dtype_name(cond.dtype()));
  detail::check_defined("where", a_in, "a");
  detail::check_defined("where", b_in, "b");
  detail::check_same_device("where", cond, a_in);
  detail::check_same_device("where", a_in, b_in);
  Operands o = promote(a_in, b_in, result_type(a_in, b_in));
  const Tensor &a = o.a, &b = o.b;
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
  }, [&cond](const JvpArgs& j) -> TensorList {
    const Tensor& y = j.outputs[0];
    const Tensor zero = zeros({}, y.dtype(), y.device());
    const Tensor &ta = j.tangents[0], &tb = j.tangents[1];
    return {expand(where(cond, ta.defined() ? ta : zero, tb.defined() ? tb : zero), y.shape())};
  });
  return finish(y, o.result);
}

Tensor where(const Tensor& cond, const Tensor& a, const Scalar& b) {
  detail::check_defined("where", a, "a");
  const DType r = result_type(a, b);
  return where(cond, a, to(scalar_operand(b, a.device()), r));
}

Tensor where(const Tensor& cond, const Scalar& a, const Tensor& b) {
  detail::check_defined("where", b, "b");
  const DType r = result_type(a, b);
  return where(cond, to(scalar_operand(a, b.device()), r), b);
}

Tensor neg(const Tensor& x) {
  Tensor y = unary_fwd(UnaryOp::neg, x, "neg");
  record("neg", {x}, {y}, {}, [](const BackwardArgs& g) -> TensorList { return {neg(g.grads[0])}; },
         [](const JvpArgs& j) -> TensorList { return {neg(j.tangents[0])}; });
  return y;
}

Tensor add_scalar(const Tensor& x, double s) {
  Tensor y = unary_fwd(UnaryOp::add_scalar, x, "add_scalar", s);
  record("add_scalar", {x}, {y}, {}, [](const BackwardArgs& g) -> TensorList { return {g.grads[0]}; },
         [](const JvpArgs& j) -> TensorList { return {j.tangents[0]}; });
  return y;
}

Tensor mul_scalar(const Tensor& x, double s) {
  Tensor y = unary_fwd(UnaryOp::mul_scalar, x, "mul_scalar", s);
  record("mul_scalar", {x}, {y}, {}, [s](const BackwardArgs& g) -> TensorList { return {mul_scalar(g.grads[0], s)}; },
         [s](const JvpArgs& j) -> TensorList { return {mul_scalar(j.tangents[0], s)}; });
  return y;
}

Tensor pow(const Tensor& x_in, const Scalar& p_in) {
  detail::check_defined("pow", x_in, "input");
  const DType r = result_type(x_in, p_in);
  // An integer result multiplies exactly; b8 to a bool power stays b8 (as PyTorch).
  if (!is_floating(r)) return promoted(x_in, scalar_operand(p_in, x_in.device()), r, pow_same);
  const Tensor x = to(x_in, r);
  const double p = p_in.to_double();
  Tensor y = unary_fwd(UnaryOp::pow_scalar, x, "pow", p);
  record("pow", {x}, {y}, {x}, [p](const BackwardArgs& g) -> TensorList {
    if (p == 0.0) return {zeros_like(g.grads[0])};
    return {g.grads[0] * mul_scalar(pow(g.saved[0], p - 1.0), p)};  // d x^p = p x^(p-1)
  }, [p](const JvpArgs& j) -> TensorList {
    if (p == 0.0) return {zeros_like(j.tangents[0])};
    return {j.tangents[0] * mul_scalar(pow(j.inputs[0], p - 1.0), p)};
  });
  return y;
}

Tensor exp(const Tensor& x) {
  Tensor y = unary_fwd(UnaryOp::exp, x, "exp");
  record("exp", {x}, {y}, {y}, [](const BackwardArgs& g) -> TensorList { return {g.grads[0] * g.saved[0]}; },
         [](const JvpArgs& j) -> TensorList { return {j.tangents[0] * j.outputs[0]}; });
  return y;
}

Tensor log(const Tensor& x) {
  Tensor y = unary_fwd(UnaryOp::log, x, "log");
  record("log", {x}, {y}, {x}, [](const BackwardArgs& g) -> TensorList { return {g.grads[0] / g.saved[0]}; },
         [](const JvpArgs& j) -> TensorList { return {j.tangents[0] / j.inputs[0]}; });
  return y;
}

Tensor sqrt(const Tensor& x) {
  Tensor y = unary_fwd(UnaryOp::sqrt, x, "sqrt");
  record("sqrt", {x}, {y}, {y}, [](const BackwardArgs& g) -> TensorList {
    return {g.grads[0] / (g.saved[0] * 2.0)};  // d sqrt(x) = 1 / (2 sqrt(x))
  }, [](const JvpArgs& j) -> TensorList {
    return {j.tangents[0] / (j.outputs[0] * 2.0)};
  });
  return y;
}

Tensor tanh(const Tensor& x) {
  Tensor y = unary_fwd(UnaryOp::tanh, x, "tanh");
  record("tanh", {x}, {y}, {y}, [](const BackwardArgs& g) -> TensorList {
    const Tensor& y = g.saved[0];
    return {g.grads[0] * (1.0 - y * y)};  // d tanh = 1 - tanh²
  }, [](const JvpArgs& j) -> TensorList {
    const Tensor& y = j.outputs[0];
    return {j.tangents[0] * (1.0 - y * y)};
  });
  return y;
}

Tensor sigmoid(const Tensor& x) {
  Tensor y = unary_fwd(UnaryOp::sigmoid, x, "sigmoid");
  record("sigmoid", {x}, {y}, {y}, [](const BackwardArgs& g) -> TensorList {
    const Tensor& y = g.saved[0];
    return {g.grads[0] * y * (1.0 - y)};  // d σ = σ (1 - σ)
  }, [](const JvpArgs& j) -> TensorList {
    const Tensor& y = j.outputs[0];
    return {j.tangents[0] * y * (1.0 - y)};
  });
  return y;
}

Tensor relu(const Tensor& x) {
  Tensor y = unary_fwd(UnaryOp::relu, x, "relu");
  record("relu", {x}, {y}, {x}, [](const BackwardArgs& g) -> TensorList {
    return {g.grads[0] * unary_fwd(UnaryOp::step, g.saved[0], "relu")};  // 1[x > 0], a constant
  }, [](const JvpArgs& j) -> TensorList {
    return {j.tangents[0] * unary_fwd(UnaryOp::step, j.inputs[0], "relu")};
  });
  return y;
}

Tensor erf(const Tensor& x) {
  Tensor y = unary_fwd(UnaryOp::erf, x, "erf");
  record("erf", {x}, {y}, {x}, [](const BackwardArgs& g) -> TensorList {
    const Tensor& x = g.saved[0];
    return {g.grads[0] * exp(neg(x * x)) * 1.1283791670955126};  // 2/√π e^(-x²)
  }, [](const JvpArgs& j) -> TensorList {
    const Tensor& x = j.inputs[0];
    return {j.tangents[0] * exp(neg(x * x)) * 1.1283791670955126};
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
  }, [](const JvpArgs& j) -> TensorList {
    const Tensor& x = j.inputs[0];
    Tensor cdf = (erf(x * 0.7071067811865476) + 1.0) * 0.5;
    Tensor pdf = exp(x * x * -0.5) * 0.3989422804014327;
    return {j.tangents[0] * (cdf + x * pdf)};
  });
  return y;
}

Tensor sin(const Tensor& x) {
  Tensor y = unary_fwd(UnaryOp::sin, x, "sin");
  record("sin", {x}, {y}, {x}, [](const BackwardArgs& g) -> TensorList { return {g.grads[0] * cos(g.saved[0])}; },
         [](const JvpArgs& j) -> TensorList { return {j.tangents[0] * cos(j.inputs[0])}; });
  return y;
}

Tensor cos(const Tensor& x) {
  Tensor y = unary_fwd(UnaryOp::cos, x, "cos");
  record("cos", {x}, {y}, {x}, [](const BackwardArgs& g) -> TensorList { return {neg(g.grads[0] * sin(g.saved[0]))}; },
         [](const JvpArgs& j) -> TensorList { return {neg(j.tangents[0] * sin(j.inputs[0]))}; });
  return y;
}

Tensor abs(const Tensor& x) {
  Tensor y = unary_fwd(UnaryOp::abs, x, "abs");
  record("abs", {x}, {y}, {x}, [](const BackwardArgs& g) -> TensorList { return {g.grads[0] * sign(g.saved[0])}; },
         [](const JvpArgs& j) -> TensorList { return {j.tangents[0] * sign(j.inputs[0])}; });
  return y;
}

Tensor sign(const Tensor& x) { return unary_fwd(UnaryOp::sign, x, "sign"); }

Tensor log1p(const Tensor& x) {
  Tensor y = unary_fwd(UnaryOp::log1p, x, "log1p");
  record("log1p", {x}, {y}, {x}, [](const BackwardArgs& g) -> TensorList { return {g.grads[0] / (g.saved[0] + 1.0)}; },
         [](const JvpArgs& j) -> TensorList { return {j.tangents[0] / (j.inputs[0] + 1.0)}; });
  return y;
}

Tensor expm1(const Tensor& x) {
  Tensor y = unary_fwd(UnaryOp::expm1, x, "expm1");
  record("expm1", {x}, {y}, {y}, [](const BackwardArgs& g) -> TensorList {
    return {g.grads[0] * (g.saved[0] + 1.0)};  // d (e^x - 1) = e^x = y + 1
  }, [](const JvpArgs& j) -> TensorList {
    return {j.tangents[0] * (j.outputs[0] + 1.0)};
  });
  return y;
}

namespace {
// floor, ceil, round: a step function, so the gradient is 0 (recorded, so that the result
// requires grad like its input, as in PyTorch).
Tensor rounding(UnaryOp op, const Tensor& x, const char* name) {
  detail::check_defined(name, x, "input");
  if (x.dtype() == DType::i64) return clone(x);
  Tensor y = unary_fwd(op, x, name);
  record(name, {x}, {y}, {}, [](const BackwardArgs& g) -> TensorList { return {zeros_like(g.grads[0])}; },
         [](const JvpArgs& j) -> TensorList { return {zeros_like(j.tangents[0])}; });
  return y;
}
}  // namespace

Tensor floor(const Tensor& x) { return rounding(UnaryOp::floor, x, "floor"); }
Tensor ceil(const Tensor& x) { return rounding(UnaryOp::ceil, x, "ceil"); }
Tensor round(const Tensor& x) { return rounding(UnaryOp::round, x, "round"); }

Tensor clamp(const Tensor& x_in, const std::optional<Scalar>& lo, const std::optional<Scalar>& hi) {
  detail::check_defined("clamp", x_in, "input");
  GG_CHECK(lo || hi, ValueError, "gg::clamp: at least one of the bounds lo and hi must be given");
  GG_CHECK(x_in.dtype() != DType::b8, DTypeError, "gg::clamp: not defined for a b8 input");
  DType r = x_in.dtype();
  if (lo) r = promote_types(r, result_type(x_in, *lo));
  if (hi) r = promote_types(r, result_type(x_in, *hi));
  const Tensor x = to(x_in, r);
  Tensor y;
  {
    NoGradGuard ng;  // maximum/minimum let NaN through, from x or from a bound
    y = x;
    if (lo) y = maximum(y, *lo);
    if (hi) y = minimum(y, *hi);
  }
  if (!is_floating(r)) return y;
  record("clamp", {x}, {y}, {x}, [lo, hi](const BackwardArgs& g) -> TensorList {
    const Tensor& x = g.saved[0];
    // 1 strictly inside the bounds, 0 at and beyond them and at NaN (a constant mask)
    Tensor inside = ones_like(x);
    if (lo) inside = inside * to(gt(x, *lo), x.dtype());
    if (hi) inside = inside * to(lt(x, *hi), x.dtype());
    return {g.grads[0] * inside};
  }, [&lo, &hi](const JvpArgs& j) -> TensorList {
    const Tensor& x = j.inputs[0];
    Tensor inside = ones_like(x);
    if (lo) inside = inside * to(gt(x, *lo), x.dtype());
    if (hi) inside = inside * to(lt(x, *hi), x.dtype());
    return {j.tangents[0] * inside};
  });
  return y;
}

Tensor clamp_min(const Tensor& x, const Scalar& lo) { return clamp(x, lo, std::nullopt); }
Tensor clamp_max(const Tensor& x, const Scalar& hi) { return clamp(x, std::nullopt, hi); }

namespace {
void check_mask(const Tensor& x, const Tensor& mask) {
  detail::check_defined("masked_fill", x, "input");
  detail::check_defined("masked_fill", mask, "mask");
  detail::check_same_device("masked_fill", x, mask);
  GG_CHECK(mask.dtype() == DType::b8, DTypeError, "gg::masked_fill: mask must be b8, got ", dtype_name(mask.dtype()));
  broadcast_shapes(x.shape(), mask.shape(), "masked_fill");
}
}  // namespace

Tensor masked_fill(const Tensor& x, const Tensor& mask, const Scalar& value) {
  check_mask(x, mask);
  Tensor v;
  {
    NoGradGuard ng;
    v = to(scalar_operand(value, x.device()), x.dtype());
  }
  return where(mask, v, x);
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, const Tensor& value) {
  check_mask(x, mask);
  detail::check_defined("masked_fill", value, "value");
  detail::check_same_device("masked_fill", x, value);
  GG_CHECK(value.dim() == 0, ShapeError, "gg::masked_fill: value must be a 0-dim tensor, got shape ",
           shape_str(value.shape()));
  return where(mask, to(value, x.dtype()), x);
}

Tensor eq(const Tensor& a, const Tensor& b) { return cmp(BinaryOp::eq, a, b, "eq"); }
Tensor ne(const Tensor& a, const Tensor& b) { return cmp(BinaryOp::ne, a, b, "ne"); }
Tensor lt(const Tensor& a, const Tensor& b) { return cmp(BinaryOp::lt, a, b, "lt"); }
Tensor le(const Tensor& a, const Tensor& b) { return cmp(BinaryOp::le, a, b, "le"); }
Tensor gt(const Tensor& a, const Tensor& b) { return cmp(BinaryOp::gt, a, b, "gt"); }
Tensor ge(const Tensor& a, const Tensor& b) { return cmp(BinaryOp::ge, a, b, "ge"); }
Tensor eq(const Tensor& a, const Scalar& b) { return cmp(BinaryOp::eq, a, b, "eq"); }
Tensor ne(const Tensor& a, const Scalar& b) { return cmp(BinaryOp::ne, a, b, "ne"); }
Tensor lt(const Tensor& a, const Scalar& b) { return cmp(BinaryOp::lt, a, b, "lt"); }
Tensor le(const Tensor& a, const Scalar& b) { return cmp(BinaryOp::le, a, b, "le"); }
Tensor gt(const Tensor& a, const Scalar& b) { return cmp(BinaryOp::gt, a, b, "gt"); }
Tensor ge(const Tensor& a, const Scalar& b) { return cmp(BinaryOp::ge, a, b, "ge"); }
// A number on the left compares as the mirrored comparison with it on the right (2 < x is x > 2).
Tensor eq(const Scalar& a, const Tensor& b) { return cmp(BinaryOp::eq, b, a, "eq"); }
Tensor ne(const Scalar& a, const Tensor& b) { return cmp(BinaryOp::ne, b, a, "ne"); }
Tensor lt(const Scalar& a, const Tensor& b) { return cmp(BinaryOp::gt, b, a, "lt"); }
Tensor le(const Scalar& a, const Tensor& b) { return cmp(BinaryOp::ge, b, a, "le"); }
Tensor gt(const Scalar& a, const Tensor& b) { return cmp(BinaryOp::lt, b, a, "gt"); }
Tensor ge(const Scalar& a, const Tensor& b) { return cmp(BinaryOp::le, b, a, "ge"); }

// The operators are the named comparisons, with their promotion (a number on the left turns
// the comparison around: 1.0 < x is x > 1.0).
Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
Tensor operator==(const Tensor& a, const Scalar& b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Scalar& b) { return ne(a, b); }
Tensor operator<(const Tensor& a, const Scalar& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Scalar& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Scalar& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Scalar& b) { return ge(a, b); }
Tensor operator==(const Scalar& a, const Tensor& b) { return eq(a, b); }
Tensor operator!=(const Scalar& a, const Tensor& b) { return ne(a, b); }
Tensor operator<(const Scalar& a, const Tensor& b) { return lt(a, b); }
Tensor operator<=(const Scalar& a, const Tensor& b) { return le(a, b); }
Tensor operator>(const Scalar& a, const Tensor& b) { return gt(a, b); }
Tensor operator>=(const Scalar& a, const Tensor& b) { return ge(a, b); }

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& x) { return neg(x); }

// A floating x keeps its dtype under a number (x + 2, x * 0.5) and runs the unary kernels; any
// other pair goes through the promoting binary op.
namespace {
bool keeps_dtype(const Tensor& x, const Scalar& s) {
  return x.defined() && is_floating(x.dtype()) && result_type(x, s) == x.dtype();
}
}  // namespace
Tensor operator+(const Tensor& a, const Scalar& s) { return keeps_dtype(a, s) ? add_scalar(a, s.to_double()) : add(a, s); }
Tensor operator+(const Scalar& s, const Tensor& a) { return keeps_dtype(a, s) ? add_scalar(a, s.to_double()) : add(s, a); }
Tensor operator-(const Tensor& a, const Scalar& s) { return keeps_dtype(a, s) ? add_scalar(a, -s.to_double()) : sub(a, s); }
Tensor operator-(const Scalar& s, const Tensor& a) { return keeps_dtype(a, s) ? add_scalar(neg(a), s.to_double()) : sub(s, a); }
Tensor operator*(const Tensor& a, const Scalar& s) { return keeps_dtype(a, s) ? mul_scalar(a, s.to_double()) : mul(a, s); }
Tensor operator*(const Scalar& s, const Tensor& a) { return keeps_dtype(a, s) ? mul_scalar(a, s.to_double()) : mul(s, a); }
Tensor operator/(const Tensor& a, const Scalar& s) { return keeps_dtype(a, s) ? mul_scalar(a, 1.0 / s.to_double()) : div(a, s); }
Tensor operator/(const Scalar& s, const Tensor& a) {
  return keeps_dtype(a, s) ? mul_scalar(pow(a, -1.0), s.to_double()) : div(s, a);
}

}  // namespace gg
