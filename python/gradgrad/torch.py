"""gradgrad's fused attention for PyTorch: exact derivatives of every order (docs/python.md).

Three ``torch.library`` custom ops in the namespace ``gradgrad`` run gradgrad's kernels:

    gradgrad::attention_forward(q, k, v, ...)                       -> O, L
    gradgrad::attention_backward(q, k, v, O, L, dO, dL, ...)        -> dQ, dK, dV
    gradgrad::attention_backward_backward(q, k, v, O, L, dO, dL,
                                          qt, kt, vt, ...)          -> gQ, gK, gV, gdO, gdL

each with a fake implementation (torch.compile) and an autograd formula: the forward's is the
backward op, the backward's is the backward-over-backward op, and that one's (order 3 and up)
differentiates a plain-torch composite attention, exact but with Nq x Nk memory. O and L enter
the backward and the BoB as saved values: no gradient flows into them there.

The options follow gg::AttentionOptions (ops/ops.h): query i sits at i' = i + Nk - Nq (bottom-right
alignment) and sees the keys j with i' - window_left <= j <= i' + window_right, an unset window
being unbounded; ``causal`` is window_right = 0. Query heads Hq must be a multiple of the key/value
heads Hkv (grouped-query attention). The ops take contiguous tensors: the public functions below
and the autograd formulas make their inputs contiguous with torch first, so a contiguous input
is read in place and the outputs are allocated by torch on the inputs' device.
"""

import contextlib
import math
import threading
import warnings
from typing import Optional

import torch
import torch.autograd.forward_ad as _fwad
import torch.nn.functional as F
from torch import Tensor
from torch.utils.dlpack import to_dlpack as _to_dlpack

from . import _C

# functorch's level API, private: where a torch lacks it, torch.func.jvp takes the composite path.
try:
    from torch._C import _functorch as _ft
    from torch._functorch.pyfunctorch import retrieve_all_functorch_interpreters as _functorch_interpreters
    from torch._functorch.pyfunctorch import temporarily_clear_interpreter_stack as _temporarily_clear_interpreter_stack

    _FUNCTORCH_LEVELS = all(
        hasattr(_ft, name)
        for name in ("peek_interpreter_stack", "TransformType", "_unwrap_for_grad", "_wrap_for_grad",
                     "is_functorch_wrapped_tensor")
    )
except ImportError:
    _FUNCTORCH_LEVELS = False

__all__ = ["attention", "scaled_dot_product_attention", "patch_sdpa"]

# PyTorch's own function, kept before any patching: the fallback of the SDPA-compatible entry.
_torch_sdpa = F.scaled_dot_product_attention


def _lse_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype


def _stream(t: Tensor) -> int:
    # the raw handle, without the torch.cuda.Stream object current_stream() builds on every call
    return torch._C._cuda_getCurrentRawStream(t.get_device()) if t.is_cuda else 0


def _dl(t: Optional[Tensor]):
    """What _C reads: a DLPack capsule of the tensor, made contiguous if it is not. The capsule
    comes from torch's C function (to_dlpack), which also takes tensors that require grad;
    Tensor.__dlpack__ refuses those and costs several microseconds per tensor in Python checks."""
    if t is None:
        return None
    return _to_dlpack(t if t.is_contiguous() else t.contiguous())


def _lse_like(q: Tensor) -> Tensor:
    return q.new_empty(q.shape[:-1], dtype=_lse_dtype(q.dtype))


# ----------------------------------------------------------------------------- the kernels
#
# _run_* allocate the outputs with torch and run gradgrad's kernels on them. They are the bodies
# of the custom ops below, and the eager autograd Functions (_forms) call them directly: the
# custom-op dispatcher adds tens of microseconds per call.


# The outputs are fresh contiguous tensors: their capsules come from _to_dlpack directly.
def _run_forward(q, k, v, scale, causal, window_left, window_right):
    O, L = torch.empty_like(q, memory_format=torch.contiguous_format), _lse_like(q)
    _C.attention_forward(
        _dl(q), _dl(k), _dl(v), _to_dlpack(O), _to_dlpack(L), scale, causal, window_left, window_right, _stream(q)
    )
    return O, L


