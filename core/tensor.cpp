#include "core/tensor.h"

#include <cmath>
#include <cstring>
#include <string>

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

template <typename T>
T* Tensor::data_ptr() const {
  constexpr DType want = dtype_of<T>();
  GG_CHECK(dtype() == want, DTypeError, "gg::Tensor::data_ptr: tensor has dtype ", dtype_name(dtype()),
           ", requested ", dtype_name(want));
  return static_cast<T*>(raw_data());
}
template float* Tensor::data_ptr<float>() const;
template double* Tensor::data_ptr<double>() const;
template int64_t* Tensor::data_ptr<int64_t>() const;
template uint8_t* Tensor::data_ptr<uint8_t>() const;
template bool* Tensor::data_ptr<bool>() const;

// Floating values convert as C++ does; i64 values are read exactly.
template <typename T>
T Tensor::item() const {
  if (dtype() != DType::i64) return static_cast<T>(item());
  GG_CHECK(numel() == 1, ValueError, "gg::Tensor::item: tensor of shape ", shape_str(shape()), " has ", numel(),
           " elements, expected 1");
  return static_cast<T>(to_vector<int64_t>()[0]);
}
template float Tensor::item<float>() const;
template double Tensor::item<double>() const;
template int64_t Tensor::item<int64_t>() const;
template int Tensor::item<int>() const;
template bool Tensor::item<bool>() const;

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

Tensor from_blob(void* data, const Shape& shape, const Shape& strides, DType dtype, Device device,
                 std::function<void(void*)> release) {
  check_layout_dims("from_blob", shape);
  const Shape st = strides.empty() ? contiguous_strides(shape) : strides;
  GG_CHECK(st.size() == shape.size(), ShapeError, "gg::from_blob: ", st.size(), " strides ", shape_str(st),
           " for shape ", shape_str(shape));
  const int64_t numel = numel_of(shape, "from_blob");  // throws on negative sizes, overflow
  // The storage spans element 0 to the view's last element.
  int64_t extent = numel > 0 ? 1 : 0;
  for (size_t i = 0; numel > 0 && i < shape.size(); ++i) {
    GG_CHECK(st[i] >= 0, ValueError, "gg::from_blob: strides must be >= 0, got ", shape_str(st), " for shape ",
             shape_str(shape));
    int64_t step = 0;
    GG_CHECK(!__builtin_mul_overflow(shape[i] - 1, st[i], &step) && !__builtin_add_overflow(extent, step, &extent),
             ShapeError, "gg::from_blob: shape ", shape_str(shape), " with strides ", shape_str(st),
             " overflows int64");
  }
  GG_CHECK(data != nullptr || extent == 0, ValueError, "gg::from_blob: data is null for a tensor of shape ",
           shape_str(shape));
  const int64_t nbytes = nbytes_of({extent}, dtype_size(dtype), "from_blob");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(data, static_cast<size_t>(nbytes), device, std::move(release));
  impl->shape = shape;
  impl->strides = st;
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
// Printing summarises as torch's _tensor_str does: a tensor of more than kPrintThreshold elements
// shows only the first and last kPrintEdgeItems entries of each dimension longer than
// 2 * kPrintEdgeItems, with "..." between them, and only those entries are read.
constexpr int64_t kPrintThreshold = 1000;
constexpr int64_t kPrintEdgeItems = 3;

void print_entry(std::ostream& os, double v) {
  if (std::isnan(v)) os << "nan";  // whatever its sign bit
  else os << v;                     // inf and -inf as the stream writes them
}
void print_entry(std::ostream& os, int64_t v) { os << v; }

// The printed entries of `t`, row-major over `kept` (the kept size of each dimension). A cut
// dimension keeps its first and last kPrintEdgeItems indices, so the entries come from 2^cuts
// corner blocks, each a view of t copied on its own: nothing else of t is read or moved.
template <typename T>
std::vector<T> gather_printed(const Tensor& t, const Shape& kept, const std::vector<bool>& cut) {
  const size_t nd = kept.size();
  std::vector<size_t> cut_dims;
  for (size_t d = 0; d < nd; ++d)
    if (cut[d]) cut_dims.push_back(d);
  if (cut_dims.empty()) return t.to_vector<T>();
  const Shape kept_strides = contiguous_strides(kept);
  std::vector<T> out(static_cast<size_t>(numel_of(kept)));
  for (uint64_t corner = 0; corner < (uint64_t(1) << cut_dims.size()); ++corner) {
    Shape block_shape = t.shape();
    int64_t offset = t.offset(), out_base = 0;
    for (size_t c = 0; c < cut_dims.size(); ++c) {
      const size_t d = cut_dims[c];
      block_shape[d] = kPrintEdgeItems;
      if (corner >> c & 1) {  // the last kPrintEdgeItems of dimension d
        offset += (t.shape()[d] - kPrintEdgeItems) * t.strides()[d];
        out_base += kPrintEdgeItems * kept_strides[d];
      }
    }
    const std::vector<T> block = make_view(t, block_shape, t.strides(), offset).to_vector<T>();
    Shape index(nd, 0);  // row-major walk over the block, placing each entry in `out`
    for (const T& v : block) {
      int64_t at = out_base;
      for (size_t d = 0; d < nd; ++d) at += index[d] * kept_strides[d];
      out[static_cast<size_t>(at)] = v;
      for (size_t d = nd; d-- > 0 && ++index[d] == block_shape[d];) index[d] = 0;
    }
  }
  return out;
}

template <typename T>
void print_rec(std::ostream& os, const std::vector<T>& v, const Shape& kept, const std::vector<bool>& cut, size_t d,
               int64_t& pos, int indent) {
  if (d == kept.size()) {
    print_entry(os, v[static_cast<size_t>(pos++)]);
    return;
  }
  const auto separate = [&] {
    os << ",";
    if (d + 1 < kept.size()) os << "\n" << std::string(static_cast<size_t>(indent + 1), ' ');
    else os << " ";
  };
  os << "[";
  for (int64_t i = 0; i < kept[d]; ++i) {
    if (i) separate();
    if (cut[d] && i == kPrintEdgeItems) {
      os << "...";
      separate();
    }
    print_rec(os, v, kept, cut, d + 1, pos, indent + 1);
  }
  os << "]";
}

template <typename T>
void print_values(std::ostream& os, const Tensor& t) {
  const bool summarise = t.numel() > kPrintThreshold;
  Shape kept = t.shape();
  std::vector<bool> cut(kept.size(), false);
  for (size_t d = 0; d < kept.size(); ++d) {
    cut[d] = summarise && kept[d] > 2 * kPrintEdgeItems;
    if (cut[d]) kept[d] = 2 * kPrintEdgeItems;
  }
  const std::vector<T> v = gather_printed<T>(t, kept, cut);
  int64_t pos = 0;
  print_rec(os, v, kept, cut, 0, pos, 0);
}
}  // namespace

std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  os << "tensor(shape=" << shape_str(t.shape()) << ", dtype=" << dtype_name(t.dtype())
     << ", device=" << t.device().str();
  if (t.requires_grad()) os << ", requires_grad";
  os << ")\n";
  const auto flags = os.flags();
  const auto precision = os.precision(6);
  os.unsetf(std::ios_base::floatfield);
  if (t.dtype() == DType::i64) print_values<int64_t>(os, t);  // exact beyond 2^53
  else print_values<double>(os, t);
  os << "\n";
  os.flags(flags);
  os.precision(precision);
  return os;
}

}  // namespace gg
