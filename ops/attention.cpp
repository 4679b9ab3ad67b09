// Fused attention as three recorded primitives (docs/attention.md derives the math):
//
//   attention_forward(Q, K, V)                 -> O, L             backward: attention_backward
//   attention_backward(Q, K, V, dO, dL; O, L)  -> dQ, dK, dV       backward: attention_backward_backward
//   attention_backward_backward(Q, K, V, dO, dL, Q̃, K̃, Ṽ; O, L) -> gQ, gK, gV, gdO, gdL
//                                                                  backward: composite fallback
//
// L = logsumexp_rows(S) is an output like O (a sequence-parallel schedule merges blocks by it);
// its cotangent dL enters the backward as D - dL (docs/attention.md). Given to the backward and
// the BoB, O and L are saved values, not inputs: no gradient flows into them there, because the
// BoB formulas already contain D = rowsum(dO∘O)'s dependence on Q, K, V and dO. The third level's
// backward differentiates the composite (exact, O(N²) memory) and warns once.
//
// Options (ops.h): grouped-query heads (k, v with Hkv heads), Nq != Nk, and a window around the
// bottom-right aligned position. check_qkv validates them and resolve_mask turns them into the
// kernels' AttentionShape; the composite builds its mask from the same resolved shape, so the
// reference and the fused op cannot disagree on which keys a query sees.
//
// The file follows the chain: the checks every level shares, then one section per level, each
// ending with the function that records the next level's rule, then the composite with the
// order-3 fallback, then the determinism switch.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <tuple>
#include <vector>

// The one upward call from ops/ into autograd/: bob_composite_vjp (the order-3 fallback) runs
// gg::grad, the engine, from inside a backward. Every other op only records nodes for it.
#include "autograd/engine.h"
#include "core/log.h"
#include "ops/common.h"

namespace gg {

// ------------------------------------------------------- shared checks

namespace {

void check_window(const char* op, const std::optional<int64_t>& w, const char* name) {
  GG_CHECK(!w || *w >= 0, ValueError, "gg::", op, ": ", name, " must be >= 0 (or unset: unbounded), got ",
           w.value_or(0));
}

// The mask of `o` for Nq queries and Nk keys, in the kernels' terms (kernels/params.h). Windows
// that cannot hide a key are dropped and window_right = 0 becomes causal, so a mask that equals
// the full or causal one always takes that form.
void resolve_mask(const char* op, int64_t nq, int64_t nk, const AttentionOptions& o, kernels::AttentionShape& s) {
  check_window(op, o.window_left, "window_left");
  check_window(op, o.window_right, "window_right");
  GG_CHECK(!(o.causal && o.window_right.value_or(0) > 0), ValueError, "gg::", op,
           ": causal = true means window_right = 0, got window_right = ", o.window_right.value_or(0));
  s.causal = o.causal;
  s.window_left = o.window_left.value_or(-1);
  s.window_right = o.causal ? -1 : o.window_right.value_or(-1);
  if (s.window_left >= nk - 1) s.window_left = -1;    // i' - window_left <= 0 for every row
  if (s.window_right >= nq - 1) s.window_right = -1;  // i' + window_right >= Nk - 1 for every row
  if (s.window_right == 0) {
    s.causal = true;
    s.window_right = -1;
  }
}

struct Checked {
  kernels::AttentionShape shape;
  Tensor q, k, v;  // contiguous
};

Checked check_qkv(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  detail::check_defined(op, q, "q");
  detail::check_defined(op, k, "k");
  detail::check_defined(op, v, "v");
  GG_CHECK(q.dim() == 4, ShapeError, "gg::", op, ": q must be (B, Hq, Nq, d), got shape ", shape_str(q.shape()));
  GG_CHECK(k.dim() == 4, ShapeError, "gg::", op, ": k must be (B, Hkv, Nk, d), got shape ", shape_str(k.shape()));
  GG_CHECK(v.shape() == k.shape(), ShapeError, "gg::", op,
           ": v must have k's shape (B, Hkv, Nk, d) (dv = d for the fused op; use attention_composite otherwise), "
           "got k ", shape_str(k.shape()), ", v ", shape_str(v.shape()));
  GG_CHECK(k.size(0) == q.size(0), ShapeError, "gg::", op, ": q and k must have the same batch size, got B = ",
           q.size(0), " (q ", shape_str(q.shape()), ") and B = ", k.size(0), " (k ", shape_str(k.shape()), ")");
  GG_CHECK(k.size(3) == q.size(3), ShapeError, "gg::", op, ": q and k must have the same head dim, got d = ",
           q.size(3), " (q ", shape_str(q.shape()), ") and d = ", k.size(3), " (k ", shape_str(k.shape()), ")");
  GG_CHECK(k.size(1) >= 1 && q.size(1) % k.size(1) == 0, ShapeError, "gg::", op, ": the query heads Hq = ",
           q.size(1), " must be a multiple of the key/value heads Hkv = ", k.size(1), " (q ", shape_str(q.shape()),
           ", k ", shape_str(k.shape()), ")");
  detail::check_same_dtype(op, q, k);
  detail::check_same_dtype(op, q, v);
  detail::check_same_device(op, q, k);
  detail::check_same_device(op, q, v);
  detail::check_floating(op, q, "q");
  const double scale = o.scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(3))));
  GG_CHECK(std::isfinite(scale), ValueError, "gg::", op, ": scale must be finite, got ", scale);
  Checked c;
  c.shape = {q.size(0), q.size(1), q.size(2), q.size(3), scale, o.causal};
  if (k.size(1) != q.size(1)) c.shape.Hkv = k.size(1);  // left at -1 (Hkv = H) otherwise
  if (k.size(2) != q.size(2)) c.shape.Nk = k.size(2);   // left at -1 (Nk = N) otherwise
  resolve_mask(op, q.size(2), k.size(2), o, c.shape);
  NoGradGuard ng;
  c.q = contiguous(q);
  c.k = contiguous(k);
  c.v = contiguous(v);
  return c;
}