def _run_backward(q, k, v, O, L, dO, dL, scale, causal, window_left, window_right):
    c = torch.contiguous_format
    dQ = torch.empty_like(q, memory_format=c)
    dK, dV = torch.empty_like(k, dtype=q.dtype, memory_format=c), torch.empty_like(v, dtype=q.dtype, memory_format=c)
    _C.attention_backward(
        *map(_dl, (q, k, v, O, L, dO, dL)), *map(_to_dlpack, (dQ, dK, dV)),
        scale, causal, window_left, window_right, _stream(q),
    )
    return dQ, dK, dV


def _run_backward_backward(q, k, v, O, L, dO, dL, qt, kt, vt, scale, causal, window_left, window_right):
    c = torch.contiguous_format
    gQ = torch.empty_like(q, memory_format=c)
    gK, gV = torch.empty_like(k, dtype=q.dtype, memory_format=c), torch.empty_like(v, dtype=q.dtype, memory_format=c)
    gdO, gdL = torch.empty_like(q, memory_format=c), torch.empty_like(L, memory_format=c)
    _C.attention_backward_backward(
        *map(_dl, (q, k, v, O, L, dO, dL, qt, kt, vt)), *map(_to_dlpack, (gQ, gK, gV, gdO, gdL)),
        scale, causal, window_left, window_right, _stream(q),
    )
    return gQ, gK, gV, gdO, gdL


_PLAIN = (torch.Tensor, torch.nn.Parameter)


def _direct(q: Tensor) -> bool:
    """Whether an eager call (not under torch.compile: _call checks that first) may skip the
    custom-op dispatcher: a plain CPU or CUDA tensor, with no dispatch mode active. Fake tensors,
    tensor subclasses and the wrappers a finished torch.func transform leaves behind go through
    the ops, which carry the fake implementations and the dispatch keys they need."""
    return (
        type(q) in _PLAIN
        and torch._C._len_torch_dispatch_stack() == 0
        and not torch._C._functorch.is_functorch_wrapped_tensor(q)
    )


# ----------------------------------------------------------------------------- the three ops


@torch.library.custom_op("gradgrad::attention_forward", mutates_args=())
def _forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    scale: Optional[float],
    causal: bool,
    window_left: Optional[int],
    window_right: Optional[int],
) -> tuple[Tensor, Tensor]:
    return _run_forward(q, k, v, scale, causal, window_left, window_right)


@_forward.register_fake
def _(q, k, v, scale, causal, window_left, window_right):
    return torch.empty_like(q, memory_format=torch.contiguous_format), _lse_like(q)


@torch.library.custom_op("gradgrad::attention_backward", mutates_args=())
def _backward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    O: Tensor,
    L: Tensor,
    dO: Tensor,
    dL: Optional[Tensor],
    scale: Optional[float],
    causal: bool,
    window_left: Optional[int],
    window_right: Optional[int],
) -> tuple[Tensor, Tensor, Tensor]:
    return _run_backward(q, k, v, O, L, dO, dL, scale, causal, window_left, window_right)


@_backward.register_fake
def _(q, k, v, O, L, dO, dL, scale, causal, window_left, window_right):
    c = torch.contiguous_format
    return (
        torch.empty_like(q, memory_format=c),
        torch.empty_like(k, dtype=q.dtype, memory_format=c),
        torch.empty_like(v, dtype=q.dtype, memory_format=c),
    )


@torch.library.custom_op("gradgrad::attention_backward_backward", mutates_args=())
def _backward_backward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    O: Tensor,
    L: Tensor,
    dO: Tensor,
    dL: Optional[Tensor],
    qt: Optional[Tensor],
    kt: Optional[Tensor],
    vt: Optional[Tensor],
    scale: Optional[float],
    causal: bool,
    window_left: Optional[int],
    window_right: Optional[int],
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    return _run_backward_backward(q, k, v, O, L, dO, dL, qt, kt, vt, scale, causal, window_left, window_right)


@_backward_backward.register_fake
def _(q, k, v, O, L, dO, dL, qt, kt, vt, scale, causal, window_left, window_right):
    c = torch.contiguous_format
    return (
        torch.empty_like(q, memory_format=c),
        torch.empty_like(k, dtype=q.dtype, memory_format=c),
        torch.empty_like(v, dtype=q.dtype, memory_format=c),
        torch.empty_like(q, memory_format=c),
        torch.empty_like(L, memory_format=c),
    )


# ----------------------------------------------------------------------------- autograd formulas
#
# Each formula is registered on its custom op (register_autograd, so that the ops are
# differentiable when called directly) and on the two autograd.Function forms of its level
# (_forms): torch.func's transforms accept the setup_context form, and not the Function that
# register_autograd generates. The formulas call the next level through _call, so that every
# order stays usable under torch.func.


