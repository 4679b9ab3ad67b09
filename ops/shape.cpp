// Copies, casts, views and index ops. Views share storage and record a node whose backward
// undoes the view on the gradient (transpose back, sum an expand, pad a slice...).
#include <algorithm>
#include <numeric>

#include "ops/common.h"

namespace gg {

Tensor clone(const Tensor& x) {
  detail::check_defined("clone", x, "input");
  Tensor y = detail::empty_like(x);
  detail::copy_into(y, x);
  record("clone", {x}, {y}, {}, [](const BackwardArgs& g) -> TensorList { return {g.grads[0]}; },
         [](const JvpArgs& j) -> TensorList { return {j.tangents[0]}; });
  return y;
}

namespace detail {
Tensor alias(const Tensor& x) {
  Tensor y = make_view(x, x.shape(), x.strides(), x.offset());
  record("alias", {x}, {y}, {}, [](const BackwardArgs& g) -> TensorList { return {g.grads[0]}; },
         [](const JvpArgs& j) -> TensorList { return {j.tangents[0]}; });
  return y;
}
}  // namespace detail

Tensor contiguous(const Tensor& x) {
  detail::check_defined("contiguous", x, "input");
  if (x.is_contiguous()) return x;
  return clone(x);
}

Tensor to(const Tensor& x, DType dtype) {
  detail::check_defined("to", x, "input");
  if (x.dtype() == dtype) return x;
  Tensor y = empty(x.shape(), dtype, x.device());
  detail::copy_into(y, x);
  if (is_floating(dtype) && is_floating(x.dtype()))
    record("to", {x}, {y}, {}, [from = x.dtype()](const BackwardArgs& g) -> TensorList { return {to(g.grads[0], from)}; },
           [dtype](const JvpArgs& j) -> TensorList { return {to(j.tangents[0], dtype)}; });
  return y;
}

Tensor to(const Tensor& x, Device device) {
  detail::check_defined("to", x, "input");
  if (x.device() == device) return x;
  Tensor src;
  {
    NoGradGuard ng;
    src = contiguous(x);
  }
  Tensor y;
  try {
    // The backend says why a device cannot be used: no CUDA in this build, no usable GPU (with
    // the driver's reason), or no device of that index.
    y = empty(x.shape(), x.dtype(), device);
  } catch (const DeviceError& e) {
    throw DeviceError(std::string("gg::to: cannot move a tensor to ") + device.str() + ": " + e.what());
  }
  dispatch::copy_between_devices(y.raw_data(), device, src.raw_data(), x.device(),
                                 static_cast<size_t>(x.numel()) * dtype_size(x.dtype()));
  record("to_device", {x}, {y}, {}, [from = x.device()](const BackwardArgs& g) -> TensorList {
    return {to(g.grads[0], from)};
  }, [device](const JvpArgs& j) -> TensorList { return {to(j.tangents[0], device)}; });
  return y;
}

Tensor Tensor::to(Device device) const { return gg::to(*this, device); }
Tensor Tensor::to(DType dtype) const { return gg::to(*this, dtype); }

Tensor reshape(const Tensor& x, const Shape& shape_in) {
  detail::check_defined("reshape", x, "input");
  detail::check_max_dims("reshape", shape_in);
  Shape shape = shape_in;
  int64_t infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      GG_CHECK(infer < 0, ShapeError, "gg::reshape: only one dim can be -1, got ", shape_str(shape_in));
      infer = static_cast<int64_t>(i);
    } else {
      GG_CHECK(shape[i] >= 0, ShapeError, "gg::reshape: invalid size ", shape[i], " in shape ", shape_str(shape_in));
    }
  }
  if (infer >= 0) {
    Shape rest = shape;
    rest.erase(rest.begin() + infer);
    const int64_t known = numel_of(rest, "reshape");  // overflow-checked
    GG_CHECK(known != 0 && x.numel() % known == 0, ShapeError, "gg::reshape: cannot reshape a tensor of shape ",
             shape_str(x.shape()), " into ", shape_str(shape_in));
    shape[static_cast<size_t>(infer)] = x.numel() / known;
  }
  GG_CHECK(numel_of(shape, "reshape") == x.numel(), ShapeError, "gg::reshape: cannot reshape a tensor of shape ",
           shape_str(x.shape()), " (", x.numel(), " elements) into ", shape_str(shape_in), " (", numel_of(shape),
           " elements)");
  if (shape == x.shape()) return x;
  Tensor src = contiguous(x);  // records a copy when x is a non-contiguous view
  Tensor y = make_view(src, shape, contiguous_strides(shape), src.offset());
  record("reshape", {src}, {y}, {}, [s = src.shape()](const BackwardArgs& g) -> TensorList {
    return {reshape(g.grads[0], s)};
  }, [&shape](const JvpArgs& j) -> TensorList { return {reshape(j.tangents[0], shape)}; });
  return y;
}