// The argument `arg` (t) shaped, typed and placed like `like`; an error names it.
void check_like(const char* op, const Tensor& t, const Tensor& like, const char* arg) {
  GG_CHECK(t.shape() == like.shape(), ShapeError, "gg::", op, ": ", arg, " has shape ", shape_str(t.shape()),
           ", expected ", shape_str(like.shape()));
  GG_CHECK(t.dtype() == like.dtype(), DTypeError, "gg::", op, ": ", arg, " has dtype ", dtype_name(t.dtype()),
           ", expected ", dtype_name(like.dtype()));
  GG_CHECK(t.device() == like.device(), DeviceError, "gg::", op, ": ", arg, " is on ", t.device().str(),
           ", expected ", like.device().str());
}

Tensor contiguous_like(const char* op, const Tensor& t, const Tensor& like, const char* arg) {
  detail::check_defined(op, t, arg);
  check_like(op, t, like, arg);
  NoGradGuard ng;
  return contiguous(t);
}

// The row log-sum-exp is kept in f32 for low-precision inputs.
DType lse_dtype(DType t) { return (t == DType::bf16 || t == DType::f16) ? DType::f32 : t; }

// L as attention_forward returns it: contiguous (B, H, N), f32 for 16-bit inputs.
void check_lse(const char* op, const Checked& c, const Tensor& q, const Tensor& L) {
  detail::check_defined(op, L, "L");
  GG_CHECK(L.shape() == Shape({c.shape.B, c.shape.H, c.shape.N}) && L.is_contiguous() && L.dtype() == lse_dtype(q.dtype()),
           ShapeError, "gg::", op, ": L must be the contiguous (B, H, N) log-sum-exp from attention_forward, got shape ",
           shape_str(L.shape()), " ", dtype_name(L.dtype()));
}

// The inputs every level's kernel reads, in the level's argument struct (its other fields zero).
template <typename Args>
Args args_for(const Checked& c) {
  Args a{};
  a.shape = c.shape;
  a.dtype = c.q.dtype();
  a.Q = c.q.raw_data();
  a.K = c.k.raw_data();
  a.V = c.v.raw_data();
  return a;
}

const void* data_or_null(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }

// An output the caller gives an _out function: exactly the shape, dtype and device the op
// writes, contiguous. Returns where the kernel writes; the write bumps the tensor's version.
void* checked_out(const char* op, const Tensor& t, const char* arg, const Shape& shape, DType dtype, Device device) {
  detail::check_defined(op, t, arg);
  GG_CHECK(t.shape() == shape, ShapeError, "gg::", op, ": ", arg, " must have shape ", shape_str(shape), ", got ",
           shape_str(t.shape()));
  GG_CHECK(t.dtype() == dtype, DTypeError, "gg::", op, ": ", arg, " must be ", dtype_name(dtype), ", got ",
           dtype_name(t.dtype()));
  GG_CHECK(t.device() == device, DeviceError, "gg::", op, ": ", arg, " must be on ", device.str(), ", got ",
           t.device().str());
  GG_CHECK(t.is_contiguous(), ValueError, "gg::", op, ": ", arg, " must be contiguous, got strides ",
           shape_str(t.strides()), " for shape ", shape_str(t.shape()));
  t.impl().storage->bump_version();
  return t.raw_data();
}

}  // namespace

// ------------------------------------------------------- 1. forward: O, L

namespace {
void forward_into(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& O, const Tensor& L,
                  const AttentionOptions& o) {
  Checked c = check_qkv(op, q, k, v, o);
  const auto& s = c.shape;
  auto a = args_for<kernels::AttentionFwdArgs>(c);
  a.O = checked_out(op, O, "O", q.shape(), q.dtype(), q.device());
  a.L = checked_out(op, L, "L", {s.B, s.H, s.N}, lse_dtype(q.dtype()), q.device());
  dispatch::attention_fwd(a, q.device());
}
}  // namespace

void attention_forward_out(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& O, const Tensor& L,
                           const AttentionOptions& o) {
  forward_into("attention_forward_out", q, k, v, O, L, o);
}

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  return attention_forward(q, k, v, o).O;
}

AttentionForward attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  Tensor O, L;
  if (q.defined() && q.dim() == 4) {  // otherwise forward_into names the bad argument
    O = empty(q.shape(), q.dtype(), q.device());
    L = empty({q.size(0), q.size(1), q.size(2)}, lse_dtype(q.dtype()), q.device());
  }
  forward_into("attention", q, k, v, O, L, o);
  // Next level: attention_backward. A missing dO or dL arrives undefined; no dL: the plain backward.
  record(
      "attention_forward", {q, k, v}, {O, L}, {q, k, v, O, L},
      [o](const BackwardArgs& g) -> TensorList {
        const TensorList& sv = g.saved;  // Q, K, V, O, L; grads: dO, dL (either may be undefined)
        const Tensor dO = g.grads[0].defined() ? g.grads[0] : zeros_like(sv[3]);
        return attention_backward(sv[0], sv[1], sv[2], sv[3].detach(), sv[4].detach(), dO, o, g.grads[1]);
      },
      [&o](const JvpArgs& j) -> TensorList {  // forward mode: Ȯ and L̇ (attention_forward_jvp, section 5)
        const AttentionForward t =
            attention_forward_jvp(j.inputs[0], j.inputs[1], j.inputs[2], j.tangents[0], j.tangents[1], j.tangents[2], o);
        return {t.O, t.L};
      },
      RecordOptions{/*materialize_grads=*/false});
  return {O, L};
}