def _forward_mode() -> bool:
    """Whether a tangent may be asked for: a torch.func transform (jvp among them) or a dual
    level of torch.autograd.forward_ad is active."""
    return _fwad._current_level >= 0 or torch._C._are_functorch_transforms_active()


def _forward_setup(ctx, inputs, output):
    ctx.set_materialize_grads(False)  # an unused output's cotangent arrives as None
    q, k, v, *options = inputs
    ctx.save_for_backward(q, k, v, *output)
    if _forward_mode():
        ctx.save_for_forward(q, k, v, *output)
    ctx.options = options


def _forward_grad(ctx, dO, dL):
    q, k, v, O, L = ctx.saved_tensors
    if dO is None:
        dO = torch.zeros_like(O)
    dQ, dK, dV = _call(_BACKWARD, q, k, v, O.detach(), L.detach(), dO, dL, *ctx.options)
    return dQ, dK, dV, None, None, None, None


def _backward_setup(ctx, inputs, output):
    ctx.set_materialize_grads(False)  # an unused output's cotangent arrives as None
    q, k, v, O, L, dO, dL, *options = inputs
    ctx.save_for_backward(q, k, v, O, L, dO, dL)
    if _forward_mode():
        ctx.save_for_forward(q, k, v, O, L, dO, dL)
    ctx.options = options


def _backward_grad(ctx, qt, kt, vt):
    q, k, v, O, L, dO, dL = ctx.saved_tensors
    gQ, gK, gV, gdO, gdL = _call(_BACKWARD_BACKWARD, q, k, v, O, L, dO, dL, qt, kt, vt, *ctx.options)
    return gQ, gK, gV, None, None, gdO, (gdL if dL is not None else None), None, None, None, None


def _bob_setup(ctx, inputs, output):
    ctx.set_materialize_grads(False)  # an unused output's cotangent arrives as None
    q, k, v, O, L, dO, dL, qt, kt, vt, *options = inputs
    ctx.save_for_backward(q, k, v, dO, dL, qt, kt, vt)
    if _forward_mode():
        ctx.save_for_forward(q, k, v, L, dO, dL, qt, kt, vt)
    ctx.options = options


def _bob_grad(ctx, cQ, cK, cV, cdO, cdL):
    warnings.warn(
        "gradgrad.torch: third and higher derivatives of attention differentiate a composite attention "
        "(exact, but with Nq x Nk memory)"
    )
    q, k, v, dO, dL, qt, kt, vt = ctx.saved_tensors
    g = _bob_composite_vjp([q, k, v, dO, dL, qt, kt, vt], [cQ, cK, cV, cdO, cdL], ctx.options)
    return g[0], g[1], g[2], None, None, g[3], g[4], g[5], g[6], g[7], None, None, None, None


# ----------------------------------------------------------------------------- forward mode
#
# The forward's tangents (O', L') come from gradgrad's fused CPU JVP kernel, and the backward's
# (forward over reverse) from the fused BoB and backward kernels (_run_backward_jvp), where they
# serve (_fused_jvp_inputs). Elsewhere, and at the BoB level, the tangent of a level is the JVP of
# that level written over the composite attention (exact, Nq x Nk scores, like the order-3
# fallback), taken by two VJPs (_jvp): a jvp rule may run inside a torch.autograd.forward_ad dual
# level, where PyTorch does not nest forward mode, so it uses reverse mode only. A level is a
# function of its tensors other than O and L, which enter the backward and the BoB as saved values
# (the reverse rules above give them no gradient either): their tangents are not read, and the
# composite recomputes O and L from q, k and v. Missing tensors and tangents count as zeros.


def _warn_forward_mode():
    warnings.warn(
        "gradgrad.torch: forward-mode derivatives of attention differentiate a composite attention "
        "(exact, but with Nq x Nk memory)"
    )


def _composite_backward(q, k, v, dO, dL, options):
    """(dQ, dK, dV) of the composite for the cotangents dO and dL of O and L."""
    _, vjp = torch.func.vjp(lambda q, k, v: _composite(q, k, v, *options), q, k, v)
    return vjp((dO, dL.to(q.dtype)))


