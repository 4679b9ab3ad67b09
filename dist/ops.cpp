// Differentiable collectives: each forward is a Group method (no tape), recorded as one node
// whose backward calls the adjoint collective through these same functions.
#include "dist/ops.h"

#include <algorithm>
#include <map>
#include <memory>
#include <numeric>
#include <utility>

#include "autograd/grad_mode.h"
#include "autograd/node.h"

namespace gg::dist {
namespace {

// Nodes keep the group by weak reference: a tape that outlives its group gets a DistError when
// differentiated, never a dangling pointer.
std::weak_ptr<Group> handle(Group& group, const char* op) {
  std::weak_ptr<Group> w = group.weak_from_this();
  GG_CHECK(!w.expired(), ValueError, "gg::", op, ": the group must be owned by a std::shared_ptr (as run_threads "
           "and NcclGroup::create make it)");
  return w;
}

std::shared_ptr<Group> lock(const std::weak_ptr<Group>& w, const char* op) {
  std::shared_ptr<Group> g = w.lock();
  GG_CHECK(g != nullptr, DistError, "gg::", op, ": differentiating a collective whose group no longer exists");
  return g;
}

}  // namespace

Tensor all_reduce(Group& group, const Tensor& x) {
  auto w = handle(group, "dist::all_reduce");
  Tensor y = group.all_reduce(x);
  record("dist_all_reduce", {x}, {y}, {}, [w](const BackwardArgs& a) -> TensorList {
    return {all_reduce(*lock(w, "dist::all_reduce"), a.grads[0])};
  });
  return y;
}

Tensor all_reduce_mean(Group& group, const Tensor& x) {
  GG_CHECK(!x.defined() || is_floating(x.dtype()), DTypeError,
           "gg::dist::all_reduce_mean: x must be a floating tensor, got ", dtype_name(x.dtype()));
  return all_reduce(group, x) * (1.0 / group.size());
}

Tensor all_gather(Group& group, const Tensor& x, int64_t dim, std::vector<int64_t>* sizes_out) {
  auto w = handle(group, "dist::all_gather");
  std::vector<int64_t> sizes;
  Tensor y = group.all_gather(x, dim, &sizes);
  if (sizes_out) *sizes_out = sizes;
  const int64_t d = dim < 0 ? dim + x.dim() : dim;  // all_gather has checked it
  record("dist_all_gather", {x}, {y}, {}, [w, d, sizes](const BackwardArgs& a) -> TensorList {
    return {reduce_scatter(*lock(w, "dist::all_gather"), a.grads[0], d, sizes)};
  });
  return y;
}

Tensor reduce_scatter(Group& group, const Tensor& x, int64_t dim, const std::vector<int64_t>& sizes) {
  auto w = handle(group, "dist::reduce_scatter");
  Tensor y = group.reduce_scatter(x, dim, sizes);
  const int64_t d = dim < 0 ? dim + x.dim() : dim;
  record("dist_reduce_scatter", {x}, {y}, {}, [w, d](const BackwardArgs& a) -> TensorList {
    return {all_gather(*lock(w, "dist::reduce_scatter"), a.grads[0], d)};
  });
  return y;
}

Tensor broadcast(Group& group, const Tensor& x, int root) {
  auto w = handle(group, "dist::broadcast");
  Tensor y = group.broadcast(x, root);
  record("dist_broadcast", {x}, {y}, {}, [w, root](const BackwardArgs& a) -> TensorList {
    std::shared_ptr<Group> g = lock(w, "dist::broadcast");
    // The root's input gets the sum of every rank's gradient, the others none. The others still
    // take part (a collective) and keep the sum on their tape through `where`, so that a
    // backward of this backward runs the same collectives on every rank.
    Tensor s = all_reduce(*g, a.grads[0]);
    Tensor keep = gt(full(s.shape(), g->rank() == root ? 1.0 : 0.0, s.dtype(), s.device()),
                     zeros({}, s.dtype(), s.device()));
    return {where(keep, s, zeros_like(s))};
  });
  return y;
}

Tensor sendrecv(Group& group, const Tensor& x, int dst, int src) {
  auto w = handle(group, "dist::sendrecv");
  Tensor y = group.sendrecv(x, dst, src);
  // y on this rank is x of `src`, so this x reaches the loss of `dst`: its gradient is dst's
  // gradient of y, which comes back by the reverse shift.
  record("dist_sendrecv", {x}, {y}, {}, [w, dst, src](const BackwardArgs& a) -> TensorList {
    return {sendrecv(*lock(w, "dist::sendrecv"), a.grads[0], src, dst)};
  });
  return y;
}

TensorList all_reduce_coalesced(Group& group, const TensorList& xs) {
  NoGradGuard ng;
  for (size_t i = 0; i < xs.size(); ++i)
    GG_CHECK(xs[i].defined(), ValueError, "gg::dist::all_reduce_coalesced: tensor ", i, " of ", xs.size(),
             " is undefined");
  // One buffer per (dtype, device), in order of first appearance (the same on every rank).
  std::vector<std::pair<DType, Device>> keys;
  std::map<size_t, std::vector<size_t>> members;
  for (size_t i = 0; i < xs.size(); ++i) {
    const std::pair<DType, Device> key{xs[i].dtype(), xs[i].device()};
    auto it = std::find(keys.begin(), keys.end(), key);
    const size_t k = static_cast<size_t>(it - keys.begin());
    if (it == keys.end()) keys.push_back(key);
    members[k].push_back(i);
  }
  TensorList out(xs.size());
  for (size_t k = 0; k < keys.size(); ++k) {
    TensorList flat;
    for (size_t i : members[k]) flat.push_back(reshape(contiguous(xs[i]), {xs[i].numel()}));
    const Tensor summed = group.all_reduce(flat.size() == 1 ? flat[0] : cat(flat, 0));
    int64_t off = 0;
    for (size_t i : members[k]) {
      out[i] = reshape(slice(summed, 0, off, off + xs[i].numel()), xs[i].shape());
      off += xs[i].numel();
    }
  }
  return out;
}

TensorList average_gradients(Group& group, const TensorList& grads) {
  for (const Tensor& g : grads)
    GG_CHECK(!g.defined() || is_floating(g.dtype()), DTypeError,
             "gg::dist::average_gradients: gradients must be floating tensors, got ", dtype_name(g.dtype()));
  TensorList out = all_reduce_coalesced(group, grads);
  NoGradGuard ng;
  for (Tensor& t : out) t = t * (1.0 / group.size());
  return out;
}

}  // namespace gg::dist
