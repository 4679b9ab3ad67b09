// The shape handling shared by every Group: checks that the ranks agree, moves the gathered or
// scattered dim to the front, pads uneven pieces to a common length, and calls the flat
// primitives of the implementation.
#include "dist/group.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "autograd/grad_mode.h"
#include "kernels/params.h"
#include "ops/ops.h"

namespace gg::dist {
namespace {

std::string shapes_str(const std::vector<Shape>& shapes) {
  std::string s;
  for (size_t r = 0; r < shapes.size(); ++r)
    s += (r ? ", rank " : "rank ") + std::to_string(r) + " " + shape_str(shapes[r]);
  return s;
}

// x with `dim` moved to the front, contiguous.
Tensor dim_to_front(const Tensor& x, int64_t dim) {
  std::vector<int64_t> perm{dim};
  for (int64_t i = 0; i < x.dim(); ++i)
    if (i != dim) perm.push_back(i);
  return contiguous(permute(x, perm));
}

// The inverse of dim_to_front, contiguous.
Tensor front_to_dim(const Tensor& x, int64_t dim) {
  std::vector<int64_t> perm;
  for (int64_t i = 0; i < x.dim(); ++i) perm.push_back(i < dim ? i + 1 : (i == dim ? 0 : i));
  return contiguous(permute(x, perm));
}

// x (n, rest...) padded with zero rows to (m, rest...).
Tensor pad_front(const Tensor& x, int64_t m) {
  if (x.size(0) == m) return x;
  Shape s = x.shape();
  s[0] = m - x.size(0);
  return cat({x, zeros(s, x.dtype(), x.device())}, 0);
}

Shape with_size(Shape s, int64_t dim, int64_t n) {
  s[static_cast<size_t>(dim)] = n;
  return s;
}

void check_reducible(const char* op, const Tensor& x) {
  GG_CHECK(x.defined(), ValueError, "gg::", op, ": x is an undefined tensor");
  GG_CHECK(is_floating(x.dtype()) || x.dtype() == DType::i64, DTypeError, "gg::", op,
           ": x must be a floating or i64 tensor, got ", dtype_name(x.dtype()));
}

}  // namespace

std::vector<Shape> Group::exchange_meta(const char* op, const Tensor& x, int64_t free_dim) {
  if (!shape_checks_) return std::vector<Shape>(static_cast<size_t>(size()), x.shape());
  std::vector<int64_t> meta(2 + kernels::kMaxDims, -1);
  meta[0] = static_cast<int64_t>(x.dtype());
  meta[1] = x.dim();
  for (int64_t i = 0; i < x.dim() && i < kernels::kMaxDims; ++i) meta[static_cast<size_t>(2 + i)] = x.size(i);
  const int64_t width = static_cast<int64_t>(meta.size());
  const std::vector<int64_t> all =
      all_gather_flat(from_indices(meta, {width}, x.device())).to_vector<int64_t>();
  std::vector<Shape> shapes(static_cast<size_t>(size()));
  std::vector<DType> dtypes(shapes.size());
  for (size_t r = 0; r < shapes.size(); ++r) {
    const int64_t* m = all.data() + r * static_cast<size_t>(width);
    dtypes[r] = static_cast<DType>(m[0]);
    shapes[r].assign(m + 2, m + 2 + std::max<int64_t>(0, std::min<int64_t>(m[1], kernels::kMaxDims)));
  }
  for (size_t r = 0; r < shapes.size(); ++r) {
    GG_CHECK(dtypes[r] == x.dtype(), DTypeError, "gg::", op, ": the ranks' dtypes differ: rank ", rank(), " has ",
             dtype_name(x.dtype()), ", rank ", r, " has ", dtype_name(dtypes[r]));
    bool same = shapes[r].size() == shapes[0].size();
    for (size_t i = 0; same && i < shapes[r].size(); ++i)
      same = static_cast<int64_t>(i) == free_dim || shapes[r][i] == shapes[0][i];
    GG_CHECK(same, ShapeError, "gg::", op, ": the ranks' shapes must agree",
             free_dim >= 0 ? std::string(" except along dim ") + std::to_string(free_dim) : std::string(),
             ", got ", shapes_str(shapes));
  }
  return shapes;
}

void Group::check_peer(const char* op, int peer, const char* arg) const {
  GG_CHECK(peer >= 0 && peer < size() && peer != rank(), ValueError, "gg::", op, ": ", arg,
           " must be another rank in [0, ", size(), "), got ", peer, " on rank ", rank());
}

Tensor Group::all_reduce(const Tensor& x) {
  NoGradGuard ng;
  check_reducible("dist::all_reduce", x);
  exchange_meta("dist::all_reduce", x, -1);
  if (x.numel() == 0) return zeros(x.shape(), x.dtype(), x.device());
  return reshape(all_reduce_flat(reshape(contiguous(x), {x.numel()})), x.shape());
}

namespace {
// A result that is complete already (the start_*_flat defaults).
class Done final : public Group::Pending {
 public:
  explicit Done(Tensor result) : result_(std::move(result)) {}
  Tensor wait() override { return result_; }