Tensor flatten(const Tensor& x) { return reshape(x, {x.numel()}); }

Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  detail::check_defined("permute", x, "input");
  GG_CHECK(static_cast<int64_t>(dims.size()) == x.dim(), ShapeError, "gg::permute: got ", dims.size(),
           " dims for a tensor of shape ", shape_str(x.shape()));
  std::vector<int64_t> d(dims.size()), inverse(dims.size());
  std::vector<char> seen(dims.size(), 0);
  Shape shape(dims.size()), strides(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    d[i] = wrap_dim(dims[i], x.dim(), "permute");
    GG_CHECK(!seen[static_cast<size_t>(d[i])], ValueError, "gg::permute: dim ", d[i], " repeated in ", shape_str(dims));
    seen[static_cast<size_t>(d[i])] = 1;
    shape[i] = x.shape()[static_cast<size_t>(d[i])];
    strides[i] = x.strides()[static_cast<size_t>(d[i])];
    inverse[static_cast<size_t>(d[i])] = static_cast<int64_t>(i);
  }
  bool identity = true;
  for (size_t i = 0; i < d.size(); ++i) identity = identity && d[i] == static_cast<int64_t>(i);
  if (identity) return x;
  Tensor y = make_view(x, shape, strides, x.offset());
  record("permute", {x}, {y}, {}, [inverse](const BackwardArgs& g) -> TensorList { return {permute(g.grads[0], inverse)}; },
         [&d](const JvpArgs& j) -> TensorList { return {permute(j.tangents[0], d)}; });
  return y;
}

Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1) {
  detail::check_defined("transpose", x, "input");
  // A 0-dim tensor transposes to itself for dims 0/-1, as in PyTorch.
  int64_t a = wrap_dim(dim0, x.dim(), "transpose", ScalarDim::allow);
  int64_t b = wrap_dim(dim1, x.dim(), "transpose", ScalarDim::allow);
  std::vector<int64_t> perm(static_cast<size_t>(x.dim()));
  std::iota(perm.begin(), perm.end(), 0);
  if (x.dim() > 0) std::swap(perm[static_cast<size_t>(a)], perm[static_cast<size_t>(b)]);
  return permute(x, perm);
}

Tensor expand(const Tensor& x, const Shape& shape_in) {
  detail::check_defined("expand", x, "input");
  detail::check_max_dims("expand", shape_in);
  GG_CHECK(shape_in.size() >= x.shape().size(), ShapeError, "gg::expand: cannot expand shape ",
           shape_str(x.shape()), " to ", shape_str(shape_in));
  const size_t lead = shape_in.size() - x.shape().size();
  Shape shape(shape_in.size()), strides(shape_in.size());
  for (size_t i = 0; i < shape_in.size(); ++i) {
    if (i < lead) {
      GG_CHECK(shape_in[i] >= 0, ShapeError, "gg::expand: size -1 not allowed in new leading dims: ", shape_str(shape_in));
      shape[i] = shape_in[i];
      strides[i] = 0;
      continue;
    }
    int64_t have = x.shape()[i - lead];
    int64_t want = shape_in[i] == -1 ? have : shape_in[i];
    GG_CHECK(want >= 0, ShapeError, "gg::expand: invalid size ", shape_in[i], " at dim ", i, " in ",
             shape_str(shape_in));
    GG_CHECK(want == have || have == 1, ShapeError, "gg::expand: cannot expand shape ", shape_str(x.shape()), " to ",
             shape_str(shape_in), " (dim ", i, ": ", have, " vs ", want, ")");
    shape[i] = want;
    strides[i] = (have == 1 && want != 1) ? 0 : x.strides()[i - lead];
  }
  if (shape == x.shape()) return x;
  Tensor y = make_view(x, shape, strides, x.offset());
  record("expand", {x}, {y}, {}, [s = x.shape()](const BackwardArgs& g) -> TensorList { return {sum_to(g.grads[0], s)}; },
         [&shape](const JvpArgs& j) -> TensorList { return {expand(j.tangents[0], shape)}; });
  return y;
}

