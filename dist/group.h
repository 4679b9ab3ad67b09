// gg::dist::Group: a set of ranks that exchange gg tensors. Every rank holds its own Group
// object (the same rank() on no two of them) and calls the same collectives in the same order;
// a collective returns once every rank has called it.
//
// The methods here are plain data movement: they record nothing on the tape. The
// differentiable versions, whose backward is again a collective, are in dist/ops.h.
//
// Two implementations:
//   ThreadGroup (dist/thread_group.h): P "virtual ranks", one std::thread each, in one process.
//   NcclGroup   (dist/nccl_group.h, builds with CUDA and NCCL only): one process per GPU.
//
// Every collective first exchanges a small record of each rank's shape and dtype, so ranks that
// disagree (a programming error that NCCL would answer with a hang or garbage) get a ShapeError
// or DTypeError on every rank instead (set_shape_checks(false) skips it).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "../core/error.h"
#include "../core/tensor.h"

namespace gg::dist {

// A communication failure: a peer that failed or disappeared, a timeout, an NCCL error.
struct DistError : Error {
  using Error::Error;
};

class Group : public std::enable_shared_from_this<Group> {
 public:
  virtual ~Group() = default;
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Elementwise sum over ranks; every rank gets the same result (for ThreadGroup bitwise: the
  // sum runs in rank order). x: f32, f64 (any floating type the device computes in) or i64.
  Tensor all_reduce(const Tensor& x);
  Tensor all_reduce_mean(const Tensor& x);  // all_reduce(x) / size()
  // The ranks' tensors concatenated along `dim` in rank order. Sizes along `dim` may differ
  // between ranks (every other dim must agree); `sizes`, when given, receives them.
  Tensor all_gather(const Tensor& x, int64_t dim, std::vector<int64_t>* sizes = nullptr);
  // The sum over ranks of x, cut along `dim` into size() pieces; rank r gets piece r. `sizes`
  // gives the pieces' lengths (summing to x.size(dim)); empty: equal pieces, x.size(dim) must
  // then be a multiple of size(). x's shape must be the same on every rank.
  Tensor reduce_scatter(const Tensor& x, int64_t dim, const std::vector<int64_t>& sizes = {});
  // Rank `root`'s x on every rank (x gives the shape and dtype on the others).
  Tensor broadcast(const Tensor& x, int root);
  // Point to point. send does not wait for the receiver on ThreadGroup (the tensor is copied);
  // on NCCL a send and its recv must be issued by both sides, so two ranks that exchange must
  // use sendrecv. recv returns a tensor shaped like `like`, with the peer's data.
  void send(const Tensor& x, int peer);
  Tensor recv(const Tensor& like, int peer);
  // Sends x to `dst` and receives a tensor shaped like x from `src`, as one step (a ring shift:
  // dst = rank + 1, src = rank - 1).
  Tensor sendrecv(const Tensor& x, int dst, int src);
  // Returns once every rank has called it.
  virtual void barrier() = 0;

  // Whether the collectives above first compare the ranks' shapes and dtypes (the default; on
  // NCCL that is one small all-gather and a wait for the device per call). Off, they trust the
  // caller: every rank must pass the same shape and dtype (all_gather: the same size along dim
  // too, reduce_scatter: the same cut), or NCCL hangs or returns garbage. Every rank must make
  // the same choice.
  void set_shape_checks(bool on) { shape_checks_ = on; }
  bool shape_checks() const { return shape_checks_; }

  // Communication that may still be running when a start_* method returns: NcclGroup issues it
  // on a stream of its own, after the work already issued on the library's stream, so that work
  // issued afterwards overlaps it; wait() returns the result and orders the library's later work
  // after it. ThreadGroup completes it before returning. Unlike the methods above, the start_*
  // methods exchange no shapes (so that they do not wait for the device): the ranks must have
  // agreed on them before (dist::grad_all_reduce and the ring schedule do).
  class Pending {
   public:
    virtual ~Pending() = default;
    virtual Tensor wait() = 0;
  };
  // all_reduce of x, one-dimensional and contiguous.
  std::unique_ptr<Pending> start_all_reduce(const Tensor& x);
  // sendrecv of x: a ring shift that runs while the caller computes on what it already holds.
  std::unique_ptr<Pending> start_sendrecv(const Tensor& x, int dst, int src);

 protected:
  Group() = default;

  // The primitives each implementation provides. Inputs are contiguous, outputs are new
  // contiguous tensors on the input's device; the public methods above check and reshape.
  virtual Tensor all_reduce_flat(const Tensor& x) = 0;                 // (n) -> (n)
  virtual Tensor all_gather_flat(const Tensor& x) = 0;                 // (n) -> (P·n), rank-major
  virtual Tensor reduce_scatter_flat(const Tensor& x) = 0;             // (P·n) -> (n)
  virtual Tensor broadcast_flat(const Tensor& x, int root) = 0;        // (n) -> (n)
  virtual void send_flat(const Tensor& x, int peer) = 0;
  virtual Tensor recv_flat(const Tensor& like, int peer) = 0;
  virtual Tensor sendrecv_flat(const Tensor& x, int dst, int src) = 0;
  // Defaults: all_reduce_flat and sendrecv_flat, complete on return.
  virtual std::unique_ptr<Pending> start_all_reduce_flat(const Tensor& x);
  virtual std::unique_ptr<Pending> start_sendrecv_flat(const Tensor& x, int dst, int src);

 private:
  // Every rank's [dtype, ndim, sizes...]: checks that the ranks agree (`dim` may differ when
  // >= 0) and returns each rank's shape.
  // With shape_checks() off: size() copies of x's shape, nothing exchanged.
  std::vector<Shape> exchange_meta(const char* op, const Tensor& x, int64_t free_dim);
  void check_peer(const char* op, int peer, const char* arg) const;
  bool shape_checks_ = true;
};

}  // namespace gg::dist
