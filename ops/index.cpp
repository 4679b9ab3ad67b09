// Indexing in libtorch's vocabulary: select, narrow, x.index({...}) and x.index_put_({...}, v).
// Integers, Slices, None and Ellipsis make views (slice, squeeze, unsqueeze), as in libtorch; a
// tensor index (a b8 mask or i64 indices) gathers a copy through index_select. Every result is
// built from recorded ops whose backwards are written in ops (a slice's backward pads with
// zeros, index_select's adds rows into zeros, and each of those has the first op as its own
// backward), so indexing is differentiable to any order.
#include <limits>

#include "core/indexing.h"
#include "ops/common.h"

namespace gg {

using indexing::TensorIndex;

namespace indexing {
TensorIndex::TensorIndex(const char* text) : kind_(Kind::ellipsis) {
  GG_CHECK(text != nullptr && std::string(text) == "...", ValueError,
           "gg::indexing::TensorIndex: the only string index is \"...\" (Ellipsis), got \"",
           text ? text : "(null)", "\"");
}
}  // namespace indexing

Tensor select(const Tensor& x, int64_t dim, int64_t index) {
  detail::check_defined("select", x, "input");
  const int64_t d = wrap_dim(dim, x.dim(), "select");
  const int64_t n = x.shape()[static_cast<size_t>(d)];
  GG_CHECK(index >= -n && index < n, IndexError, "gg::select: index ", index, " is out of range for dim ", d,
           " of size ", n, " (shape ", shape_str(x.shape()), ")");
  const int64_t i = index < 0 ? index + n : index;
  return squeeze(slice(x, d, i, i + 1), d);
}

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  detail::check_defined("narrow", x, "input");
  const int64_t d = wrap_dim(dim, x.dim(), "narrow");
  const int64_t n = x.shape()[static_cast<size_t>(d)];
  GG_CHECK(start >= -n && start <= n, IndexError, "gg::narrow: start ", start, " is out of range for dim ", d,
           " of size ", n, " (shape ", shape_str(x.shape()), ")");
  const int64_t s = start < 0 ? start + n : start;
  GG_CHECK(length >= 0 && length <= n - s, IndexError, "gg::narrow: start ", s, " + length ", length,
           " exceeds dim ", d, " of size ", n, " (shape ", shape_str(x.shape()), ")");
  return slice(x, d, s, s + length);
}

