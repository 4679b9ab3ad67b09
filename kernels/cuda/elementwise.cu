// Elementwise CUDA kernels: strided copy with dtype conversion, fill, arange, counter-based
// random numbers, unary maps, broadcasting binary ops and where. Each matches its CPU kernel
// (kernels/cpu/copy.cpp, kernels/cpu/elementwise.cpp) element for element.
//
// dtype matrix (b8 is stored as uint8_t, bf16/f16 as __nv_bfloat16/__half):
//   copy_strided   any of {f32, f64, bf16, f16, i64, b8} -> any, through double like the CPU
//                  `load`/`store`: bf16/f16 round to nearest even from float, b8 = (v != 0),
//                  i64 truncates. Same dtype copies raw bits.
//   fill, arange   all six dtypes, stored like the CPU `store`.
//   random         all six dtypes; element i = f(seed, offset + i), the CPU's splitmix64 stream.
//   unary          f32, f64, bf16, f16 (half types computed in float, stored rounded).
//   binary         f32, f64, bf16, f16, i64 (half types in float); comparisons write b8.
//   where          f32, f64, bf16, f16, i64 (a pure select: raw bits).
//
// Paths: contiguous operands run a flat grid-stride loop of 16-byte packs (kVec elements per
// thread per step) when every pointer is aligned, with a scalar (stride-0) operand broadcast
// from a register; everything else runs an N-d loop that unravels the linear output index
// through the collapsed shape (32-bit index math when numel < 2^31). Every launch goes to the
// library stream with no synchronisation.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "core/cuda_check.cuh"
#include "core/cuda_runtime.h"
#include "core/error.h"
#include "kernels/cuda/kernels.h"

