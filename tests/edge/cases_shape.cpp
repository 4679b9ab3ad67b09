// Dims, sizes and views: 0-dim tensors given a dim, size arithmetic that would overflow, more
// dims than a layout holds, empty tensors, and every view and index op's argument checks.
#include <limits>

#include "harness.h"

namespace gg::edge {
namespace {

constexpr int64_t kBig = int64_t{1} << 62;
Tensor s0() { return scalar_tensor(2.5, DType::f64); }
Tensor m23() { return from_vector({0, 1, 2, 3, 4, 5}, {2, 3}, DType::f64); }

// ---- 0-dim tensors and dims
CASE("0-dim/size(0) is an IndexError") { THROWS(IndexError, "gg::Tensor::size: dim 0 given for a 0-dim tensor", s0().size(0)); }
CASE("0-dim/size(-1) is an IndexError") { THROWS(IndexError, "gg::Tensor::size: dim -1 given for a 0-dim tensor", s0().size(-1)); }
CASE("0-dim/cat is a ShapeError") { THROWS(ShapeError, "gg::cat: tensor 0 is 0-dim", cat({s0(), s0()}, 0)); }
CASE("0-dim/cat with dim -1 is a ShapeError") { THROWS(ShapeError, "gg::cat: tensor 1 is 0-dim", cat({ones({1}, DType::f64), s0()}, -1)); }
CASE("0-dim/slice is an IndexError") { THROWS(IndexError, "gg::slice: dim 0 given for a 0-dim tensor", slice(s0(), 0, 0, 1)); }
// PyTorch accepts index_select on a 0-dim tensor (index [0]); gg refuses, like the other indexing ops.
CASE("0-dim/index_select is an IndexError") {
  THROWS(IndexError, "gg::index_select: dim 0 given for a 0-dim tensor", index_select(s0(), 0, from_indices({0}, {1})));
}
CASE("0-dim/sum over dim 0") { Tensor y = sum(s0(), {0}); CHECK_SHAPE(y, {}); CHECK_VALUES(y, {2.5}); }
CASE("0-dim/sum over dim -1 keepdim") { Tensor y = sum(s0(), {-1}, true); CHECK_SHAPE(y, {}); CHECK_VALUES(y, {2.5}); }
CASE("0-dim/mean over dim 0") { Tensor y = mean(s0(), {0}); CHECK_SHAPE(y, {}); CHECK_VALUES(y, {2.5}); }
CASE("0-dim/mean over dim 0 keepdim") { Tensor y = mean(s0(), {0}, true); CHECK_SHAPE(y, {}); CHECK_VALUES(y, {2.5}); }
CASE("0-dim/max over dim -1") { Tensor y = max(s0(), {-1}); CHECK_SHAPE(y, {}); CHECK_VALUES(y, {2.5}); }
CASE("0-dim/sum over dim 1 is an IndexError") { THROWS(IndexError, "gg::sum: dim 1 is out of range for a 0-dim tensor", sum(s0(), {1})); }
CASE("0-dim/sum over dims 0 and -1 repeats a dim") { THROWS(ValueError, "gg::sum: dim appears more than once", sum(s0(), {0, -1})); }
CASE("0-dim/softmax over dim 0 is 1") { CHECK_VALUES(softmax(s0(), 0), {1.0}); }
CASE("0-dim/log_softmax over dim -1 is 0") { CHECK_VALUES(log_softmax(s0(), -1), {0.0}); }
CASE("0-dim/softmax gradcheck") {
  Tensor x = s0().requires_grad_();
  CHECK(gradcheck([](const TensorList& a) { return softmax(a[0], 0) * a[0]; }, {x}).ok);
}
CASE("0-dim/transpose(0, -1) is itself") { Tensor y = transpose(s0(), 0, -1); CHECK_SHAPE(y, {}); CHECK_VALUES(y, {2.5}); }
CASE("0-dim/squeeze(0) is itself") { CHECK_SHAPE(squeeze(s0(), 0), {}); }
CASE("0-dim/unsqueeze(0)") { Tensor y = unsqueeze(s0(), 0); CHECK_SHAPE(y, {1}); CHECK_VALUES(y, {2.5}); }
CASE("0-dim/unsqueeze(2) is an IndexError") { THROWS(IndexError, "gg::unsqueeze: dim 2 is out of range", unsqueeze(s0(), 2)); }
CASE("0-dim/stack") { Tensor y = stack({s0(), s0() * 2.0}, 0); CHECK_SHAPE(y, {2}); CHECK_VALUES(y, {2.5, 5.0}); }
CASE("0-dim/permute with no dims") { CHECK_SHAPE(permute(s0(), {}), {}); }
CASE("0-dim/permute with a dim is a ShapeError") { THROWS(ShapeError, "gg::permute: got 1 dims", permute(s0(), {0})); }
CASE("0-dim/reshape to [1, 1]") { CHECK_SHAPE(reshape(s0(), {1, 1}), {1, 1}); }
CASE("0-dim/reshape to [2] is a ShapeError") { THROWS(ShapeError, "gg::reshape: cannot reshape", reshape(s0(), {2})); }
CASE("0-dim/expand to [2, 3]") { Tensor y = expand(s0(), {2, 3}); CHECK_SHAPE(y, {2, 3}); CHECK_VALUES(sum(y), {15.0}); }
CASE("0-dim/flatten") { CHECK_SHAPE(flatten(s0()), {1}); }
CASE("0-dim/item") { CHECK(s0().item() == 2.5); }
CASE("0-dim/backward through sum over dim 0") {
  Tensor x = s0().requires_grad_();
  Tensor g = grad(sum(x * x, {0}), x);
  CHECK_SHAPE(g, {});
  CHECK_VALUES(g, {5.0});
}
CASE("0-dim/max backward") {
  Tensor x = s0().requires_grad_();
  CHECK_VALUES(grad(max(x, {0}, true), x), {1.0});
}

// ---- dims out of range on ordinary tensors
CASE("dims/size(2) of 2-D") { THROWS(IndexError, "gg::Tensor::size: dim 2 is out of range for a tensor of 2 dims (expected -2..1)", m23().size(2)); }
CASE("dims/size(-3) of 2-D") { THROWS(IndexError, "gg::Tensor::size: dim -3 is out of range", m23().size(-3)); }
CASE("dims/transpose out of range") { THROWS(IndexError, "gg::transpose: dim 2 is out of range", transpose(m23(), 0, 2)); }
CASE("dims/permute repeats a dim") { THROWS(ValueError, "gg::permute: dim 0 repeated", permute(m23(), {0, -2})); }
CASE("dims/softmax out of range") { THROWS(IndexError, "gg::softmax: dim 2 is out of range", softmax(m23(), 2)); }
CASE("dims/log_softmax out of range") { THROWS(IndexError, "gg::log_softmax: dim -3 is out of range", log_softmax(m23(), -3)); }
CASE("dims/squeeze out of range") { THROWS(IndexError, "gg::squeeze: dim 5 is out of range", squeeze(m23(), 5)); }
CASE("dims/stack out of range") { THROWS(IndexError, "gg::stack: dim 4 is out of range", stack({m23()}, 4)); }
CASE("dims/cat out of range") { THROWS(IndexError, "gg::cat: dim 2 is out of range", cat({m23()}, 2)); }
CASE("dims/max out of range") { THROWS(IndexError, "gg::max: dim -3 is out of range", max(m23(), {-3})); }
CASE("dims/mean out of range") { THROWS(IndexError, "gg::mean: dim 2 is out of range", mean(m23(), {2})); }

// ---- size arithmetic
CASE("sizes/empty with a negative size") { THROWS(ShapeError, "gg::empty: negative size -1 in shape [2, -1]", empty({2, -1})); }
CASE("sizes/zeros with a negative size") { THROWS(ShapeError, "negative size -3", zeros({-3})); }
CASE("sizes/element count overflows") { THROWS(ShapeError, "gg::empty: the shape [4611686018427387904, 4] has more elements than int64", empty({kBig, 4})); }
CASE("sizes/byte count overflows") { THROWS(ShapeError, "gg::empty: the shape [2305843009213693952] (2305843009213693952 elements of 8 bytes) needs more bytes", empty({kBig / 2}, DType::f64)); }
CASE("sizes/full with overflowing shape") { THROWS(ShapeError, "has more elements than int64", full({kBig, kBig}, 1.0)); }
// PyTorch accepts some empty shapes whose other sizes overflow; gg requires the non-zero sizes'
// product to fit, so strides stay representable.
CASE("sizes/zero-sized shape whose other sizes overflow") { THROWS(ShapeError, "has more elements than int64", zeros({0, kBig, 4})); }
CASE("sizes/reshape of empty to a huge shape") { THROWS(ShapeError, "gg::reshape: the shape [0, 4611686018427387904, 4611686018427387904]", reshape(zeros({0}), {0, kBig, kBig})); }
CASE("sizes/reshape of empty with -1 and huge sizes") { THROWS(ShapeError, "gg::reshape:", reshape(zeros({0}), {-1, kBig, kBig})); }
CASE("sizes/reshape of empty with -1") { THROWS(ShapeError, "gg::reshape: cannot reshape a tensor of shape [0] into [-1, 0]", reshape(zeros({0}), {-1, 0})); }
CASE("sizes/reshape of empty to [3, 0, 5]") { CHECK_SHAPE(reshape(zeros({0, 2}), {3, 0, 5}), {3, 0, 5}); }
CASE("sizes/reshape with two -1") { THROWS(ShapeError, "gg::reshape: only one dim can be -1", reshape(m23(), {-1, -1})); }
CASE("sizes/reshape with -2") { THROWS(ShapeError, "gg::reshape: invalid size -2", reshape(m23(), {-2, -3})); }
CASE("sizes/expand to a negative size") { THROWS(ShapeError, "gg::expand: invalid size -2 at dim 0", expand(ones({1}), {-2})); }
CASE("sizes/expand new leading -1") { THROWS(ShapeError, "gg::expand: size -1 not allowed in new leading dims", expand(ones({1}), {-1, 2})); }
CASE("sizes/expand to a huge broadcast view") {
  Tensor y = expand(ones({1}, DType::f64), {kBig});
  CHECK(y.numel() == kBig);
  CHECK_VALUES(slice(y, 0, kBig - 2, kBig), {1.0, 1.0});
}
CASE("sizes/expand huge then cat overflows") {
  Tensor y = expand(ones({1}), {kBig});
  THROWS(ShapeError, "gg::cat: the total size along dim 0 does not fit in int64", cat({y, y}, 0));
}
CASE("sizes/expand huge then clone overflows bytes") {
  THROWS(ShapeError, "gg::empty:", clone(expand(ones({1}), {kBig})));
}
CASE("sizes/slice with a huge step") {
  Tensor y = slice(arange(0, 10, 1, DType::f64), 0, 1, 10, std::numeric_limits<int64_t>::max());
  CHECK_SHAPE(y, {1});
  CHECK_VALUES(y, {1.0});
}
CASE("sizes/slice with a huge end") { CHECK_VALUES(slice(arange(0, 4, 1, DType::f64), 0, 2, std::numeric_limits<int64_t>::max()), {2, 3}); }
CASE("sizes/slice with INT64_MIN start") { CHECK_VALUES(slice(arange(0, 3, 1, DType::f64), 0, std::numeric_limits<int64_t>::min(), 2), {0, 1}); }
CASE("sizes/slice with step 0") { THROWS(ValueError, "gg::slice: step must be positive, got 0", slice(m23(), 1, 0, 2, 0)); }
CASE("sizes/slice with a negative step") { THROWS(ValueError, "gg::slice: step must be positive, got -1", slice(m23(), 1, 0, 2, -1)); }
CASE("sizes/slice with end before start is empty") { CHECK_SHAPE(slice(m23(), 1, 2, 1), {2, 0}); }
CASE("sizes/slice with step 2 values") { CHECK_VALUES(slice(m23(), 1, 0, 3, 2), {0, 2, 3, 5}); }
CASE("sizes/huge allocation is an OutOfMemoryError") {
  THROWS(OutOfMemoryError, "gg: out of memory allocating 4611686018427387904 bytes", empty({kBig}, DType::b8));
}
CASE("sizes/out of memory names the device") { THROWS(OutOfMemoryError, "on cpu", empty({kBig / 8}, DType::f64)); }

// ---- more dims than a layout holds
CASE("dims/empty with 9 dims") { THROWS(ShapeError, "gg::empty: at most 8 dims are supported, got 9 dims", empty({1, 1, 1, 1, 1, 1, 1, 1, 1})); }
CASE("dims/zeros with 9 dims") { THROWS(ShapeError, "gg::full: at most 8 dims", zeros({1, 1, 1, 1, 1, 1, 1, 1, 2})); }
CASE("dims/randn with 9 dims") { THROWS(ShapeError, "gg::random: at most 8 dims", randn(Shape(9, 1))); }
CASE("dims/reshape to 9 dims") { THROWS(ShapeError, "gg::reshape: at most 8 dims", reshape(ones({2}), {1, 1, 1, 1, 1, 1, 1, 1, 2})); }
CASE("dims/unsqueeze to 9 dims") { THROWS(ShapeError, "gg::unsqueeze: at most 8 dims", unsqueeze(ones(Shape(8, 1)), 0)); }
CASE("dims/expand to 9 dims") { THROWS(ShapeError, "gg::expand: at most 8 dims", expand(ones({2}), Shape(9, 2))); }
CASE("dims/stack to 9 dims") { THROWS(ShapeError, "at most 8 dims", stack({ones(Shape(8, 1))}, 0)); }
CASE("dims/8 dims clone") {
  Tensor x = arange(0, 256, 1, DType::f64);
  Tensor y = clone(transpose(reshape(x, Shape(8, 2)), 0, 7));
  CHECK_SHAPE(y, Shape(8, 2));
  CHECK_VALUES(sum(y), {255.0 * 128});
}
CASE("dims/make_view with 9 dims") { THROWS(ShapeError, "gg::make_view: at most 8 dims", make_view(ones({1}), Shape(9, 1), Shape(9, 1), 0)); }
CASE("dims/make_view outside the storage") { THROWS(IndexError, "gg::make_view: shape [3], strides [2] at offset 0 reach outside a storage of 4 elements", make_view(ones({4}), {3}, {2}, 0)); }
CASE("dims/make_view with a negative offset") { THROWS(IndexError, "gg::make_view:", make_view(ones({4}), {1}, {1}, -1)); }
CASE("dims/make_view with mismatched strides") { THROWS(ShapeError, "gg::make_view: 1 strides for shape [2, 2]", make_view(ones({4}), {2, 2}, {1}, 0)); }

// ---- empty tensors
CASE("empty/zeros({2, 0}) is contiguous") { CHECK(zeros({2, 0}).is_contiguous()); }
CASE("empty/transpose of an empty tensor is contiguous") { CHECK(transpose(zeros({3, 0, 2}), 0, 2).is_contiguous()); }
CASE("empty/sum is 0") { CHECK_VALUES(sum(zeros({2, 0})), {0.0}); }
CASE("empty/sum over the empty dim") { Tensor y = sum(zeros({2, 0}), {1}); CHECK_SHAPE(y, {2}); CHECK_VALUES(y, {0, 0}); }
CASE("empty/sum over the other dim") { CHECK_SHAPE(sum(zeros({2, 0}), {0}), {0}); }
CASE("empty/mean is NaN") { CHECK_VALUES(mean(zeros({0, 3})), {std::numeric_limits<double>::quiet_NaN()}); }
CASE("empty/max is a ValueError") { THROWS(ValueError, "gg::max: cannot take the max over an empty dimension of shape [0, 3]", max(zeros({0, 3}))); }
CASE("empty/max over the non-empty dim") { CHECK_SHAPE(max(zeros({0, 3}), {1}), {0}); }
CASE("empty/softmax") { CHECK_SHAPE(softmax(zeros({0, 4}), 1), {0, 4}); }
CASE("empty/softmax over the empty dim") { CHECK_SHAPE(softmax(zeros({4, 0}), 1), {4, 0}); }
CASE("empty/matmul (2,0)x(0,3) is zeros") { Tensor y = matmul(ones({2, 0}), ones({0, 3})); CHECK_SHAPE(y, {2, 3}); CHECK_VALUES(y, std::vector<double>(6, 0.0)); }
CASE("empty/matmul (0,2)x(2,3)") { CHECK_SHAPE(matmul(ones({0, 2}), ones({2, 3})), {0, 3}); }
CASE("empty/cat of empties") { CHECK_SHAPE(cat({zeros({0, 2}), zeros({0, 2})}, 0), {0, 2}); }
CASE("empty/cat with an empty piece") { CHECK_VALUES(cat({zeros({0, 3}, DType::f64), m23()}, 0), {0, 1, 2, 3, 4, 5}); }
CASE("empty/index_select with an empty index") { CHECK_SHAPE(index_select(m23(), 1, from_indices({}, {0})), {2, 0}); }
CASE("empty/index_select from an empty dim") { THROWS(IndexError, "gg::index_select: index 0 is out of range for a dim of size 0", index_select(zeros({0, 2}), 0, from_indices({0}, {1}))); }
CASE("empty/embedding with no indices") { CHECK_SHAPE(embedding(m23(), from_indices({}, {0})), {0, 3}); }
CASE("empty/clone and backward") {
  Tensor x = zeros({2, 0}, DType::f64).requires_grad_();
  Tensor g = grad(sum(clone(x) * 2.0), x);
  CHECK_SHAPE(g, {2, 0});
}
CASE("empty/hessian of an empty input") {
  Tensor h = hessian([](const Tensor& x) { return sum(x * x); }, zeros({0}, DType::f64));
  CHECK_SHAPE(h, {0, 0});
}
CASE("empty/hessian of a 0-dim input") {
  CHECK_VALUES(hessian([](const Tensor& x) { return x * x * x; }, scalar_tensor(2.0, DType::f64)), {12.0});
}
CASE("empty/fused attention at N = 0, forward and backward") {
  Tensor q = zeros({1, 2, 0, 4}, DType::f64).requires_grad_(), k = zeros({1, 2, 0, 4}, DType::f64).requires_grad_(),
         v = zeros({1, 2, 0, 4}, DType::f64).requires_grad_();
  Tensor o = attention(q, k, v);
  CHECK_SHAPE(o, {1, 2, 0, 4});
  TensorList g = grad({sum(o)}, {q, k, v});
  CHECK_SHAPE(g[0], {1, 2, 0, 4});
  CHECK_SHAPE(g[2], {1, 2, 0, 4});
}
CASE("empty/fused attention at N = 0, second order") {
  Tensor q = zeros({1, 1, 0, 4}, DType::f64).requires_grad_();
  Tensor k = zeros({1, 1, 0, 4}, DType::f64), v = zeros({1, 1, 0, 4}, DType::f64);
  Tensor dq = grad(sum(attention(q, k, v)), q, Tensor(), std::nullopt, /*create_graph=*/true);
  CHECK_SHAPE(dq, {1, 1, 0, 4});
}
CASE("empty/cross_entropy with N = 0 is NaN") {
  CHECK_VALUES(cross_entropy(zeros({0, 3}, DType::f64), from_indices({}, {0})), {std::numeric_limits<double>::quiet_NaN()});
}
CASE("empty/layer_norm of zero rows") { CHECK_SHAPE(layer_norm(zeros({0, 4}), {4}), {0, 4}); }

// ---- views and index ops: argument checks
CASE("views/cat of nothing") { THROWS(ValueError, "gg::cat: expected at least one tensor", cat({}, 0)); }
CASE("views/cat with an undefined tensor") { THROWS(ValueError, "gg::cat: tensors[i] is an undefined tensor", cat({m23(), Tensor()}, 0)); }
CASE("views/cat shape mismatch") { THROWS(ShapeError, "gg::cat: tensor 1 has shape [2, 2], incompatible", cat({m23(), zeros({2, 2}, DType::f64)}, 0)); }
CASE("views/cat promotes its dtypes") {
  Tensor y = cat({m23(), zeros({1, 3})}, 0);
  CHECK(y.dtype() == DType::f64);
  CHECK_VALUES(y, {0, 1, 2, 3, 4, 5, 0, 0, 0});
}
CASE("views/cat rank mismatch") { THROWS(ShapeError, "gg::cat: tensor 1 has shape [3]", cat({m23(), zeros({3}, DType::f64)}, 0)); }
CASE("views/stack of nothing") { THROWS(ValueError, "gg::stack: expected at least one tensor", stack({}, 0)); }
CASE("views/stack with an undefined first tensor") { THROWS(ValueError, "gg::stack: tensors[i] is an undefined tensor", stack({Tensor(), m23()}, 0)); }
CASE("views/stack shape mismatch") { THROWS(ShapeError, "gg::stack: tensor 1 has shape [3]", stack({m23(), zeros({3}, DType::f64)}, 0)); }
CASE("views/index_select index out of range") { THROWS(IndexError, "gg::index_select: index 3 is out of range for a dim of size 3", index_select(m23(), 1, from_indices({0, 3}, {2}))); }
CASE("views/index_select negative index") { THROWS(IndexError, "gg::index_select: index -1 is out of range", index_select(m23(), 1, from_indices({-1}, {1}))); }
CASE("views/index_select f32 index") { THROWS(DTypeError, "gg::index_select: index must be i64, got f32", index_select(m23(), 1, zeros({1}))); }
CASE("views/index_select 2-D index") { THROWS(ShapeError, "gg::index_select: index must be 1-D", index_select(m23(), 1, from_indices({0, 1}, {1, 2}))); }
CASE("views/index_select undefined index") { THROWS(ValueError, "gg::index_select: index is an undefined tensor", index_select(m23(), 1, Tensor())); }
CASE("views/index_select values and repeated indices") { CHECK_VALUES(index_select(m23(), 1, from_indices({2, 2, 0}, {3})), {2, 2, 0, 5, 5, 3}); }
CASE("views/embedding index out of range") { THROWS(IndexError, "gg::embedding: index 2 is out of range for 2 rows", embedding(m23(), from_indices({0, 2}, {2}))); }
CASE("views/embedding f32 indices") { THROWS(DTypeError, "gg::embedding: indices must be i64", embedding(m23(), zeros({2}))); }
CASE("views/embedding 1-D weight") { THROWS(ShapeError, "gg::embedding: weight must be (V, D)", embedding(zeros({3}), from_indices({0}, {1}))); }
CASE("views/embedding undefined indices") { THROWS(ValueError, "gg::embedding: indices is an undefined tensor", embedding(m23(), Tensor())); }
CASE("views/expand fewer dims") { THROWS(ShapeError, "gg::expand: cannot expand shape [2, 3] to [3]", expand(m23(), {3})); }
CASE("views/expand incompatible") { THROWS(ShapeError, "gg::expand: cannot expand shape [2, 3] to [4, 3]", expand(m23(), {4, 3})); }
CASE("views/reshape count mismatch") { THROWS(ShapeError, "gg::reshape: cannot reshape a tensor of shape [2, 3] (6 elements) into [4]", reshape(m23(), {4})); }
CASE("views/reshape of a transpose copies") { CHECK_VALUES(reshape(transpose(m23(), 0, 1), {6}), {0, 3, 1, 4, 2, 5}); }
CASE("views/squeeze a non-unit dim is a no-op") { CHECK_SHAPE(squeeze(m23(), 0), {2, 3}); }
CASE("views/permute wrong count") { THROWS(ShapeError, "gg::permute: got 3 dims for a tensor of shape [2, 3]", permute(m23(), {0, 1, 2})); }
CASE("views/clone undefined") { THROWS(ValueError, "gg::clone: input is an undefined tensor", clone(Tensor())); }
CASE("views/contiguous undefined") { THROWS(ValueError, "gg::contiguous: input is an undefined tensor", contiguous(Tensor())); }
CASE("views/to undefined") { THROWS(ValueError, "gg::to: input is an undefined tensor", to(Tensor(), DType::f64)); }
CASE("views/to a CUDA device that is not there") {
  const int n = cuda::device_count();
  if (n == 0) {  // the reason comes from the backend: no CUDA in this build, or no usable GPU
#ifdef GG_HAS_CUDA
    THROWS(DeviceError, "gg::to: cannot move a tensor to cuda:0: gg: cannot use cuda:0: no usable GPU found",
           to(m23(), Device::cuda(0)));
#else
    THROWS(DeviceError, "gg::to: cannot move a tensor to cuda:0: gg: cannot use cuda:0: this build of gradgrad has no CUDA backend",
           to(m23(), Device::cuda(0)));
#endif
  } else {
    THROWS(DeviceError, "gg::to: cannot move a tensor to cuda:" + std::to_string(n) + ": gg: cannot use cuda:" + std::to_string(n) +
           ": no such device (" + std::to_string(n) + " CUDA device", to(m23(), Device::cuda(n)));
  }
}
CASE("views/to a negative CUDA index") { THROWS(DeviceError, "gg::to: cannot move a tensor to cuda:-1", to(m23(), Device::cuda(-1))); }
CASE("views/reshape undefined") { THROWS(ValueError, "gg::reshape: input is an undefined tensor", reshape(Tensor(), {1})); }
CASE("views/transpose undefined") { THROWS(ValueError, "gg::transpose: input is an undefined tensor", transpose(Tensor(), 0, 1)); }
CASE("views/slice undefined") { THROWS(ValueError, "gg::slice: input is an undefined tensor", slice(Tensor(), 0, 0, 1)); }
CASE("views/expand undefined") { THROWS(ValueError, "gg::expand: input is an undefined tensor", expand(Tensor(), {1})); }
CASE("views/squeeze undefined") { THROWS(ValueError, "gg::squeeze: input is an undefined tensor", squeeze(Tensor(), 0)); }
CASE("views/unsqueeze undefined") { THROWS(ValueError, "gg::unsqueeze: input is an undefined tensor", unsqueeze(Tensor(), 0)); }
CASE("views/permute undefined") { THROWS(ValueError, "gg::permute: input is an undefined tensor", permute(Tensor(), {})); }
CASE("views/undefined tensor metadata names the misuse") { THROWS(ValueError, "gg::Tensor: use of an undefined", Tensor().shape()); }

// ---- casts
// PyTorch's CPU cast of NaN or out-of-range floats to int64 is whatever the instruction gives
// (INT64_MIN on x86); gg saturates and maps NaN to 0 on every backend, as the GPU's cvt does.
CASE("casts/f64 NaN to i64 is 0") { CHECK_VALUES(to(from_vector({std::nan(""), 2.9, -2.9}, {3}, DType::f64), DType::i64), {0, 2, -2}); }
CASE("casts/out-of-range to i64 saturates") {
  Tensor y = to(from_vector({1e30, -1e30, INFINITY, -INFINITY}, {4}, DType::f64), DType::i64);
  std::vector<int64_t> v = y.to_vector<int64_t>();
  CHECK(v[0] == INT64_MAX && v[1] == INT64_MIN && v[2] == INT64_MAX && v[3] == INT64_MIN);
}
CASE("casts/f32 to b8 and back") { CHECK_VALUES(to(to(from_vector({0, -0.5, 2}, {3}), DType::b8), DType::f64), {0, 1, 1}); }
CASE("casts/i64 to f64") { CHECK_VALUES(to(from_indices({-3, 4}, {2}), DType::f64), {-3, 4}); }
CASE("casts/f64 to f32 gradient comes back as f64") {
  Tensor x = from_vector({1.5, -2}, {2}, DType::f64).requires_grad_();
  Tensor g = grad(sum(to(x, DType::f32) * 3.0), x);
  CHECK(g.dtype() == DType::f64);
  CHECK_VALUES(g, {3, 3});
}
CASE("casts/i64 cannot require grad") { Tensor i = from_indices({1}, {1}); THROWS(DTypeError, "gg::Tensor::requires_grad_: only floating tensors", i.requires_grad_()); }

// ---- libtorch-style indexing (ops/index.cpp) and member forms
CASE("indexing/select on a 0-dim tensor is an IndexError") {
  THROWS(IndexError, "gg::select: dim 0 given for a 0-dim tensor", s0()[0]);
}
CASE("indexing/select with INT64_MIN") {
  THROWS(IndexError, "gg::select: index -9223372036854775808 is out of range for dim 0 of size 2",
         m23()[std::numeric_limits<int64_t>::min()]);
}
CASE("indexing/index with INT64_MAX") {
  THROWS(IndexError, "gg::index: index 9223372036854775807 is out of range for dim 1 of size 3",
         m23().index({0, std::numeric_limits<int64_t>::max()}));
}
CASE("indexing/narrow with INT64_MIN start") {
  THROWS(IndexError, "gg::narrow: start -9223372036854775808 is out of range", m23().narrow(1, std::numeric_limits<int64_t>::min(), 1));
}
CASE("indexing/narrow with a huge length") {
  THROWS(IndexError, "gg::narrow: start 1 + length 9223372036854775807 exceeds dim 1 of size 3",
         m23().narrow(1, 1, std::numeric_limits<int64_t>::max()));
}
CASE("indexing/narrow with a negative length") { THROWS(IndexError, "gg::narrow: start 0 + length -1", m23().narrow(0, 0, -1)); }
CASE("indexing/i64 index INT64_MIN") {
  THROWS(IndexError, "gg::index: index -9223372036854775808 is out of range for dim 0 of size 2",
         m23().index({from_indices({std::numeric_limits<int64_t>::min()}, {1})}));
}
CASE("indexing/0-dim with None, Ellipsis and nothing") {
  CHECK_SHAPE(s0().index({indexing::None}), {1});
  CHECK_SHAPE(s0().index({indexing::Ellipsis}), {});
  CHECK_VALUES(s0().index({}), {2.5});
}
CASE("indexing/0-dim mask is a ValueError") {
  THROWS(ValueError, "gg::index: index 0 is a 0-dim mask", m23().index({scalar_tensor(1.0) > 0.0}));
}
CASE("indexing/a mask of all false gives an empty result with a zero gradient") {
  Tensor x = m23().requires_grad_();
  Tensor y = x.index({x > 100.0});
  CHECK_SHAPE(y, {0});
  CHECK_VALUES(grad(sum(y) + sum(x) * 0.0, x), {0, 0, 0, 0, 0, 0});
}
CASE("indexing/empty tensor") {
  Tensor e = zeros({0, 3}, DType::f64);
  CHECK_SHAPE(e.index({indexing::Slice(), 1}), {0});
  CHECK_SHAPE(e.index({e > 0.0}), {0});
  THROWS(IndexError, "gg::select: index 0 is out of range for dim 0 of size 0", e[0]);
}
CASE("indexing/a bool-typed float tensor is a DTypeError") {
  THROWS(DTypeError, "gg::index: index 0 must be a b8 mask or an i64 index tensor, got f64", m23().index({m23()}));
}
CASE("indexing/an undefined tensor index") { THROWS(ValueError, "gg::index: index 1 is an undefined tensor", m23().index({0, Tensor()})); }
CASE("indexing/index of an undefined tensor") { THROWS(ValueError, "gg::index: input is an undefined tensor", index(Tensor(), {0})); }
CASE("indexing/slice step 0") { THROWS(ValueError, "gg::index: a slice's step must be positive, got 0", m23().index({indexing::Slice(0, 2, 0)})); }
CASE("indexing/index_put_ with an i64 tensor is a ValueError") {
  Tensor x = m23().clone();
  THROWS(ValueError, "gg::index_put_: an i64 index tensor is not supported", x.index_put_({from_indices({0}, {1})}, 1.0));
}
CASE("indexing/index_put_ with a value that does not broadcast") {
  Tensor x = m23().clone();
  THROWS(ShapeError, "gg::index_put_: shapes [2] and [2, 3] cannot be broadcast", x.index_put_({x > 1.0}, ones({2}, DType::f64)));
  THROWS(ShapeError, "gg::index_put_: a value of shape [2, 1, 3] does not broadcast to the indexed view of shape [2, 3]",
         x.index_put_({x > 1.0}, ones({2, 1, 3}, DType::f64)));
}
CASE("indexing/index_put_ with a mask into an expanded view") {
  Tensor x = expand(scalar_tensor(1.0, DType::f64), {3});
  THROWS(ValueError, "elements that share memory", x.index_put_({x > 0.5}, 2.0));
}
CASE("members/t of a 3-D tensor is a ShapeError") { THROWS(ShapeError, "gg::t: expects a tensor with at most 2 dims", zeros({1, 2, 3}).t()); }
CASE("members/t of 0-dim and 1-D tensors is itself") { CHECK_SHAPE(s0().t(), {}); CHECK_SHAPE(zeros({3}).t(), {3}); }
CASE("members/flatten with start after end") { THROWS(ValueError, "gg::flatten: start_dim 1 comes after end_dim 0", m23().flatten(1, 0)); }
CASE("members/flatten of a 0-dim tensor") { CHECK_SHAPE(s0().flatten(), {1}); }
CASE("members/view of a transpose is a ShapeError") { THROWS(ShapeError, "gg::view: a tensor of shape [3, 2]", m23().t().view({6})); }
CASE("members/item<int64_t> of six elements") { THROWS(ValueError, "gg::Tensor::item: tensor of shape [2, 3] has 6 elements", m23().item<int64_t>()); }
CASE("members/retain_grad without requires_grad") { THROWS(AutogradError, "gg::Tensor::retain_grad", m23().retain_grad()); }
CASE("members/tensor with ragged rows") { THROWS(ShapeError, "gg::tensor: ragged rows: row 1 has 1 values, row 0 has 2", tensor({{1, 2}, {3}})); }
CASE("members/tensor with an empty first row") { THROWS(ShapeError, "gg::tensor: ragged rows: row 1 has 2 values, row 0 has 0", tensor({std::initializer_list<int>{}, {1, 2}})); }
CASE("members/mm of a vector") { THROWS(ShapeError, "gg::mm: expects two 2-D tensors, got a of shape [2, 3] and b of shape [3]", mm(m23(), ones({3}, DType::f64))); }
CASE("members/comparisons with NaN") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK_VALUES(to(m23() > nan, DType::f64), {0, 0, 0, 0, 0, 0});
  CHECK_VALUES(to(m23() != nan, DType::f64), {1, 1, 1, 1, 1, 1});
  CHECK_VALUES(to(from_indices({1, 2}, {2}) < nan, DType::f64), {0, 0});
}
CASE("members/i64 compared with numbers beyond int64") {
  CHECK_VALUES(to(from_indices({INT64_MAX, INT64_MIN}, {2}) < 1e19, DType::f64), {1, 1});
  CHECK_VALUES(to(from_indices({INT64_MAX, INT64_MIN}, {2}) > -INFINITY, DType::f64), {1, 1});
}
CASE("members/in-place on a saved tensor is caught at backward") {
  Tensor w = from_vector({1, 2}, {2}, DType::f64).requires_grad_();
  Tensor x = from_vector({3, 4}, {2}, DType::f64);
  Tensor y = sum(w * x);  // saves x
  x += 1.0;
  THROWS(AutogradError, "modified by an in-place operation", y.backward());
}

}  // namespace
}  // namespace gg::edge
