// Matrix product with numpy semantics: batch dims broadcast, 1-D operands get a unit dim
// that is removed again. Transposed views reach the kernel without a copy.
#include "ops/common.h"

namespace gg {
namespace {

// Row and column strides of the last two dims, normalised so that one of them is 1 when the
// data allows it (a dim of size 1 may carry any stride). Returns false when neither is 1, and
// when the other stride is shorter than a row (a column) of the matrix: rows that overlap, as
// in a broadcast (stride-0) view, must be copied out, not read with a made-up leading dim.
bool matrix_strides(const Tensor& t, int64_t rows, int64_t cols, int64_t& rs, int64_t& cs) {
  rs = t.strides()[static_cast<size_t>(t.dim() - 2)];
  cs = t.strides()[static_cast<size_t>(t.dim() - 1)];
  // A broadcast (stride 0) dim of size > 1 has no BLAS layout: the caller copies it first.
  if ((rows > 1 && rs == 0) || (cols > 1 && cs == 0)) return false;
  if (cols == 1) cs = 1;
  if (rows == 1) rs = cs == 1 ? cols : 1;
  if (cs == 1) return rs >= cols;
  return rs == 1 && cs >= rows;
}

// A matrix (or batch of them, of at least 2 rows and columns) stored column by column: the
// transpose of a row-major one.
bool is_transposed_matrix(const Tensor& t) {
  if (t.dim() < 2 || t.size(-2) < 2 || t.size(-1) < 2) return false;
  const int64_t rs = t.strides()[static_cast<size_t>(t.dim() - 2)], cs = t.strides()[static_cast<size_t>(t.dim() - 1)];
  return rs == 1 && cs >= t.size(-2);
}

Tensor matmul_2d_plus(const Tensor& a_in, const Tensor& b_in) {
  const int64_t M = a_in.size(-2), K = a_in.size(-1), N = b_in.size(-1);
  GG_CHECK(b_in.size(-2) == K, ShapeError, "gg::matmul: shapes cannot be multiplied: a is ",
           shape_str(a_in.shape()), ", b is ", shape_str(b_in.shape()), " (", K, " != ", b_in.size(-2), ")");
  Shape batch = broadcast_shapes(Shape(a_in.shape().begin(), a_in.shape().end() - 2),
                                 Shape(b_in.shape().begin(), b_in.shape().end() - 2), "matmul");
  Shape out_shape = batch;
  out_shape.push_back(M);
  out_shape.push_back(N);
  detail::check_max_dims("matmul", out_shape);

  Tensor a = a_in, b = b_in;
  int64_t ars, acs, brs, bcs;
  {
    NoGradGuard ng;
    if (!matrix_strides(a, M, K, ars, acs)) { a = clone(a); matrix_strides(a, M, K, ars, acs); }
    if (!matrix_strides(b, K, N, brs, bcs)) { b = clone(b); matrix_strides(b, K, N, brs, bcs); }
  }
  // Offset of each batch's matrix, following broadcast strides.
  const int64_t nb = numel_of(batch);
  std::vector<int64_t> a_off(static_cast<size_t>(nb)), b_off(static_cast<size_t>(nb));
  kernels::Layout la = detail::broadcast_layout(a, [&] { Shape s = batch; s.push_back(M); s.push_back(K); return s; }());
  kernels::Layout lb = detail::broadcast_layout(b, [&] { Shape s = batch; s.push_back(K); s.push_back(N); return s; }());
  for (int64_t i = 0; i < nb; ++i) {
    int64_t rem = i, oa = a.offset(), ob = b.offset();
    for (size_t dd = batch.size(); dd-- > 0;) {
      int64_t idx = rem % batch[dd];
      rem /= batch[dd];
      oa += idx * la.strides[dd];
      ob += idx * lb.strides[dd];
    }
    a_off[static_cast<size_t>(i)] = oa;
    b_off[static_cast<size_t>(i)] = ob;
  }
  Tensor y = empty(out_shape, a.dtype(), a.device());
  dispatch::matmul({a.dtype(), nb, M, N, K, a.impl().storage->data(), b.impl().storage->data(), y.raw_data(),
                    a_off.data(), b_off.data(), ars, acs, brs, bcs},
                   a.device());
  return y;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  detail::check_defined("matmul", a, "a");
  detail::check_defined("matmul", b, "b");
  detail::check_same_device("matmul", a, b);
  detail::check_same_dtype("matmul", a, b);
  detail::check_floating("matmul", a, "a");
  detail::check_cpu_dtype("matmul", a, false);
  GG_CHECK(a.dim() >= 1 && b.dim() >= 1, ShapeError, "gg::matmul: both operands need at least 1 dim, got ",
           shape_str(a.shape()), " and ", shape_str(b.shape()));
  // numpy rules for vectors: (K) x (K) is the dot product (a 0-dim result); (K) x (.., K, N)
  // and (.., M, K) x (K) drop the unit dim again.
  if (a.dim() == 1 && b.dim() == 1) {
    GG_CHECK(a.size(0) == b.size(0), ShapeError, "gg::matmul: vectors of different lengths: a is ",
             shape_str(a.shape()), ", b is ", shape_str(b.shape()));
    return reshape(matmul(unsqueeze(a, 0), unsqueeze(b, 1)), {});
  }
  if (a.dim() == 1) return squeeze(matmul(unsqueeze(a, 0), b), -2);
  if (b.dim() == 1) return squeeze(matmul(a, unsqueeze(b, 1)), -1);
  Tensor y = matmul_2d_plus(a, b);
  record("matmul", {a, b}, {y}, {a, b}, [sa = a.shape(), sb = b.shape()](const BackwardArgs& g) -> TensorList {
    const Tensor &gy = g.grads[0], &a = g.saved[0], &b = g.saved[1];
    // An operand that is a transposed view (x·Wᵀ in a linear layer) gets its gradient as the
    // transpose of a contiguous product, (B·dYᵀ)ᵀ or (dYᵀ·A)ᵀ: the transpose's own backward then
    // hands a contiguous gradient to W, instead of a transposed one that every later op reads
    // with strides. The same sums, in the order of the transposed product.
    Tensor da, db;
    if (g.needs[0])
      da = is_transposed_matrix(a) ? transpose(matmul(b, transpose(gy, -1, -2)), -1, -2)  // (B·dYᵀ)ᵀ
                                   : matmul(gy, transpose(b, -1, -2));                   // dA = dY·Bᵀ
    if (g.needs[1])
      db = is_transposed_matrix(b) ? transpose(matmul(transpose(gy, -1, -2), a), -1, -2)  // (dYᵀ·A)ᵀ
                                   : matmul(transpose(a, -1, -2), gy);                   // dB = Aᵀ·dY
    return {g.needs[0] ? sum_to(da, sa) : Tensor(), g.needs[1] ? sum_to(db, sb) : Tensor()};
  }, [](const JvpArgs& j) -> TensorList {  // (A B)˙ = Ȧ B + A Ḃ
    const Tensor &ta = j.tangents[0], &tb = j.tangents[1];
    return {detail::tangent_sum(ta.defined() ? matmul(ta, j.inputs[1]) : ta, tb.defined() ? matmul(j.inputs[0], tb) : tb,
                                j.outputs[0].shape())};
  });
  return y;
}

Tensor mm(const Tensor& a, const Tensor& b) {
  detail::check_defined("mm", a, "a");
  detail::check_defined("mm", b, "b");
  GG_CHECK(a.dim() == 2 && b.dim() == 2, ShapeError, "gg::mm: expects two 2-D tensors, got a of shape ",
           shape_str(a.shape()), " and b of shape ", shape_str(b.shape()), "; matmul takes other shapes");
  return matmul(a, b);
}

}  // namespace gg
