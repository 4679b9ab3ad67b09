// Vectorised math that keeps IEEE results at the edges of its domain, shared by the elementwise
// kernels (elementwise.cpp) and the attention tiles (attention.h).
#pragma once
#include <Eigen/Core>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace gg::kernels::cpu {

// Note [vectorised exp and log at the edges]
// Eigen's generic packet exp and its log are within 1 ulp of the correctly rounded result only on part of
// their domain: pexp clamps its argument to about ±88.72 (f32) or ±709.78 (f64), so an exp that
// should underflow to a subnormal or to 0 returns exp(-88.72) = 2.9e-39 instead, and plog
// clamps subnormal inputs to the smallest normal number. ExpOp below (and LogOp in
// elementwise.cpp) return Eigen's
// packet when every lane lies inside that part (the common case costs a compare and an
// any-lane test per packet) and otherwise, out of line, fix the other lanes: exactly where the
// answer is known (exp of x below kExpZero is 0), else with the scalar std:: function (NaN
// lanes too). Eigen's scalar path (the unaligned head and tail) is the std:: function, and
// exp's edges hold for every caller of ExpOp::packetOp (attention's probability tiles, whose
// masked scores are -inf, too).
template <typename T>
struct VecLimits;
template <>
struct VecLimits<float> {
  static constexpr float kExpLow = -88.0f;    // pexp is within 1 ulp for x >= this
  static constexpr float kExpZero = -104.0f;  // exp(x) < 2^-150 for x < this: rounds to 0
};
template <>
struct VecLimits<double> {
  static constexpr double kExpLow = -708.0;   // exp(x) is a normal double for x >= this
  static constexpr double kExpZero = -746.0;  // exp(x) < 2^-1075 for x < this: rounds to 0
};

// y with the lanes of x selected by `redo` replaced by f(x).
template <typename Packet, typename F>
Packet redo_lanes(const Packet& x, const Packet& y, const Packet& redo, F f) {
  namespace ei = Eigen::internal;
  using T = typename ei::unpacket_traits<Packet>::type;
  using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  constexpr int kLanes = ei::unpacket_traits<Packet>::size;
  T xs[kLanes], ys[kLanes], ms[kLanes];
  ei::pstoreu(xs, x);
  ei::pstoreu(ys, y);
  ei::pstoreu(ms, redo);
  for (int i = 0; i < kLanes; ++i) {
    Bits m;
    std::memcpy(&m, &ms[i], sizeof(T));
    if (m != 0) ys[i] = f(xs[i]);
  }
  return ei::ploadu<Packet>(ys);
}

// Eigen's generic packet exp (the range reduction and polynomial of GenericPacketMathFunctions.h),
// on every instruction set: Eigen's own AVX-512 float pexp is up to 4 ulp off near |x| = 87 and
// overflows to inf from x = 88.7, below the true overflow at 88.72.
template <typename Packet>
EIGEN_STRONG_INLINE Packet generic_pexp(const Packet& x) {
  namespace ei = Eigen::internal;
  if constexpr (std::is_same_v<typename ei::unpacket_traits<Packet>::type, float>) {
    return ei::pexp_float(x);
  } else {
    return ei::pexp_double(x);
  }
}

// exp: Eigen's generic packet exp for x >= kExpLow (overflow to inf included), 0 below kExpZero, std::exp
// between and for NaN.
template <typename T>
struct ExpOp {
  T operator()(T x) const { return std::exp(x); }
  template <typename Packet>
  EIGEN_STRONG_INLINE Packet packetOp(const Packet& x) const {
    namespace ei = Eigen::internal;
    const Packet y = generic_pexp(x);
    const Packet redo = ei::pcmp_lt_or_nan(x, ei::pset1<Packet>(VecLimits<T>::kExpLow));
    if (EIGEN_PREDICT_TRUE(!ei::predux_any(redo))) return y;
    return edges(x, y, redo);
  }
  template <typename Packet>
  static EIGEN_DONT_INLINE Packet edges(const Packet x, const Packet y, const Packet redo) {
    namespace ei = Eigen::internal;
    const Packet zero = ei::pcmp_lt(x, ei::pset1<Packet>(VecLimits<T>::kExpZero));
    const Packet rest = ei::pandnot(redo, zero);
    const Packet y0 = ei::pandnot(y, zero);
    return ei::predux_any(rest) ? redo_lanes(x, y0, rest, [](T v) { return std::exp(v); }) : y0;
  }
};

}  // namespace gg::kernels::cpu
