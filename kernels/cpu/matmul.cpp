// Batched matrix product through Eigen. Each operand is mapped in place as row-major (column
// stride 1) or column-major (row stride 1), so transposed views need no copy.
#include "kernels/cpu/eigen.h"
#include <cstring>

#include "core/error.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/strided.h"

namespace gg::kernels::cpu {
namespace {

template <typename T, int Order>
using MatMap = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Order>, 0, Eigen::OuterStride<>>;
template <typename T>
using OutMap = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;

// True when every batch multiplies the same B and the A matrices are row-major and follow
// each other in memory, as in (T, N, K) · W with W broadcast: then C = A·B is one tall product
// (batch·M, K) · (K, N), far cheaper than `batch` small ones (B is packed once, rows block well).
bool is_one_tall_product(const MatmulParams& p, int64_t lda) {
  if (p.batch < 2 || p.a_col_stride != 1) return false;
  for (int64_t i = 1; i < p.batch; ++i)
    if (p.b_offsets[i] != p.b_offsets[0] || p.a_offsets[i] != p.a_offsets[0] + i * p.M * lda) return false;
  return true;
}

// Products smaller than this (multiply-adds, all batches together) run on the calling thread.
// Waking a second thread costs microseconds, more than it saves on such products, and far more
// when the cores are shared: the 1-40-40-1 MAML step (every product under 0.5M multiply-adds)
// took 8.2 ms per meta-iteration with two OpenMP threads on a loaded 2-core machine, 1.2 ms
// with one.
constexpr double kParallelMacs = double(1 << 20);

// C = A·B (M×K by K×N into a dense row-major C) on the calling thread. Eigen's own product
// splits a large enough GEMM over OpenMP threads whatever its caller wants; its GEMM kernel is
// called here directly, with no parallel information, instead. Products with one row or one
// column, and tiny ones, go through Eigen's product, which then never forks.
template <typename T, int OrderA, int OrderB>
void product_serial(const T* a, int64_t lda, const T* b, int64_t ldb, T* c, int64_t M, int64_t N, int64_t K) {
  MatMap<T, OrderA> A(a, M, K, Eigen::OuterStride<>(std::max<int64_t>(lda, 1)));
  MatMap<T, OrderB> B(b, K, N, Eigen::OuterStride<>(std::max<int64_t>(ldb, 1)));
  OutMap<T> C(c, M, N);
  if (K == 0) {
    C.setZero();
    return;
  }
  if (M == 1 || N == 1 || M + N + K < 20) {
    C.noalias() = A * B;  // Eigen's GEMV or coefficient-wise product: neither forks
    return;
  }
#if EIGEN_VERSION_AT_LEAST(3, 4, 0)
  {
    namespace ei = Eigen::internal;
    C.setZero();  // the kernel accumulates: C += A·B
    ei::gemm_blocking_space<Eigen::RowMajor, T, T, Eigen::Dynamic, Eigen::Dynamic, Eigen::Dynamic> blocking(M, N, K, 1,
                                                                                                         true);
    ei::general_matrix_matrix_product<Eigen::Index, T, OrderA, false, T, OrderB, false, Eigen::RowMajor, 1>::run(
        M, N, K, a, std::max<int64_t>(lda, 1), b, std::max<int64_t>(ldb, 1), c, 1, N, T(1), blocking, nullptr);
  }
#else
  C.noalias() = A.lazyProduct(B);  // Eigen 3.3's kernel has another signature
#endif
}

template <typename T, int OrderA, int OrderB>
void gemm(const MatmulParams& p) {
  const T* a = static_cast<const T*>(p.a);
  const T* b = static_cast<const T*>(p.b);
  T* c = static_cast<T*>(p.c);
  const int64_t lda = OrderA == Eigen::RowMajor ? p.a_row_stride : p.a_col_stride;
  const int64_t ldb = OrderB == Eigen::RowMajor ? p.b_row_stride : p.b_col_stride;
  const double macs = static_cast<double>(p.M) * static_cast<double>(p.N) * static_cast<double>(p.K);
  const bool serial = macs * static_cast<double>(p.batch) < kParallelMacs;
  if (OrderA == Eigen::RowMajor && p.K > 0 && is_one_tall_product(p, lda)) {
    if (serial) return product_serial<T, OrderA, OrderB>(a + p.a_offsets[0], lda, b + p.b_offsets[0], ldb, c,
                                                         p.batch * p.M, p.N, p.K);
    MatMap<T, OrderA> A(a + p.a_offsets[0], p.batch * p.M, p.K, Eigen::OuterStride<>(std::max<int64_t>(lda, 1)));
    MatMap<T, OrderB> B(b + p.b_offsets[0], p.K, p.N, Eigen::OuterStride<>(std::max<int64_t>(ldb, 1)));
    OutMap<T>(c, p.batch * p.M, p.N).noalias() = A * B;
    return;
  }
  if (serial) {
    for (int64_t i = 0; i < p.batch; ++i)
      product_serial<T, OrderA, OrderB>(a + p.a_offsets[i], lda, b + p.b_offsets[i], ldb, c + i * p.M * p.N, p.M, p.N,
                                        p.K);
    return;
  }
  // Many matrices: one thread per matrix (Eigen then runs single-threaded inside, since it is
  // already in a parallel region). One matrix: Eigen splits it over threads itself.
#pragma omp parallel for schedule(static) if (p.batch > 1)
  for (int64_t i = 0; i < p.batch; ++i) {
    MatMap<T, OrderA> A(a + p.a_offsets[i], p.M, p.K, Eigen::OuterStride<>(std::max<int64_t>(lda, 1)));
    MatMap<T, OrderB> B(b + p.b_offsets[i], p.K, p.N, Eigen::OuterStride<>(std::max<int64_t>(ldb, 1)));
    OutMap<T> C(c + i * p.M * p.N, p.M, p.N);
    if (p.K == 0) C.setZero();
    else C.noalias() = A * B;
  }
}

template <typename T>
void matmul_t(const MatmulParams& p) {
  const bool a_row = p.a_col_stride == 1, b_row = p.b_col_stride == 1;
  if (a_row && b_row) return gemm<T, Eigen::RowMajor, Eigen::RowMajor>(p);
  if (a_row) return gemm<T, Eigen::RowMajor, Eigen::ColMajor>(p);
  if (b_row) return gemm<T, Eigen::ColMajor, Eigen::RowMajor>(p);
  return gemm<T, Eigen::ColMajor, Eigen::ColMajor>(p);
}

}  // namespace

void matmul(const MatmulParams& p) {
  switch (p.dtype) {
    case DType::f32: return matmul_t<float>(p);
    case DType::f64: return matmul_t<double>(p);
    default: throw DTypeError(std::string("gg::matmul: CPU supports f32 and f64, got ") + dtype_name(p.dtype));
  }
}

void index_select(const IndexParams& p) {
  const size_t es = dtype_size(p.dtype);
  const auto* src = static_cast<const char*>(p.src);
  auto* dst = static_cast<char*>(p.dst);
  const size_t row = static_cast<size_t>(p.inner) * es;
  for (int64_t o = 0; o < p.outer; ++o)
    for (int64_t j = 0; j < p.n_idx; ++j)
      std::memcpy(dst + static_cast<size_t>(o * p.n_idx + j) * row,
                  src + static_cast<size_t>(o * p.dim_size + p.idx[j]) * row, row);
}

namespace {
template <typename T>
void index_add_t(const IndexParams& p) {
  const T* src = static_cast<const T*>(p.src);
  T* dst = static_cast<T*>(p.dst);
  for (int64_t o = 0; o < p.outer; ++o)
    for (int64_t j = 0; j < p.n_idx; ++j) {
      const T* s = src + (o * p.n_idx + j) * p.inner;
      T* d = dst + (o * p.dim_size + p.idx[j]) * p.inner;
      for (int64_t i = 0; i < p.inner; ++i) d[i] += s[i];
    }
}
}  // namespace

void index_add(const IndexParams& p) {
  switch (p.dtype) {
    case DType::f32: return index_add_t<float>(p);
    case DType::f64: return index_add_t<double>(p);
    default: throw DTypeError(std::string("gg::index_add: CPU supports f32 and f64, got ") + dtype_name(p.dtype));
  }
}

}  // namespace gg::kernels::cpu