def _composite_bob(q, k, v, dO, dL, qt, kt, vt, options):
    """(gQ, gK, gV, gdO, gdL): the gradient of <qt, dQ> + <kt, dK> + <vt, dV> over the composite."""

    def pairing(q, k, v, dO, dL):
        d = _composite_backward(q, k, v, dO, dL, options)
        return sum((t * g).sum() for t, g in zip((qt, kt, vt), d))

    return torch.func.grad(pairing, argnums=(0, 1, 2, 3, 4))(q, k, v, dO, dL)


def _jvp(f, primals, tangents):
    """J(primals) @ tangents for f (tensors -> tuple of tensors), by reverse mode alone: the VJP of
    u -> J^T u (linear in u, so u's value does not matter) with the cotangent `tangents`."""
    out, vjp = torch.func.vjp(f, *primals)
    _, vjp_of_vjp = torch.func.vjp(lambda *u: vjp(u), *(torch.zeros_like(o) for o in out))
    return vjp_of_vjp(tuple(tangents))


def _or_zeros(t, like):
    return torch.zeros_like(like) if t is None else t


def _fused_jvp_kernel(q):
    """Whether the fused JVP kernel takes q's device and dtype: f32 or f64 on the CPU."""
    return q.device.type == "cpu" and q.dtype in (torch.float32, torch.float64)


def _run_fused(fused, run, options):
    """run(*tensors, *options) on what _fused_jvp_inputs gave (`fused`), its results wrapped at
    the torch.func level it named (none: returned as they are)."""
    tensors, level = fused
    if level is None:
        return run(*tensors, *options)
    with _temporarily_clear_interpreter_stack():  # plain outputs from torch.empty_like
        out = run(*tensors, *options)
    return tuple(_ft._wrap_for_grad(t, level) for t in out)


def _fused_jvp_inputs(tensors, cuda=False):
    """The tensors a fused kernel reads for a level's inputs and their tangents (`tensors`, q
    first, None for a zero tangent), and the torch.func level to wrap its results at (None outside
    torch.func); None where the composite must run. Under torch.func.jvp the rule sees the tensors
    wrapped at the jvp's level, the innermost transform active: they are unwrapped from that level
    alone. The kernels serve f32 or f64 CPU tensors (and, with `cuda`, CUDA tensors of the four
    dtypes) that are then plain (_direct: of plain type, wrapped by no other transform, whose rules
    must see the computation; no dispatch mode active) and tangents that need no derivative of
    their own: grad mode off, or nothing requires grad. Their results are plain tensors, with no
    graph and no rule."""
    q = tensors[0]
    if not _fused_jvp_kernel(q) and not (cuda and q.is_cuda):
        return None
    if torch._C._len_torch_dispatch_stack() != 0:
        return None
    level = None
    if torch._C._are_functorch_transforms_active():
        if not _FUNCTORCH_LEVELS:
            return None
        top = _ft.peek_interpreter_stack()
        if top is None or top.key() != _ft.TransformType.Jvp:
            return None
        level = top.level()
        tensors = tuple(None if t is None else _ft._unwrap_for_grad(t, level) for t in tensors)
    record = torch.is_grad_enabled()
    for t in tensors:
        if t is not None and (not _direct(t) or (record and t.requires_grad)):
            return None
    return tensors, level


def _run_forward_jvp(q, k, v, qd, kd, vd, scale, causal, window_left, window_right):
    """O' and L' (in L's dtype) from the fused kernel; a tangent of None is zero."""
    Od, Ld = torch.empty_like(q, memory_format=torch.contiguous_format), _lse_like(q)
    _C.attention_forward_jvp(
        *map(_dl, (q, k, v, qd, kd, vd)), _to_dlpack(Od), _to_dlpack(Ld),
        scale, causal, window_left, window_right, _stream(q),
    )
    return Od, Ld


