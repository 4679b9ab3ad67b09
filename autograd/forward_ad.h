// Forward-mode differentiation: dual tensors, in the spirit of torch.autograd.forward_ad and
// JAX's jvp. Inside a gg::fwd::DualLevel, make_dual(x, t) is x carrying the tangent t; every op
// then computes, beside its result, the result's tangent by its JVP rule (written in gg ops next
// to its backward in ops/*.cpp), and unpack_dual(y) hands back y's primal and tangent J·t.
//
//   gg::fwd::DualLevel level;
//   Tensor y = f(gg::fwd::make_dual(x, v));
//   Tensor jv = gg::fwd::unpack_dual(y).tangent;   // J(x)·v, from one pass (undefined: zero)
//
// Composition. The rules are ordinary ops, so:
// - levels nest (forward over forward): a level opened inside another is inner; a tangent at an
//   inner level carries tangents of the outer ones (while a rule of level k runs, only the levels
//   opened before k are visible), so the outer tangent of an inner tangent is the mixed second
//   derivative;
// - reverse over forward: tangents are recorded on the tape like any result when their inputs
//   require grad, so gg::grad differentiates a JVP;
// - forward over reverse: a backward run on dual tensors is made of ops, which carry tangents,
//   so the gradient of a dual has the tangent H·v (a Hessian-vector product in one pass), with or
//   without create_graph.
// A rule runs whenever an input carries a tangent at an open level, with grad mode on or off.
// An op without a rule (the collectives of gg::dist) throws an AutogradError naming it when a
// tangent reaches it. In-place ops refuse dual tensors (AutogradError).
//
// Levels belong to the thread that opens them and close in reverse order (RAII); closing a level
// erases its tangents from every tensor that has one, so nothing outlives it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "../core/tensor.h"

namespace gg::fwd {

class DualLevel {
 public:
  DualLevel();
  ~DualLevel();
  DualLevel(const DualLevel&) = delete;
  DualLevel& operator=(const DualLevel&) = delete;
  uint64_t id() const { return id_; }
  int depth() const { return depth_; }  // 0 for the outermost level open on this thread

 private:
  uint64_t id_;
  int depth_;
  size_t prev_visible_;
};

struct Dual {
  Tensor primal;   // the tensor without this level's tangent (other levels' tangents and its history kept)
  Tensor tangent;  // its tangent at this level; undefined where it has none (a zero tangent)
};

// `primal` carrying `tangent` at the innermost open level (or at `level`): a view of primal,
// recorded on the tape (gradients flow through it to primal) and keeping primal's tangents at the
// other levels. primal must be floating; tangent must match its shape, dtype and device
// (ShapeError, DTypeError, DeviceError naming the argument); no open level is an AutogradError.
Tensor make_dual(const Tensor& primal, const Tensor& tangent);
Tensor make_dual(const Tensor& primal, const Tensor& tangent, const DualLevel& level);
Dual unpack_dual(const Tensor& t);
Dual unpack_dual(const Tensor& t, const DualLevel& level);

// Whether some dual level is open on this thread.
bool is_active();

}  // namespace gg::fwd
