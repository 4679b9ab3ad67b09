#include "core/tensor.h"

#include <cmath>
#include <cstring>
#include <iomanip>

#include "ops/dispatch.h"  // the only way to the kernels (copies for to_vector)

namespace gg {

namespace {
template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::b8; }
template <> constexpr DType dtype_of<bool>() { return DType::b8; }
}  // namespace

TensorImpl& Tensor::impl() const {
  GG_CHECK(impl_ != nullptr, ValueError,
           "gg::Tensor: use of an undefined (default-constructed) tensor; ops name the argument when "
           "they check it, this access came from a method or a helper that does not");
  return *impl_;
}

int64_t Tensor::size(int64_t d) const { return shape()[wrap_dim(d, dim(), "Tensor::size")]; }

bool Tensor::is_contiguous() const {
  if (numel() == 0) return true;  // an empty tensor is contiguous whatever its strides (as in PyTorch)
  int64_t expected = 1;
  for (size_t i = shape().size(); i-- > 0;) {
    if (shape()[i] == 1) continue;
    if (strides()[i] != expected) return false;
    expected *= shape()[i];
  }
  return true;
}

void* Tensor::raw_data() const {
  return static_cast<char*>(impl().storage->data()) + offset() * dtype_size(dtype());
}

template <typename T>
T* Tensor::data() const {
  constexpr DType want = dtype_of<T>();
  GG_CHECK(dtype() == want, DTypeError, "gg::Tensor::data: tensor has dtype ", dtype_name(dtype()),
           ", requested ", dtype_name(want));
  GG_CHECK(device().is_cpu(), DeviceError, "gg::Tensor::data: tensor is on ", device().str(),
           "; call .to_vector() or move it to the CPU first");
  return static_cast<T*>(raw_data());
}
template float* Tensor::data<float>() const;
template double* Tensor::data<double>() const;
template int64_t* Tensor::data<int64_t>() const;
template uint8_t* Tensor::data<uint8_t>() const;

template <typename T>
std::vector<T> Tensor::to_vector() const {
  Tensor c = *this;
  if (!device().is_cpu()) {
    // Gather the view into contiguous memory on its device, then bring it over.
    Tensor dense = empty(shape(), dtype(), device());
    dispatch::copy({dtype(), dtype(), raw_data(), dense.raw_data(), kernels::make_layout(shape(), strides()),
                    kernels::make_layout(shape(), contiguous_strides(shape()))},
                   device());
    c = empty(shape(), dtype(), Device::cpu());
    dispatch::copy_between_devices(c.raw_data(), Device::cpu(), dense.raw_data(), device(),
                                   static_cast<size_t>(numel()) * dtype_size(dtype()));
  }
  std::vector<T> out(static_cast<size_t>(numel()));
  // Strided read with conversion to T through the CPU copy kernel.
  dispatch::copy({c.dtype(), dtype_of<T>(), c.raw_data(), out.data(), kernels::make_layout(c.shape(), c.strides()),
                  kernels::make_layout(c.shape(), contiguous_strides(c.shape()))},
                 Device::cpu());
  return out;
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<uint8_t> Tensor::to_vector<uint8_t>() const;

double Tensor::item() const {
  GG_CHECK(numel() == 1, ValueError, "gg::Tensor::item: tensor of shape ", shape_str(shape()),
           " has ", numel(), " elements, expected 1");
  return to_vector<double>()[0];
}

Tensor& Tensor::requires_grad_(bool flag) {
  GG_CHECK(is_leaf(), AutogradError,
           "gg::Tensor::requires_grad_: only leaf tensors can change requires_grad (this one was "
           "produced by an op; use detach() to get a leaf)");
  GG_CHECK(!flag || is_floating(dtype()), DTypeError,
           "gg::Tensor::requires_grad_: only floating tensors can require grad, got ",
           dtype_name(dtype()));
  impl().requires_grad = flag;
  return *this;
}

Tensor Tensor::detach() const {
  return make_view(*this, shape(), strides(), offset());
}

namespace {
void check_layout_dims(const char* op, const Shape& shape) {
  GG_CHECK(shape.size() <= static_cast<size_t>(kernels::kMaxDims), ShapeError, "gg::", op, ": at most ",
           kernels::kMaxDims, " dims are supported, got ", shape.size(), " dims in shape ", shape_str(shape));
}
}  // namespace

Tensor empty(const Shape& shape, DType dtype, Device device) {
  check_layout_dims("empty", shape);
  const int64_t nbytes = nbytes_of(shape, dtype_size(dtype), "empty");  // throws on negative sizes, overflow
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(static_cast<size_t>(nbytes), device);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor make_view(const Tensor& base, const Shape& shape, const Shape& strides, int64_t offset) {
  check_layout_dims("make_view", shape);
  GG_CHECK(strides.size() == shape.size(), ShapeError, "gg::make_view: ", strides.size(), " strides for shape ",
           shape_str(shape));
  // The view must lie inside the storage: non-negative strides and offset, last element in range.
  if (numel_of(shape, "make_view") > 0) {
    const int64_t capacity = static_cast<int64_t>(base.impl().storage->nbytes() / dtype_size(base.dtype()));
    int64_t last = offset;
    bool ok = offset >= 0;
    for (size_t i = 0; ok && i < shape.size(); ++i) {
      int64_t step = 0;
      ok = strides[i] >= 0 && !__builtin_mul_overflow(shape[i] - 1, strides[i], &step) &&
           !__builtin_add_overflow(last, step, &last);
    }
    GG_CHECK(ok && last < capacity, IndexError, "gg::make_view: shape ", shape_str(shape), ", strides ",
             shape_str(strides), " at offset ", offset, " reach outside a storage of ", capacity, " elements");
  }
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.impl().storage;
  impl->offset = offset;
  impl->shape = shape;
  impl->strides = strides;
  impl->dtype = base.dtype();
  return Tensor(std::move(impl));
}

namespace {
void print_rec(std::ostream& os, const std::vector<double>& v, const Shape& shape, size_t d,
               int64_t& pos, int indent) {
  if (d == shape.size()) {
    os << v[static_cast<size_t>(pos++)];
    return;
  }
  os << "[";
  for (int64_t i = 0; i < shape[d]; ++i) {
    if (i) {
      os << ",";
      if (d + 1 < shape.size()) os << "\n" << std::string(static_cast<size_t>(indent + 1), ' ');
      else os << " ";
    }
    if (shape[d] > 12 && i == 6) {  // elide the middle of long dims
      os << "...";
      int64_t skip = (shape[d] - 12) * numel_of(Shape(shape.begin() + d + 1, shape.end()));
      pos += skip;
      i += shape[d] - 12 - 1;
      continue;
    }
    print_rec(os, v, shape, d + 1, pos, indent + 1);
  }
  os << "]";
}
}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  os << "tensor(shape=" << shape_str(t.shape()) << ", dtype=" << dtype_name(t.dtype())
     << ", device=" << t.device().str();
  if (t.requires_grad()) os << ", requires_grad";
  os << ")\n";
  if (t.dtype() == DType::bf16 || t.dtype() == DType::f16) return os << "<low-precision data>";
  std::vector<double> v = t.to_vector<double>();
  int64_t pos = 0;
  auto flags = os.flags();
  os << std::setprecision(6);
  print_rec(os, v, t.shape(), 0, pos, 0);
  os.flags(flags);
  return os;
}

}  // namespace gg
