// Every path of the CPU matrix product against a plain f64 triple loop: the single-threaded GEMM
// for products under 1M multiply-adds in each storage order of A and B, GEMV and tiny
// products, the one tall product for a shared weight, and the OpenMP paths above 1M (batched,
// one large matrix, tall), in f64 and f32.
#include <string>
#include <vector>

#include "test_util.h"

namespace gg::test {
namespace {

// (.., M, K) x (.., K, N), batch dims equal or b without them; reads the logical values.
Values reference(const Tensor& a, const Tensor& b) {
  const Values av = a.to_vector<double>(), bv = b.to_vector<double>();
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  int64_t batch = 1;
  for (int64_t d = 0; d + 2 < a.dim(); ++d) batch *= a.size(d);
  const bool shared_b = b.dim() == 2;
  Values out(static_cast<size_t>(batch * M * N), 0.0);
  for (int64_t t = 0; t < batch; ++t)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k)
          s += av[static_cast<size_t>((t * M + i) * K + k)] *
               bv[static_cast<size_t>(((shared_b ? 0 : t) * K + k) * N + j)];
        out[static_cast<size_t>((t * M + i) * N + j)] = s;
      }
  return out;
}

// A (.., rows, cols) tensor, stored row by row, or column by column (a transposed view).
Tensor matrix(Shape shape, bool column_major, DType dtype) {
  if (!column_major) return randn(shape, dtype);
  std::swap(shape[shape.size() - 1], shape[shape.size() - 2]);
  return transpose(randn(shape, dtype), -1, -2);
}

void check(const Tensor& a, const Tensor& b, const std::string& what) {
  const double tol = a.dtype() == DType::f64 ? 1e-12 : 2e-5;
  const Tensor y = matmul(a, b);
  expect_close(y.to_vector<double>(), reference(a, b), tol, tol * static_cast<double>(a.size(-1)), what);
}

TEST(MatmulPaths, AgainstPlainLoops) {
  manual_seed(11);
  for (DType dtype : {DType::f64, DType::f32}) {
    const std::string dt = dtype_name(dtype);
    for (bool a_col : {false, true})
      for (bool b_col : {false, true}) {  // single-threaded GEMM, each storage order
        const std::string order = std::string(a_col ? "col" : "row") + "/" + (b_col ? "col" : "row");
        check(matrix({37, 29}, a_col, dtype), matrix({29, 41}, b_col, dtype), dt + " small gemm " + order);
        check(matrix({5, 37, 29}, a_col, dtype), matrix({5, 29, 41}, b_col, dtype), dt + " small batch " + order);
        check(matrix({130, 70}, a_col, dtype), matrix({70, 120}, b_col, dtype), dt + " threaded gemm " + order);
        check(matrix({4, 70, 64}, a_col, dtype), matrix({4, 64, 66}, b_col, dtype), dt + " threaded batch " + order);
      }
    check(randn({1, 50}, dtype), randn({50, 30}, dtype), dt + " one row (gemv)");
    check(randn({30, 50}, dtype), randn({50, 1}, dtype), dt + " one column (gemv)");
    check(randn({3, 4}, dtype), randn({4, 5}, dtype), dt + " tiny");
    check(randn({25, 10, 40}, dtype), randn({40, 40}, dtype), dt + " tall, shared weight");
    check(randn({64, 64, 64}, dtype), randn({64, 64}, dtype), dt + " tall, threaded");
    check(randn({2, 0, 5}, dtype), randn({2, 5, 3}, dtype), dt + " empty");
    check(randn({2, 4, 0}, dtype), randn({2, 0, 3}, dtype), dt + " K = 0");
  }
}

}  // namespace
}  // namespace gg::test