// ------------------------------------------------------- 2. backward: dQ, dK, dV

namespace {
// Runs the backward into dQ, dK, dV; returns O made contiguous (what the recorded node saves).
Tensor backward_into(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& O,
                     const Tensor& L, const Tensor& dO, const Tensor& dL, const Tensor& dQ, const Tensor& dK,
                     const Tensor& dV, const AttentionOptions& o) {
  Checked c = check_qkv(op, q, k, v, o);
  Tensor Oc = contiguous_like(op, O, q, "O"), dOc = contiguous_like(op, dO, q, "dO");
  check_lse(op, c, q, L);
  Tensor dLc = dL.defined() ? contiguous_like(op, dL, L, "dL") : Tensor();
  auto a = args_for<kernels::AttentionBwdArgs>(c);
  a.O = Oc.raw_data();
  a.L = L.raw_data();
  a.dO = dOc.raw_data();
  a.dL = data_or_null(dLc);
  a.deterministic = attention_deterministic();
  a.dQ = checked_out(op, dQ, "dQ", q.shape(), q.dtype(), q.device());
  a.dK = checked_out(op, dK, "dK", k.shape(), q.dtype(), q.device());
  a.dV = checked_out(op, dV, "dV", k.shape(), q.dtype(), q.device());
  dispatch::attention_bwd(a, q.device());
  return Oc;
}
}  // namespace

void attention_backward_out(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& O, const Tensor& L,
                            const Tensor& dO, const Tensor& dQ, const Tensor& dK, const Tensor& dV,
                            const AttentionOptions& o, const Tensor& dL) {
  backward_into("attention_backward_out", q, k, v, O, L, dO, dL, dQ, dK, dV, o);
}

TensorList attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& O, const Tensor& L,
                              const Tensor& dO, const AttentionOptions& o, const Tensor& dL) {
  const char* op = "attention_backward";
  TensorList grads(3);
  if (q.defined() && k.defined() && q.dim() == 4 && k.dim() == 4) {  // otherwise backward_into names the bad one
    grads = {empty(q.shape(), q.dtype(), q.device()), empty(k.shape(), q.dtype(), q.device()),
             empty(k.shape(), q.dtype(), q.device())};
  }
  const Tensor Oc = backward_into(op, q, k, v, O, L, dO, dL, grads[0], grads[1], grads[2], o);
  // Next level: attention_backward_backward. A missing cotangent arrives undefined and skips its BoB terms.
  record(
      op, {q, k, v, dO, dL}, grads, {q, k, v, dO, Oc, L, dL},
      [o](const BackwardArgs& g) -> TensorList {
        const TensorList& sv = g.saved;  // Q, K, V, dO, O, L, dL; grads are the cotangents Q̃, K̃, Ṽ (maybe undefined)
        return attention_backward_backward(sv[0], sv[1], sv[2], sv[4], sv[5], sv[3], g.grads[0], g.grads[1],
                                           g.grads[2], o, sv[6]);
      },
      [&](const JvpArgs& j) -> TensorList {
        // Forward mode (forward over reverse), fused: (dQ, dK, dV) = ∇_{q,k,v} φ with φ = ⟨dO, O⟩ + ⟨dL, L⟩.
        // Along q̇, k̇, v̇ it moves by H_φ·(q̇, k̇, v̇), which (H_φ symmetric) is the BoB's gQ, gK, gV
        // with cotangents q̇, k̇, v̇; along dȮ, dL̇ (φ is linear in them) by the backward of dȮ, dL̇.
        // Undefined tangents are zero: their terms are skipped.
        const TensorList& in = j.inputs;
        const TensorList& t = j.tangents;
        TensorList out(3);
        if (t[0].defined() || t[1].defined() || t[2].defined())
          out = attention_backward_backward(in[0], in[1], in[2], O, L, in[3], t[0], t[1], t[2], o, in[4]);
        if (t[3].defined() || t[4].defined()) {
          const TensorList lin =
              attention_backward(in[0], in[1], in[2], O, L, t[3].defined() ? t[3] : zeros_like(in[3]), o, t[4]);
          for (size_t i = 0; i < 3; ++i) out[i] = out[i].defined() ? out[i] + lin[i] : lin[i];
        }
        out.resize(3);
        return out;
      },
      RecordOptions{/*materialize_grads=*/false});
  return grads;
}

// ------------------------------------------------------- 3. backward-over-backward: gQ, gK, gV, gdO, gdL

