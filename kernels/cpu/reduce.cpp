// Row reductions and row softmax on contiguous (rows, cols) arrays, via Eigen.
#include <Eigen/Core>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "kernels/cpu/kernels.h"

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
    if (p.cols == 0) out.setConstant(-std::numeric_limits<T>::infinity());
    else out = x.rowwise().maxCoeff();
  }
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
      T lse = m + std::log(s);
      for (int64_t c = 0; c < p.cols; ++c) yr[c] = xr[c] - lse;
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

void softmax_last(const SoftmaxParams& p) {
  switch (p.dtype) {
    case DType::f32: return softmax_t<float>(p);
    case DType::f64: return softmax_t<double>(p);
    default: throw DTypeError(std::string("gg::softmax: CPU supports f32 and f64, got ") + dtype_name(p.dtype));
  }
}

}  // namespace gg::kernels::cpu