 private:
  Tensor result_;
};

// Another Pending's result, reshaped.
class Reshaped final : public Group::Pending {
 public:
  Reshaped(std::unique_ptr<Group::Pending> flat, Shape shape) : flat_(std::move(flat)), shape_(std::move(shape)) {}
  Tensor wait() override { return reshape(flat_->wait(), shape_); }

 private:
  std::unique_ptr<Group::Pending> flat_;
  Shape shape_;
};
}  // namespace

std::unique_ptr<Group::Pending> Group::start_all_reduce_flat(const Tensor& x) {
  return std::make_unique<Done>(all_reduce_flat(x));
}

std::unique_ptr<Group::Pending> Group::start_sendrecv_flat(const Tensor& x, int dst, int src) {
  return std::make_unique<Done>(sendrecv_flat(x, dst, src));
}

std::unique_ptr<Group::Pending> Group::start_all_reduce(const Tensor& x) {
  NoGradGuard ng;
  check_reducible("dist::start_all_reduce", x);
  GG_CHECK(x.dim() == 1 && x.is_contiguous(), ShapeError,
           "gg::dist::start_all_reduce: x must be one-dimensional and contiguous, got shape ", shape_str(x.shape()));
  return start_all_reduce_flat(x);
}

Tensor Group::all_reduce_mean(const Tensor& x) {
  GG_CHECK(!x.defined() || is_floating(x.dtype()), DTypeError,
           "gg::dist::all_reduce_mean: x must be a floating tensor, got ", dtype_name(x.dtype()));
  Tensor s = all_reduce(x);
  NoGradGuard ng;
  return s * (1.0 / size());
}

Tensor Group::all_gather(const Tensor& x, int64_t dim, std::vector<int64_t>* sizes_out) {
  NoGradGuard ng;
  GG_CHECK(x.defined(), ValueError, "gg::dist::all_gather: x is an undefined tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "dist::all_gather");
  const std::vector<Shape> shapes = exchange_meta("dist::all_gather", x, d);
  std::vector<int64_t> sizes;
  for (const Shape& s : shapes) sizes.push_back(s[static_cast<size_t>(d)]);
  if (sizes_out) *sizes_out = sizes;
  const int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
  const int64_t m = *std::max_element(sizes.begin(), sizes.end());
  const Shape out_shape = with_size(x.shape(), d, total);
  if (numel_of(out_shape, "dist::all_gather") == 0) return zeros(out_shape, x.dtype(), x.device());

  const Tensor front = pad_front(dim_to_front(x, d), m);  // (m, rest...)
  Shape gathered_shape = front.shape();
  gathered_shape[0] = m * size();
  Tensor g = reshape(all_gather_flat(reshape(front, {front.numel()})), gathered_shape);
  if (m * size() != total) {  // uneven: drop each rank's padding
    TensorList pieces;
    for (int r = 0; r < size(); ++r) pieces.push_back(slice(g, 0, r * m, r * m + sizes[static_cast<size_t>(r)]));
    g = cat(pieces, 0);
  }
  return front_to_dim(g, d);
}

Tensor Group::reduce_scatter(const Tensor& x, int64_t dim, const std::vector<int64_t>& sizes_in) {
  NoGradGuard ng;
  check_reducible("dist::reduce_scatter", x);
  const int64_t d = wrap_dim(dim, x.dim(), "dist::reduce_scatter");
  const int64_t n = x.size(d), P = size();
  std::vector<int64_t> sizes = sizes_in;
  if (sizes.empty()) {
    GG_CHECK(n % P == 0, ShapeError, "gg::dist::reduce_scatter: dim ", d, " of x ", shape_str(x.shape()),
             " has size ", n, ", not a multiple of the ", P, " ranks; pass the pieces' sizes");
    sizes.assign(static_cast<size_t>(P), n / P);
  }
  GG_CHECK(static_cast<int64_t>(sizes.size()) == P, ValueError, "gg::dist::reduce_scatter: got ", sizes.size(),
           " sizes for ", P, " ranks");
  for (int64_t s : sizes)
    GG_CHECK(s >= 0, ValueError, "gg::dist::reduce_scatter: sizes must be >= 0, got ", shape_str(sizes));
  GG_CHECK(std::accumulate(sizes.begin(), sizes.end(), int64_t{0}) == n, ShapeError,
           "gg::dist::reduce_scatter: sizes ", shape_str(sizes), " do not add up to dim ", d, " of x ",
           shape_str(x.shape()));
  // The sizes travel with the shape check, so ranks that cut differently are told so.
  exchange_meta("dist::reduce_scatter", x, -1);
  if (shape_checks_) {
    const Tensor s = from_indices(sizes, {P}, x.device());
    const std::vector<int64_t> all = all_gather_flat(s).to_vector<int64_t>();
    for (int64_t r = 0; r < P; ++r)
      GG_CHECK(std::equal(sizes.begin(), sizes.end(), all.begin() + r * P), ValueError,
               "gg::dist::reduce_scatter: the ranks cut x differently: rank ", rank(), " has sizes ",
               shape_str(sizes), ", rank ", r, " has ",
               shape_str(Shape(all.begin() + r * P, all.begin() + (r + 1) * P)));
  }
  const int64_t mine = sizes[static_cast<size_t>(rank())];
  const int64_t m = *std::max_element(sizes.begin(), sizes.end());
  const Shape out_shape = with_size(x.shape(), d, mine);
  if (m == 0 || x.numel() == 0) return zeros(out_shape, x.dtype(), x.device());

  Tensor front = dim_to_front(x, d);  // (n, rest...)
  if (m * P != n) {  // uneven: pad every piece to m rows
    TensorList pieces;
    int64_t off = 0;
    for (int64_t s : sizes) {
      pieces.push_back(pad_front(slice(front, 0, off, off + s), m));
      off += s;
    }
    front = cat(pieces, 0);
  }
  Shape piece_shape = front.shape();
  piece_shape[0] = m;
  Tensor mine_t = reshape(reduce_scatter_flat(reshape(front, {front.numel()})), piece_shape);
  if (mine != m) mine_t = slice(mine_t, 0, 0, mine);
  return front_to_dim(mine_t, d);
}

Tensor Group::broadcast(const Tensor& x, int root) {
  NoGradGuard ng;
  GG_CHECK(x.defined(), ValueError, "gg::dist::broadcast: x is an undefined tensor");
  GG_CHECK(root >= 0 && root < size(), ValueError, "gg::dist::broadcast: root must be in [0, ", size(), "), got ",
           root);
  exchange_meta("dist::broadcast", x, -1);
  if (x.numel() == 0) return zeros(x.shape(), x.dtype(), x.device());
  return reshape(broadcast_flat(reshape(contiguous(x), {x.numel()}), root), x.shape());
}

void Group::send(const Tensor& x, int peer) {
  NoGradGuard ng;
  GG_CHECK(x.defined(), ValueError, "gg::dist::send: x is an undefined tensor");
  check_peer("dist::send", peer, "peer");
  send_flat(reshape(contiguous(x), {x.numel()}), peer);
}

Tensor Group::recv(const Tensor& like, int peer) {
  NoGradGuard ng;
  GG_CHECK(like.defined(), ValueError, "gg::dist::recv: like is an undefined tensor");
  check_peer("dist::recv", peer, "peer");
  return reshape(recv_flat(reshape(contiguous(like), {like.numel()}), peer), like.shape());
}

std::unique_ptr<Group::Pending> Group::start_sendrecv(const Tensor& x, int dst, int src) {
  NoGradGuard ng;
  GG_CHECK(x.defined(), ValueError, "gg::dist::start_sendrecv: x is an undefined tensor");
  check_peer("dist::start_sendrecv", dst, "dst");
  check_peer("dist::start_sendrecv", src, "src");
  return std::make_unique<Reshaped>(start_sendrecv_flat(reshape(contiguous(x), {x.numel()}), dst, src), x.shape());
}

Tensor Group::sendrecv(const Tensor& x, int dst, int src) {
  NoGradGuard ng;
  GG_CHECK(x.defined(), ValueError, "gg::dist::sendrecv: x is an undefined tensor");
  check_peer("dist::sendrecv", dst, "dst");
  check_peer("dist::sendrecv", src, "src");
  return reshape(sendrecv_flat(reshape(contiguous(x), {x.numel()}), dst, src), x.shape());
}

}  // namespace gg::dist