namespace {
// The BoB's kernel arguments: its checked, contiguous inputs (kept alive in `keep`) and outputs.
struct BobCall {
  kernels::AttentionBobArgs a;
  TensorList keep;
};
BobCall bob_call(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& O, const Tensor& L,
                 const Tensor& dO, const Tensor& qt, const Tensor& kt, const Tensor& vt, const AttentionOptions& o,
                 const Tensor& dL) {
  Checked c = check_qkv(op, q, k, v, o);
  check_lse(op, c, q, L);
  BobCall b{args_for<kernels::AttentionBobArgs>(c),
            {c.q, c.k, c.v, contiguous_like(op, O, q, "O"), contiguous_like(op, dO, q, "dO")}};
  Tensor dLc = dL.defined() ? contiguous_like(op, dL, L, "dL") : Tensor();
  Tensor qtc = qt.defined() ? contiguous_like(op, qt, q, "qt") : Tensor();
  Tensor ktc = kt.defined() ? contiguous_like(op, kt, k, "kt") : Tensor();
  Tensor vtc = vt.defined() ? contiguous_like(op, vt, k, "vt") : Tensor();
  b.a.O = b.keep[3].raw_data();
  b.a.L = L.raw_data();
  b.a.dO = b.keep[4].raw_data();
  b.a.dL = data_or_null(dLc);
  b.a.Qt = data_or_null(qtc);
  b.a.Kt = data_or_null(ktc);
  b.a.Vt = data_or_null(vtc);
  b.a.deterministic = attention_deterministic();
  for (const Tensor& t : {dLc, qtc, ktc, vtc}) b.keep.push_back(t);
  return b;
}

// Points the kernel at the caller's gQ, gK, gV, gdO and gdL (undefined: not wanted).
void bob_into(const char* op, const Tensor& q, const Tensor& k, const Tensor& L, kernels::AttentionBobArgs& a,
              const Tensor& gQ, const Tensor& gK, const Tensor& gV, const Tensor& gdO, const Tensor& gdL) {
  a.gQ = checked_out(op, gQ, "gQ", q.shape(), q.dtype(), q.device());
  a.gK = checked_out(op, gK, "gK", k.shape(), q.dtype(), q.device());
  a.gV = checked_out(op, gV, "gV", k.shape(), q.dtype(), q.device());
  a.gdO = checked_out(op, gdO, "gdO", q.shape(), q.dtype(), q.device());
  a.gdL = gdL.defined() ? checked_out(op, gdL, "gdL", L.shape(), L.dtype(), q.device()) : nullptr;
}

// gQ, gK, gV, gdO, written by the kernel.
TensorList bob_outputs(const char* op, const Tensor& q, const Tensor& k, const Tensor& L,
                       kernels::AttentionBobArgs& a) {
  TensorList outs;
  for (const Tensor* like : {&q, &k, &k, &q}) outs.push_back(empty(like->shape(), q.dtype(), q.device()));
  bob_into(op, q, k, L, a, outs[0], outs[1], outs[2], outs[3], Tensor());
  return outs;
}

// The rule attention_backward_backward records, defined in the next section with the composite
// it differentiates; declared here because the level that records it comes first in the chain.
TensorList bob_composite_vjp(const TensorList& inputs, const TensorList& cots, const AttentionOptions& o);
TensorList bob_composite_jvp(const TensorList& inputs, const TensorList& tangents, const TensorList& outputs,
                             const AttentionOptions& o);
}  // namespace

void attention_backward_backward_out(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& O,
                                     const Tensor& L, const Tensor& dO, const Tensor& qt, const Tensor& kt,
                                     const Tensor& vt, const Tensor& gQ, const Tensor& gK, const Tensor& gV,
                                     const Tensor& gdO, const Tensor& gdL, const AttentionOptions& o,
                                     const Tensor& dL) {
  const char* op = "attention_backward_backward_out";
  BobCall b = bob_call(op, q, k, v, O, L, dO, qt, kt, vt, o, dL);
  bob_into(op, q, k, L, b.a, gQ, gK, gV, gdO, gdL);
  dispatch::attention_bwd_bwd(b.a, q.device());
}

TensorList attention_bob_row_sums(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& O, const Tensor& L,
                                  const Tensor& dO, const Tensor& qt, const Tensor& kt, const Tensor& vt,
                                  const AttentionOptions& o) {
  BobCall b = bob_call("attention_bob_row_sums", q, k, v, O, L, dO, qt, kt, vt, o, Tensor());
  // the stage may write pass 1's outputs, grad_Q and grad_dO, as scratch (kernels/params.h)
  const Tensor gq = empty(q.shape(), q.dtype(), q.device()), gdO = empty(q.shape(), q.dtype(), q.device());
  b.a.gQ = gq.raw_data();
  b.a.gdO = gdO.raw_data();
  TensorList EF = {empty(L.shape(), L.dtype(), q.device()), empty(L.shape(), L.dtype(), q.device())};
  b.a.stage = kernels::BobStage::kRowSums;
  b.a.E = EF[0].raw_data();
  b.a.F = EF[1].raw_data();
  dispatch::attention_bwd_bwd(b.a, q.device());
  return EF;
}

TensorList attention_bob_from_row_sums(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& O,
                                       const Tensor& L, const Tensor& dO, const Tensor& qt, const Tensor& kt,
                                       const Tensor& vt, const Tensor& E, const Tensor& F, const AttentionOptions& o) {
  const char* op = "attention_bob_from_row_sums";
  BobCall b = bob_call(op, q, k, v, O, L, dO, qt, kt, vt, o, Tensor());
  const Tensor Ec = contiguous_like(op, E, L, "E"), Fc = contiguous_like(op, F, L, "F");
  TensorList outs = bob_outputs(op, q, k, L, b.a);
  b.a.stage = kernels::BobStage::kFromRowSums;
  b.a.E = Ec.raw_data();  // read only in this stage
  b.a.F = Fc.raw_data();
  dispatch::attention_bwd_bwd(b.a, q.device());
  return outs;
}

