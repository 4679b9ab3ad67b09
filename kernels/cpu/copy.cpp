// Strided copy with element-type conversion, fill, arange and counter-based random numbers.
#include <cmath>
#include <cstring>

#include "kernels/cpu/half.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/strided.h"

namespace gg::kernels {

Layout make_layout(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  Layout l;
  l.ndim = static_cast<int>(sizes.size());
  for (int i = 0; i < l.ndim && i < kMaxDims; ++i) {
    l.sizes[i] = sizes[static_cast<size_t>(i)];
    l.strides[i] = strides[static_cast<size_t>(i)];
  }
  return l;
}

namespace cpu {
namespace {

double load(DType t, const void* base, int64_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(base)[i];
    case DType::f64: return static_cast<const double*>(base)[i];
    case DType::bf16: return bf16_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::f16: return f16_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::i64: return static_cast<double>(static_cast<const int64_t*>(base)[i]);
    case DType::b8: return static_cast<const uint8_t*>(base)[i] ? 1.0 : 0.0;
  }
  return 0;
}

// Floating to i64 truncates toward zero and saturates: NaN -> 0, values beyond the range -> the
// nearest end (what the GPU's cvt.rzi does; a plain cast would be undefined behaviour there).
inline int64_t to_i64(double v) {
  if (v != v) return 0;
  if (v >= 9223372036854775808.0) return INT64_MAX;
  if (v < -9223372036854775808.0) return INT64_MIN;
  return static_cast<int64_t>(v);
}

void store(DType t, void* base, int64_t i, double v) {
  switch (t) {
    case DType::f32: static_cast<float*>(base)[i] = static_cast<float>(v); break;
    case DType::f64: static_cast<double*>(base)[i] = v; break;
    case DType::bf16: static_cast<uint16_t*>(base)[i] = float_to_bf16(static_cast<float>(v)); break;
    case DType::f16: static_cast<uint16_t*>(base)[i] = float_to_f16(static_cast<float>(v)); break;
    case DType::i64: static_cast<int64_t*>(base)[i] = to_i64(v); break;
    case DType::b8: static_cast<uint8_t*>(base)[i] = v != 0.0; break;
  }
}

// splitmix64: a strong 64-bit mix; element i of a stream is mix(seed, offset + i).
inline uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
inline double to_unit(uint64_t r) { return (static_cast<double>(r >> 11) + 0.5) * 0x1.0p-53; }  // (0,1)

}  // namespace

void copy_strided(const CopyParams& p) {
  const Layout* const layouts[2] = {&p.dst_layout, &p.src_layout};
  const size_t es = dtype_size(p.dst_dtype);
  if (p.src_dtype == p.dst_dtype) {
    for_each_run<2>(layouts, [&](const int64_t* base, int64_t n, const int64_t* st) {
      auto* d = static_cast<char*>(p.dst) + base[0] * static_cast<int64_t>(es);
      auto* s = static_cast<const char*>(p.src) + base[1] * static_cast<int64_t>(es);
      if (st[0] == 1 && st[1] == 1) {
        std::memcpy(d, s, static_cast<size_t>(n) * es);
      } else {
        for (int64_t i = 0; i < n; ++i)
          std::memcpy(d + i * st[0] * static_cast<int64_t>(es), s + i * st[1] * static_cast<int64_t>(es), es);
      }
    });
    return;
  }
  for_each_run<2>(layouts, [&](const int64_t* base, int64_t n, const int64_t* st) {
    for (int64_t i = 0; i < n; ++i)
      store(p.dst_dtype, p.dst, base[0] + i * st[0], load(p.src_dtype, p.src, base[1] + i * st[1]));
  });
}

void fill(const FillParams& p) {
  for (int64_t i = 0; i < p.n; ++i) store(p.dtype, p.dst, i, p.value);
}

void arange(const ArangeParams& p) {
  for (int64_t i = 0; i < p.n; ++i) store(p.dtype, p.dst, i, p.start + p.step * static_cast<double>(i));
}

void random(const RandomParams& p) {
  for (int64_t i = 0; i < p.n; ++i) {
    uint64_t ctr = p.offset + static_cast<uint64_t>(i);
    double v;
    if (p.kind == RandomKind::uniform) {
      v = p.a + (p.b - p.a) * to_unit(mix(p.seed ^ mix(ctr)));
    } else {  // Box-Muller on two independent uniforms of the same counter
      double u1 = to_unit(mix(p.seed ^ mix(2 * ctr))), u2 = to_unit(mix(p.seed ^ mix(2 * ctr + 1)));
      v = p.a + p.b * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    }
    store(p.dtype, p.dst, i, v);
  }
}

}  // namespace cpu
}  // namespace gg::kernels
