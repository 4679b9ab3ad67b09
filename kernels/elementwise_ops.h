// The elementwise ops, listed once. kernels/params.h makes the enums UnaryOp and BinaryOp and
// their names from these lists; kernels/cpu/elementwise.cpp and kernels/cuda/elementwise.cu
// make their per-op dispatch and functors from them. No Eigen, no spdlog, no CUDA here: the
// file is read by the C++ compiler and by nvcc alike.
//
// A unary entry is  X(name, forward formula)  where the formula is an expression in
//   x   the input value,
//   a   the op's scalar `alpha` (UnaryParams::alpha) converted to C,
//   C   the type the arithmetic runs in (float or double; half types compute in float),
//   M:: the math of the backend: M::exp, M::log, M::sqrt, M::tanh, M::sin, M::cos, M::abs,
//       M::log1p, M::expm1, M::floor, M::ceil, M::rint (to nearest, ties to even), M::erf, M::sigmoid, M::gelu (x·Φ(x)), M::pow(x, a) (exactly x * x when a == 2),
//       M::max(x, s) (NaN propagates) and M::step(x) (1 where x > 0, else 0).
//       Each M function is within 1 ulp of the correctly rounded result at the edges of its
//       domain (overflow, underflow to subnormals and 0, subnormal inputs, ±inf) and gives NaN
//       for NaN; tests/ieee_edges.h holds the table both backends are checked against. A
//       formula that composes M functions can lose that at the edges (1 / (1 + exp(-x))
//       gives 0, not 3.8e-44, for sigmoid(-100) in f32), so such ops get their own M function.
// The CPU evaluates the formula once on whole Eigen arrays (x is an array expression, so write
// it with arithmetic and M:: only: no ?:, no comparisons); CUDA evaluates it per element.
//
// A binary entry is  X(name, result, forward formula)  with result `same` (out has the dtype of
// the operands) or `b8` (a comparison writing 0/1), and the formula a scalar expression in a
// and b (both C; i64 operands compute in int64_t).
//
// Adding an op, e.g. square (y = x², dy/dx = 2x):
//   1. its line in the list below:                      X(square, x * x)
//   2. the ops/ three-liner, declared in ops/ops.h and defined in ops/elementwise.cpp, whose
//      backward is written in gg ops (so that it is differentiable again):
//        Tensor square(const Tensor& x) {
//          Tensor y = unary_fwd(UnaryOp::square, x, "square");
//          record("square", {x}, {y}, {x}, [](const BackwardArgs& g) -> TensorList {
//            return {g.grads[0] * g.saved[0] * 2.0}; });
//          return y;
//        }
//   3. its row in tests/op_table.cpp (forward against an f64 loop, gradcheck, gradgradcheck;
//      the GPU tests run the same rows):
//        un("square", [](auto& x) { return square(x); }, [](double x) { return x * x; });
// The enum value, its name, the CPU kernel and the CUDA kernel all follow from the line in 1.
// A formula that needs a function M lacks adds it to both backends' M (CpuMath in
// kernels/cpu/elementwise.cpp, CudaMath in kernels/cuda/elementwise.cu).
#pragma once

#include <cmath>
#include <type_traits>

#if defined(__CUDACC__)
#define GG_ELEMENTWISE_FN __host__ __device__ __forceinline__
#else
#define GG_ELEMENTWISE_FN inline
#endif

namespace gg::kernels {
// Division. Integers truncate toward zero; x / -1 wraps (INT64_MIN / -1 = INT64_MIN) instead of
// trapping, and x / 0 gives 0 here because gg::div refuses a zero divisor before any kernel runs
// (ops/ops.h). Floating point divides as IEEE 754 says.
template <typename C>
GG_ELEMENTWISE_FN C elementwise_div(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    if (b == C(0)) return C(0);
    if (b == C(-1)) return static_cast<C>(C(0) - static_cast<std::make_unsigned_t<C>>(a));
  }
  return a / b;
}

// Integer +, - and * wrap around (two's complement), as in PyTorch and numpy: INT64_MAX + 1 is
// INT64_MIN. Signed overflow is undefined in C++, so integers go through their unsigned type.
template <typename C>
GG_ELEMENTWISE_FN C elementwise_add(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}
template <typename C>
GG_ELEMENTWISE_FN C elementwise_sub(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(a) - static_cast<U>(b));
  } else {
    return a - b;
  }
}
template <typename C>
GG_ELEMENTWISE_FN C elementwise_mul(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}
// a to the power b. Integers multiply by repeated squaring, wrapping like elementwise_mul; a
// negative exponent gives 0 here because gg::pow refuses it before any kernel runs (ops/ops.h).
// Floating point calls the backend's pow, exactly a * a for b == 2 (as M::pow).
template <typename C>
GG_ELEMENTWISE_FN C elementwise_pow(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    if (b < C(0)) return C(0);
    U result = 1, base = static_cast<U>(a);
    for (U e = static_cast<U>(b); e != 0; e >>= 1) {
      if (e & 1u) result *= base;
      base *= base;
    }
    return static_cast<C>(result);
  } else {
    if (b == C(2)) return a * a;
#if defined(__CUDA_ARCH__)
    if constexpr (std::is_same_v<C, float>) return powf(a, b);
    else return ::pow(a, b);
#else
    return std::pow(a, b);
#endif
  }
}
}  // namespace gg::kernels

// clang-format off
#define GG_UNARY_OPS(X)                                                  \
  X(neg,        -x)                                                      \
  X(exp,        M::exp(x))                                               \
  X(log,        M::log(x))                                               \
  X(sqrt,       M::sqrt(x))                                              \
  X(tanh,       M::tanh(x))                                              \
  X(sigmoid,    M::sigmoid(x))                                           \
  X(relu,       M::max(x, C(0)))                                         \
  X(gelu,       M::gelu(x))                                              \
  X(erf,        M::erf(x))                                               \
  X(sin,        M::sin(x))                                               \
  X(cos,        M::cos(x))                                               \
  X(abs,        M::abs(x))                                               \
  X(log1p,      M::log1p(x))                                             \
  X(expm1,      M::expm1(x))                                             \
  X(floor,      M::floor(x))                                             \
  X(ceil,       M::ceil(x))                                              \
  X(round,      M::rint(x))                                              \
  X(sign,       M::step(x) - M::step(-x))                                \
  X(step,       M::step(x))                                              \
  X(pow_scalar, M::pow(x, a))                                            \
  X(add_scalar, x + a)                                                   \
  X(mul_scalar, x * a)

// maximum, minimum: NaN wins (if either operand is NaN, the result is that NaN).
#define GG_BINARY_OPS(X)                                                 \
  X(add,     same, ::gg::kernels::elementwise_add(a, b))                 \
  X(sub,     same, ::gg::kernels::elementwise_sub(a, b))                 \
  X(mul,     same, ::gg::kernels::elementwise_mul(a, b))                 \
  X(div,     same, ::gg::kernels::elementwise_div(a, b))                 \
  X(maximum, same, a > b ? a : (b > a ? b : (a != a ? a : b)))           \
  X(minimum, same, a < b ? a : (b < a ? b : (a != a ? a : b)))           \
  X(pow,     same, ::gg::kernels::elementwise_pow(a, b))                 \
  X(eq,      b8,   a == b)                                               \
  X(ne,      b8,   a != b)                                               \
  X(lt,      b8,   a < b)                                                \
  X(le,      b8,   a <= b)                                               \
  X(gt,      b8,   a > b)                                                \
  X(ge,      b8,   a >= b)
// clang-format on