Tensor squeeze(const Tensor& x, int64_t dim) {
  detail::check_defined("squeeze", x, "input");
  int64_t d = wrap_dim(dim, x.dim(), "squeeze", ScalarDim::allow);  // a 0-dim tensor squeezes to itself
  if (x.dim() == 0 || x.shape()[static_cast<size_t>(d)] != 1) return x;
  Shape shape = x.shape(), strides = x.strides();
  shape.erase(shape.begin() + d);
  strides.erase(strides.begin() + d);
  Tensor y = make_view(x, shape, strides, x.offset());
  record("squeeze", {x}, {y}, {}, [d](const BackwardArgs& g) -> TensorList { return {unsqueeze(g.grads[0], d)}; },
         [d](const JvpArgs& j) -> TensorList { return {squeeze(j.tangents[0], d)}; });
  return y;
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  detail::check_defined("unsqueeze", x, "input");
  int64_t d = wrap_dim(dim, x.dim() + 1, "unsqueeze");
  Shape shape = x.shape(), strides = x.strides();
  int64_t stride = d < x.dim() ? x.strides()[static_cast<size_t>(d)] * x.shape()[static_cast<size_t>(d)] : 1;
  shape.insert(shape.begin() + d, 1);
  strides.insert(strides.begin() + d, stride);
  detail::check_max_dims("unsqueeze", shape);
  Tensor y = make_view(x, shape, strides, x.offset());
  record("unsqueeze", {x}, {y}, {}, [d](const BackwardArgs& g) -> TensorList { return {squeeze(g.grads[0], d)}; },
         [d](const JvpArgs& j) -> TensorList { return {unsqueeze(j.tangents[0], d)}; });
  return y;
}

namespace {
// Pads `g` with zeros back to `shape`: the adjoint of slice. Its own backward is slice again.
Tensor slice_backward(const Tensor& g, const Shape& shape, int64_t dim, int64_t start, int64_t end, int64_t step) {
  Tensor y = zeros(shape, g.dtype(), g.device());
  {
    NoGradGuard ng;
    detail::copy_into(slice(y, dim, start, end, step), g);
  }
  record("slice_backward", {g}, {y}, {}, [dim, start, end, step](const BackwardArgs& a) -> TensorList {
    return {slice(a.grads[0], dim, start, end, step)};
  }, [&](const JvpArgs& j) -> TensorList { return {slice_backward(j.tangents[0], shape, dim, start, end, step)}; });
  return y;
}
}  // namespace

Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  detail::check_defined("slice", x, "input");
  int64_t d = wrap_dim(dim, x.dim(), "slice");
  GG_CHECK(step > 0, ValueError, "gg::slice: step must be positive, got ", step);
  const int64_t n = x.shape()[static_cast<size_t>(d)];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape shape = x.shape(), strides = x.strides();
  shape[static_cast<size_t>(d)] = end == start ? 0 : (end - start - 1) / step + 1;  // no overflow for huge steps
  // A step past the end keeps one element: its stride is never used to move, so it is kept as is
  // (a huge step times the stride would overflow).
  if (shape[static_cast<size_t>(d)] > 1) strides[static_cast<size_t>(d)] *= step;
  if (start == 0 && end == n && step == 1) return x;
  Tensor y = make_view(x, shape, strides, x.offset() + start * x.strides()[static_cast<size_t>(d)]);
  record("slice", {x}, {y}, {}, [s = x.shape(), d, start, end, step](const BackwardArgs& g) -> TensorList {
    return {slice_backward(g.grads[0], s, d, start, end, step)};
  }, [&](const JvpArgs& j) -> TensorList { return {slice(j.tangents[0], d, start, end, step)}; });
  return y;
}

