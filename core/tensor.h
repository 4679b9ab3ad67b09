// gg::Tensor: a handle (shared pointer) to a strided view of a Storage, plus the autograd
// fields the tape needs. Copying a Tensor copies the handle, as in PyTorch. The math lives in
// ops/ (free functions gg::exp, gg::matmul, operators + - * /); this header holds the data and
// declares libtorch's member forms (x.exp(), x.sum(1), x.add_(y)), which ops/ defines.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <tuple>
#include <type_traits>
#include <vector>

#include "device.h"
#include "dtype.h"
#include "error.h"
#include "scalar.h"
#include "shape.h"
#include "storage.h"

namespace gg {

class Node;
class Tensor;
using TensorList = std::vector<Tensor>;
namespace indexing {
class TensorIndex;  // core/indexing.h
}

struct TensorImpl;

// A forward-mode tangent of a tensor at one dual level (autograd/forward_ad.h): `level` is the
// level's id, unique over the program's life, so a tangent of a level that has closed never
// matches a later one.
struct LevelTangent {
  uint64_t level;
  std::shared_ptr<TensorImpl> tangent;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in elements
  Shape shape;
  Shape strides;  // in elements
  DType dtype = DType::f32;

  // Autograd. A leaf has no grad_fn; it requires grad when the user says so. A non-leaf
  // requires grad exactly when it has a grad_fn (the node that produced it).
  bool requires_grad = false;
  std::shared_ptr<Node> grad_fn;
  uint32_t output_nr = 0;                 // which output of grad_fn this is
  std::shared_ptr<TensorImpl> grad;       // filled by Tensor::backward() on leaves
  std::weak_ptr<Node> grad_accumulator;   // the leaf's AccumulateGrad node, while alive

  // Forward mode: the tangent carried beside this primal at each open dual level (usually none;
  // a level's entries are erased when it closes).
  std::vector<LevelTangent> tangents;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}
  // Assigning to a named tensor rebinds the handle; assigning to a temporary one writes into its
  // data, as in libtorch: x[0] = y copies y into row 0 of x (copy_), x[0] = 1.0 fills it.
  Tensor(const Tensor&) = default;
  Tensor(Tensor&&) = default;
  Tensor& operator=(const Tensor&) & = default;
  Tensor& operator=(Tensor&&) & = default;
  Tensor& operator=(const Tensor& src) &&;
  Tensor& operator=(double value) &&;

