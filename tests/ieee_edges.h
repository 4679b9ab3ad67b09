// The IEEE edges of the ops that go through a vectorised transcendental function or a clamp:
// overflow and underflow thresholds (exp overflows past 88.72 and underflows to subnormals
// below -87.34 and to 0 below -103.97 in f32), ±inf, NaN, subnormal inputs, ±0 and the largest
// finite value. One table, run on the CPU by gg_tests (test_ieee_edges.cpp) and on CUDA by
// gg_gpu_tests (gpu/test_cuda_ieee_edges.cpp).
//
// A row is an op, a dtype and its inputs: for an elementwise op, values each checked on its
// own (all of a row go into one tensor, each several times, so that every value lands in a
// vector lane as well as in the scalar head or tail); for softmax, log_softmax and
// cross_entropy, one row of logits. The expected result is the op computed in long double
// (f64 or wider) from the same input and rounded to the row's dtype. A result passes when it is
// within kUlps of it, with no slack at the hard edges: NaN exactly where NaN is expected, an
// infinity exactly where one is expected, and a zero of the expected sign.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "gradgrad.h"

namespace gg::test::ieee {

// None of these ops is correctly rounded on either backend; 1 ulp is what a faithful result
// may be off by.
constexpr int kUlps = 1;

struct EdgeCase {
  std::string op;         // exp log log1p expm1 tanh sigmoid erf gelu pow softmax log_softmax cross_entropy
  DType dtype;            // f32 or f64
  std::vector<double> x;  // elementwise: the inputs; row ops: one row of logits (dtype values)
  double alpha = 0;       // pow: the exponent; cross_entropy: the target class
  int pad = 0;            // row ops: -inf logits appended (CUDA's long-row kernel above 1024)
};

inline bool is_row_op(const std::string& op) {
  return op == "softmax" || op == "log_softmax" || op == "cross_entropy";
}

inline std::vector<EdgeCase> edge_table() {
  constexpr double inf = std::numeric_limits<double>::infinity();
  constexpr double nan = std::numeric_limits<double>::quiet_NaN();
  constexpr double fmax = 3.4028234663852886e38;   // largest finite f32
  constexpr double fmin = 1.1754943508222875e-38;  // smallest normal f32
  constexpr double fsub = 1e-40;                   // a subnormal f32 (rounded on conversion)
  constexpr double ftiny = 1.401298464324817e-45;  // smallest subnormal f32
  constexpr double dmax = std::numeric_limits<double>::max();
  constexpr double dmin = std::numeric_limits<double>::min();
  constexpr double dtiny = std::numeric_limits<double>::denorm_min();
  const DType f32 = DType::f32, f64 = DType::f64;
  return {
      {"exp", f32, {0., -0., fsub, -fsub, ftiny, -ftiny, 1, -1, 87.3, -87.3, 88.7, -88.7, 88.72, 88.73, -88.73, -89,
                    100, -100, 103.9, -103.9, -104, fmax, -fmax, inf, -inf, nan, -nan}},
      {"log", f32, {0., -0., ftiny, fsub, fmin, fmin - ftiny, -ftiny, -1, 0.5, 1, 2, 88.7, fmax, inf, -inf, nan, -nan}},
      {"tanh", f32, {0., -0., fsub, -fsub, ftiny, -ftiny, 1e-5, -1e-5, 9.5, -9.5, 20, 88.7, -88.7, 103.9, -103.9, fmax,
                     -fmax, inf, -inf, nan, -nan}},
      {"sigmoid", f32, {0., -0., fsub, -fsub, ftiny, -ftiny, 20, -20, -87.5, 88.7, -88.7, 100, -100, 103.9, -103.9, -104, -110,
                        fmax, -fmax, inf, -inf, nan, -nan}},
      {"erf", f32, {0., -0., fsub, -fsub, ftiny, -ftiny, 4, -4, 10, -10, 88.7, -88.7, fmax, -fmax, inf, -inf, nan, -nan}},
      {"gelu", f32, {0., -0., fsub, -fsub, ftiny, -ftiny, -5, -10, -14, 10, 88.7, -88.7, -103.9, fmax, -fmax, inf, -inf,
                     nan, -nan}},
      {"pow", f32, {0., -0., fsub, -ftiny, 1e20, 2e19, fmax, -fmax, inf, -inf, nan}, 2},
      {"pow", f32, {-0., -ftiny, 1e-13, -1e13, 7e12, inf, -inf, nan}, 3},
      {"pow", f32, {0., -0., ftiny, fsub, -1, fmax, inf, -inf, nan}, 0.5},
      {"pow", f32, {0., -0., ftiny, 1e-38, fmax, inf, -inf, nan}, -1},
      {"pow", f32, {0., nan, inf, -inf}, 0},
      {"softmax", f32, {0, -100}},
      {"softmax", f32, {100, 0}, 0, 1100},
      {"softmax", f32, {-88.7, 88.7}},
      {"softmax", f32, {1e6, 1e6, 1e6}},
      {"softmax", f32, {fmax, -fmax}, 0, 1100},
      {"softmax", f32, {ftiny, -ftiny}},
      {"softmax", f32, {-inf, 0}},
      {"softmax", f32, {-inf, -inf}},  // PyTorch: NaN
      {"softmax", f32, {inf, 0}},      // PyTorch: NaN
      {"softmax", f32, {nan, 0}, 0, 1100},
      {"log_softmax", f32, {1e6, 1e6}},
      {"log_softmax", f32, {1e30, 1e30, 1e30}, 0, 1100},
      {"log_softmax", f32, {fmax, fmax}},
      {"log_softmax", f32, {-fmax, fmax}, 0, 1100},
      {"log_softmax", f32, {0, -100}},
      {"log_softmax", f32, {88.7, -103.9}},
      {"log_softmax", f32, {-inf, 0}},
      {"log_softmax", f32, {-inf, -inf}},
      {"log_softmax", f32, {inf, 0}},
      {"log_softmax", f32, {nan, 0}, 0, 1100},
      {"cross_entropy", f32, {0, -inf}, 0},
      {"cross_entropy", f32, {0, -inf}, 1},
      {"cross_entropy", f32, {fmax, -fmax}, 1},
      {"cross_entropy", f32, {1e6, 1e6}, 0},
      {"cross_entropy", f32, {100, 0}, 1},
      {"cross_entropy", f32, {nan, 0}, 1},
      {"cross_entropy", f32, {inf, 0}, 0},
      // f64: Eigen's packet exp clamps at ±709.78 and its log flushes subnormals the same way.
      {"exp", f64, {0., -0., dtiny, -dtiny, -700, -708.5, -720, -745, -745.2, -746, -800, 709.7, 709.8, 710, dmax, -dmax,
                    inf, -inf, nan}},
      {"log", f64, {0., -0., dtiny, 1e-310, dmin, -dtiny, 1, dmax, inf, -inf, nan}},
      {"tanh", f64, {0., -0., dtiny, -dtiny, 20, -20, 800, -800, inf, -inf, nan}},
      {"sigmoid", f64, {0., dtiny, 40, -40, -707.5, -708.5, -720, -745, -800, 800, dmax, -dmax, inf, -inf, nan}},
      {"erf", f64, {0., -0., dtiny, -dtiny, 10, -10, inf, -inf, nan}},
      {"gelu", f64, {0., -0., dtiny, -dtiny, -40, 40, dmax, -dmax, inf, -inf, nan}},
      {"pow", f64, {0., -0., dtiny, 1e-200, 1e200, -dmax, inf, -inf, nan}, 2},
      {"log1p", f32, {0., -0., fsub, -fsub, ftiny, -ftiny, 1e-5, -1e-5, -0.5, -0.99, -1, -2, 1e30, fmax, inf, -inf, nan}},
      {"expm1", f32, {0., -0., fsub, -fsub, ftiny, -ftiny, 1e-5, -1e-5, 1, -20, -100, 88.7, 88.73, fmax, -fmax, inf, -inf,
                      nan}},
      {"log1p", f64, {0., -0., dtiny, -dtiny, 1e-300, -1e-12, -1, 1e300, dmax, inf, -inf, nan}},
      {"expm1", f64, {0., -0., dtiny, -dtiny, 1e-12, -40, 709.7, 710, dmax, -dmax, inf, -inf, nan}},
      {"softmax", f64, {0, -720}},
      {"softmax", f64, {-inf, 0}, 0, 1100},
      {"log_softmax", f64, {1e300, 1e300}, 0, 1100},
      {"log_softmax", f64, {-dmax, dmax}},
      {"cross_entropy", f64, {0, -inf}, 0},
  };
}

inline void PrintTo(const EdgeCase& c, std::ostream* os) {
  *os << c.op << " " << dtype_name(c.dtype) << " (" << c.x.size() << " values)";
}

// "exp_f32_3": the op, the dtype and the row's position in the table.
inline std::string edge_case_name(const ::testing::TestParamInfo<EdgeCase>& info) {
  return info.param.op + "_" + dtype_name(info.param.dtype) + "_" + std::to_string(info.index);
}

// ---------------------------------------------------------------- the reference, in long double

using Wide = long double;

inline Wide reference_unary(const std::string& op, Wide x, Wide alpha) {
  if (op == "exp") return std::exp(x);
  if (op == "log") return std::log(x);
  if (op == "tanh") return std::tanh(x);
  if (op == "sigmoid") return 1 / (1 + std::exp(-x));
  if (op == "erf") return std::erf(x);
  if (op == "gelu") return x * std::erfc(-x / std::sqrt(Wide(2))) / 2;
  if (op == "pow") return std::pow(x, alpha);
  if (op == "log1p") return std::log1p(x);
  if (op == "expm1") return std::expm1(x);
  ADD_FAILURE() << "no reference for " << op;
  return 0;
}

// log_softmax of one row as the maths defines it: (x - m) - log Σ exp(x - m), m = max x (NaN
// if any x is NaN). A +inf logit or a row of -inf gives NaN through inf - inf, as in PyTorch.
inline std::vector<Wide> reference_log_softmax(const std::vector<Wide>& x) {
  Wide m = -std::numeric_limits<Wide>::infinity();
  for (Wide v : x) m = (std::isnan(v) || std::isnan(m)) ? std::numeric_limits<Wide>::quiet_NaN() : std::max(m, v);
  Wide s = 0;
  for (Wide v : x) s += std::exp(v - m);
  std::vector<Wide> y;
  for (Wide v : x) y.push_back((v - m) - std::log(s));
  return y;
}

// ---------------------------------------------------------------- comparison

// The result's value in the dtype, rounded from long double once.
inline double round_to(Wide v, DType dtype) {
  return dtype == DType::f32 ? static_cast<double>(static_cast<float>(v)) : static_cast<double>(v);
}

// Ulps between two finite or infinite values of `dtype` (held exactly in doubles): the number of
// representable values from one to the other, counting +0 and -0 as one.
inline uint64_t ulps_between(double a, double b, DType dtype) {
  auto ordinal = [dtype](double v) -> int64_t {  // monotone in v, 0 for both zeros
    if (dtype == DType::f32) {
      const float f = static_cast<float>(v);
      int32_t i;
      std::memcpy(&i, &f, sizeof i);
      return i < 0 ? -static_cast<int64_t>(i & 0x7fffffff) : i;
    }
    int64_t i;
    std::memcpy(&i, &v, sizeof i);
    return i < 0 ? -(i & 0x7fffffffffffffff) : i;
  };
  const int64_t x = ordinal(a), y = ordinal(b);
  auto mag = [](int64_t v) { return v < 0 ? static_cast<uint64_t>(-v) : static_cast<uint64_t>(v); };
  if ((x < 0) != (y < 0)) return mag(x) + mag(y);
  return x > y ? mag(x - y) : mag(y - x);
}

// Empty when `got` passes against `want` (both values of the dtype), else why not.
inline std::string mismatch(double got, double want, DType dtype) {
  std::ostringstream why;
  why.precision(dtype == DType::f32 ? 9 : 17);
  if (std::isnan(want) || std::isnan(got)) {
    if (std::isnan(want) && std::isnan(got)) return "";
    why << "got " << got << ", expected " << want;
    return why.str();
  }
  if (std::isinf(want) || std::isinf(got)) {
    if (got == want) return "";
    why << "got " << got << ", expected " << want << " (an infinity must be exact)";
    return why.str();
  }
  if (got == 0 && want == 0 && std::signbit(got) != std::signbit(want)) {
    why << "got " << got << ", expected " << want << " (the sign of zero)";
    return why.str();
  }
  const uint64_t d = ulps_between(got, want, dtype);
  if (d <= static_cast<uint64_t>(kUlps)) return "";
  why << "got " << got << ", expected " << want << " (" << d << " ulp apart, at most " << kUlps << ")";
  return why.str();
}

// ---------------------------------------------------------------- running a row

inline std::string show(double v, DType dtype) {
  std::ostringstream s;
  s.precision(dtype == DType::f32 ? 9 : 17);
  s << v;
  return s.str();
}

inline Tensor apply_unary(const std::string& op, const Tensor& x, double alpha) {
  if (op == "exp") return exp(x);
  if (op == "log") return log(x);
  if (op == "tanh") return tanh(x);
  if (op == "sigmoid") return sigmoid(x);
  if (op == "erf") return erf(x);
  if (op == "gelu") return gelu(x);
  if (op == "pow") return pow(x, alpha);
  if (op == "log1p") return log1p(x);
  if (op == "expm1") return expm1(x);
  ADD_FAILURE() << "no op " << op;
  return x;
}

// Runs the row on `device` and adds a failure for every element off its reference.
inline void check_edge_case(const EdgeCase& c, Device device) {
  std::vector<double> in;  // the inputs as values of the dtype
  for (double v : c.x) in.push_back(round_to(v, c.dtype));

  if (!is_row_op(c.op)) {
    // Each value at positions i, i + k, i + 2k, ...: the middle copies sit in vector lanes
    // whatever the alignment (up to 16 lanes), the first and last may fall in a scalar head or tail.
    const size_t k = in.size(), copies = 2 + (48 + k - 1) / k;
    std::vector<double> xs;
    for (size_t r = 0; r < copies; ++r) xs.insert(xs.end(), in.begin(), in.end());
    const Shape shape{static_cast<int64_t>(xs.size())};
    const std::vector<double> got = apply_unary(c.op, from_vector(xs, shape, c.dtype, device), c.alpha).to_vector<double>();
    ASSERT_EQ(got.size(), xs.size());
    for (size_t j = 0; j < k; ++j) {  // one failure per input: its first bad copy, and how many are
      const double want = round_to(reference_unary(c.op, in[j], c.alpha), c.dtype);
      std::string first;
      size_t bad = 0;
      for (size_t i = j; i < xs.size(); i += k) {
        const std::string why = mismatch(got[i], want, c.dtype);
        if (why.empty()) continue;
        if (bad++ == 0) first = why;
      }
      if (bad)
        ADD_FAILURE() << c.op << (c.op == "pow" ? "(x, " + show(c.alpha, c.dtype) + ")" : "") << " at "
                      << dtype_name(c.dtype) << " x = " << show(in[j], c.dtype) << ": " << first << ", at " << bad
                      << " of its " << copies << " positions";
    }
    return;
  }

  std::vector<double> row = in;
  row.insert(row.end(), static_cast<size_t>(c.pad), -std::numeric_limits<double>::infinity());
  const std::vector<Wide> lsm = reference_log_softmax(std::vector<Wide>(row.begin(), row.end()));
  const Tensor x = from_vector(row, {1, static_cast<int64_t>(row.size())}, c.dtype, device);
  std::vector<double> got, want;
  if (c.op == "cross_entropy") {
    got = cross_entropy(x, from_indices({static_cast<int64_t>(c.alpha)}, {1}, device)).to_vector<double>();
    want = {round_to(-lsm[static_cast<size_t>(c.alpha)], c.dtype)};
  } else {
    const bool log = c.op == "log_softmax";
    got = (log ? log_softmax(x, 1) : softmax(x, 1)).to_vector<double>();
    for (Wide v : lsm) want.push_back(round_to(log ? v : std::exp(v), c.dtype));
  }
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const std::string why = mismatch(got[i], want[i], c.dtype);
    if (!why.empty()) {
      std::string logits;
      for (size_t j = 0; j < in.size(); ++j) logits += (j ? ", " : "") + show(in[j], c.dtype);
      ADD_FAILURE() << c.op << " of the " << dtype_name(c.dtype) << " row (" << logits << ")"
                    << (c.pad ? " + " + std::to_string(c.pad) + " x -inf" : "")
                    << (c.op == "cross_entropy" ? ", target " + std::to_string(static_cast<int64_t>(c.alpha)) : "")
                    << ": element " << i << ": " << why;
    }
  }
}

}  // namespace gg::test::ieee
