// Elementwise maps (Eigen arrays on contiguous data) and broadcasting binary ops / where.
#include "kernels/cpu/eigen.h"
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/error.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/strided.h"
#include "kernels/cpu/vec_math.h"

namespace gg::kernels::cpu {
namespace {

template <typename T>
using Vec = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <typename T>
using CVec = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

// log: Eigen's packet for x >= the smallest normal number and for x <= 0 (-inf at ±0, NaN
// below), std::log for subnormal x and NaN.
template <typename T>
struct LogOp {
  T operator()(T x) const { return std::log(x); }
  template <typename Packet>
  EIGEN_STRONG_INLINE Packet packetOp(const Packet& x) const {
    namespace ei = Eigen::internal;
    const Packet y = ei::plog(x);
    const Packet low = ei::pcmp_lt_or_nan(x, ei::pset1<Packet>(std::numeric_limits<T>::min()));
    if (EIGEN_PREDICT_TRUE(!ei::predux_any(low))) return y;
    return edges(x, y, low);
  }
  template <typename Packet>
  static EIGEN_DONT_INLINE Packet edges(const Packet x, const Packet y, const Packet low) {
    namespace ei = Eigen::internal;
    const Packet rest = ei::pandnot(low, ei::pcmp_le(x, ei::pzero(x)));
    return ei::predux_any(rest) ? redo_lanes(x, y, rest, [](T v) { return std::log(v); }) : y;
  }
};

// sigmoid(x) = 1 / (1 + exp(-x)), and exp(x) / (1 + exp(x)) below kExpLow, where exp(-x)
// overflows and the result is a tiny exp(x) (sigmoid(-100) = 3.8e-44 in f32), and for NaN.
template <typename T>
struct SigmoidOp {
  T operator()(T x) const {
    if (x >= VecLimits<T>::kExpLow) return T(1) / (T(1) + std::exp(-x));
    const T e = std::exp(x);
    return e / (T(1) + e);
  }
  template <typename Packet>
  EIGEN_STRONG_INLINE Packet packetOp(const Packet& x) const {
    namespace ei = Eigen::internal;
    const Packet one = ei::pset1<Packet>(T(1));
    const Packet y = ei::pdiv(one, ei::padd(one, generic_pexp(ei::pnegate(x))));
    const Packet low = ei::pcmp_lt_or_nan(x, ei::pset1<Packet>(VecLimits<T>::kExpLow));
    if (EIGEN_PREDICT_TRUE(!ei::predux_any(low))) return y;
    return edges(x, y, low);
  }
  template <typename Packet>
  static EIGEN_DONT_INLINE Packet edges(const Packet x, const Packet y, const Packet low) {
    namespace ei = Eigen::internal;
    const Packet e = ExpOp<T>().packetOp(x);
    return ei::pselect(low, ei::pdiv(e, ei::padd(ei::pset1<Packet>(T(1)), e)), y);
  }
};

}  // namespace
}  // namespace gg::kernels::cpu

namespace Eigen::internal {
template <typename T>
struct functor_traits<gg::kernels::cpu::ExpOp<T>> {
  enum { Cost = functor_traits<scalar_exp_op<T>>::Cost, PacketAccess = packet_traits<T>::HasExp };
};
template <typename T>
struct functor_traits<gg::kernels::cpu::LogOp<T>> {
  enum { Cost = functor_traits<scalar_log_op<T>>::Cost, PacketAccess = packet_traits<T>::HasLog };
};
template <typename T>
struct functor_traits<gg::kernels::cpu::SigmoidOp<T>> {
  enum {
    Cost = functor_traits<scalar_exp_op<T>>::Cost + 2 * NumTraits<T>::AddCost + scalar_div_cost<T, true>::value,
    PacketAccess = packet_traits<T>::HasExp && packet_traits<T>::HasDiv
  };
};
}  // namespace Eigen::internal