class _FusedTangent(torch.autograd.Function):
    """The forward's tangents (O', L') from the fused kernel, with a reverse rule: for cotangents c
    of (O', L'), <(O', L'), c> = <(q', k', v'), J^T c> with J^T c the backward of c, so the
    tangents' gradients are the backward of c and q, k, v's the BoB of c with the tangents as its
    cotangents (both fused, and differentiable again as those levels are)."""

    @staticmethod
    def forward(ctx, q, k, v, O, L, qd, kd, vd, scale, causal, window_left, window_right):
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(q, k, v, O, L, qd, kd, vd)
        ctx.options = (scale, causal, window_left, window_right)
        return _run_forward_jvp(q, k, v, qd, kd, vd, scale, causal, window_left, window_right)

    @staticmethod
    def backward(ctx, cO, cL):
        q, k, v, O, L, qd, kd, vd = ctx.saved_tensors
        if qd is None and kd is None and vd is None:  # zero tangents: (O', L') = 0
            return (None,) * 12
        cO = _or_zeros(cO, O)
        g = _call(_BACKWARD_BACKWARD, q, k, v, O, L, cO, cL, qd, kd, vd, *ctx.options)[:3]
        gd = _call(_BACKWARD, q, k, v, O, L, cO, cL, *ctx.options)
        gd = tuple(None if t is None else x for t, x in zip((qd, kd, vd), gd))
        return (*g, None, None, *gd, None, None, None, None)


def _fused_tangent_serves(tensors):
    """Whether _FusedTangent may give the forward's tangents: eager CPU f32 or f64 tensors (plain,
    no torch.func transform) whose tangents are recorded for reverse mode."""
    return (_fused_jvp_kernel(tensors[0]) and not torch._C._are_functorch_transforms_active()
            and all(t is None or _direct(t) for t in tensors))


def _forward_jvp(ctx, qd, kd, vd, *_):
    q, k, v, O, L = ctx.saved_tensors
    fused = _fused_jvp_inputs((q, k, v, qd, kd, vd))
    if fused is None and _fused_tangent_serves((q, k, v, qd, kd, vd)):
        return _FusedTangent.apply(q, k, v, O.detach(), L.detach(), qd, kd, vd, *ctx.options)
    if fused is not None:
        return _run_fused(fused, _run_forward_jvp, ctx.options)
    _warn_forward_mode()
    primals = (q, k, v)
    tangents = tuple(_or_zeros(t, p) for t, p in zip((qd, kd, vd), primals))
    Od, Ld = _jvp(lambda q, k, v: _composite(q, k, v, *ctx.options), primals, tangents)
    return Od, Ld.to(_lse_dtype(q.dtype))


def _run_backward_jvp(q, k, v, O, L, dO, dL, qd, kd, vd, dOd, dLd, scale, causal, window_left, window_right):
    """The backward's tangents (dQ', dK', dV') from the fused kernels. (dQ, dK, dV) is the gradient
    of phi = <dO, O> + <dL, L> over q, k, v, so along (q', k', v') it moves by the Hessian of phi
    times (q', k', v'), which (the Hessian being symmetric) is the BoB's (gQ, gK, gV) with q', k',
    v' as its cotangents; along (dO', dL'), where phi is linear, by the backward of dO', dL'. A
    tangent of None is zero and drops its kernel."""
    options = (scale, causal, window_left, window_right)
    out = None
    if qd is not None or kd is not None or vd is not None:
        out = _run_backward_backward(q, k, v, O, L, dO, dL, qd, kd, vd, *options)[:3]
    if dOd is not None or dLd is not None:
        lin = _run_backward(q, k, v, O, L, _or_zeros(dOd, dO), dLd, *options)
        out = lin if out is None else tuple(a + b for a, b in zip(out, lin))
    if out is None:
        out = (torch.zeros_like(q), torch.zeros_like(k, dtype=q.dtype), torch.zeros_like(v, dtype=q.dtype))
    return out


def _backward_jvp(ctx, qd, kd, vd, Od, Ld, dOd, dLd, *_):
    q, k, v, O, L, dO, dL = ctx.saved_tensors
    fused = _fused_jvp_inputs((q, k, v, O, L, dO, dL, qd, kd, vd, dOd, dLd), cuda=True)
    if fused is not None:
        return _run_fused(fused, _run_backward_jvp, ctx.options)
    _warn_forward_mode()
    dL = _or_zeros(dL, L)
    primals = (q, k, v, dO, dL)
    tangents = tuple(_or_zeros(t, p) for t, p in zip((qd, kd, vd, dOd, dLd), primals))
    return _jvp(lambda *x: _composite_backward(*x, ctx.options), primals, tangents)


