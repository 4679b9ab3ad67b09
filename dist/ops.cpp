// Differentiable collectives: each forward is a Group method (no tape), recorded as one node
// whose backward calls the adjoint collective through these same functions.
#include "dist/ops.h"

#include <algorithm>
#include <map>
#include <memory>
#include <numeric>
#include <utility>

#include "autograd/engine.h"
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

// The tensors `members` of xs, flattened into one buffer in that order (one tensor: itself,
// flattened); an undefined entry counts as zeros shaped like like[i].
Tensor pack(const TensorList& xs, const TensorList& like, const std::vector<size_t>& members) {
  TensorList flat;
  for (size_t i : members) {
    const Tensor& x = xs[i];
    flat.push_back(x.defined() ? reshape(contiguous(x), {x.numel()})
                               : zeros({like[i].numel()}, like[i].dtype(), like[i].device()));
  }
  return flat.size() == 1 ? contiguous(flat[0]) : cat(flat, 0);
}
// The inverse: out[i] for each member, shaped like like[i], cut from `flat` in order.
void unpack(const Tensor& flat, const TensorList& like, const std::vector<size_t>& members, TensorList& out) {
  int64_t off = 0;
  for (size_t i : members) {
    out[i] = reshape(slice(flat, 0, off, off + like[i].numel()), like[i].shape());
    off += like[i].numel();
  }
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
    unpack(group.all_reduce(pack(xs, xs, members[k])), xs, members[k], out);
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

namespace {

// grad_all_reduce's buckets: members (input indices, in the order they are packed), and the
// all-reduce of each once it has started.
struct Buckets {
  struct Bucket {
    std::vector<size_t> members;
    int64_t numel = 0;
    int missing = 0;  // members whose gradient is not complete yet
    std::unique_ptr<Group::Pending> sum;
  };
  std::vector<Bucket> list;
  std::vector<size_t> of;  // input -> bucket
  TensorList grads;        // the complete gradients, until packed
  size_t next = 0;         // the first bucket not started

  Buckets(const TensorList& inputs, int64_t bucket_bytes) : of(inputs.size()), grads(inputs.size()) {
    for (size_t k = inputs.size(); k-- > 0;) {
      const Tensor& x = inputs[k];
      bool fits = !list.empty();
      if (fits) {
        const Tensor& first = inputs[list.back().members[0]];
        fits = first.dtype() == x.dtype() && first.device() == x.device() &&
               (list.back().numel + x.numel()) * static_cast<int64_t>(dtype_size(x.dtype())) <= bucket_bytes;
      }
      if (!fits) list.emplace_back();
      list.back().members.push_back(k);
      list.back().numel += x.numel();
      ++list.back().missing;
      of[k] = list.size() - 1;
    }
  }
  // Every bucket as [dtype, numel], for comparing the ranks' plans.
  std::vector<int64_t> plan(const TensorList& inputs) const {
    std::vector<int64_t> p;
    for (const Bucket& b : list) {
      p.push_back(static_cast<int64_t>(inputs[b.members[0]].dtype()));
      p.push_back(b.numel);
    }
    return p;
  }
  // Starts the buckets from `next` on whose gradients are all complete, in order.
  void start_ready(Group& group, const TensorList& inputs) {
    NoGradGuard ng;
    for (; next < list.size() && list[next].missing == 0; ++next) {
      Bucket& b = list[next];
      if (b.numel == 0) continue;
      b.sum = group.start_all_reduce(pack(grads, inputs, b.members));
      for (size_t k : b.members) grads[k] = Tensor();
    }
  }
};

}  // namespace

TensorList grad_all_reduce(Group& group, const TensorList& outputs, const TensorList& inputs,
                           const TensorList& grad_outputs, const GradOptions& options, bool average,
                           int64_t bucket_bytes) {
  GG_CHECK(!options.create_graph, ValueError, "gg::dist::grad_all_reduce: options.create_graph must be false (the "
           "sums are not recorded on the tape; dist::all_reduce is the differentiable sum)");
  GG_CHECK(bucket_bytes > 0, ValueError, "gg::dist::grad_all_reduce: bucket_bytes must be positive, got ",
           bucket_bytes);
  GG_CHECK(!inputs.empty(), ValueError, "gg::dist::grad_all_reduce: no inputs given");
  for (size_t i = 0; i < inputs.size(); ++i) {
    GG_CHECK(inputs[i].defined(), ValueError, "gg::dist::grad_all_reduce: input ", i, " is undefined");
    GG_CHECK(is_floating(inputs[i].dtype()), DTypeError, "gg::dist::grad_all_reduce: input ", i,
             " must be a floating tensor, got ", dtype_name(inputs[i].dtype()));
  }
  Buckets buckets(inputs, bucket_bytes);
  {  // every rank's buckets, compared before the backward (a mismatch would hang or mix sums)
    NoGradGuard ng;
    const std::vector<int64_t> mine = buckets.plan(inputs);
    std::vector<int64_t> sizes;
    const Tensor all = group.all_gather(
        from_indices(mine, {static_cast<int64_t>(mine.size())}, inputs[buckets.list[0].members[0]].device()), 0,
        &sizes);
    const std::vector<int64_t> v = all.to_vector<int64_t>();
    int64_t at = 0;
    for (size_t r = 0; r < sizes.size(); ++r) {
      const std::vector<int64_t> theirs(v.begin() + at, v.begin() + at + sizes[r]);
      at += sizes[r];
      GG_CHECK(theirs == mine, DistError, "gg::dist::grad_all_reduce: the ranks' inputs differ (rank ",
               group.rank(), " has ", mine.size() / 2, " buckets of [dtype, elements] ", shape_str(mine), ", rank ",
               r, " has ", theirs.size() / 2, ": ", shape_str(theirs), ")");
    }
  }
  GradOptions o = options;
  o.on_gradient = [&](size_t k, const Tensor& g) {
    buckets.grads[k] = g;
    --buckets.list[buckets.of[k]].missing;
    buckets.start_ready(group, inputs);
    if (options.on_gradient) options.on_gradient(k, g);
  };
  gg::grad(outputs, inputs, grad_outputs, o);
  TensorList out(inputs.size());
  NoGradGuard ng;
  for (Buckets::Bucket& b : buckets.list) {
    if (b.numel == 0)
      for (size_t k : b.members) out[k] = zeros_like(inputs[k]);
    else
      unpack(b.sum->wait(), inputs, b.members, out);
    if (average)
      for (size_t k : b.members) out[k] = out[k] * (1.0 / group.size());
  }
  return out;
}

}  // namespace gg::dist