namespace gg::kernels::cpu {
namespace {

// The M:: of the formulas in kernels/elementwise_ops.h, on Eigen array expressions: Eigen's
// vectorised functions where it has them (exp, log and sigmoid through the functors above), a
// scalar std:: function per element otherwise.
struct CpuMath {
  template <typename D> static auto exp(const Eigen::ArrayBase<D>& x) {
    return x.unaryExpr(ExpOp<typename D::Scalar>());
  }
  template <typename D> static auto log(const Eigen::ArrayBase<D>& x) {
    return x.unaryExpr(LogOp<typename D::Scalar>());
  }
  template <typename D> static auto sigmoid(const Eigen::ArrayBase<D>& x) {
    return x.unaryExpr(SigmoidOp<typename D::Scalar>());
  }
  template <typename D> static auto sqrt(const Eigen::ArrayBase<D>& x) { return x.sqrt(); }
  template <typename D> static auto tanh(const Eigen::ArrayBase<D>& x) { return x.tanh(); }
  template <typename D> static auto sin(const Eigen::ArrayBase<D>& x) { return x.sin(); }
  template <typename D> static auto cos(const Eigen::ArrayBase<D>& x) { return x.cos(); }
  template <typename D> static auto abs(const Eigen::ArrayBase<D>& x) { return x.abs(); }
  template <typename D, typename T> static auto max(const Eigen::ArrayBase<D>& x, T s) { return x.max(s); }
  template <typename D> static auto floor(const Eigen::ArrayBase<D>& x) { return x.floor(); }
  template <typename D> static auto ceil(const Eigen::ArrayBase<D>& x) { return x.ceil(); }
  template <typename D> static auto rint(const Eigen::ArrayBase<D>& x) {
    using T = typename D::Scalar;
    return x.unaryExpr([](T v) { return std::nearbyint(v); });
  }
  template <typename D> static auto log1p(const Eigen::ArrayBase<D>& x) {
    using T = typename D::Scalar;
    return x.unaryExpr([](T v) { return std::log1p(v); });
  }
  template <typename D> static auto expm1(const Eigen::ArrayBase<D>& x) {
    using T = typename D::Scalar;
    return x.unaryExpr([](T v) { return std::expm1(v); });
  }
  template <typename D> static auto erf(const Eigen::ArrayBase<D>& x) {
    using T = typename D::Scalar;
    return x.unaryExpr([](T v) { return std::erf(v); });
  }
  // x·Φ(x) = x·erfc(-x/√2)/2, in double: 1 + erf(x/√2) would cancel for negative x, and the
  // rounding of x/√2 in f32 is magnified ~x² times by erfc's steep tail.
  template <typename D> static auto gelu(const Eigen::ArrayBase<D>& x) {
    using T = typename D::Scalar;
    return x.unaryExpr([](T v) {
      const double d = v;
      return static_cast<T>(0.5 * d * std::erfc(d * -0.70710678118654752440));
    });
  }
  template <typename D> static auto step(const Eigen::ArrayBase<D>& x) {
    using T = typename D::Scalar;
    return x.unaryExpr([](T v) { return v > T(0) ? T(1) : T(0); });
  }
  template <typename D, typename T> static auto pow(const Eigen::ArrayBase<D>& x, T a) {
    return x.unaryExpr([a](T v) { return a == T(2) ? v * v : std::pow(v, a); });
  }
};

// y = formula(x) over the whole array, one case per entry of GG_UNARY_OPS.
template <typename T>
void unary_t(const UnaryParams& p) {
  using C = T;
  using M = CpuMath;
  CVec<T> x(static_cast<const T*>(p.x), p.n);
  Vec<T> y(static_cast<T*>(p.y), p.n);
  const T a = static_cast<T>(p.alpha);
  switch (p.op) {
#define GG_UNARY_CASE(name, formula) \
  case UnaryOp::name: y = (formula); break;
    GG_UNARY_OPS(GG_UNARY_CASE)
#undef GG_UNARY_CASE
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

// binary_map with the formula of each entry of GG_BINARY_OPS; comparisons write b8.
template <typename T>
void binary_t(const BinaryParams& p) {
  switch (p.op) {
#define GG_BINARY_CASE(name, result, formula)                     \
  case BinaryOp::name: {                                          \
    using Out = std::conditional_t<GG_RESULT_IS_B8_##result, uint8_t, T>; \
    return binary_map<Out, T>(p, [](T a, T b) { return Out(formula); }); \
  }
    GG_BINARY_OPS(GG_BINARY_CASE)
#undef GG_BINARY_CASE
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
    default:
      throw DTypeError(std::string("gg::") + op_name(p.op) + ": the CPU kernel supports f32 and f64, got " +
                       dtype_name(p.dtype));
  }
}

void binary(const BinaryParams& p) {
  switch (p.dtype) {
    case DType::f32: return binary_t<float>(p);
    case DType::f64: return binary_t<double>(p);
    case DType::i64: return binary_t<int64_t>(p);
    default:
      throw DTypeError(std::string("gg::") + op_name(p.op) + ": the CPU kernel supports f32, f64 and i64, got " +
                       dtype_name(p.dtype));
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