Tensor cat(const TensorList& xs, int64_t dim) {
  GG_CHECK(!xs.empty(), ValueError, "gg::cat: expected at least one tensor");
  for (size_t i = 0; i < xs.size(); ++i) detail::check_defined("cat", xs[i], "tensors[i]");
  const Tensor& first = xs[0];
  for (size_t i = 0; i < xs.size(); ++i)
    GG_CHECK(xs[i].dim() > 0, ShapeError, "gg::cat: tensor ", i, " is 0-dim and cannot be concatenated (use stack)");
  int64_t d = wrap_dim(dim, first.dim(), "cat");
  Shape shape = first.shape();
  int64_t total = 0;
  DType dtype = first.dtype();  // the tensors' promoted dtype, as torch.cat
  std::vector<DType> dtypes;
  for (size_t i = 0; i < xs.size(); ++i) {
    detail::check_same_device("cat", first, xs[i]);
    dtype = promote_types(dtype, xs[i].dtype());
    dtypes.push_back(xs[i].dtype());
    bool ok = xs[i].dim() == first.dim();
    for (int64_t k = 0; ok && k < first.dim(); ++k)
      ok = k == d || xs[i].shape()[static_cast<size_t>(k)] == shape[static_cast<size_t>(k)];
    GG_CHECK(ok, ShapeError, "gg::cat: tensor ", i, " has shape ", shape_str(xs[i].shape()),
             ", incompatible with tensor 0 of shape ", shape_str(first.shape()), " along dim ", d);
    GG_CHECK(!__builtin_add_overflow(total, xs[i].shape()[static_cast<size_t>(d)], &total), ShapeError,
             "gg::cat: the total size along dim ", d, " does not fit in int64");
  }
  shape[static_cast<size_t>(d)] = total;
  Tensor y = empty(shape, dtype, first.device());
  std::vector<int64_t> offsets;
  int64_t off = 0;
  {
    NoGradGuard ng;
    for (const Tensor& x : xs) {
      int64_t len = x.shape()[static_cast<size_t>(d)];
      offsets.push_back(off);
      detail::copy_into(slice(y, d, off, off + len), x);
      off += len;
    }
  }
  offsets.push_back(off);
  record("cat", xs, {y}, {}, [d, offsets, dtypes](const BackwardArgs& g) -> TensorList {
    TensorList out;
    for (size_t i = 0; i + 1 < offsets.size(); ++i) {
      if (!g.needs[i]) {
        out.emplace_back();
        continue;
      }
      const Tensor gi = slice(g.grads[0], d, offsets[i], offsets[i + 1]);
      out.push_back(gi.dtype() == dtypes[i] ? gi : to(gi, dtypes[i]));  // each input's own dtype
    }
    return out;
  }, [d](const JvpArgs& j) -> TensorList {
    TensorList ts = j.tangents;
    for (size_t i = 0; i < ts.size(); ++i)
      if (!ts[i].defined()) ts[i] = zeros_like(j.inputs[i]);
    return {cat(ts, d)};
  });
  return y;
}

Tensor stack(const TensorList& xs, int64_t dim) {
  GG_CHECK(!xs.empty(), ValueError, "gg::stack: expected at least one tensor");
  for (size_t i = 0; i < xs.size(); ++i) detail::check_defined("stack", xs[i], "tensors[i]");
  int64_t d = wrap_dim(dim, xs[0].dim() + 1, "stack");
  TensorList u;
  for (size_t i = 0; i < xs.size(); ++i) {
    GG_CHECK(xs[i].defined() && xs[i].shape() == xs[0].shape(), ShapeError, "gg::stack: tensor ", i, " has shape ",
             xs[i].defined() ? shape_str(xs[i].shape()) : "undefined", ", expected ", shape_str(xs[0].shape()));
    u.push_back(unsqueeze(xs[i], d));
  }
  return cat(u, d);
}