  // ---- metadata ----
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  const Shape& strides() const { return impl().strides; }
  int64_t dim() const { return static_cast<int64_t>(impl().shape.size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const { return numel_of(impl().shape); }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device(); }
  int64_t offset() const { return impl().offset; }
  bool is_contiguous() const;
  uint64_t version() const { return impl().storage->version(); }

  // ---- data (CPU tensors) ----
  void* raw_data() const;  // start of this view, any device
  template <typename T> T* data() const;          // checks dtype and device
  double item() const;                            // one-element tensor to double
  template <typename T> std::vector<T> to_vector() const;  // any layout, any device

  // ---- autograd ----
  bool requires_grad() const { return impl().requires_grad || impl().grad_fn != nullptr; }
  Tensor& requires_grad_(bool flag = true);  // leaves only
  bool is_leaf() const { return impl().grad_fn == nullptr; }
  const std::shared_ptr<Node>& grad_fn() const { return impl().grad_fn; }
  uint32_t output_nr() const { return impl().output_nr; }
  Tensor grad() const { return Tensor(impl().grad); }
  void set_grad(const Tensor& g) { impl().grad = g.impl_; }
  void zero_grad() { impl().grad.reset(); }
  // Same data, no history, requires_grad false.
  Tensor detach() const;
  // Accumulates d(this)/d(leaf) into leaf.grad() for every leaf that requires grad.
  // `gradient` defaults to 1 for a one-element tensor. libtorch's argument order: retain_graph
  // (unset: the value of create_graph), then create_graph.
  void backward(const Tensor& gradient = Tensor(), std::optional<bool> retain_graph = std::nullopt,
                bool create_graph = false) const;

  // ---- moves and casts (differentiable; defined with the ops in ops/shape.cpp) ----
  Tensor to(Device device) const;  // this tensor itself when already there
  Tensor to(DType dtype) const;
  Tensor cuda(int index = 0) const { return to(Device::cuda(index)); }
  Tensor cpu() const { return to(Device::cpu()); }

  // ---- libtorch's member forms ----
  // The layering rule: core/ never includes ops/. These members are declared here and defined
  // in ops/tensor_methods.cpp, each forwarding to the free function in ops/ops.h, which stays
  // the reference (PyTorch's TensorBody.h declares methods the same way and ATen defines them).
  // In-place members (name_) are const, as in libtorch: they change the data, not the handle.
  const Shape& sizes() const { return shape(); }
  bool is_cuda() const { return device().is_cuda(); }
  template <typename T> T item() const;       // T: float, double, int64_t, int, bool
  template <typename T> T* data_ptr() const;  // any device (a device pointer on a GPU); checks the dtype
  void* data_ptr() const { return raw_data(); }
  // A non-leaf keeps its gradient in grad() after the next backward(), as a leaf does. A no-op
  // on a leaf; AutogradError on a tensor that does not require grad.
  void retain_grad() const;

  Tensor sum() const;
  // One dim as an integer of any type; a template so that sum({}) takes the list form (all dims).
  template <typename I, std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>, int> = 0>
  Tensor sum(I dim, bool keepdim = false) const { return sum(std::vector<int64_t>{static_cast<int64_t>(dim)}, keepdim); }
  Tensor sum(const std::vector<int64_t>& dims, bool keepdim = false) const;
  Tensor mean() const;
  template <typename I, std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>, int> = 0>
  Tensor mean(I dim, bool keepdim = false) const { return mean(std::vector<int64_t>{static_cast<int64_t>(dim)}, keepdim); }
  Tensor mean(const std::vector<int64_t>& dims, bool keepdim = false) const;
  Tensor max() const;  // all elements; NaN propagates
  Tensor min() const;
  Tensor max(const Tensor& other) const;  // maximum(*this, other)
  Tensor min(const Tensor& other) const;  // minimum(*this, other)
  // Values and i64 indices over one dim (gg::max_dim); a template as sum's is.
  template <typename I, std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>, int> = 0>
  std::tuple<Tensor, Tensor> max(I dim, bool keepdim = false) const { return max_dim(static_cast<int64_t>(dim), keepdim); }
  template <typename I, std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>, int> = 0>
  std::tuple<Tensor, Tensor> min(I dim, bool keepdim = false) const { return min_dim(static_cast<int64_t>(dim), keepdim); }
  std::tuple<Tensor, Tensor> max_dim(int64_t dim, bool keepdim = false) const;
  std::tuple<Tensor, Tensor> min_dim(int64_t dim, bool keepdim = false) const;
  Tensor amax(const std::vector<int64_t>& dims = {}, bool keepdim = false) const;
  Tensor amin(const std::vector<int64_t>& dims = {}, bool keepdim = false) const;
  Tensor argmax(std::optional<int64_t> dim = std::nullopt, bool keepdim = false) const;  // unset: flattened
  Tensor argmin(std::optional<int64_t> dim = std::nullopt, bool keepdim = false) const;
  Tensor logsumexp(const std::vector<int64_t>& dims, bool keepdim = false) const;
  Tensor var(const std::vector<int64_t>& dims = {}, double correction = 1, bool keepdim = false) const;
  Tensor std(const std::vector<int64_t>& dims = {}, double correction = 1, bool keepdim = false) const;
  Tensor norm(double p = 2, const std::vector<int64_t>& dims = {}, bool keepdim = false) const;
  bool allclose(const Tensor& other, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false) const;
  bool equal(const Tensor& other) const;

  Tensor reshape(const Shape& shape) const;
  Tensor view(const Shape& shape) const;  // reshape that never copies: ShapeError where it would
  Tensor reshape_as(const Tensor& other) const;
  Tensor t() const;  // transpose of a tensor with at most 2 dims
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor squeeze() const;  // every dim of size 1
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor expand(const Shape& shape) const;
  Tensor expand_as(const Tensor& other) const;
  Tensor clone() const;
  Tensor contiguous() const;

  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor abs() const;
  Tensor neg() const;
  Tensor tanh() const;
  Tensor sigmoid() const;
  Tensor relu() const;
  Tensor sin() const;
  Tensor cos() const;
  Tensor sign() const;
  Tensor log1p() const;
  Tensor expm1() const;
  Tensor floor() const;
  Tensor ceil() const;
  Tensor round() const;
  Tensor pow(const Scalar& exponent) const;
  Tensor pow(const Tensor& exponent) const;
  Tensor clamp(const std::optional<Scalar>& lo, const std::optional<Scalar>& hi = std::nullopt) const;
  Tensor clamp_min(const Scalar& lo) const;
  Tensor clamp_max(const Scalar& hi) const;
  Tensor maximum(const Tensor& other) const;
  Tensor minimum(const Tensor& other) const;
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;
  Tensor matmul(const Tensor& other) const;
  Tensor mm(const Tensor& other) const;  // both 2-D
  // Numbers promote with the tensor as in PyTorch (ops/ops.h, result_type): an i64 x.add(1)
  // stays i64, x.add(1.5) and x.gt(1.5) compute in floating point.
  Tensor add(const Tensor& other, double alpha = 1.0) const;
  Tensor add(const Scalar& other) const;
  Tensor sub(const Tensor& other, double alpha = 1.0) const;
  Tensor sub(const Scalar& other) const;
  Tensor mul(const Tensor& other) const;
  Tensor mul(const Scalar& other) const;
  Tensor div(const Tensor& other) const;
  Tensor div(const Scalar& other) const;
  Tensor eq(const Tensor& other) const;
  Tensor eq(const Scalar& other) const;
  Tensor ne(const Tensor& other) const;
  Tensor ne(const Scalar& other) const;
  Tensor lt(const Tensor& other) const;
  Tensor lt(const Scalar& other) const;
  Tensor le(const Tensor& other) const;
  Tensor le(const Scalar& other) const;
  Tensor gt(const Tensor& other) const;
  Tensor gt(const Scalar& other) const;
  Tensor ge(const Tensor& other) const;
  Tensor ge(const Scalar& other) const;
  Tensor masked_fill(const Tensor& mask, const Scalar& value) const;
  Tensor masked_fill(const Tensor& mask, const Tensor& value) const;  // value: 0-dim
  Tensor triu(int64_t diagonal = 0) const;
  Tensor tril(int64_t diagonal = 0) const;

  // ---- indexing (core/indexing.h has the index types; ops/index.cpp the ops) ----
  Tensor operator[](int64_t index) const;        // select(0, index): a view
  Tensor operator[](const Tensor& index) const;  // index({index}): a b8 mask or i64 indices
  Tensor index(const std::vector<indexing::TensorIndex>& indices) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor slice(int64_t dim = 0, std::optional<int64_t> start = std::nullopt,
               std::optional<int64_t> end = std::nullopt, int64_t step = 1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor index_select(int64_t dim, const Tensor& index) const;
  Tensor gather(int64_t dim, const Tensor& index) const;
  Tensor scatter_add(int64_t dim, const Tensor& index, const Tensor& src) const;

  // ---- in place (the rules of ops/inplace.cpp: refused on tensors that require grad while
  // grad mode is on) ----
  const Tensor& add_(const Tensor& other, double alpha = 1.0) const;
  const Tensor& add_(const Scalar& other) const;
  const Tensor& sub_(const Tensor& other, double alpha = 1.0) const;
  const Tensor& sub_(const Scalar& other) const;
  const Tensor& mul_(const Tensor& other) const;
  const Tensor& mul_(const Scalar& other) const;
  const Tensor& div_(const Tensor& other) const;
  const Tensor& div_(const Scalar& other) const;
  const Tensor& zero_() const;
  const Tensor& fill_(double value) const;
  const Tensor& copy_(const Tensor& src) const;
  const Tensor& index_put_(const std::vector<indexing::TensorIndex>& indices, const Tensor& value) const;
  const Tensor& index_put_(const std::vector<indexing::TensorIndex>& indices, double value) const;
  const Tensor& operator+=(const Tensor& other) const { return add_(other); }
  const Tensor& operator+=(const Scalar& other) const { return add_(other); }
  const Tensor& operator-=(const Tensor& other) const { return sub_(other); }
  const Tensor& operator-=(const Scalar& other) const { return sub_(other); }
  const Tensor& operator*=(const Tensor& other) const { return mul_(other); }
  const Tensor& operator*=(const Scalar& other) const { return mul_(other); }
  const Tensor& operator/=(const Tensor& other) const { return div_(other); }
  const Tensor& operator/=(const Scalar& other) const { return div_(other); }

  // ---- identity ----
  TensorImpl& impl() const;
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

// "tensor(shape=[2, 2], dtype=f64, device=cpu)\n[[1, 2],\n [3, 4]]": a header line, then the
// values with 6 significant digits (nan, inf, -inf; i64 exactly). Above 1000 elements the output
// is summarised as PyTorch's is: each dimension longer than 6 shows its first and last 3 entries
// around "...", and only the shown entries are read (copied alone from a GPU). The text ends in
// a newline, so `std::cout << t` is PyTorch's print(t).
std::ostream& operator<<(std::ostream& os, const Tensor& t);

// A new tensor with fresh contiguous storage; contents uninitialised.
Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
// A tensor over memory the library does not own (PyTorch's from_blob), e.g. another framework's
// tensor: `data` is its element 0, `strides` are in elements (>= 0; empty: contiguous). Nothing
// is copied or allocated, and the library never frees `data`; it must stay valid while any tensor
// or view of it lives, and `release` (may be empty; must not throw) runs once when the last one
// lets go. Versions and autograd work as on any tensor. Bad sizes or strides: ShapeError or
// ValueError naming gg::from_blob.
Tensor from_blob(void* data, const Shape& shape, const Shape& strides, DType dtype, Device device = Device::cpu(),
                 std::function<void(void*)> release = {});
// A view sharing `base`'s storage with the given geometry (no autograd record: ops/ does that).
Tensor make_view(const Tensor& base, const Shape& shape, const Shape& strides, int64_t offset);

}  // namespace gg