namespace gg::kernels::cuda {
using namespace ::gg::cuda::runtime;  // the stream, allocation and device queries
namespace {

constexpr int kThreads = 256;      // threads per block
constexpr int kBlocksPerSm = 8;    // 8 x 256 = 2048 threads: a full H100/H200 SM
constexpr int kPackBytes = 16;     // one vector load/store per thread per step

// ---------------------------------------------------------------- bf16/f16 <-> f32
// Bit-identical to kernels/cpu/half.h: the intrinsics round to nearest even like the CPU code;
// NaNs are handled here so that their bits match too (the hardware returns a canonical NaN).

__device__ __forceinline__ bool is_nan_bits(float f) { return (__float_as_uint(f) & 0x7fffffffu) > 0x7f800000u; }

__device__ __forceinline__ float bf16_to_float(__nv_bfloat16 h) {
  return __uint_as_float(static_cast<uint32_t>(__bfloat16_as_ushort(h)) << 16);  // exact
}

__device__ __forceinline__ __nv_bfloat16 float_to_bf16(float f) {
  if (is_nan_bits(f)) return __ushort_as_bfloat16(static_cast<unsigned short>((__float_as_uint(f) >> 16) | 0x40u));
  return __float2bfloat16_rn(f);
}

__device__ __forceinline__ float f16_to_float(__half h) {
  const uint32_t bits = __half_as_ushort(h);
  if ((bits & 0x7fffu) > 0x7c00u)  // NaN: keep sign and payload like the CPU
    return __uint_as_float(((bits & 0x8000u) << 16) | 0x7f800000u | ((bits & 0x3ffu) << 13));
  return __half2float(h);  // exact
}

__device__ __forceinline__ __half float_to_f16(float f) {
  if (is_nan_bits(f)) return __ushort_as_half(static_cast<unsigned short>(((__float_as_uint(f) >> 16) & 0x8000u) | 0x7e00u));
  return __float2half_rn(f);
}

// ---------------------------------------------------------------- element traits
// Per storage type: the type arithmetic runs in (Compute) and the conversions. to_double and
// from_double are the CPU `load` and `store` (used by copy, fill, arange and random).

template <typename T>
struct ElemTraits;

template <>
struct ElemTraits<float> {
  using Compute = float;
  static __device__ __forceinline__ float to_compute(float x) { return x; }
  static __device__ __forceinline__ float from_compute(float v) { return v; }
  static __device__ __forceinline__ double to_double(float x) { return x; }
  static __device__ __forceinline__ float from_double(double v) { return static_cast<float>(v); }
};

template <>
struct ElemTraits<double> {
  using Compute = double;
  static __device__ __forceinline__ double to_compute(double x) { return x; }
  static __device__ __forceinline__ double from_compute(double v) { return v; }
  static __device__ __forceinline__ double to_double(double x) { return x; }
  static __device__ __forceinline__ double from_double(double v) { return v; }
};

template <>
struct ElemTraits<__nv_bfloat16> {
  using Compute = float;
  static __device__ __forceinline__ float to_compute(__nv_bfloat16 x) { return bf16_to_float(x); }
  static __device__ __forceinline__ __nv_bfloat16 from_compute(float v) { return float_to_bf16(v); }
  static __device__ __forceinline__ double to_double(__nv_bfloat16 x) { return bf16_to_float(x); }
  static __device__ __forceinline__ __nv_bfloat16 from_double(double v) { return float_to_bf16(static_cast<float>(v)); }
};

template <>
struct ElemTraits<__half> {
  using Compute = float;
  static __device__ __forceinline__ float to_compute(__half x) { return f16_to_float(x); }
  static __device__ __forceinline__ __half from_compute(float v) { return float_to_f16(v); }
  static __device__ __forceinline__ double to_double(__half x) { return f16_to_float(x); }
  static __device__ __forceinline__ __half from_double(double v) { return float_to_f16(static_cast<float>(v)); }
};

template <>
struct ElemTraits<int64_t> {
  using Compute = int64_t;
  static __device__ __forceinline__ int64_t to_compute(int64_t x) { return x; }
  static __device__ __forceinline__ int64_t from_compute(int64_t v) { return v; }
  static __device__ __forceinline__ double to_double(int64_t x) { return static_cast<double>(x); }
  static __device__ __forceinline__ int64_t from_double(double v) { return static_cast<int64_t>(v); }
};

template <>
struct ElemTraits<uint8_t> {  // b8: only loaded and stored, never computed on
  static __device__ __forceinline__ double to_double(uint8_t x) { return x ? 1.0 : 0.0; }
  static __device__ __forceinline__ uint8_t from_double(double v) { return v != 0.0 ? 1 : 0; }
};

// The CPU `load`/`store` with the dtype chosen at run time (the strided conversion path).
__device__ __forceinline__ double load_as_double(DType t, const void* base, int64_t i) {
  switch (t) {
    case DType::f32: return ElemTraits<float>::to_double(static_cast<const float*>(base)[i]);
    case DType::f64: return ElemTraits<double>::to_double(static_cast<const double*>(base)[i]);
    case DType::bf16: return ElemTraits<__nv_bfloat16>::to_double(static_cast<const __nv_bfloat16*>(base)[i]);
    case DType::f16: return ElemTraits<__half>::to_double(static_cast<const __half*>(base)[i]);
    case DType::i64: return ElemTraits<int64_t>::to_double(static_cast<const int64_t*>(base)[i]);
    case DType::b8: return ElemTraits<uint8_t>::to_double(static_cast<const uint8_t*>(base)[i]);
  }
  return 0;
}

__device__ __forceinline__ void store_from_double(DType t, void* base, int64_t i, double v) {
  switch (t) {
    case DType::f32: static_cast<float*>(base)[i] = ElemTraits<float>::from_double(v); break;
    case DType::f64: static_cast<double*>(base)[i] = ElemTraits<double>::from_double(v); break;
    case DType::bf16: static_cast<__nv_bfloat16*>(base)[i] = ElemTraits<__nv_bfloat16>::from_double(v); break;
    case DType::f16: static_cast<__half*>(base)[i] = ElemTraits<__half>::from_double(v); break;
    case DType::i64: static_cast<int64_t*>(base)[i] = ElemTraits<int64_t>::from_double(v); break;
    case DType::b8: static_cast<uint8_t*>(base)[i] = ElemTraits<uint8_t>::from_double(v); break;
  }
}

// kVec elements moved as one 16-byte (or, for b8 outputs, kVec-byte) access.
template <typename T, int kVec>
struct alignas(sizeof(T) * kVec) Pack {
  T v[kVec];
};

// ---------------------------------------------------------------- math in the compute type
// The M:: of the formulas in kernels/elementwise_ops.h, per element in the compute type C.
// Accurate CUDA math (no fast-math intrinsics): the float overloads call the f-suffixed
// functions, the double overloads the plain ones. pow is exactly x * x for a == 2 and max(x, s)
// is std::max(x, s) (NaN propagates), like the CPU.

struct CudaMath {
#define GG_CUDA_MATH(name, f32_fn, f64_fn)                                   \
  static __device__ __forceinline__ float name(float x) { return f32_fn(x); } \
  static __device__ __forceinline__ double name(double x) { return f64_fn(x); }
  GG_CUDA_MATH(exp, expf, ::exp)
  GG_CUDA_MATH(log, logf, ::log)
  GG_CUDA_MATH(sqrt, sqrtf, ::sqrt)
  GG_CUDA_MATH(tanh, tanhf, ::tanh)
  GG_CUDA_MATH(erf, erff, ::erf)
  GG_CUDA_MATH(sin, sinf, ::sin)
  GG_CUDA_MATH(cos, cosf, ::cos)
  GG_CUDA_MATH(abs, fabsf, ::fabs)
  GG_CUDA_MATH(log1p, log1pf, ::log1p)
  GG_CUDA_MATH(expm1, expm1f, ::expm1)
  GG_CUDA_MATH(floor, floorf, ::floor)
  GG_CUDA_MATH(ceil, ceilf, ::ceil)
  GG_CUDA_MATH(rint, rintf, ::rint)  // to nearest, ties to even
#undef GG_CUDA_MATH
  // sigmoid as 1 / (1 + e) or e / (1 + e) with e = exp(-|x|) <= 1 (tiny results survive).
  template <typename C>
  static __device__ __forceinline__ C sigmoid(C x) {
    const C e = exp(-abs(x));
    return (x < C(0) ? e : C(1)) / (C(1) + e);
  }
  // gelu = x·Φ(x) = x·erfc(-x/√2)/2 in double (the CPU's formula; see CpuMath::gelu).
  static __device__ __forceinline__ double gelu(double x) { return 0.5 * x * ::erfc(x * -0.70710678118654752440); }
  static __device__ __forceinline__ float gelu(float x) { return static_cast<float>(gelu(static_cast<double>(x))); }
  static __device__ __forceinline__ float pow(float x, float a) { return a == 2.0f ? x * x : powf(x, a); }
  static __device__ __forceinline__ double pow(double x, double a) { return a == 2.0 ? x * x : ::pow(x, a); }
  template <typename C>
  static __device__ __forceinline__ C max(C x, C s) { return x < s ? s : x; }
  template <typename C>
  static __device__ __forceinline__ C step(C x) { return x > C(0) ? C(1) : C(0); }
};

// UnaryFormula<op>::apply(x, a) and BinaryFormula<op>::apply(a, b): the formulas of
// kernels/elementwise_ops.h.
template <UnaryOp op>
struct UnaryFormula;
#define GG_UNARY_FORMULA(name, formula)                         \
  template <>                                                   \
  struct UnaryFormula<UnaryOp::name> {                          \
    template <typename C, typename M = CudaMath>                \
    static __device__ __forceinline__ C apply(C x, C a) {       \
      (void)a;                                                  \
      return formula;                                           \
    }                                                           \
  };
GG_UNARY_OPS(GG_UNARY_FORMULA)
#undef GG_UNARY_FORMULA

// kB8: the op writes b8 (a comparison), else the operands' dtype.
template <BinaryOp op>
struct BinaryFormula;
#define GG_BINARY_FORMULA(name, result, formula)                \
  template <>                                                   \
  struct BinaryFormula<BinaryOp::name> {                        \
    static constexpr bool kB8 = GG_RESULT_IS_B8_##result;       \
    template <typename C>                                       \
    static __device__ __forceinline__ auto apply(C a, C b) {    \
      using Out = std::conditional_t<kB8, uint8_t, C>;          \
      return Out(formula);                                      \
    }                                                           \
  };
GG_BINARY_OPS(GG_BINARY_FORMULA)
#undef GG_BINARY_FORMULA

// Calls fn(std::integral_constant<Op, op>) so that a kernel switches on the op once, outside
// its loop, and each loop body sees the op as a constant.
#define GG_OP_CASE(name, ...) \
  case Op::name: return fn(std::integral_constant<Op, Op::name>{});
template <typename Fn>
__device__ __forceinline__ void with_op(UnaryOp op, Fn&& fn) {
  using Op = UnaryOp;
  switch (op) { GG_UNARY_OPS(GG_OP_CASE) }
}
template <typename Fn>
__device__ __forceinline__ void with_op(BinaryOp op, Fn&& fn) {
  using Op = BinaryOp;
  switch (op) { GG_BINARY_OPS(GG_OP_CASE) }
}
#undef GG_OP_CASE

// ---------------------------------------------------------------- N-d offsets
// kOps operands walking one row-major index space of `ndim` dims (collapsed on the host).
// offsets() unravels a linear index: ndim - 1 divisions, none for a 1-d space.
template <int kOps>
struct Indexer {
  int ndim;
  int64_t sizes[kMaxDims];
  int64_t strides[kOps][kMaxDims];

