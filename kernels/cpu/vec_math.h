// Vectorised math that keeps IEEE results at the edges of its domain, shared by the elementwise
// kernels (elementwise.cpp) and the attention tiles (attention.h).
#pragma once
#include "kernels/cpu/eigen.h"
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
// masked scores are -inf, too, where exp_tile_ps below does not serve).
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

#if defined(__AVX512F__)
// exp of 16 floats for attention's probability tiles, where it runs once or twice per score: the
// range reduction x = n·ln2 + r (n = round(x·log2 e), r by a two-part ln2, |r| <= ln2/2), e^r by
// its Taylor polynomial of degree 7 (remainder under 6e-9, a tenth of an ulp), and 2^n·e^r by one
// vscalefps, which rounds once into the subnormals and gives 0 and inf past the ends. Edges:
// x is clamped to [-104, 89] first (exp(-104) and below round to 0, so -inf gives exactly 0;
// exp(89) overflows, so +inf gives inf) with the operand order of vmaxps/vminps that returns a
// NaN x unchanged, and NaN propagates. Within 1 ulp of the correctly rounded result everywhere
// (tests/test_vec_math.cpp checks it against std::exp in long double over the whole range).
inline __m512 exp_tile_ps(__m512 x) {
  namespace ei = Eigen::internal;
  x = ei::pmax(x, ei::pset1<__m512>(-104.0f));  // vmaxps(-104, x): a NaN x comes back unchanged
  x = ei::pmin(x, ei::pset1<__m512>(89.0f));
  const __m512 n = _mm512_roundscale_ps(ei::pmul(x, ei::pset1<__m512>(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = ei::pmadd(n, ei::pset1<__m512>(-0.693359375f), x);  // ln2's high part: n·it is exact
  r = ei::pmadd(n, ei::pset1<__m512>(2.12194440e-4f), r);       // + n·(0.693359375 - ln2)
  __m512 p = ei::pset1<__m512>(1.0f / 5040);
  for (const float c : {1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f})
    p = ei::pmadd(p, r, ei::pset1<__m512>(c));
  return _mm512_scalef_ps(p, n);
}
#endif

}  // namespace gg::kernels::cpu