def _bob_jvp(ctx, qd, kd, vd, Od, Ld, dOd, dLd, qtd, ktd, vtd, *_):
    _warn_forward_mode()
    q, k, v, L, dO, dL, qt, kt, vt = ctx.saved_tensors
    dL, qt, kt, vt = _or_zeros(dL, L), _or_zeros(qt, q), _or_zeros(kt, k), _or_zeros(vt, v)
    primals = (q, k, v, dO, dL, qt, kt, vt)
    tangents = tuple(_or_zeros(t, p) for t, p in zip((qd, kd, vd, dOd, dLd, qtd, ktd, vtd), primals))
    gQ, gK, gV, gdO, gdL = _jvp(lambda *x: _composite_bob(*x, ctx.options), primals, tangents)
    return gQ, gK, gV, gdO, gdL.to(L.dtype)


# The ops as the torch.func forms' forward. Each names every parameter: torch.compile (PyTorch
# 2.11) traces a Function applied without grad, as in a backward, by passing ctx first to a
# forward whose parameter count differs from the call's, which a forward of *args always does.
def _forward_op(q, k, v, scale, causal, window_left, window_right):
    return torch.ops.gradgrad.attention_forward(q, k, v, scale, causal, window_left, window_right)


def _backward_op(q, k, v, O, L, dO, dL, scale, causal, window_left, window_right):
    return torch.ops.gradgrad.attention_backward(q, k, v, O, L, dO, dL, scale, causal, window_left, window_right)


def _backward_backward_op(q, k, v, O, L, dO, dL, qt, kt, vt, scale, causal, window_left, window_right):
    return torch.ops.gradgrad.attention_backward_backward(
        q, k, v, O, L, dO, dL, qt, kt, vt, scale, causal, window_left, window_right
    )


# torch.autograd.Function.apply without its Python wrapper, which binds setup_context signatures
# and unwraps dead torch.func wrappers (_direct sends those to the op path).
_apply = torch._C._FunctionBase.__dict__["apply"]


def _forms(run, op, setup, grad, jvp_rule, tensors):
    """How _call runs one level: `run` (the kernels, for calls that record nothing), the apply of
    the eager autograd.Function, the torch.func form, the traced form, and `tensors`, the number
    of leading arguments that may be tensors. `Func` and `Traced` have a separate setup_context,
    which torch.func's transforms and torch.compile require, and call the custom op; `Traced`
    lacks the jvp rule, which Dynamo cannot trace. `Eager` is the classic form, used for plain
    eager calls: it runs the kernels directly. All but `Traced` carry the level's jvp rule."""

    class Traced(torch.autograd.Function):  # for torch.compile, which traces no custom jvp
        generate_vmap_rule = True  # vmap runs forward and backward under the ops' batching rule
        forward = staticmethod(op)
        setup_context = staticmethod(setup)
        backward = staticmethod(grad)

    class Func(Traced):
        jvp = staticmethod(jvp_rule)

    class Eager(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *args):
            output = run(*args)
            setup(ctx, args, output)
            return output

        backward = staticmethod(grad)
        jvp = staticmethod(jvp_rule)

    return run, _apply.__get__(None, Eager), Func, Traced, tensors


def _any_requires_grad(args, n):
    for t in args[:n]:
        if t is not None and t.requires_grad:
            return True
    return False


def _nested_forward_mode() -> bool:
    """Whether two torch.func forward-mode levels are open at once (jvp in jvp, jacfwd of jacfwd).
    PyTorch gives the results of a custom Function's jvp rule no tangent at the outer level, so
    that second-order tangents through it come out zero; attention then runs as the composite
    (torch ops)."""
    if not torch._C._are_functorch_transforms_active() or not _FUNCTORCH_LEVELS:
        return False
    return sum(i.key() == _ft.TransformType.Jvp for i in _functorch_interpreters()) >= 2


def _call(forms, *args):
    """Runs a level. Under two forward-mode levels the forward is the composite
    (_nested_forward_mode). Where _direct allows it and no torch.func transform is active: the kernels
    alone when the call records nothing (grad mode off, or no input that requires grad, and no
    forward_ad dual level), else the eager form. Under torch.compile the traced form (no jvp rule,
    which Dynamo cannot trace); the torch.func form otherwise."""
    run, eager, func, traced, tensors = forms
    if torch.compiler.is_compiling():
        return traced.apply(*args)
    if forms is _FORWARD and _nested_forward_mode():
        _warn_forward_mode()
        return _composite(*args)
    if _direct(args[0]) and not torch._C._are_functorch_transforms_active():
        if _fwad._current_level >= 0 or (torch.is_grad_enabled() and _any_requires_grad(args, tensors)):
            return eager(*args)
        return run(*args)
    return func.apply(*args)


