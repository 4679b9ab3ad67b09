// Batched matrix product through cuBLAS: C[b] = A[b] · B[b] for b < batch.
//
//   A[b]  (M, K) at a + a_offsets[b], element (m, k) at m * a_row_stride + k * a_col_stride
//   B[b]  (K, N) at b + b_offsets[b], element (k, n) at k * b_row_stride + n * b_col_stride
//   C[b]  (M, N) contiguous row-major at c + b * M * N
// One stride of each pair is 1; a_offsets / b_offsets are host arrays, in elements.
// dtypes: f64 (CUBLAS_COMPUTE_64F), f32 (CUBLAS_COMPUTE_32F, or _FAST_TF32 under allow_tf32()),
// bf16 and f16 (16-bit inputs and output, f32 accumulation).
//
// Derivation. cuBLAS is column-major: a matrix X with leading dimension ld has X(i, j) at
// i + j * ld. Read that way, row-major C (ld N) is the N×M matrix Cᵀ, so we ask cuBLAS for
//   Cᵀ = Bᵀ · Aᵀ     (m = N, n = M, k = K, ldc = N)
// with B as the first operand and A as the second. Each operand's memory, read column-major:
//   B row-major    (b_col_stride 1, ld = b_row_stride): X(n, k) = B(k, n), X = Bᵀ (N×K) -> op N
//   B column-major (b_row_stride 1, ld = b_col_stride): X(k, n) = B(k, n), X = B  (K×N) -> op T
//   A row-major    (a_col_stride 1, ld = a_row_stride): Y(k, m) = A(m, k), Y = Aᵀ (K×M) -> op N
//   A column-major (a_row_stride 1, ld = a_col_stride): Y(m, k) = A(m, k), Y = A  (M×K) -> op T
// so op(X) = Bᵀ and op(Y) = Aᵀ as required. Like the CPU kernel, an operand whose column stride
// is 1 counts as row-major. cuBLAS needs ld >= max(1, rows of the stored matrix); when the stored
// matrix has a single column, ld is never used to address anything and is raised to that bound.
//
// Batches: when both offset lists are arithmetic progressions (stride >= 0; 0 = broadcast
// operand) one cublasGemmStridedBatchedEx covers them all, otherwise one cublasGemmEx per batch.
// K == 0 gives C = 0.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <mutex>
#include <string>

#include "core/cuda_check.cuh"
#include "core/cuda_runtime.h"
#include "core/error.h"
#include "kernels/cuda/kernels.h"