namespace {

// How many dims of the indexed tensor an index consumes.
int64_t dims_consumed(const TensorIndex& i) {
  switch (i.kind()) {
    case TensorIndex::Kind::integer:
    case TensorIndex::Kind::slice: return 1;
    case TensorIndex::Kind::tensor: return i.tensor().dtype() == DType::b8 ? i.tensor().dim() : 1;
    default: return 0;
  }
}

// The index list with its Ellipsis replaced by full slices, after checking that the list fits x
// and holds at most one tensor. `op` names the public op in messages.
std::vector<TensorIndex> expand_ellipsis(const char* op, const Tensor& x, const std::vector<TensorIndex>& indices) {
  int64_t consumed = 0, ellipses = 0, tensors = 0;
  for (size_t k = 0; k < indices.size(); ++k) {
    const TensorIndex& i = indices[k];
    if (i.kind() == TensorIndex::Kind::tensor) {
      const Tensor& t = i.tensor();
      GG_CHECK(t.defined(), ValueError, "gg::", op, ": index ", k, " is an undefined tensor");
      GG_CHECK(t.dtype() == DType::b8 || t.dtype() == DType::i64, DTypeError, "gg::", op, ": index ", k,
               " must be a b8 mask or an i64 index tensor, got ", dtype_name(t.dtype()));
      GG_CHECK(t.dtype() != DType::b8 || t.dim() > 0, ValueError, "gg::", op, ": index ", k,
               " is a 0-dim mask; a mask needs at least one dim");
      ++tensors;
    }
    ellipses += i.kind() == TensorIndex::Kind::ellipsis;
    consumed += dims_consumed(i);
  }
  GG_CHECK(ellipses <= 1, IndexError, "gg::", op, ": an index list can hold only one Ellipsis, got ", ellipses);
  GG_CHECK(tensors <= 1, ValueError, "gg::", op, ": at most one tensor index per list is supported, got ", tensors,
           "; index in several steps");
  GG_CHECK(consumed <= x.dim(), IndexError, "gg::", op, ": too many indices for a tensor of shape ",
           shape_str(x.shape()), ": they cover ", consumed, " dims");
  std::vector<TensorIndex> out;
  for (const TensorIndex& i : indices) {
    if (i.kind() != TensorIndex::Kind::ellipsis) {
      out.push_back(i);
      continue;
    }
    for (int64_t k = 0; k < x.dim() - consumed; ++k) out.push_back(indexing::Slice());
  }
  return out;
}

// Gathers along `d` with a b8 mask over dims d .. d + mask.dim() - 1 of r (merged into one dim).
Tensor index_mask(const Tensor& r, int64_t d, const Tensor& mask, int64_t src_dim) {
  const size_t k = static_cast<size_t>(mask.dim()), du = static_cast<size_t>(d);
  const Shape covered(r.shape().begin() + d, r.shape().begin() + d + mask.dim());
  GG_CHECK(covered == mask.shape(), IndexError, "gg::index: the mask of shape ", shape_str(mask.shape()),
           " does not match the sizes ", shape_str(covered), " of the dims it indexes (from dim ", src_dim,
           " of a tensor of shape ", shape_str(r.shape()), ")");
  std::vector<int64_t> positions;
  const std::vector<uint8_t> m = mask.to_vector<uint8_t>();
  for (size_t p = 0; p < m.size(); ++p)
    if (m[p]) positions.push_back(static_cast<int64_t>(p));
  Shape merged(r.shape().begin(), r.shape().begin() + d);
  merged.push_back(numel_of(covered));
  merged.insert(merged.end(), r.shape().begin() + static_cast<int64_t>(du + k), r.shape().end());
  const auto count = static_cast<int64_t>(positions.size());
  return index_select(reshape(r, merged), d, from_indices(positions, {count}, r.device()));
}

// Gathers along `d` with i64 indices of any shape (negative ones count from the end); the
// index's dims replace dim d.
Tensor index_integers(const Tensor& r, int64_t d, const Tensor& index, int64_t src_dim) {
  const int64_t n = r.shape()[static_cast<size_t>(d)];
  std::vector<int64_t> v = index.to_vector<int64_t>();
  for (int64_t& i : v) {
    GG_CHECK(i >= -n && i < n, IndexError, "gg::index: index ", i, " is out of range for dim ", src_dim,
             " of size ", n);
    if (i < 0) i += n;
  }
  const auto count = static_cast<int64_t>(v.size());
  Tensor y = index_select(r, d, from_indices(v, {count}, r.device()));
  if (index.dim() == 1) return y;
  Shape shape(y.shape().begin(), y.shape().begin() + d);
  shape.insert(shape.end(), index.shape().begin(), index.shape().end());
  shape.insert(shape.end(), y.shape().begin() + d + 1, y.shape().end());
  return reshape(y, shape);
}

}  // namespace

Tensor index(const Tensor& x, const std::vector<TensorIndex>& indices) {
  detail::check_defined("index", x, "input");
  const std::vector<TensorIndex> list = expand_ellipsis("index", x, indices);
  Tensor r = x;
  int64_t d = 0, src = 0;  // the dim of r the next index applies to; the same dim of x
  for (const TensorIndex& i : list) {
    switch (i.kind()) {
      case TensorIndex::Kind::integer: {
        const int64_t n = r.shape()[static_cast<size_t>(d)];
        GG_CHECK(i.integer() >= -n && i.integer() < n, IndexError, "gg::index: index ", i.integer(),
                 " is out of range for dim ", src, " of size ", n, " (shape ", shape_str(x.shape()), ")");
        r = select(r, d, i.integer());
        ++src;
        break;
      }
      case TensorIndex::Kind::slice: {
        const int64_t step = i.slice().step.value_or(1);
        GG_CHECK(step > 0, ValueError, "gg::index: a slice's step must be positive, got ", step, " (dim ", src, ")");
        r = slice(r, d, i.slice().start.value_or(0), i.slice().stop.value_or(std::numeric_limits<int64_t>::max()),
                  step);
        ++d, ++src;
        break;
      }
      case TensorIndex::Kind::none:
        r = unsqueeze(r, d);
        ++d;
        break;
      case TensorIndex::Kind::tensor: {
        const Tensor& t = i.tensor();
        if (t.dtype() == DType::b8) {
          r = index_mask(r, d, t, src);
          ++d, src += t.dim();
        } else {
          r = index_integers(r, d, t, src);
          d += t.dim(), ++src;
        }
        break;
      }
      case TensorIndex::Kind::ellipsis: break;  // expanded above
    }
  }
  return r;
}

