// Row reductions and row softmax on contiguous (rows, cols) arrays, via Eigen.
#include "kernels/cpu/eigen.h"
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/strided.h"

namespace gg::kernels::cpu {
namespace {

template <typename T>
using RowMajor = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

template <typename T>
void reduce_t(const ReduceParams& p) {
  Eigen::Map<const RowMajor<T>> x(static_cast<const T*>(p.x), p.rows, p.cols);
  Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, 1>> out(static_cast<T*>(p.out), p.rows);
  if (p.op == ReduceOp::sum) {
    if (p.rows == 1) out(0) = x.sum();  // one long row: a single vectorised sum
    else out = x.rowwise().sum();
  } else {
    // NaN propagates (a NaN anywhere in the row gives NaN, as torch.max and gg::maximum do);
    // Eigen's maxCoeff leaves the NaN case unspecified, so this is a plain loop.
    const T* xp = static_cast<const T*>(p.x);
    for (int64_t r = 0; r < p.rows; ++r) {
      T m = -std::numeric_limits<T>::infinity();
      const T* row = xp + r * p.cols;
      for (int64_t c = 0; c < p.cols; ++c) {
        const T v = row[c];
        if (v > m || v != v) m = v;
        if (m != m) break;
      }
      out(r) = m;
    }
  }
}

// Walks x in its own layout and adds each element into its output slot (stride 0 along the
// summed dims), so summing a leading dim, e.g. (T, r, c) -> (r, c), needs no transposed copy.
template <typename T>
void sum_strided_t(const SumStridedParams& p) {
  const T* x = static_cast<const T*>(p.x);
  T* out = static_cast<T*>(p.out);
  int64_t n_out = 1;
  for (int d = 0; d < p.out_layout.ndim; ++d)
    if (p.out_layout.strides[d] != 0) n_out *= p.out_layout.sizes[d];
  std::fill(out, out + n_out, T(0));
  const Layout* const layouts[2] = {&p.out_layout, &p.x_layout};
  for_each_run<2>(layouts, [&](const int64_t* base, int64_t n, const int64_t* st) {
    T* o = out + base[0];
    const T* in = x + base[1];
    if (st[0] == 0) {  // the innermost dim is summed: one running total
      T acc = *o;
      for (int64_t i = 0; i < n; ++i) acc += in[i * st[1]];
      *o = acc;
    } else if (st[0] == 1 && st[1] == 1) {
      for (int64_t i = 0; i < n; ++i) o[i] += in[i];
    } else {
      for (int64_t i = 0; i < n; ++i) o[i * st[0]] += in[i * st[1]];
    }
  });
}

template <typename T>
void softmax_t(const SoftmaxParams& p) {
  const T* x = static_cast<const T*>(p.x);
  T* y = static_cast<T*>(p.y);
  for (int64_t r = 0; r < p.rows; ++r) {
    const T* xr = x + r * p.cols;
    T* yr = y + r * p.cols;
    T m = -std::numeric_limits<T>::infinity();
    for (int64_t c = 0; c < p.cols; ++c) m = std::max(m, xr[c]);
    T s = 0;
    for (int64_t c = 0; c < p.cols; ++c) s += std::exp(xr[c] - m);
    if (p.log) {
      // (x - m) - log s, not x - (m + log s): for large |m| the sum m + log s drops the low
      // bits of log s.
      const T log_s = std::log(s);
      for (int64_t c = 0; c < p.cols; ++c) yr[c] = (xr[c] - m) - log_s;
    } else {
      T inv = T(1) / s;
      for (int64_t c = 0; c < p.cols; ++c) yr[c] = std::exp(xr[c] - m) * inv;
    }
  }
}

}  // namespace

void reduce_last(const ReduceParams& p) {
  switch (p.dtype) {
    case DType::f32: return reduce_t<float>(p);
    case DType::f64: return reduce_t<double>(p);
    default: throw DTypeError(std::string("gg: CPU reductions support f32 and f64, got ") + dtype_name(p.dtype));
  }
}

void sum_strided(const SumStridedParams& p) {
  switch (p.dtype) {
    case DType::f32: return sum_strided_t<float>(p);
    case DType::f64: return sum_strided_t<double>(p);
    default: throw DTypeError(std::string("gg: CPU reductions support f32 and f64, got ") + dtype_name(p.dtype));
  }
}

void softmax_last(const SoftmaxParams& p) {
  switch (p.dtype) {
    case DType::f32: return softmax_t<float>(p);
    case DType::f64: return softmax_t<double>(p);
    default: throw DTypeError(std::string("gg::softmax: CPU supports f32 and f64, got ") + dtype_name(p.dtype));
  }
}

}  // namespace gg::kernels::cpu
