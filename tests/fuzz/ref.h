// The fuzzer's independent reference: tensors as row-major f64 arrays with a shape and a
// dtype, and naive loops for every op it generates. Each function returns false when the op is
// invalid for its arguments (gg must then throw a gg::Error).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "../test_util.h"
#include "gradgrad.h"

namespace gg::fuzz {

struct Ref {
  Shape shape;
  std::vector<double> v;
  DType dtype = DType::f64;
  int64_t numel() const { return static_cast<int64_t>(v.size()); }
};

using test::ravel;
using test::unravel;
inline bool wrap(int64_t& d, int64_t ndim, bool scalar_ok) {
  if (ndim == 0) {
    if (!scalar_ok || (d != 0 && d != -1)) return false;
    d = 0;
    return true;
  }
  if (d < -ndim || d >= ndim) return false;
  if (d < 0) d += ndim;
  return true;
}
// gg's size rule (core/shape.h): the product of the non-zero sizes must fit in int64.
inline bool fits(const Shape& s) {
  int64_t n = 1;
  for (int64_t x : s)
    if (x != 0 && __builtin_mul_overflow(n, x, &n)) return false;
  return true;
}
inline int64_t prod(const Shape& s) {
  int64_t n = 1;
  for (int64_t x : s) n *= x;
  return n;
}
inline bool broadcast(const Shape& a, const Shape& b, Shape& out) {
  const size_t n = std::max(a.size(), b.size());
  out.assign(n, 1);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())], db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1) return false;
    out[i] = da == 1 ? db : da;
  }
  return true;
}
inline int64_t bindex(const std::vector<int64_t>& out_idx, const Shape& s) {
  const size_t lead = out_idx.size() - s.size();
  int64_t i = 0;
  for (size_t d = 0; d < s.size(); ++d) i = i * s[d] + (s[d] == 1 ? 0 : out_idx[d + lead]);
  return i;
}
// Rounds a value as storing it in `t` would (f32 rounding, i64 truncation with saturation, b8).
inline double round_to(double x, DType t) {
  switch (t) {
    case DType::f32: return static_cast<double>(static_cast<float>(x));
    case DType::i64:
      if (std::isnan(x)) return 0;
      if (x >= 9223372036854775808.0) return 9223372036854775807.0;
      if (x < -9223372036854775808.0) return -9223372036854775808.0;
      return std::trunc(x) + 0.0;  // an integer has no -0
    case DType::b8: return x != 0 ? 1 : 0;
    default: return x;
  }
}
inline bool floating(DType t) { return t == DType::f32 || t == DType::f64; }

// PyTorch's type promotion of two tensors (b8 < i64 < f32 < f64; a 0-dim tensor widens a
// dimensioned one only from a higher category), written out apart from the library's.
inline DType promote_ref(DType a, bool a_dims, DType b, bool b_dims) {
  auto category = [](DType t) { return t == DType::b8 ? 0 : t == DType::i64 ? 1 : 2; };
  auto wider = [&](DType x, DType y) {
    if (x == y) return x;
    if (category(x) != category(y)) return category(x) > category(y) ? x : y;
    return DType::f64;  // f32 with f64
  };
  if (a_dims == b_dims) return wider(a, b);
  const DType high = a_dims ? a : b, low = a_dims ? b : a;
  return category(low) > category(high) ? wider(high, low) : high;
}

}  // namespace gg::fuzz