Tensor& index_put_(Tensor& self, const std::vector<TensorIndex>& indices, const Tensor& value) {
  detail::check_defined("index_put_", self, "self");
  detail::check_defined("index_put_", value, "value");
  GG_CHECK(!GradMode::is_enabled() || !self.requires_grad(), AutogradError,
           "gg::index_put_: in-place update of a tensor that requires grad (shape ", shape_str(self.shape()),
           ") is not supported while grad mode is on; do it under gg::NoGradGuard or work out of place");
  GG_CHECK(!value.requires_grad() || !GradMode::is_enabled(), AutogradError,
           "gg::index_put_: the value requires grad, which an in-place update cannot record; work out of place");
  GG_CHECK(!detail::forward_ad_active() || (!detail::has_open_tangent(self) && !detail::has_open_tangent(value)),
           AutogradError, "gg::index_put_: in-place update of a dual tensor (a forward-mode tangent on ",
           detail::has_open_tangent(self) ? "self" : "the value", "); work out of place");
  const std::vector<TensorIndex> list = expand_ellipsis("index_put_", self, indices);
  NoGradGuard ng;
  // Everything before a tensor index is basic: a view of self to write into.
  size_t k = 0;
  std::vector<TensorIndex> basic;
  int64_t d = 0;  // the dim of the view where a mask starts
  for (; k < list.size() && list[k].kind() != TensorIndex::Kind::tensor; ++k) {
    basic.push_back(list[k]);
    d += list[k].kind() != TensorIndex::Kind::integer;
  }
  Tensor view = index(self, basic);
  if (k == list.size()) {
    copy_(view, to(value, view.dtype()));
    return self;
  }
  const Tensor& mask = list[k].tensor();
  GG_CHECK(mask.dtype() == DType::b8, ValueError, "gg::index_put_: an i64 index tensor is not supported here "
           "(masks and basic indices are); write through index_select's inverse out of place");
  for (size_t j = k + 1; j < list.size(); ++j) {
    const TensorIndex& i = list[j];
    const bool full = i.kind() == TensorIndex::Kind::slice && !i.slice().start && !i.slice().stop &&
                      i.slice().step.value_or(1) == 1;
    GG_CHECK(full, ValueError, "gg::index_put_: after a mask only full slices (Slice()) are supported, index ", j,
             " is not one");
  }
  const Shape covered(view.shape().begin() + d, view.shape().begin() + d + mask.dim());
  GG_CHECK(covered == mask.shape(), IndexError, "gg::index_put_: the mask of shape ", shape_str(mask.shape()),
           " does not match the sizes ", shape_str(covered), " of the dims it indexes (tensor of shape ",
           shape_str(self.shape()), ")");
  // The mask stands for every element it selects: broadcast it over the other dims of the view.
  Shape mask_shape(static_cast<size_t>(d), 1);
  mask_shape.insert(mask_shape.end(), mask.shape().begin(), mask.shape().end());
  mask_shape.resize(view.shape().size(), 1);
  const Tensor v = to(value, view.dtype());
  GG_CHECK(broadcast_shapes(v.shape(), view.shape(), "index_put_") == view.shape(), ShapeError,
           "gg::index_put_: a value of shape ", shape_str(v.shape()), " does not broadcast to the indexed view of shape ",
           shape_str(view.shape()));
  copy_(view, where(reshape(to(mask, view.device()), mask_shape), v, view));
  return self;
}

Tensor& index_put_(Tensor& self, const std::vector<TensorIndex>& indices, double value) {
  detail::check_defined("index_put_", self, "self");
  return index_put_(self, indices, scalar_tensor(value, self.dtype(), self.device()));
}

}  // namespace gg
