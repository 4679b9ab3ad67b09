// gg::Scalar: a C++ number as an operand of an op (x + 2, pow(x, 0.5), x > 1.5, x.add_(1)),
// libtorch's c10::Scalar. It lives in core/ so that Tensor's member forms (core/tensor.h) can take
// one; the type promotion that reads it is in ops/ (ops/ops.h, result_type).
#pragma once
#include <cstdint>
#include <type_traits>

#include "dtype.h"

namespace gg {

// A C++ number as an operand of a binary op (x + 2, pow(x, 0.5), where(m, x, 0)). Its
// category is its C++ type's: bool, integer (held as int64_t) or floating (held as double).
class Scalar {
 public:
  template <typename T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
  Scalar(T v) {  // NOLINT(google-explicit-constructor): numbers convert as in libtorch
    if constexpr (std::is_same_v<T, bool>) {
      dtype_ = DType::b8;
      i_ = v ? 1 : 0;
      d_ = i_;
    } else if constexpr (std::is_integral_v<T>) {
      dtype_ = DType::i64;
      i_ = static_cast<int64_t>(v);
      d_ = static_cast<double>(v);
    } else {
      dtype_ = DType::f64;
      d_ = static_cast<double>(v);
      i_ = 0;
    }
  }
  DType dtype() const { return dtype_; }  // b8, i64 or f64: the category
  bool is_floating() const { return dtype_ == DType::f64; }
  double to_double() const { return d_; }
  int64_t to_int64() const { return i_; }

 private:
  DType dtype_;
  double d_;
  int64_t i_;
};

}  // namespace gg