  template <typename Idx>
  __device__ __forceinline__ void offsets(Idx i, int64_t (&off)[kOps]) const {
#pragma unroll
    for (int k = 0; k < kOps; ++k) off[k] = 0;
    for (int d = ndim - 1; d > 0; --d) {
      const Idx size = static_cast<Idx>(sizes[d]);
      const Idx q = i / size;
      const int64_t r = static_cast<int64_t>(i - q * size);
#pragma unroll
      for (int k = 0; k < kOps; ++k) off[k] += r * strides[k][d];
      i = q;
    }
    if (ndim > 0) {
#pragma unroll
      for (int k = 0; k < kOps; ++k) off[k] += static_cast<int64_t>(i) * strides[k][0];
    }
  }
};

// Grid-stride loop bounds, in the index type of the kernel.
template <typename Idx>
__device__ __forceinline__ Idx thread_index() {
  return static_cast<Idx>(blockIdx.x) * static_cast<Idx>(blockDim.x) + static_cast<Idx>(threadIdx.x);
}
template <typename Idx>
__device__ __forceinline__ Idx thread_count() {
  return static_cast<Idx>(gridDim.x) * static_cast<Idx>(blockDim.x);
}

// ---------------------------------------------------------------- contiguous loops
// y[i] = fn(x[i]) over contiguous arrays: 16-byte packs when `vectorize` (all pointers aligned),
// then the tail (or everything) one element per thread. fn maps Compute -> stored Out.
template <typename T, typename Out, typename Fn>
__device__ __forceinline__ void unary_loop(const T* x, Out* y, int64_t n, bool vectorize, Fn fn) {
  using Tr = ElemTraits<T>;
  constexpr int kVec = kPackBytes / sizeof(T);
  const int64_t tid = thread_index<int64_t>(), nthreads = thread_count<int64_t>();
  int64_t done = 0;
  if (vectorize) {
    const int64_t npacks = n / kVec;
    const auto* xp = reinterpret_cast<const Pack<T, kVec>*>(x);
    auto* yp = reinterpret_cast<Pack<Out, kVec>*>(y);
    for (int64_t k = tid; k < npacks; k += nthreads) {
      const Pack<T, kVec> px = xp[k];
      Pack<Out, kVec> py;
#pragma unroll
      for (int j = 0; j < kVec; ++j) py.v[j] = fn(Tr::to_compute(px.v[j]));
      yp[k] = py;
    }
    done = npacks * kVec;
  }
  for (int64_t i = done + tid; i < n; i += nthreads) y[i] = fn(Tr::to_compute(x[i]));
}

// out[i] = fn(a[i], b[i]) over contiguous arrays; a scalar operand (all strides 0) is read once.
template <typename T, typename Out, typename Fn>
__device__ __forceinline__ void binary_loop(const T* a, const T* b, Out* out, int64_t n, bool a_scalar, bool b_scalar,
                                            bool vectorize, Fn fn) {
  using Tr = ElemTraits<T>;
  using C = typename Tr::Compute;
  constexpr int kVec = kPackBytes / sizeof(T);
  const int64_t tid = thread_index<int64_t>(), nthreads = thread_count<int64_t>();
  const C a0 = a_scalar ? Tr::to_compute(a[0]) : C(0);
  const C b0 = b_scalar ? Tr::to_compute(b[0]) : C(0);
  int64_t done = 0;
  if (vectorize) {
    const int64_t npacks = n / kVec;
    const auto* ap = reinterpret_cast<const Pack<T, kVec>*>(a);
    const auto* bp = reinterpret_cast<const Pack<T, kVec>*>(b);
    auto* op = reinterpret_cast<Pack<Out, kVec>*>(out);
    for (int64_t k = tid; k < npacks; k += nthreads) {
      Pack<T, kVec> pa{}, pb{};
      if (!a_scalar) pa = ap[k];
      if (!b_scalar) pb = bp[k];
      Pack<Out, kVec> po;
#pragma unroll
      for (int j = 0; j < kVec; ++j)
        po.v[j] = fn(a_scalar ? a0 : Tr::to_compute(pa.v[j]), b_scalar ? b0 : Tr::to_compute(pb.v[j]));
      op[k] = po;
    }
    done = npacks * kVec;
  }
  for (int64_t i = done + tid; i < n; i += nthreads)
    out[i] = fn(a_scalar ? a0 : Tr::to_compute(a[i]), b_scalar ? b0 : Tr::to_compute(b[i]));
}

// ---------------------------------------------------------------- kernels: copy, fill, arange, random

// dst[i] = convert(src[i]), both contiguous, different dtypes.
template <typename S, typename D>
__global__ void convert_contiguous_kernel(const S* src, D* dst, int64_t n) {
  for (int64_t i = thread_index<int64_t>(); i < n; i += thread_count<int64_t>())
    dst[i] = ElemTraits<D>::from_double(ElemTraits<S>::to_double(src[i]));
}

// Same-dtype strided copy of raw bits. Operands: 0 = dst, 1 = src.
template <typename Bits, typename Idx>
__global__ void copy_bits_strided_kernel(const Bits* src, Bits* dst, Idx n, const __grid_constant__ Indexer<2> ix) {
  for (Idx i = thread_index<Idx>(); i < n; i += thread_count<Idx>()) {
    int64_t off[2];
    ix.offsets(i, off);
    dst[off[0]] = src[off[1]];
  }
}

// Strided copy with conversion, dtypes chosen at run time. Operands: 0 = dst, 1 = src.
template <typename Idx>
__global__ void convert_strided_kernel(DType src_dtype, const void* src, DType dst_dtype, void* dst, Idx n,
                                       const __grid_constant__ Indexer<2> ix) {
  for (Idx i = thread_index<Idx>(); i < n; i += thread_count<Idx>()) {
    int64_t off[2];
    ix.offsets(i, off);
    store_from_double(dst_dtype, dst, off[0], load_as_double(src_dtype, src, off[1]));
  }
}

template <typename T>
__global__ void fill_kernel(T* dst, int64_t n, double value) {
  const T v = ElemTraits<T>::from_double(value);
  for (int64_t i = thread_index<int64_t>(); i < n; i += thread_count<int64_t>()) dst[i] = v;
}

// start + step * i, with the multiply and add rounded separately like the CPU (no FMA).
template <typename T>
__global__ void arange_kernel(T* dst, int64_t n, double start, double step) {
  for (int64_t i = thread_index<int64_t>(); i < n; i += thread_count<int64_t>())
    dst[i] = ElemTraits<T>::from_double(__dadd_rn(start, __dmul_rn(step, static_cast<double>(i))));
}

// splitmix64 and the (0, 1) mapping of kernels/cpu/copy.cpp.
__device__ __forceinline__ uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
__device__ __forceinline__ double to_unit(uint64_t r) { return (static_cast<double>(r >> 11) + 0.5) * 0x1.0p-53; }

// Element i depends only on (seed, offset + i). Products and sums are rounded separately (no
// FMA contraction) to give the CPU's doubles; log and cos are CUDA's (within an ulp or two of
// glibc's), so normal samples can differ from the CPU in the last bit of a double.
template <typename T>
__global__ void random_kernel(T* dst, int64_t n, uint64_t seed, uint64_t offset, RandomKind kind, double a, double b) {
  for (int64_t i = thread_index<int64_t>(); i < n; i += thread_count<int64_t>()) {
    const uint64_t ctr = offset + static_cast<uint64_t>(i);
    double v;
    if (kind == RandomKind::uniform) {
      v = __dadd_rn(a, __dmul_rn(b - a, to_unit(mix(seed ^ mix(ctr)))));
    } else {  // Box-Muller on two independent uniforms of the same counter
      const double u1 = to_unit(mix(seed ^ mix(2 * ctr))), u2 = to_unit(mix(seed ^ mix(2 * ctr + 1)));
      const double radius = ::sqrt(-2.0 * ::log(u1));
      v = __dadd_rn(a, __dmul_rn(__dmul_rn(b, radius), ::cos(6.283185307179586 * u2)));
    }
    dst[i] = ElemTraits<T>::from_double(v);
  }
}

// ---------------------------------------------------------------- kernels: unary, binary, where

// y = op(x), contiguous, T in {f32, f64, bf16, f16}.
template <typename T>
__global__ void unary_kernel(UnaryOp op, const T* x, T* y, int64_t n, double alpha, bool vectorize) {
  using Tr = ElemTraits<T>;
  using C = typename Tr::Compute;
  const C a = static_cast<C>(alpha);
  with_op(op, [&](auto k) {
    using F = UnaryFormula<decltype(k)::value>;
    unary_loop(x, y, n, vectorize, [a](C v) { return Tr::from_compute(F::apply(v, a)); });
  });
}

// The stored result of BinaryFormula F: b8 as is, anything else converted back to T.
template <typename T, typename F, typename C>
__device__ __forceinline__ auto binary_store(C x, C y) {
  if constexpr (F::kB8) return F::apply(x, y);
  else return ElemTraits<T>::from_compute(F::apply(x, y));
}

// out = a op b, each operand contiguous or a scalar.
template <typename T>
__global__ void binary_contiguous_kernel(BinaryOp op, const T* a, const T* b, void* out, int64_t n, bool a_scalar,
                                         bool b_scalar, bool vectorize) {
  using C = typename ElemTraits<T>::Compute;
  with_op(op, [&](auto k) {
    using F = BinaryFormula<decltype(k)::value>;
    using Out = std::conditional_t<F::kB8, uint8_t, T>;
    binary_loop(a, b, static_cast<Out*>(out), n, a_scalar, b_scalar, vectorize,
                [](C x, C y) { return binary_store<T, F>(x, y); });
  });
}

// out[i] = a[off_a(i)] op b[off_b(i)], out contiguous. Operands: 0 = a, 1 = b.
template <typename T, typename Idx>
__global__ void binary_strided_kernel(BinaryOp op, const T* a, const T* b, void* out, Idx n,
                                      const __grid_constant__ Indexer<2> ix) {
  using Tr = ElemTraits<T>;
  with_op(op, [&](auto k) {
    using F = BinaryFormula<decltype(k)::value>;
    using Out = std::conditional_t<F::kB8, uint8_t, T>;
    for (Idx i = thread_index<Idx>(); i < n; i += thread_count<Idx>()) {
      int64_t off[2];
      ix.offsets(i, off);
      static_cast<Out*>(out)[i] = binary_store<T, F>(Tr::to_compute(a[off[0]]), Tr::to_compute(b[off[1]]));
    }
  });
}

// out[i] = cond ? a : b on raw bits, out contiguous. Operands: 0 = cond, 1 = a, 2 = b.
template <typename Bits, typename Idx>
__global__ void where_kernel(const uint8_t* cond, const Bits* a, const Bits* b, Bits* out, Idx n,
                             const __grid_constant__ Indexer<3> ix) {
  for (Idx i = thread_index<Idx>(); i < n; i += thread_count<Idx>()) {
    int64_t off[3];
    ix.offsets(i, off);
    out[i] = cond[off[0]] ? a[off[1]] : b[off[2]];
  }
}

// ---------------------------------------------------------------- host helpers

int64_t numel(const Layout& l) {
  int64_t n = 1;
  for (int d = 0; d < l.ndim; ++d) n *= l.sizes[d];
  return n;
}

// Row-major contiguous, ignoring the strides of size-1 dims.
bool is_contiguous(const Layout& l) {
  int64_t expected = 1;
  for (int d = l.ndim - 1; d >= 0; --d) {
    if (l.sizes[d] == 1) continue;
    if (l.strides[d] != expected) return false;
    expected *= l.sizes[d];
  }
  return true;
}

// Every element reads the same address (a broadcast scalar).
bool is_scalar(const Layout& l) {
  for (int d = 0; d < l.ndim; ++d)
    if (l.sizes[d] != 1 && l.strides[d] != 0) return false;
  return true;
}

bool is_aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// The Indexer for `shape` read through each operand's strides, with size-1 dims dropped and
// neighbouring dims fused where every operand steps through them as one run
// (stride[d - 1] == stride[d] * size[d]); the row-major linear order is unchanged.
template <int kOps>
Indexer<kOps> make_indexer(const Layout& shape, const Layout* const (&ops)[kOps]) {
  Indexer<kOps> ix{};
  int nd = 0;
  for (int d = 0; d < shape.ndim; ++d) {
    const int64_t size = shape.sizes[d];
    if (size == 1) continue;
    bool fuse = nd > 0;
    for (int k = 0; k < kOps; ++k) fuse = fuse && ix.strides[k][nd - 1] == ops[k]->strides[d] * size;
    if (fuse) {
      ix.sizes[nd - 1] *= size;
      for (int k = 0; k < kOps; ++k) ix.strides[k][nd - 1] = ops[k]->strides[d];
    } else {
      ix.sizes[nd] = size;
      for (int k = 0; k < kOps; ++k) ix.strides[k][nd] = ops[k]->strides[d];
      ++nd;
    }
  }
  ix.ndim = nd;
  return ix;
}

constexpr int64_t kMax32 = int64_t{1} << 31;  // below this, strided kernels index in 32 bits

// Enough blocks for `work` threads, capped at one full wave (grid-stride loops do the rest).
int grid_for(int64_t work) {
  const int64_t wanted = (work + kThreads - 1) / kThreads;
  const int64_t cap = static_cast<int64_t>(sm_count()) * kBlocksPerSm;
  return static_cast<int>(wanted < 1 ? 1 : (wanted < cap ? wanted : cap));
}

template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), int64_t work, Args&&... args) {
  kernel<<<grid_for(work), kThreads, 0, cuda_stream()>>>(std::forward<Args>(args)...);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
struct TypeTag {
  using type = T;
};

// fn(TypeTag<storage type>) for any of the six dtypes.
template <typename Fn>
void dispatch_any(DType t, Fn&& fn) {
  switch (t) {
    case DType::f32: return fn(TypeTag<float>{});
    case DType::f64: return fn(TypeTag<double>{});
    case DType::bf16: return fn(TypeTag<__nv_bfloat16>{});
    case DType::f16: return fn(TypeTag<__half>{});
    case DType::i64: return fn(TypeTag<int64_t>{});
    case DType::b8: return fn(TypeTag<uint8_t>{});
  }
  throw DTypeError(std::string("gg: CUDA: unknown dtype ") + std::to_string(static_cast<int>(t)));
}

[[noreturn]] void unsupported(const char* op, const char* supported, DType t) {
  throw DTypeError(std::string("gg::") + op + ": CUDA supports " + supported + ", got " + dtype_name(t));
}

// ---------------------------------------------------------------- typed launchers

template <typename Bits>
void copy_bits_strided(const CopyParams& p, int64_t n) {
  const Layout* const ops[2] = {&p.dst_layout, &p.src_layout};
  const Indexer<2> ix = make_indexer(p.dst_layout, ops);
  const auto* src = static_cast<const Bits*>(p.src);
  auto* dst = static_cast<Bits*>(p.dst);
  if (n < kMax32) launch(copy_bits_strided_kernel<Bits, uint32_t>, n, src, dst, static_cast<uint32_t>(n), ix);
  else launch(copy_bits_strided_kernel<Bits, int64_t>, n, src, dst, n, ix);
}

template <typename T>
void unary_typed(const UnaryParams& p) {
  const auto* x = static_cast<const T*>(p.x);
  auto* y = static_cast<T*>(p.y);
  const bool vectorize = is_aligned(x, kPackBytes) && is_aligned(y, kPackBytes);
  const int64_t vec = kPackBytes / sizeof(T);
  launch(unary_kernel<T>, vectorize ? (p.n + vec - 1) / vec : p.n, p.op, x, y, p.n, p.alpha, vectorize);
}

template <typename T>
void binary_typed(const BinaryParams& p) {
  const int64_t n = numel(p.a_layout);
  if (n == 0) return;
  const auto* a = static_cast<const T*>(p.a);
  const auto* b = static_cast<const T*>(p.b);
  const bool a_scalar = is_scalar(p.a_layout), b_scalar = is_scalar(p.b_layout);
  if ((a_scalar || is_contiguous(p.a_layout)) && (b_scalar || is_contiguous(p.b_layout))) {
    const int64_t vec = kPackBytes / sizeof(T);
    const size_t out_bytes = (is_comparison(p.op) ? 1 : sizeof(T)) * vec;
    const bool vectorize = (a_scalar || is_aligned(a, kPackBytes)) && (b_scalar || is_aligned(b, kPackBytes)) &&
                           is_aligned(p.out, out_bytes);
    launch(binary_contiguous_kernel<T>, vectorize ? (n + vec - 1) / vec : n, p.op, a, b, p.out, n, a_scalar, b_scalar,
           vectorize);
    return;
  }
  const Layout* const ops[2] = {&p.a_layout, &p.b_layout};
  const Indexer<2> ix = make_indexer(p.a_layout, ops);
  if (n < kMax32) launch(binary_strided_kernel<T, uint32_t>, n, p.op, a, b, p.out, static_cast<uint32_t>(n), ix);
  else launch(binary_strided_kernel<T, int64_t>, n, p.op, a, b, p.out, n, ix);
}

template <typename Bits>
void where_typed(const WhereParams& p) {
  const int64_t n = numel(p.a_layout);
  if (n == 0) return;
  const Layout* const ops[3] = {&p.cond_layout, &p.a_layout, &p.b_layout};
  const Indexer<3> ix = make_indexer(p.a_layout, ops);
  const auto* a = static_cast<const Bits*>(p.a);
  const auto* b = static_cast<const Bits*>(p.b);
  auto* out = static_cast<Bits*>(p.out);
  if (n < kMax32) launch(where_kernel<Bits, uint32_t>, n, p.cond, a, b, out, static_cast<uint32_t>(n), ix);
  else launch(where_kernel<Bits, int64_t>, n, p.cond, a, b, out, n, ix);
}

}  // namespace