TensorList attention_backward_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& O,
                                       const Tensor& L, const Tensor& dO, const Tensor& qt, const Tensor& kt,
                                       const Tensor& vt, const AttentionOptions& o, const Tensor& dL) {
  const char* op = "attention_backward_backward";
  BobCall b = bob_call(op, q, k, v, O, L, dO, qt, kt, vt, o, dL);
  TensorList outs;  // gQ, gK, gV, gdO, gdL
  for (const Tensor* like : {&q, &k, &k, &q, &L}) outs.push_back(empty(like->shape(), like->dtype(), q.device()));
  bob_into(op, q, k, L, b.a, outs[0], outs[1], outs[2], outs[3], outs[4]);
  dispatch::attention_bwd_bwd(b.a, q.device());
  // Next level: the composite fallback (order 3 and up).
  record(op, {q, k, v, dO, dL, qt, kt, vt}, outs, {q, k, v, dO, dL, qt, kt, vt}, [o](const BackwardArgs& g) -> TensorList {
    logging::warn_once("attention_order3",
                   "gg::attention: third and higher derivatives fall back to differentiating attention_composite "
                   "(exact, but O(N^2) memory)");
    return bob_composite_vjp(g.saved, g.grads, o);
  }, [&o](const JvpArgs& j) -> TensorList { return bob_composite_jvp(j.inputs, j.tangents, j.outputs, o); });
  return outs;
}

// ------------------------------------------------------- 4. order 3 and up: the composite and its fallback

namespace {
// The reference: every step an ordinary differentiable op, N×N scores stored. Grouped heads
// are expanded to one key/value head per query head (a view, then a copy by reshape); the mask
// is the fused op's (resolve_mask), applied by where(). A row that sees no key would make the
// softmax 0/0, so its scores become 0 instead of -inf and its O is set to 0 by where(): O = 0
// and L = -inf there whatever the data, and with finite data every derivative of that row is an
// exact zero.
AttentionForward composite_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o,
                                   bool want_lse) {
  const char* op = "attention_composite";
  detail::check_defined(op, q, "q");
  detail::check_defined(op, k, "k");
  detail::check_defined(op, v, "v");
  GG_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(), ShapeError,
           "gg::attention_composite: q, k, v must have the same number (>= 2) of dims, got ", shape_str(q.shape()),
           ", ", shape_str(k.shape()), ", ", shape_str(v.shape()));
  GG_CHECK(q.size(-1) == k.size(-1), ShapeError, "gg::attention_composite: q and k need the same head dim, got ",
           shape_str(q.shape()), " and ", shape_str(k.shape()));
  GG_CHECK(k.size(-2) == v.size(-2), ShapeError, "gg::attention_composite: k and v need the same length, got ",
           shape_str(k.shape()), " and ", shape_str(v.shape()));
  const double scale = o.scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(-1))));
  GG_CHECK(std::isfinite(scale), ValueError, "gg::attention_composite: scale must be finite, got ", scale);
  const int64_t nq = q.size(-2), nk = k.size(-2);
  Tensor kk = k, vv = v;
  if (q.dim() == 4 && k.size(1) != q.size(1)) {  // grouped-query heads (B, Hkv, Nk, d)
    GG_CHECK(k.size(1) >= 1 && q.size(1) % k.size(1) == 0 && v.size(1) == k.size(1), ShapeError,
             "gg::attention_composite: the query heads Hq = ", q.size(1),
             " must be a multiple of the key/value heads Hkv = ", k.size(1), " (q ", shape_str(q.shape()), ", k ",
             shape_str(k.shape()), ", v ", shape_str(v.shape()), ")");
    const int64_t group = q.size(1) / k.size(1);
    auto widen = [&](const Tensor& t) {
      const Shape grouped = {t.size(0), t.size(1), group, t.size(2), t.size(3)};
      return reshape(expand(unsqueeze(t, 2), grouped), {t.size(0), q.size(1), t.size(2), t.size(3)});
    };
    kk = widen(k);
    vv = widen(v);
  }
  kernels::AttentionShape m{1, 1, nq, q.size(-1), scale, false};
  m.Nk = nk;
  resolve_mask(op, nq, nk, o, m);
  Tensor s = matmul(q, transpose(kk, -1, -2)) * scale;  // (.., Nq, Nk)
  // Row i sees keys [first_key(i), last_key(i)] (first_key >= 0, last_key <= nk - 1). The scores
  // of the keys a row does not see are replaced (not added to, so a NaN there stays out) by
  // -inf, or by 0 in a row that sees no key, whose softmax is then finite and whose O is set to
  // 0; an (Nq, Nk) mask is made only when some row has a key it does not see.
  std::vector<double> keep(static_cast<size_t>(nq), 1.0);
  bool any_masked = false, any_empty = false;
  for (int64_t i = 0; i < nq; ++i) {
    const int64_t lo = m.first_key(i), hi = m.last_key(i);
    if (hi < lo) keep[static_cast<size_t>(i)] = 0.0;
    any_empty = any_empty || hi < lo;
    any_masked = any_masked || lo > 0 || hi < nk - 1;
  }
  if (any_masked) {
    std::vector<double> seen(static_cast<size_t>(nq * nk), 0.0), fill(static_cast<size_t>(nq * nk), 0.0);
    for (int64_t i = 0; i < nq; ++i) {
      const int64_t lo = m.first_key(i), hi = m.last_key(i);
      if (hi < lo) continue;
      std::fill(seen.begin() + i * nk + lo, seen.begin() + i * nk + hi + 1, 1.0);
      std::fill(fill.begin() + i * nk, fill.begin() + (i + 1) * nk, -std::numeric_limits<double>::infinity());
    }
    s = where(from_vector(seen, {nq, nk}, DType::b8, q.device()), s,
              from_vector(fill, {nq, nk}, q.dtype(), q.device()));
  }
  Tensor p = softmax(s, -1);
  Tensor keep_rows = any_empty ? from_vector(keep, {nq, 1}, DType::b8, q.device()) : Tensor();
  AttentionForward f{matmul(p, vv), Tensor()};
  if (any_empty) f.O = where(keep_rows, f.O, zeros({}, q.dtype(), q.device()));
  if (!want_lse) return f;
  // L = m + log Σ_j exp(s - m), m the row maximum (a constant: it cancels); -inf where no key.
  Tensor row_max = max(s, {-1}, true).detach();
  Tensor lse = squeeze(row_max + log(sum(exp(s - row_max), {-1}, true)), -1);
  if (any_empty)
    lse = where(squeeze(keep_rows, -1), lse, full({}, -std::numeric_limits<double>::infinity(), q.dtype(), q.device()));
  f.L = lse;
  return f;
}

