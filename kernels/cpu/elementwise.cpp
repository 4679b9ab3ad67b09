// Elementwise maps (Eigen arrays on contiguous data) and broadcasting binary ops / where.
#include <Eigen/Core>
#include <cmath>

#include "core/error.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/strided.h"

namespace gg::kernels::cpu {
namespace {

template <typename T>
using Vec = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <typename T>
using CVec = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

template <typename T>
void unary_t(const UnaryParams& p) {
  CVec<T> x(static_cast<const T*>(p.x), p.n);
  Vec<T> y(static_cast<T*>(p.y), p.n);
  const T a = static_cast<T>(p.alpha);
  const T inv_sqrt2 = static_cast<T>(0.70710678118654752440);
  switch (p.op) {
    case UnaryOp::neg: y = -x; break;
    case UnaryOp::exp: y = x.exp(); break;
    case UnaryOp::log: y = x.log(); break;
    case UnaryOp::sqrt: y = x.sqrt(); break;
    case UnaryOp::tanh: y = x.tanh(); break;
    case UnaryOp::sigmoid: y = T(1) / (T(1) + (-x).exp()); break;
    case UnaryOp::relu: y = x.max(T(0)); break;
    case UnaryOp::gelu: y = x.unaryExpr([&](T v) { return T(0.5) * v * (T(1) + std::erf(v * inv_sqrt2)); }); break;
    case UnaryOp::erf: y = x.unaryExpr([](T v) { return std::erf(v); }); break;
    case UnaryOp::sin: y = x.sin(); break;
    case UnaryOp::cos: y = x.cos(); break;
    case UnaryOp::abs: y = x.abs(); break;
    case UnaryOp::sign: y = x.unaryExpr([](T v) { return T((v > T(0)) - (v < T(0))); }); break;
    case UnaryOp::step: y = x.unaryExpr([](T v) { return v > T(0) ? T(1) : T(0); }); break;
    case UnaryOp::pow_scalar:
      if (a == T(2)) y = x.square();
      else y = x.unaryExpr([a](T v) { return std::pow(v, a); });
      break;
    case UnaryOp::add_scalar: y = x + a; break;
    case UnaryOp::mul_scalar: y = x * a; break;
  }
}

// One run of out[i] = f(x[i * sx], y[i * sy]). The common stride patterns get their own loop
// (both contiguous, or one operand a broadcast scalar) so the compiler can vectorise them.
template <typename Out, typename T, typename F>
inline void run_binary(F f, Out* o, const T* x, int64_t sx, const T* y, int64_t sy, int64_t n) {
  if (sx == 1 && sy == 1) {
    for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], y[i]);
  } else if (sx == 1 && sy == 0) {
    const T b = *y;
    for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], b);
  } else if (sx == 0 && sy == 1) {
    const T a = *x;
    for (int64_t i = 0; i < n; ++i) o[i] = f(a, y[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) o[i] = f(x[i * sx], y[i * sy]);
  }
}

// Runs `f` over the broadcast index space of p (output contiguous), one run at a time.
template <typename Out, typename T, typename F>
void binary_map(const BinaryParams& p, F f) {
  const T* a = static_cast<const T*>(p.a);
  const T* b = static_cast<const T*>(p.b);
  Out* out = static_cast<Out*>(p.out);
  Layout out_layout = p.a_layout;  // output is contiguous over the same sizes
  int64_t s = 1;
  for (int d = out_layout.ndim; d-- > 0;) {
    out_layout.strides[d] = s;
    s *= out_layout.sizes[d];
  }
  const Layout* const layouts[3] = {&out_layout, &p.a_layout, &p.b_layout};
  for_each_run<3>(layouts, [&](const int64_t* base, int64_t n, const int64_t* st) {
    run_binary(f, out + base[0], a + base[1], st[1], b + base[2], st[2], n);
  });
}

template <typename T>
void binary_t(const BinaryParams& p) {
  using B = uint8_t;  // comparisons write b8
  switch (p.op) {
    case BinaryOp::add: return binary_map<T, T>(p, [](T a, T b) { return a + b; });
    case BinaryOp::sub: return binary_map<T, T>(p, [](T a, T b) { return a - b; });
    case BinaryOp::mul: return binary_map<T, T>(p, [](T a, T b) { return a * b; });
    case BinaryOp::div: return binary_map<T, T>(p, [](T a, T b) { return a / b; });
    case BinaryOp::maximum:  // NaN wins
      return binary_map<T, T>(p, [](T a, T b) { return a > b ? a : (b > a ? b : (a != a ? a : b)); });
    case BinaryOp::eq: return binary_map<B, T>(p, [](T a, T b) { return B(a == b); });
    case BinaryOp::ne: return binary_map<B, T>(p, [](T a, T b) { return B(a != b); });
    case BinaryOp::lt: return binary_map<B, T>(p, [](T a, T b) { return B(a < b); });
    case BinaryOp::le: return binary_map<B, T>(p, [](T a, T b) { return B(a <= b); });
    case BinaryOp::gt: return binary_map<B, T>(p, [](T a, T b) { return B(a > b); });
    case BinaryOp::ge: return binary_map<B, T>(p, [](T a, T b) { return B(a >= b); });
  }
}

template <typename T>
void where_t(const WhereParams& p) {
  const T* a = static_cast<const T*>(p.a);
  const T* b = static_cast<const T*>(p.b);
  T* out = static_cast<T*>(p.out);
  Layout out_layout = p.a_layout;
  int64_t s = 1;
  for (int d = out_layout.ndim; d-- > 0;) {
    out_layout.strides[d] = s;
    s *= out_layout.sizes[d];
  }
  const Layout* const layouts[4] = {&out_layout, &p.cond_layout, &p.a_layout, &p.b_layout};
  for_each_run<4>(layouts, [&](const int64_t* base, int64_t n, const int64_t* st) {
    for (int64_t i = 0; i < n; ++i)
      out[base[0] + i] = p.cond[base[1] + i * st[1]] ? a[base[2] + i * st[2]] : b[base[3] + i * st[3]];
  });
}

}  // namespace

void unary(const UnaryParams& p) {
  switch (p.dtype) {
    case DType::f32: return unary_t<float>(p);
    case DType::f64: return unary_t<double>(p);
    default: throw DTypeError(std::string("gg: CPU elementwise ops support f32 and f64, got ") + dtype_name(p.dtype));
  }
}

void binary(const BinaryParams& p) {
  switch (p.dtype) {
    case DType::f32: return binary_t<float>(p);
    case DType::f64: return binary_t<double>(p);
    case DType::i64: return binary_t<int64_t>(p);
    default: throw DTypeError(std::string("gg: CPU binary ops support f32, f64 and i64, got ") + dtype_name(p.dtype));
  }
}

void where(const WhereParams& p) {
  switch (p.dtype) {
    case DType::f32: return where_t<float>(p);
    case DType::f64: return where_t<double>(p);
    case DType::i64: return where_t<int64_t>(p);
    default: throw DTypeError(std::string("gg::where: CPU supports f32, f64 and i64, got ") + dtype_name(p.dtype));
  }
}

}  // namespace gg::kernels::cpu