// ---------------------------------------------------------------- entry points

void copy_strided(const CopyParams& p) {
  const int64_t n = numel(p.dst_layout);
  if (n == 0) return;
  const bool contiguous = is_contiguous(p.dst_layout) && is_contiguous(p.src_layout);
  if (p.src_dtype == p.dst_dtype) {
    const size_t es = dtype_size(p.dst_dtype);
    if (contiguous) {
      CUDA_CHECK(cudaMemcpyAsync(p.dst, p.src, static_cast<size_t>(n) * es, cudaMemcpyDeviceToDevice, cuda_stream()));
      return;
    }
    switch (es) {
      case 1: return copy_bits_strided<uint8_t>(p, n);
      case 2: return copy_bits_strided<uint16_t>(p, n);
      case 4: return copy_bits_strided<uint32_t>(p, n);
      case 8: return copy_bits_strided<uint64_t>(p, n);
      default: unsupported("copy", "f32, f64, bf16, f16, i64 and b8", p.dst_dtype);
    }
  }
  if (contiguous) {
    dispatch_any(p.src_dtype, [&](auto src_tag) {
      dispatch_any(p.dst_dtype, [&](auto dst_tag) {
        using S = typename decltype(src_tag)::type;
        using D = typename decltype(dst_tag)::type;
        launch(convert_contiguous_kernel<S, D>, n, static_cast<const S*>(p.src), static_cast<D*>(p.dst), n);
      });
    });
    return;
  }
  const Layout* const ops[2] = {&p.dst_layout, &p.src_layout};
  const Indexer<2> ix = make_indexer(p.dst_layout, ops);
  if (n < kMax32) {
    launch(convert_strided_kernel<uint32_t>, n, p.src_dtype, p.src, p.dst_dtype, p.dst, static_cast<uint32_t>(n), ix);
  } else {
    launch(convert_strided_kernel<int64_t>, n, p.src_dtype, p.src, p.dst_dtype, p.dst, n, ix);
  }
}

