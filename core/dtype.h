// Element types. f32/f64 run everywhere; bf16/f16 are reserved for the CUDA backend;
// i64 holds indices and class targets; b8 holds comparison results and masks.
#pragma once
#include <cstddef>
#include <cstdint>
#include <iosfwd>

namespace gg {

enum class DType : uint8_t { f32, f64, bf16, f16, i64, b8 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::i64: return 8;
    case DType::b8: return 1;
  }
  return 0;
}

constexpr const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i64: return "i64";
    case DType::b8: return "b8";
  }
  return "?";
}

constexpr bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::bf16 || t == DType::f16;
}

// Writes dtype_name(t): `std::cout << x.dtype()` prints "f32".
std::ostream& operator<<(std::ostream& os, DType t);

}  // namespace gg