// Order-3 fallback: the vector-Jacobian product of the composite BoB map
//   (Q, K, V, dO, dL, Q̃, K̃, Ṽ) -> (gQ, gK, gV, gdO, gdL)
// with cotangents `cots`, by nested gg::grad over attention_composite. Inputs that require grad
// enter through detail::alias when the caller records (create_graph), so the result stays
// connected to their history and higher orders keep working; otherwise through fresh leaves.
TensorList bob_composite_vjp(const TensorList& inputs, const TensorList& cots, const AttentionOptions& o) {
  const bool record_result = GradMode::is_enabled();
  EnableGradGuard eg;
  TensorList x(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) continue;
    if (record_result && inputs[i].requires_grad()) {
      x[i] = detail::alias(inputs[i]);
    } else {
      x[i] = inputs[i].detach();
      x[i].requires_grad_(true);
    }
  }
  // First level: dQ, dK, dV of the composite, as functions of x (dL: L's cotangent, if any).
  const bool has_dL = x[4].defined();
  AttentionForward f = composite_forward(x[0], x[1], x[2], o, has_dL);
  TensorList outs0 = {f.O}, cots0 = {x[3]};
  if (has_dL) {  // the fused L is f32 for 16-bit inputs, the composite's has q's dtype
    outs0.push_back(f.L);
    cots0.push_back(x[4].dtype() == f.L.dtype() ? x[4] : to(x[4], f.L.dtype()));
  }
  TensorList d = grad(outs0, {x[0], x[1], x[2]}, cots0, std::nullopt, /*create_graph=*/true);
  // Second level: gradient of <Q̃, dQ> + <K̃, dK> + <Ṽ, dV> with respect to Q, K, V, dO, dL.
  Tensor inner;
  for (size_t t = 0; t < 3; ++t)
    if (x[5 + t].defined()) inner = inner.defined() ? inner + sum(x[5 + t] * d[t]) : sum(x[5 + t] * d[t]);
  TensorList result(inputs.size());
  if (!inner.defined()) return result;  // no cotangent at all: BoB is identically zero
  TensorList wrt2 = {x[0], x[1], x[2], x[3]};
  if (has_dL) wrt2.push_back(x[4]);
  TensorList g = grad({inner}, wrt2, {}, std::nullopt, /*create_graph=*/true, /*allow_unused=*/true);
  // Third level: the requested vector-Jacobian product.
  TensorList outs, outs_cots, wrt;
  std::vector<size_t> wrt_index;
  for (size_t j = 0; j < g.size(); ++j)
    if (g[j].defined() && g[j].requires_grad()) {
      outs.push_back(g[j]);
      outs_cots.push_back(cots[j]);
    }
  for (size_t i = 0; i < x.size(); ++i)
    if (x[i].defined()) {
      wrt.push_back(x[i]);
      wrt_index.push_back(i);
    }
  if (outs.empty()) return result;
  TensorList r = grad(outs, wrt, outs_cots, std::nullopt, /*create_graph=*/record_result, /*allow_unused=*/true);
  for (size_t j = 0; j < r.size(); ++j) result[wrt_index[j]] = r[j];
  return result;
}

// Forward mode of the BoB (order 3): its Jacobian-vector product as the double-VJP of
// bob_composite_vjp. u ↦ (BoB's VJP of u) is linear, so ∂/∂u ⟨VJP(u), ẋ⟩ = J·ẋ, one tangent per
// BoB output (undefined: zero). Exact, O(N²), like the VJP it differentiates.
TensorList bob_composite_jvp(const TensorList& inputs, const TensorList& tangents, const TensorList& outputs,
                             const AttentionOptions& o) {
  const bool record_result = GradMode::is_enabled();
  EnableGradGuard eg;
  TensorList u;
  for (const Tensor& out : outputs) u.push_back(zeros_like(out).requires_grad_(true));  // any value: linear in u
  const TensorList r = bob_composite_vjp(inputs, u, o);
  Tensor inner;
  for (size_t i = 0; i < r.size(); ++i)
    if (r[i].defined() && tangents[i].defined()) {
      const Tensor term = sum(r[i] * tangents[i]);
      inner = inner.defined() ? inner + term : term;
    }
  if (!inner.defined() || !inner.requires_grad()) return TensorList(outputs.size());
  return grad({inner}, u, {}, std::nullopt, /*create_graph=*/record_result, /*allow_unused=*/true);
}
}  // namespace

Tensor attention_composite(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  return composite_forward(q, k, v, o, false).O;
}

AttentionForward attention_composite_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const AttentionOptions& o) {
  return composite_forward(q, k, v, o, true);
}

// ------------------------------------------------------- 5. forward mode: the JVP of the forward