namespace {
void check_index(const char* op, const Tensor& index, int64_t size) {
  GG_CHECK(index.dtype() == DType::i64, DTypeError, "gg::", op, ": index must be i64, got ", dtype_name(index.dtype()));
  for (int64_t v : index.to_vector<int64_t>())
    GG_CHECK(v >= 0 && v < size, IndexError, "gg::", op, ": index ", v, " is out of range for a dim of size ", size);
}

}  // namespace

// Its own backward is index_select again.
Tensor detail::index_add_zeros(const Tensor& g, int64_t d, const Tensor& index, const Shape& shape) {
  Tensor gc;
  {
    NoGradGuard ng;
    gc = contiguous(g);
  }
  Tensor y = zeros(shape, g.dtype(), g.device());
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < d; ++i) outer *= shape[static_cast<size_t>(i)];
  for (size_t i = static_cast<size_t>(d) + 1; i < shape.size(); ++i) inner *= shape[i];
  dispatch::index_add({g.dtype(), gc.raw_data(), y.raw_data(), static_cast<const int64_t*>(index.raw_data()), outer,
                       shape[static_cast<size_t>(d)], inner, index.numel()},
                      g.device());
  record("index_add", {g}, {y}, {}, [d, index](const BackwardArgs& a) -> TensorList {
    return {index_select(a.grads[0], d, index)};
  }, [&](const JvpArgs& j) -> TensorList { return {detail::index_add_zeros(j.tangents[0], d, index, shape)}; });
  return y;
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  detail::check_defined("index_select", x, "input");
  detail::check_defined("index_select", index, "index");
  detail::check_same_device("index_select", x, index);
  GG_CHECK(index.dim() == 1, ShapeError, "gg::index_select: index must be 1-D, got shape ", shape_str(index.shape()));
  int64_t d = wrap_dim(dim, x.dim(), "index_select");
  check_index("index_select", index, x.shape()[static_cast<size_t>(d)]);
  Tensor xc, ic;
  {
    NoGradGuard ng;
    xc = contiguous(x);
    ic = contiguous(index);
  }
  Shape shape = x.shape();
  shape[static_cast<size_t>(d)] = index.numel();
  Tensor y = empty(shape, x.dtype(), x.device());
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < d; ++i) outer *= shape[static_cast<size_t>(i)];
  for (size_t i = static_cast<size_t>(d) + 1; i < shape.size(); ++i) inner *= shape[i];
  dispatch::index_select({x.dtype(), xc.raw_data(), y.raw_data(), static_cast<const int64_t*>(ic.raw_data()), outer,
                          x.shape()[static_cast<size_t>(d)], inner, index.numel()},
                         x.device());
  record("index_select", {x}, {y}, {}, [d, ic, s = x.shape()](const BackwardArgs& g) -> TensorList {
    return {detail::index_add_zeros(g.grads[0], d, ic, s)};
  }, [&](const JvpArgs& j) -> TensorList { return {index_select(j.tangents[0], d, ic)}; });
  return y;
}

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  detail::check_defined("embedding", weight, "weight");
  detail::check_defined("embedding", indices, "indices");
  GG_CHECK(indices.dtype() == DType::i64, DTypeError, "gg::embedding: indices must be i64, got ",
           dtype_name(indices.dtype()));
  GG_CHECK(weight.dim() == 2, ShapeError, "gg::embedding: weight must be (V, D), got shape ", shape_str(weight.shape()));
  for (int64_t v : indices.to_vector<int64_t>())
    GG_CHECK(v >= 0 && v < weight.size(0), IndexError, "gg::embedding: index ", v, " is out of range for ",
             weight.size(0), " rows");
  Shape out = indices.shape();
  out.push_back(weight.shape()[1]);
  return reshape(index_select(weight, 0, reshape(indices, {indices.numel()})), out);
}

}  // namespace gg