_FORWARD = _forms(_run_forward, _forward_op, _forward_setup, _forward_grad, _forward_jvp, 3)
_BACKWARD = _forms(_run_backward, _backward_op, _backward_setup, _backward_grad, _backward_jvp, 7)
_BACKWARD_BACKWARD = _forms(
    _run_backward_backward, _backward_backward_op, _bob_setup, _bob_grad, _bob_jvp, 10
)


_forward.register_autograd(_forward_grad, setup_context=_forward_setup)
_backward.register_autograd(_backward_grad, setup_context=_backward_setup)
_backward_backward.register_autograd(_bob_grad, setup_context=_bob_setup)


def _batching_rule(op):
    """The vmap rule of an op whose tensors all lead with the batch B: the vmapped dimension is
    folded into B (an input without it is expanded), and the outputs are unfolded again."""

    def rule(info, in_dims, *args):
        n = info.batch_size
        folded = []
        for a, dim in zip(args, in_dims):
            if isinstance(a, Tensor):
                a = a.expand(n, *a.shape) if dim is None else a.movedim(dim, 0)
                a = a.flatten(0, 1)
            folded.append(a)
        outs = op(*folded)
        return tuple(o.unflatten(0, (n, -1)) for o in outs), (0,) * len(outs)

    return rule


for _op in (_forward, _backward, _backward_backward):
    torch.library.register_vmap(_op, _batching_rule(_op))


def _composite(q, k, v, scale, causal, window_left, window_right):
    """O and L of attention written in torch ops (Nq x Nk scores), gg::attention_composite's
    rules: grouped heads repeated, the mask of AttentionOptions, and O = 0, L = -inf in a row that
    sees no key (its scores set to 0 so that every derivative there is an exact zero)."""
    if k.shape[1] != q.shape[1]:
        group = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    nq, nk = q.shape[-2], k.shape[-2]
    s = (q @ k.transpose(-1, -2)) * (scale if scale is not None else 1.0 / math.sqrt(q.shape[-1]))
    i = torch.arange(nq, device=q.device)[:, None] + (nk - nq)
    j = torch.arange(nk, device=q.device)[None, :]
    seen = torch.ones(nq, nk, dtype=torch.bool, device=q.device)
    right = 0 if causal else window_right
    if window_left is not None:
        seen &= j >= i - window_left
    if right is not None:
        seen &= j <= i + right
    rows = seen.any(-1, keepdim=True)
    fill = torch.zeros(nq, 1, dtype=s.dtype, device=q.device).masked_fill(rows, float("-inf"))
    s = torch.where(seen, s, fill)
    O = torch.where(rows, torch.softmax(s, -1) @ v, 0.0)
    L = torch.where(rows[:, 0], torch.logsumexp(s, -1), float("-inf"))
    return O, L


def _bob_composite_vjp(inputs, cots, options):
    """The vector-Jacobian product of the BoB map (q, k, v, dO, dL, qt, kt, vt) -> (gQ, gK, gV,
    gdO, gdL) with cotangents `cots`, by nested autograd over the composite (ops/attention.cpp's
    bob_composite_vjp). Inputs that require grad enter as aliases when the graph is recorded
    (create_graph), so the result keeps their history and higher orders work."""
    record = torch.is_grad_enabled()
    with torch.enable_grad():
        x = []
        for t in inputs:
            if t is None:
                x.append(None)
            elif record and t.requires_grad:
                x.append(t.view_as(t))
            else:
                x.append(t.detach().requires_grad_())
        q, k, v, dO, dL, qt, kt, vt = x
        O, L = _composite(q, k, v, *options)
        outs, outs_cots = [O], [dO]
        if dL is not None:  # the fused L is f32 for 16-bit inputs, the composite's has q's dtype
            outs.append(L)
            outs_cots.append(dL.to(L.dtype))
        d = torch.autograd.grad(outs, (q, k, v), outs_cots, create_graph=True)
        terms = [(t * g).sum() for t, g in zip((qt, kt, vt), d) if t is not None]
        result = [None] * len(inputs)
        if not terms:  # no cotangent at all: the BoB is identically zero
            return result
        wrt2 = [q, k, v, dO] + ([dL] if dL is not None else [])
        g = torch.autograd.grad(sum(terms), wrt2, create_graph=True, allow_unused=True)
        pairs = [(gi, c) for gi, c in zip(g, cots) if gi is not None and gi.requires_grad and c is not None]
        if not pairs:
            return result
        wrt_index = [i for i, t in enumerate(x) if t is not None]
        r = torch.autograd.grad(
            [p[0] for p in pairs],
            [x[i] for i in wrt_index],
            [p[1].to(p[0].dtype) for p in pairs],
            create_graph=record,
            allow_unused=True,
        )
    for i, ri in zip(wrt_index, r):
        result[i] = ri
    return result