// Ṡ = scale·(Q̇Kᵀ + QK̇ᵀ) (zero where the mask hides a key), P = softmax(S), L̇ = rowsum(P ∘ Ṡ),
// Ṗ = P ∘ (Ṡ − L̇), Ȯ = ṖV + PV̇, all in differentiable ops (so the tangents have tangents and
// gradients of their own), from the composite's mask. Stores Nq×Nk matrices; where the tangents
// need no derivatives the CPU runs the fused kernel instead (fused_jvp_serves).
namespace {
// The fused kernel (kernels/cpu/attention_jvp.cpp: one sweep beside the forward, no Nq×Nk buffer)
// exists for f32 and f64 on the CPU.
bool fused_jvp_kernel(const Tensor& q) {
  return q.device().is_cpu() && (q.dtype() == DType::f32 || q.dtype() == DType::f64);
}

// attention_forward_jvp runs the kernel where the tangents need no tangents of their own: no input
// or tangent carries a tangent of an outer dual level. Their gradients (reverse over forward) it
// records itself (attention_forward_jvp). Elsewhere the composite formula below.
bool fused_jvp_serves(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& qt, const Tensor& kt,
                      const Tensor& vt) {
  if (!fused_jvp_kernel(q)) return false;
  for (const Tensor* t : {&q, &k, &v, &qt, &kt, &vt})
    if (t->defined() && detail::has_visible_tangent(*t)) return false;
  return true;
}

// q, k, v and the options (check_qkv), and each defined tangent shaped, typed and placed like its primal.
Checked check_jvp(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& qt,
                  const Tensor& kt, const Tensor& vt, const AttentionOptions& o) {
  Checked c = check_qkv(op, q, k, v, o);
  for (const auto& [t, like, name] : {std::tuple<const Tensor&, const Tensor&, const char*>{qt, q, "qt"},
                                      {kt, k, "kt"}, {vt, v, "vt"}}) {
    if (t.defined()) check_like(op, t, like, name);  // undefined: a zero tangent
  }
  return c;
}

// The fused kernel on checked inputs, writing Ȯ and L̇ to Ot and Lt (contiguous, q's shape and
// (B, Hq, Nq), q's dtype); O and L, the forward's, are its scratch, handed out through keep_O and
// keep_L where given. An undefined tangent is zero (nullptr).
void fused_jvp_into(const Checked& c, const Tensor& qt, const Tensor& kt, const Tensor& vt, void* Ot, void* Lt,
                    Tensor* keep_O = nullptr, Tensor* keep_L = nullptr) {
  NoGradGuard ng;
  auto dense = [](const Tensor& t) { return t.defined() ? contiguous(t) : Tensor(); };
  const Tensor qtc = dense(qt), ktc = dense(kt), vtc = dense(vt);
  const Tensor O = empty(c.q.shape(), c.q.dtype(), c.q.device());
  const Tensor L = empty({c.shape.B, c.shape.H, c.shape.N}, c.q.dtype(), c.q.device());
  if (keep_O) *keep_O = O;
  if (keep_L) *keep_L = L;
  auto a = args_for<kernels::AttentionJvpArgs>(c);
  a.Qt = data_or_null(qtc);
  a.Kt = data_or_null(ktc);
  a.Vt = data_or_null(vtc);
  a.O = O.raw_data();
  a.L = L.raw_data();
  a.Ot = Ot;
  a.Lt = Lt;
  dispatch::attention_jvp(a, c.q.device());
}

// The composite formula on checked inputs, in differentiable ops on q, k, v and the tangents.
AttentionForward composite_jvp(const char* op, const Checked& c, const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& qt, const Tensor& kt, const Tensor& vt, const AttentionOptions& o) {
  const int64_t nq = q.size(2), nk = k.size(2), group = q.size(1) / k.size(1);
  auto widen = [&](const Tensor& t) {  // grouped heads: one key/value head per query head
    if (group == 1) return t;
    const Shape grouped = {t.size(0), t.size(1), group, t.size(2), t.size(3)};
    return reshape(expand(unsqueeze(t, 2), grouped), {t.size(0), q.size(1), t.size(2), t.size(3)});
  };
  const Tensor kk = widen(k), vv = widen(v);
  const double scale = c.shape.scale;
  Tensor s = matmul(q, transpose(kk, -1, -2)) * scale;
  Tensor st;  // Ṡ / scale, from the defined tangents
  if (qt.defined()) st = matmul(qt, transpose(kk, -1, -2));
  if (kt.defined()) {
    const Tensor term = matmul(q, transpose(widen(kt), -1, -2));
    st = st.defined() ? st + term : term;
  }
  if (st.defined()) st = st * scale;
  // The composite's mask (section 4): hidden keys get -inf scores, a row that sees no key scores
  // 0 and is zeroed after the softmax.
  kernels::AttentionShape m{1, 1, nq, q.size(-1), scale, false};
  m.Nk = nk;
  resolve_mask(op, nq, nk, o, m);
  std::vector<double> seen(static_cast<size_t>(nq * nk), 0.0), fill(static_cast<size_t>(nq * nk), 0.0),
      keep(static_cast<size_t>(nq), 1.0);
  bool any_masked = false, any_empty = false;
  for (int64_t i = 0; i < nq; ++i) {
    const int64_t lo = m.first_key(i), hi = m.last_key(i);
    any_masked = any_masked || lo > 0 || hi < nk - 1;
    if (hi < lo) {
      keep[static_cast<size_t>(i)] = 0.0;
      any_empty = true;
      continue;
    }
    std::fill(seen.begin() + i * nk + lo, seen.begin() + i * nk + hi + 1, 1.0);
    std::fill(fill.begin() + i * nk, fill.begin() + (i + 1) * nk, -std::numeric_limits<double>::infinity());
  }
  const Tensor zero = zeros({}, q.dtype(), q.device());
  if (any_masked) {
    const Tensor visible = from_vector(seen, {nq, nk}, DType::b8, q.device());
    s = where(visible, s, from_vector(fill, {nq, nk}, q.dtype(), q.device()));
    if (st.defined()) st = where(visible, st, zero);
  }
  Tensor p = softmax(s, -1);
  if (any_empty) p = where(from_vector(keep, {nq, 1}, DType::b8, q.device()), p, zero);
  Tensor ot, l;
  if (st.defined()) {
    const Tensor pst = p * st;
    const Tensor lt = sum(pst, {-1}, true);  // L̇ = rowsum(P ∘ Ṡ)
    ot = matmul(pst - p * lt, vv);           // Ṗ V with Ṗ = P ∘ (Ṡ − L̇)
    l = squeeze(lt, -1);
  } else {
    l = zeros({q.size(0), q.size(1), nq}, q.dtype(), q.device());
  }
  if (vt.defined()) ot = ot.defined() ? ot + matmul(p, widen(vt)) : matmul(p, widen(vt));  // + P V̇
  if (!ot.defined()) ot = zeros_like(q);
  return {ot, l.dtype() == lse_dtype(q.dtype()) ? l : to(l, lse_dtype(q.dtype()))};
}
}  // namespace