void fill(const FillParams& p) {
  if (p.n <= 0) return;
  if (p.value == 0.0 && !std::signbit(p.value)) {  // +0 is all-zero bits in every dtype
    CUDA_CHECK(cudaMemsetAsync(p.dst, 0, static_cast<size_t>(p.n) * dtype_size(p.dtype), cuda_stream()));
    return;
  }
  dispatch_any(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch(fill_kernel<T>, p.n, static_cast<T*>(p.dst), p.n, p.value);
  });
}

void arange(const ArangeParams& p) {
  if (p.n <= 0) return;
  dispatch_any(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch(arange_kernel<T>, p.n, static_cast<T*>(p.dst), p.n, p.start, p.step);
  });
}

void random(const RandomParams& p) {
  if (p.n <= 0) return;
  dispatch_any(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch(random_kernel<T>, p.n, static_cast<T*>(p.dst), p.n, p.seed, p.offset, p.kind, p.a, p.b);
  });
}

void unary(const UnaryParams& p) {
  if (p.n <= 0) return;
  switch (p.dtype) {
    case DType::f32: return unary_typed<float>(p);
    case DType::f64: return unary_typed<double>(p);
    case DType::bf16: return unary_typed<__nv_bfloat16>(p);
    case DType::f16: return unary_typed<__half>(p);
    default: unsupported(op_name(p.op), "f32, f64, bf16 and f16", p.dtype);
  }
}

void binary(const BinaryParams& p) {
  switch (p.dtype) {
    case DType::f32: return binary_typed<float>(p);
    case DType::f64: return binary_typed<double>(p);
    case DType::bf16: return binary_typed<__nv_bfloat16>(p);
    case DType::f16: return binary_typed<__half>(p);
    case DType::i64: return binary_typed<int64_t>(p);
    default: unsupported(op_name(p.op), "f32, f64, bf16, f16 and i64", p.dtype);
  }
}

void where(const WhereParams& p) {
  switch (p.dtype) {
    case DType::f32: return where_typed<uint32_t>(p);
    case DType::f64: return where_typed<uint64_t>(p);
    case DType::bf16: return where_typed<uint16_t>(p);
    case DType::f16: return where_typed<uint16_t>(p);
    case DType::i64: return where_typed<uint64_t>(p);
    default: unsupported("where", "f32, f64, bf16, f16 and i64", p.dtype);
  }
}

}  // namespace gg::kernels::cuda