namespace gg::kernels::cuda {
using namespace ::gg::cuda::runtime;  // the stream, allocation and device queries
namespace {

// ------------------------------------------------------------------ handles

constexpr int kMaxDevices = 64;
struct HandleSlot {
  std::once_flag init;
  cublasHandle_t handle = nullptr;
};
HandleSlot g_handles[kMaxDevices];  // never destroyed: they live as long as the process

// The current device's handle, created on first use, bound to the library stream.
cublasHandle_t handle() {
  const int device = current_device();
  GG_CHECK(device >= 0 && device < kMaxDevices, DeviceError, "gg::matmul: CUDA device index ", device,
           " out of range");
  HandleSlot& slot = g_handles[device];
  std::call_once(slot.init, [&] { CUBLAS_CHECK(cublasCreate(&slot.handle)); });
  CUBLAS_CHECK(cublasSetStream(slot.handle, cuda_stream()));
  return slot.handle;
}

// ------------------------------------------------------------------ helpers

struct GemmTypes {
  cudaDataType_t data;
  cublasComputeType_t compute;
  bool double_scalars;  // alpha, beta as double (64F compute) or float
};

GemmTypes gemm_types(DType t) {
  switch (t) {
    case DType::f64: return {CUDA_R_64F, CUBLAS_COMPUTE_64F, true};
    case DType::f32: return {CUDA_R_32F, allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, false};
    case DType::bf16: return {CUDA_R_16BF, CUBLAS_COMPUTE_32F, false};
    case DType::f16: return {CUDA_R_16F, CUBLAS_COMPUTE_32F, false};
    default:
      throw DTypeError(std::string("gg::matmul: CUDA supports f32, f64, bf16 and f16, got ") + dtype_name(t));
  }
}

int to_int(int64_t v, const char* what) {
  GG_CHECK(v >= 0 && v <= INT_MAX, ValueError, "gg::matmul: ", what, " = ", v, " does not fit cuBLAS's int");
  return static_cast<int>(v);
}

// One cuBLAS operand: the transpose flag and leading dimension of its column-major storage.
struct Operand {
  cublasOperation_t op;
  int ld;
};

// `row_major`: the operand's column stride is 1. (rows, cols) is the operand's own shape (K×N for B,
// M×K for A); the stored column-major matrix is its transpose when row-major, itself otherwise.
Operand operand(const char* name, bool row_major, int64_t row_stride, int64_t col_stride, int64_t rows,
                int64_t cols) {
  const int64_t stored_rows = row_major ? cols : rows;
  const int64_t stored_cols = row_major ? rows : cols;
  int64_t ld = row_major ? row_stride : col_stride;
  if (stored_cols <= 1) ld = std::max<int64_t>(ld, stored_rows);
  ld = std::max<int64_t>(ld, 1);
  GG_CHECK(ld >= stored_rows, ValueError, "gg::matmul: ", name, " (", rows, ", ", cols, ") with strides (",
           row_stride, ", ", col_stride, ") has no cuBLAS layout (leading dimension ", ld, " < ", stored_rows, ")");
  return {row_major ? CUBLAS_OP_N : CUBLAS_OP_T, to_int(ld, "leading dimension")};
}

// True when offsets[i] = offsets[0] + i * stride for all i, with stride >= 0.
bool constant_stride(const int64_t* offsets, int64_t batch, int64_t* stride) {
  *stride = batch > 1 ? offsets[1] - offsets[0] : 0;
  if (*stride < 0) return false;
  for (int64_t i = 1; i < batch; ++i)
    if (offsets[i] != offsets[0] + i * *stride) return false;
  return true;
}

}  // namespace

void matmul(const MatmulParams& p) {
  const GemmTypes types = gemm_types(p.dtype);
  if (p.batch == 0 || p.M == 0 || p.N == 0) return;
  const size_t es = dtype_size(p.dtype);
  char* c = static_cast<char*>(p.c);
  if (p.K == 0) {
    CUDA_CHECK(cudaMemsetAsync(c, 0, static_cast<size_t>(p.batch * p.M * p.N) * es, cuda_stream()));
    return;
  }

  // Cᵀ (N×M) = op(X) (N×K) · op(Y) (K×M), X from B and Y from A (see the header).
  const Operand x = operand("b", p.b_col_stride == 1, p.b_row_stride, p.b_col_stride, p.K, p.N);
  const Operand y = operand("a", p.a_col_stride == 1, p.a_row_stride, p.a_col_stride, p.M, p.K);
  const int m = to_int(p.N, "N"), n = to_int(p.M, "M"), k = to_int(p.K, "K");
  const int ldc = m;
  const auto* a = static_cast<const char*>(p.a);
  const auto* b = static_cast<const char*>(p.b);

  const double alpha_d = 1.0, beta_d = 0.0;
  const float alpha_f = 1.0f, beta_f = 0.0f;
  const void* alpha = types.double_scalars ? static_cast<const void*>(&alpha_d) : &alpha_f;
  const void* beta = types.double_scalars ? static_cast<const void*>(&beta_d) : &beta_f;
  cublasHandle_t h = handle();

  int64_t a_stride = 0, b_stride = 0;
  if (constant_stride(p.a_offsets, p.batch, &a_stride) && constant_stride(p.b_offsets, p.batch, &b_stride)) {
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        h, x.op, y.op, m, n, k, alpha,
        b + p.b_offsets[0] * es, types.data, x.ld, b_stride,
        a + p.a_offsets[0] * es, types.data, y.ld, a_stride, beta,
        c, types.data, ldc, p.M * p.N, to_int(p.batch, "batch"),
        types.compute, CUBLAS_GEMM_DEFAULT));
    return;
  }
  for (int64_t i = 0; i < p.batch; ++i) {
    CUBLAS_CHECK(cublasGemmEx(
        h, x.op, y.op, m, n, k, alpha,
        b + p.b_offsets[i] * es, types.data, x.ld,
        a + p.a_offsets[i] * es, types.data, y.ld, beta,
        c + static_cast<size_t>(i * p.M * p.N) * es, types.data, ldc,
        types.compute, CUBLAS_GEMM_DEFAULT));
  }
}

}  // namespace gg::kernels::cuda