AttentionForward attention_forward_jvp(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& qt,
                                       const Tensor& kt, const Tensor& vt, const AttentionOptions& o) {
  const char* op = "attention_forward_jvp";
  const Checked c = check_jvp(op, q, k, v, qt, kt, vt, o);
  if (!fused_jvp_serves(q, k, v, qt, kt, vt)) return composite_jvp(op, c, q, k, v, qt, kt, vt, o);
  AttentionForward t{empty(q.shape(), q.dtype(), q.device()),
                     empty({c.shape.B, c.shape.H, c.shape.N}, q.dtype(), q.device())};
  Tensor O, L;
  fused_jvp_into(c, qt, kt, vt, t.O.raw_data(), t.L.raw_data(), &O, &L);
  // Reverse mode through the tangents (reverse over forward), for cotangents c of (Ȯ, L̇):
  // ⟨(Ȯ, L̇), c⟩ = ⟨(q̇, k̇, v̇), Jᵀc⟩ with Jᵀc the backward of c, so the tangents' gradients are that
  // backward and the primals' are the BoB of c with the tangents as its cotangents; both fused,
  // and differentiable again as those levels are.
  record(
      op, {q, k, v, qt, kt, vt}, {t.O, t.L}, {q, k, v, O, L, qt, kt, vt},
      [o](const BackwardArgs& g) -> TensorList {
        const TensorList& sv = g.saved;  // q, k, v, O, L, q̇, k̇, v̇; grads: c of Ȯ and L̇ (maybe undefined)
        TensorList out(6);
        if (!sv[5].defined() && !sv[6].defined() && !sv[7].defined()) return out;  // zero tangents: (Ȯ, L̇) = 0
        const Tensor cO = g.grads[0].defined() ? g.grads[0] : zeros_like(sv[3]);
        const TensorList bob =
            attention_backward_backward(sv[0], sv[1], sv[2], sv[3], sv[4], cO, sv[5], sv[6], sv[7], o, g.grads[1]);
        for (size_t i = 0; i < 3; ++i) out[i] = bob[i];
        const TensorList back = attention_backward(sv[0], sv[1], sv[2], sv[3], sv[4], cO, o, g.grads[1]);
        for (size_t i = 0; i < 3; ++i) out[3 + i] = sv[5 + i].defined() ? back[i] : Tensor();  // a zero tangent: no edge
        return out;
      },
      RecordOptions{/*materialize_grads=*/false});
  return t;
}

void attention_forward_jvp_out(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& qt,
                               const Tensor& kt, const Tensor& vt, const Tensor& Ot, const Tensor& Lt,
                               const AttentionOptions& o) {
  const char* op = "attention_forward_jvp_out";
  const Checked c = check_jvp(op, q, k, v, qt, kt, vt, o);
  GG_CHECK(!q.device().is_cpu() || fused_jvp_kernel(q), DTypeError, "gg::", op, ": q has dtype ",
           dtype_name(q.dtype()), "; on the CPU it takes f32 and f64");
  const auto& s = c.shape;
  void* ot = checked_out(op, Ot, "Ot", q.shape(), q.dtype(), q.device());
  void* lt = checked_out(op, Lt, "Lt", {s.B, s.H, s.N}, lse_dtype(q.dtype()), q.device());
  if (q.device().is_cpu()) {
    fused_jvp_into(c, qt, kt, vt, ot, lt);
    return;
  }
  // No fused kernel on this device: the composite formula on plain views (nothing recorded, no
  // outer tangents carried), copied into the outputs.
  NoGradGuard ng;
  auto plain = [](const Tensor& t) { return t.defined() ? t.detach() : Tensor(); };
  const AttentionForward t = composite_jvp(op, c, plain(q), plain(k), plain(v), plain(qt), plain(kt), plain(vt), o);
  copy_(Tensor(Ot), t.O);
  copy_(Tensor(Lt), t.L);
}

// ------------------------------------------------------- determinism switch

namespace {
// GG_ATTENTION_DETERMINISTIC=0 at start-up: the faster, atomic additions (any other value or
// unset: deterministic). Read once, as CUBLAS_WORKSPACE_CONFIG is by cuBLAS.
bool deterministic_from_env() {
  const char* env = std::getenv("GG_ATTENTION_DETERMINISTIC");
  return env == nullptr || std::strcmp(env, "0") != 0;
}
// Read by the backward and the BoB, which pass it to the kernels (AttentionSavedArgs::deterministic).
std::atomic<bool> g_attention_deterministic{deterministic_from_env()};
}  // namespace

void set_attention_deterministic(bool deterministic) { g_attention_deterministic = deterministic; }
bool attention_deterministic() { return g_attention_deterministic; }

}  // namespace gg