# ----------------------------------------------------------------------------- public functions


def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    is_causal: bool = False,
    scale: Optional[float] = None,
    window: tuple[Optional[int], Optional[int]] = (None, None),
    enable_gqa: bool = False,
) -> Tensor:
    """softmax(scale * q @ k^T + mask) @ v with gradgrad's semantics (gg::attention).

    q: (B, Hq, Nq, d); k, v: (B, Hkv, Nk, d); result (B, Hq, Nq, d). ``is_causal`` is
    bottom-right aligned (query i sees keys j <= i + Nk - Nq); ``window = (left, right)`` bounds
    the keys a query sees around that aligned position (None: unbounded); ``scale`` defaults to
    1/sqrt(d). Hq != Hkv needs ``enable_gqa=True`` (as in PyTorch). Differentiable to any order:
    orders 1 and 2 run fused kernels, order 3 and up a composite (exact, Nq x Nk memory).
    """
    if not isinstance(window, (tuple, list)) or len(window) != 2:
        raise ValueError(f"gradgrad.torch.attention: window must be a pair (left, right), got {window!r}")
    if not enable_gqa and q.dim() == 4 and k.dim() == 4 and q.shape[1] != k.shape[1]:
        raise ValueError(
            f"gradgrad.torch.attention: q has Hq = {q.shape[1]} heads and k has Hkv = {k.shape[1]}; "
            "pass enable_gqa=True for grouped-query attention"
        )
    return _call(_FORWARD, q, k, v, scale, is_causal, window[0], window[1])[0]


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Optional[Tensor] = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: Optional[float] = None,
    enable_gqa: bool = False,
) -> Tensor:
    """torch.nn.functional.scaled_dot_product_attention's signature and results, on gradgrad's ops.

    Calls that gradgrad covers, 4-D (B, H, N, d) inputs with value's shape equal to key's, no
    ``attn_mask`` and ``dropout_p == 0``, run the fused ops; PyTorch's top-left ``is_causal``
    (query i sees keys j <= i, whatever Nq and Nk) is translated into gradgrad's mask. Every other
    call goes to PyTorch's own function, with PyTorch's backends and their derivative limits.
    """
    if (
        attn_mask is not None
        or dropout_p != 0.0
        or query.dim() != 4
        or key.dim() != 4
        or value.shape != key.shape
        or (not enable_gqa and query.shape[1] != key.shape[1])
    ):
        return _torch_sdpa(
            query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
            enable_gqa=enable_gqa,
        )
    window_right = None
    nq, nk = query.shape[-2], key.shape[-2]
    if is_causal and nq < nk:
        # Top-left: keys from nq on are seen by no query; on the rest it is the diagonal rule.
        key, value = key[..., :nq, :], value[..., :nq, :]
    elif is_causal:
        window_right = nq - nk  # j <= i is j <= i' + (Nq - Nk) with i' = i + Nk - Nq
    return _call(_FORWARD, query, key, value, scale, is_causal and window_right is None, None, window_right)[0]


_patch_lock = threading.Lock()
_patch_depth = 0


@contextlib.contextmanager
def patch_sdpa():
    """Routes torch.nn.functional.scaled_dot_product_attention to gradgrad while active.

    Replaces the attribute of torch.nn.functional (what models that call
    ``F.scaled_dot_product_attention(...)``, and nn.MultiheadAttention, look up at each call) with
    :func:`scaled_dot_product_attention`, and restores PyTorch's function when the outermost block
    exits. Nestable. The patch is process-wide: other threads see it while any block is active.
    Code that bound the function to its own name before the block (``from torch.nn.functional
    import scaled_dot_product_attention``) keeps PyTorch's.
    """
    global _patch_depth
    with _patch_lock:
        if _patch_depth == 0:
            F.scaled_dot_product_attention = scaled_dot_product_attention
        _patch_depth += 1
    try:
        yield
    finally:
        with _patch_lock:
            _patch_depth -= 1
            if _patch_depth == 0:
                F.scaled_dot_product_attention = _torch_sdpa
