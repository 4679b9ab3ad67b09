"""gradgrad.torch against PyTorch's math SDPA: values, first and second derivatives, gradcheck and
gradgradcheck in f64 over the attention options, order 3 through the composite fallback,
torch.func, torch.compile, the SDPA routing, zero copies and the error messages."""

import math
import os
import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import gradgrad
import gradgrad.torch as ggt
from gradgrad import _C

f64 = torch.float64


def visible(nq, nk, causal=False, window=(None, None), device=None):
    """gradgrad's mask as a boolean (Nq, Nk) tensor: query i at i' = i + Nk - Nq sees keys j with
    i' - left <= j <= i' + right; causal is right = 0 (ops/ops.h, AttentionOptions)."""
    i = torch.arange(nq, device=device)[:, None] + (nk - nq)
    j = torch.arange(nk, device=device)[None, :]
    seen = torch.ones(nq, nk, dtype=torch.bool, device=device)
    left, right = window[0], 0 if causal else window[1]
    if left is not None:
        seen &= j >= i - left
    if right is not None:
        seen &= j <= i + right
    return seen


def math_sdpa(q, k, v, **kw):
    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(q, k, v, **kw)


def reference(q, k, v, causal=False, window=(None, None), scale=None):
    mask = visible(q.shape[-2], k.shape[-2], causal, window, q.device)
    return math_sdpa(q, k, v, attn_mask=mask, scale=scale, enable_gqa=q.shape[1] != k.shape[1])


def inputs(B, Hq, Hkv, Nq, Nk, d, seed, dtype=f64):
    g = torch.Generator().manual_seed(seed)
    make = lambda *s: torch.randn(*s, generator=g, dtype=dtype).requires_grad_()  # noqa: E731
    return make(B, Hq, Nq, d), make(B, Hkv, Nk, d), make(B, Hkv, Nk, d)


def chain(fn, q, k, v, seed):
    """O, the first derivatives (with create_graph) for a random dO, and the second derivatives
    of a random weighted sum of squares of the first."""
    g = torch.Generator().manual_seed(seed)  # f64 on the CPU, then O's dtype and device: the
    O = fn(q, k, v)                           # same draws whatever the inputs
    dO = torch.randn(O.shape, generator=g, dtype=f64).to(O)
    first = torch.autograd.grad(O, (q, k, v), dO, create_graph=True)
    weights = [torch.randn(t.shape, generator=g, dtype=f64).to(t) for t in first]
    penalty = sum((w * t * t).sum() for w, t in zip(weights, first))
    second = torch.autograd.grad(penalty, (q, k, v))
    return O, first, second


def assert_chains_equal(a, b, tol=1e-10):
    torch.testing.assert_close(a[0], b[0], rtol=tol, atol=tol)
    for x, y in zip(a[1], b[1]):
        torch.testing.assert_close(x, y, rtol=tol, atol=tol)
    for x, y in zip(a[2], b[2]):
        torch.testing.assert_close(x, y, rtol=tol, atol=tol)


# (B, Hq, Hkv, Nq, Nk, d, causal, window): dense and causal, GQA and MQA, Nq != Nk both ways,
# one- and two-sided windows, d 32 and 64. No row of these sees zero keys (PyTorch's math SDPA
# and gradgrad treat such rows differently; test_rows_without_keys covers them).
CASES = {
    "dense": (1, 2, 2, 9, 9, 32, False, (None, None)),
    "causal": (1, 2, 2, 9, 9, 32, True, (None, None)),
    "gqa_causal": (2, 4, 2, 7, 7, 32, True, (None, None)),
    "mqa": (1, 4, 1, 8, 8, 64, False, (None, None)),
    "nq_lt_nk_causal": (1, 2, 2, 5, 11, 32, True, (None, None)),
    "nq_gt_nk_gqa_left_window": (1, 4, 2, 13, 6, 64, False, (2, None)),
    "two_sided_window": (1, 2, 2, 17, 17, 32, False, (3, 2)),
    "nq_lt_nk_right_window": (1, 2, 2, 6, 10, 32, False, (None, 1)),
    "causal_sliding_mqa": (1, 4, 1, 11, 11, 64, True, (4, None)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_matches_math_sdpa_to_order_two(name):
    B, Hq, Hkv, Nq, Nk, d, causal, window = CASES[name]
    q, k, v = inputs(B, Hq, Hkv, Nq, Nk, d, seed=len(name))
    ours = chain(lambda *x: ggt.attention(*x, is_causal=causal, window=window, enable_gqa=True), q, k, v, 1)
    ref = chain(lambda *x: reference(*x, causal=causal, window=window), q, k, v, 1)
    assert_chains_equal(ours, ref)


@pytest.mark.parametrize("name", list(CASES))
def test_gradcheck_and_gradgradcheck(name):
    B, Hq, Hkv, Nq, Nk, d, causal, window = CASES[name]
    q, k, v = inputs(B, Hq, Hkv, Nq, Nk, d, seed=len(name) + 100)
    fn = lambda *x: ggt.attention(*x, is_causal=causal, window=window, enable_gqa=True, scale=0.3)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (q, k, v), fast_mode=True)
    assert torch.autograd.gradgradcheck(fn, (q, k, v), fast_mode=True)


def test_gradgradcheck_full_jacobians_small_case():
    q, k, v = inputs(1, 2, 1, 5, 6, 32, seed=7)
    fn = lambda *x: ggt.attention(*x, is_causal=True, enable_gqa=True)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (q, k, v))
    assert torch.autograd.gradgradcheck(fn, (q, k, v))


def test_logsumexp_output_is_differentiable():
    q, k, v = inputs(1, 2, 2, 6, 8, 32, seed=8)
    fn = lambda *x: torch.ops.gradgrad.attention_forward(*x, None, True, None, None)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (q, k, v), fast_mode=True)
    assert torch.autograd.gradgradcheck(fn, (q, k, v), fast_mode=True)
    O, L = fn(q, k, v)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(32)
    want = torch.logsumexp(scores.masked_fill(~visible(6, 8, True), float("-inf")), -1)
    torch.testing.assert_close(L, want, rtol=1e-12, atol=1e-12)
    # L alone (O unused: no cotangent for it reaches the backward op).
    for x, y in zip(torch.autograd.grad(L.sum(), (q, k)), torch.autograd.grad(want.sum(), (q, k))):
        torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-12)


@pytest.mark.filterwarnings("ignore:gradgrad.torch. third and higher derivatives")
def test_third_order_through_the_composite_fallback():
    q, k, v = inputs(1, 2, 1, 5, 7, 32, seed=9)

    def third(fn):
        O = fn(q, k, v)
        (dq,) = torch.autograd.grad(O.sin().sum(), q, create_graph=True)
        dk, dv = torch.autograd.grad((dq * dq).sum(), (k, v), create_graph=True)
        return torch.autograd.grad((dk * dv).sum(), (q, k, v))

    with pytest.warns(UserWarning, match="third and higher derivatives"):
        ours = third(lambda *x: ggt.attention(*x, is_causal=True, enable_gqa=True))
    ref = third(lambda *x: reference(*x, causal=True))
    for x, y in zip(ours, ref):
        torch.testing.assert_close(x, y, rtol=1e-10, atol=1e-10)
    # The third derivatives against finite differences of the second.
    fn = lambda *x: ggt.attention(*x, window=(1, 2), enable_gqa=True)  # noqa: E731
    second = lambda *x: torch.autograd.grad(fn(*x).pow(2).sum(), x, create_graph=True)  # noqa: E731
    assert torch.autograd.gradgradcheck(second, (q, k, v), fast_mode=True)


def test_rows_without_keys_give_zeros():
    # Bottom-right causal with Nq > Nk: the first Nq - Nk queries see no key.
    q, k, v = inputs(1, 2, 2, 9, 5, 32, seed=10)
    O, L = torch.ops.gradgrad.attention_forward(q, k, v, None, True, None, None)
    assert torch.equal(O[:, :, :4], torch.zeros_like(O[:, :, :4]))
    assert torch.isneginf(L[:, :, :4]).all()
    dq, dk, dv = torch.autograd.grad(O.sum(), (q, k, v), create_graph=True)
    assert torch.equal(dq[:, :, :4], torch.zeros_like(dq[:, :, :4]))
    # The seen rows match the reference on their own.
    ref = reference(q[:, :, 4:], k, v, causal=True)
    torch.testing.assert_close(O[:, :, 4:], ref, rtol=1e-12, atol=1e-12)
    assert torch.autograd.gradgradcheck(lambda *x: ggt.attention(*x, is_causal=True), (q, k, v), fast_mode=True)


def test_func_grad_of_grad():
    q, k, v = inputs(1, 2, 2, 6, 6, 32, seed=11)
    q, k, v = q.detach(), k.detach(), v.detach()

    def outer(fn):
        inner = torch.func.grad(lambda q: fn(q, k, v).sin().sum())
        return torch.func.grad(lambda q: inner(q).pow(2).sum())(q)

    ours = outer(lambda *x: ggt.attention(*x, is_causal=True))
    ref = outer(lambda *x: reference(*x, causal=True))
    torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-10)


def test_vmap_matches_a_loop_with_batched_and_shared_inputs():
    q, k, v = (t.detach() for t in inputs(3, 4, 2, 5, 7, 16, seed=12))
    q, k, v = q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1)  # a vmapped dim of 3 over B = 1
    attn = lambda q, k, v: ggt.attention(q, k, v, is_causal=True, window=(3, None), enable_gqa=True)  # noqa: E731
    out = torch.func.vmap(attn)(q, k, v)
    loop = torch.stack([attn(q[i], k[i], v[i]) for i in range(3)])
    torch.testing.assert_close(out, loop, rtol=0, atol=0)
    shared = torch.func.vmap(attn, in_dims=(1, None, None))(q.movedim(0, 1), k[0], v[0])  # vmapped dim inside
    torch.testing.assert_close(shared, torch.stack([attn(q[i], k[0], v[0]) for i in range(3)]), rtol=0, atol=0)


def test_jacrev_and_per_sample_second_order_match_math_sdpa():
    q, k, v = (t.detach() for t in inputs(3, 2, 2, 4, 5, 8, seed=13))
    jac = lambda fn: torch.func.jacrev(lambda q: fn(q, k[:1], v[:1]))(q[:1])  # noqa: E731
    torch.testing.assert_close(jac(lambda *x: ggt.attention(*x, is_causal=True)),
                               jac(lambda *x: reference(*x, causal=True)), rtol=1e-10, atol=1e-12)

    def per_sample(fn):  # vmap over samples of the gradient of a gradient norm
        def norm(q, k, v):
            g = torch.func.grad(lambda q, k, v: fn(q[None], k[None], v[None]).square().sum(), argnums=(0, 1, 2))(q, k, v)
            return sum(t.square().sum() for t in g)
        return torch.func.vmap(torch.func.grad(norm, argnums=(0, 1, 2)))(q, k, v)

    ours = per_sample(lambda *x: ggt.attention(*x, is_causal=True))
    ref = per_sample(lambda *x: reference(*x, causal=True))
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


@pytest.mark.filterwarnings("ignore:gradgrad.torch")
@pytest.mark.parametrize("name", ["full", "causal_gqa_window", "rect_two_sided"])
def test_forward_mode_matches_math_sdpa(name):
    causal, window, (B, Hq, Hkv, Nq, Nk, d) = {
        "full": (False, (None, None), (1, 2, 2, 5, 5, 8)),
        "causal_gqa_window": (True, (3, None), (2, 4, 2, 5, 7, 8)),
        "rect_two_sided": (False, (2, 1), (1, 2, 2, 6, 4, 8)),
    }[name]
    q, k, v = (t.detach() for t in inputs(B, Hq, Hkv, Nq, Nk, d, seed=14))
    g = torch.Generator().manual_seed(15)
    tangents = tuple(torch.randn(t.shape, generator=g, dtype=f64) for t in (q, k, v))
    gqa = Hq != Hkv
    ours = lambda q, k, v: ggt.attention(q, k, v, is_causal=causal, window=window, enable_gqa=gqa)  # noqa: E731
    ref = lambda q, k, v: reference(q, k, v, causal, window)  # noqa: E731
    o, t = torch.func.jvp(ours, (q, k, v), tangents)
    ro, rt = torch.func.jvp(ref, (q, k, v), tangents)
    torch.testing.assert_close(o, ro, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(t, rt, rtol=1e-12, atol=1e-12)
    with torch.autograd.forward_ad.dual_level():  # dual tensors, eager
        dual = ours(*(torch.autograd.forward_ad.make_dual(p, tp) for p, tp in zip((q, k, v), tangents)))
        torch.testing.assert_close(torch.autograd.forward_ad.unpack_dual(dual).tangent, rt, rtol=1e-12, atol=1e-12)
    # forward over reverse: the JVP of a gradient (runs the backward level's rule), and the JVP of
    # the gradient of a gradient norm (the BoB level's rule), against the same over the reference
    def grads(fn):
        return torch.func.grad(lambda q, k, v: fn(q, k, v).sin().sum(), argnums=(0, 1, 2))

    def norm_grads(fn):
        return torch.func.grad(lambda *x: sum(t.square().sum() for t in grads(fn)(*x)), argnums=(0, 1, 2))

    for lift in (grads, norm_grads):
        a = torch.func.jvp(lift(ours), (q, k, v), tangents)[1]
        b = torch.func.jvp(lift(ref), (q, k, v), tangents)[1]
        for x, y in zip(a, b):
            torch.testing.assert_close(x, y, rtol=1e-10, atol=1e-10)


@pytest.mark.filterwarnings("ignore:gradgrad.torch")
def test_hessian_and_gradcheck_with_forward_ad():
    q, k, v = (t.detach() for t in inputs(1, 2, 2, 4, 5, 4, seed=16))
    hess = lambda fn: torch.func.hessian(lambda q: fn(q, k, v).sin().sum())(q)  # noqa: E731
    torch.testing.assert_close(hess(lambda *x: ggt.attention(*x, is_causal=True)),
                               hess(lambda *x: reference(*x, causal=True)), rtol=1e-10, atol=1e-12)
    x = tuple(t.clone().requires_grad_() for t in (q, k, v))
    assert torch.autograd.gradcheck(lambda *x: ggt.attention(*x, is_causal=True), x, check_forward_ad=True)


@pytest.mark.filterwarnings("ignore:gradgrad.torch")
def test_forward_over_forward_matches_math_sdpa():
    # two forward-mode levels at once: the forward runs as the composite (a custom Function's jvp
    # rule gets no outer tangent in PyTorch, which would make these second-order tangents zero)
    q, k, v = (t.detach() for t in inputs(1, 4, 2, 5, 7, 8, seed=17))
    g = torch.Generator().manual_seed(18)
    t1, t2 = (torch.randn(q.shape, generator=g, dtype=f64) for _ in range(2))
    ours = lambda q: ggt.attention(q, k, v, is_causal=True, window=(3, None), enable_gqa=True)  # noqa: E731
    ref = lambda q: reference(q, k, v, True, (3, None))  # noqa: E731

    def second(fn):
        return torch.func.jvp(lambda q: torch.func.jvp(fn, (q,), (t1,))[1], (q,), (t2,))[1]

    expected = second(ref)
    assert expected.abs().max() > 1e-3
    torch.testing.assert_close(second(ours), expected, rtol=1e-12, atol=1e-12)
    small = lambda fn: torch.func.jacfwd(torch.func.jacfwd(lambda q: fn(q).sin().sum()))(q)  # noqa: E731
    torch.testing.assert_close(small(ours), small(ref), rtol=1e-10, atol=1e-12)


def test_consistency_training_step_with_a_jvp_through_attention():
    # An sCM-style step: the time derivative of the network, a JVP taken without gradients, forms
    # a stop-gradient target; the loss is then back-propagated through a second forward. The JVP
    # runs gradgrad's fused CPU kernel (no warning), both passes match PyTorch's math attention.
    torch.manual_seed(21)
    B, N, D, H = 2, 24, 32, 4
    params = {name: (torch.randn(D, D, dtype=f64) / D**0.5).requires_grad_() for name in ("q", "k", "v", "o")}
    x, dx = torch.randn(B, N, D, dtype=f64), torch.randn(B, N, D, dtype=f64)
    t, dt = torch.tensor(0.3, dtype=f64), torch.tensor(1.0, dtype=f64)

    def network(attend, w, x, t):
        def heads(y):
            return y.view(B, N, H, D // H).transpose(1, 2)

        h = x * torch.cos(t) + torch.sin(t)
        o = attend(heads(h @ w["q"]), heads(h @ w["k"]), heads(h @ w["v"]))
        return o.transpose(1, 2).reshape(B, N, D) @ w["o"]

    def step(attend):
        for w in params.values():
            w.grad = None
        with torch.no_grad():
            f = lambda x, t: network(attend, params, x, t)  # noqa: E731
            value, tangent = torch.func.jvp(f, (x, t), (dx, dt))
        target = value - 0.1 * tangent
        loss = (network(attend, params, x, t) - target).square().mean() + tangent.square().mean()
        loss.backward()
        return tangent, [w.grad.clone() for w in params.values()]

    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="gradgrad.torch")  # the fused kernel does not warn
        ours = step(lambda q, k, v: ggt.attention(q, k, v, is_causal=True))
    ref = step(lambda q, k, v: reference(q, k, v, causal=True))
    assert ours[0].abs().max() > 1e-3
    torch.testing.assert_close(ours[0], ref[0], rtol=1e-10, atol=1e-12)
    for a, b in zip(ours[1], ref[1]):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


# (causal, window, (B, Hq, Hkv, Nq, Nk, d), scale) for the forward's fused JVP: the forward-mode
# cases above, a grouped case with Nq > Nk whose first rows see no key and a given scale, and sizes
# past one tile of the CPU kernel.
FUSED_JVP_CASES = {
    "full": (False, (None, None), (1, 2, 2, 5, 5, 8), None),
    "causal_gqa_window": (True, (3, None), (2, 4, 2, 5, 7, 8), None),
    "rect_two_sided": (False, (2, 1), (1, 2, 2, 6, 4, 8), None),
    "mqa_causal_nq_gt_nk_scale": (True, (None, None), (1, 4, 1, 7, 4, 16), 0.3),
    "tiles": (False, (None, None), (1, 2, 2, 70, 90, 32), None),
}


def forward_level(causal, window, scale):
    """(q, k, v) -> (O, L) through the forward's autograd forms, as gradgrad.torch.attention runs it."""
    return lambda q, k, v: ggt._call(ggt._FORWARD, q, k, v, scale, causal, *window)


def dual_tangents(fn, primals, tangents):
    """The tangents of fn's outputs in a torch.autograd.forward_ad dual level (None: no tangent)."""
    with torch.autograd.forward_ad.dual_level():
        duals = [p if t is None else torch.autograd.forward_ad.make_dual(p, t) for p, t in zip(primals, tangents)]
        return tuple(torch.autograd.forward_ad.unpack_dual(o).tangent for o in fn(*duals))


def dual_level_outputs(fn, primals, tangents):
    """The tangents of fn's outputs (a tuple) in a torch.autograd.forward_ad dual level."""
    with torch.autograd.forward_ad.dual_level():
        outs = fn(*(torch.autograd.forward_ad.make_dual(p, t) for p, t in zip(primals, tangents)))
        return tuple(torch.autograd.forward_ad.unpack_dual(o).tangent for o in outs)


def composite_tangents(options, primals, tangents):
    """The tangents of (O, L) through the composite attention in torch ops (ggt._composite)."""
    return torch.func.jvp(lambda *x: ggt._composite(*x, *options), tuple(primals), tuple(tangents))[1]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("name", list(FUSED_JVP_CASES))
def test_forward_mode_fused_kernel_matches_the_composite(name, dtype):
    causal, window, (B, Hq, Hkv, Nq, Nk, d), scale = FUSED_JVP_CASES[name]
    q, k, v = (t.detach() for t in inputs(B, Hq, Hkv, Nq, Nk, d, seed=17))
    g = torch.Generator().manual_seed(18)
    tangents = tuple(torch.randn(t.shape, generator=g, dtype=f64) for t in (q, k, v))
    fn = forward_level(causal, window, scale)
    exact = composite_tangents((scale, causal, *window), (q, k, v), tangents)  # f64
    tol = 1e-12 if dtype == f64 else 1e-5  # f32: about 1e-6 seen against f64, as the composite's own
    x, t = [p.to(dtype) for p in (q, k, v)], [p.to(dtype) for p in tangents]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the fused path does not warn
        fused = torch.func.jvp(fn, tuple(x), tuple(t))[1]
        dual = dual_tangents(fn, x, t)
        q_only = dual_tangents(fn, x, [t[0], None, None])  # absent tangents are zeros
    q_only_exact = composite_tangents((scale, causal, *window), (q, k, v),
                                      [tangents[0], torch.zeros_like(k), torch.zeros_like(v)])
    for got in (fused, dual):
        for a, b in zip(got, exact):
            assert a.dtype == dtype
            torch.testing.assert_close(a, b.to(dtype), rtol=tol, atol=tol)
    for a, b in zip(q_only, q_only_exact):
        torch.testing.assert_close(a, b.to(dtype), rtol=tol, atol=tol)


def test_forward_mode_runs_the_fused_kernel_outside_batched_transforms():
    q, k, v = (t.detach() for t in inputs(1, 2, 2, 6, 6, 8, seed=19))
    g = torch.Generator().manual_seed(20)
    tangents = tuple(torch.randn(t.shape, generator=g, dtype=f64) for t in (q, k, v))
    fn = lambda q, k, v: ggt.attention(q, k, v, is_causal=True)  # noqa: E731

    def gg_allocations(run):  # the fused kernel takes its O and L scratch from gg's CPU allocator
        before = _C._cpu_memory_stats()[2]
        run()
        return _C._cpu_memory_stats()[2] - before

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert gg_allocations(lambda: torch.func.jvp(fn, (q, k, v), tangents)) == 2
        assert gg_allocations(lambda: dual_tangents(fn, (q, k, v), tangents)) == 2
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="gradgrad.torch")
        # a tangent that requires grad, and a tangent differentiated in reverse mode: the fused
        # kernel, its results recorded with their reverse rule (_FusedTangent)
        assert gg_allocations(lambda: dual_tangents(fn, (q, k, v), [tangents[0].clone().requires_grad_(), None, None])) == 2
        qr = q.clone().requires_grad_()
        (t,) = dual_tangents(fn, (qr, k, v), (tangents[0], None, None))
        torch.autograd.grad(t.sum(), qr)
    with pytest.warns(UserWarning, match="forward-mode derivatives"):  # batched tangents (vmap)
        torch.func.jacfwd(lambda q: fn(q, k, v))(q)


@pytest.mark.parametrize("name", list(FUSED_JVP_CASES))
def test_reverse_over_forward_runs_the_fused_kernels(name):
    # the gradient of <(O', L'), (w, wL)> over q, k, v and their tangents, through dual tensors
    # (the fused tangent's reverse rule: the BoB and the backward), against the composite's
    causal, window, (B, Hq, Hkv, Nq, Nk, d), scale = FUSED_JVP_CASES[name]
    options = (scale, causal, *window)
    q, k, v = (t.detach() for t in inputs(B, Hq, Hkv, Nq, Nk, d, seed=23))
    g = torch.Generator().manual_seed(24)
    tangents = tuple(torch.randn(t.shape, generator=g, dtype=f64) for t in (q, k, v))
    w, wL = torch.randn(q.shape, generator=g, dtype=f64), torch.randn(q.shape[:-1], generator=g, dtype=f64)
    x = [t.clone().requires_grad_() for t in (q, k, v, *tangents)]
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="gradgrad.torch")
        Od, Ld = dual_level_outputs(forward_level(causal, window, scale), x[:3], x[3:])
        got = torch.autograd.grad((Od * w).sum() + (Ld * wL).sum(), x)

    def pairing(q, k, v, qd, kd, vd):
        Od, Ld = composite_tangents(options, (q, k, v), (qd, kd, vd))
        return (Od * w).sum() + (Ld * wL).sum()

    want = torch.func.grad(pairing, argnums=tuple(range(6)))(q, k, v, *tangents)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name", list(FUSED_JVP_CASES))
def test_forward_over_reverse_runs_the_fused_kernels(name, monkeypatch):
    # A Hessian-vector product by forward over reverse: the backward level's tangent is the BoB of
    # the tangents (plus the backward of the cotangents' tangents), so no level forms Nq x Nk
    # (no composite warning) and the BoB kernel runs once; the same through dual tensors, where the
    # forward's tangent is recorded with its reverse rule (_FusedTangent)
    causal, window, (B, Hq, Hkv, Nq, Nk, d), scale = FUSED_JVP_CASES[name]
    q, k, v = (t.detach() for t in inputs(B, Hq, Hkv, Nq, Nk, d, seed=21))
    g = torch.Generator().manual_seed(22)
    tangents = tuple(torch.randn(t.shape, generator=g, dtype=f64) for t in (q, k, v))
    ours = lambda q, k, v: ggt.attention(  # noqa: E731
        q, k, v, is_causal=causal, window=window, scale=scale, enable_gqa=Hq != Hkv)
    loss = lambda fn: lambda q, k, v: fn(q, k, v).sin().sum()  # noqa: E731
    grads = lambda fn: torch.func.grad(loss(fn), argnums=(0, 1, 2))  # noqa: E731
    exact = torch.func.jvp(grads(lambda q, k, v: reference(q, k, v, causal, window, scale)), (q, k, v), tangents)[1]
    bob_calls = []
    run_bob = ggt._run_backward_backward
    monkeypatch.setattr(ggt, "_run_backward_backward", lambda *a: bob_calls.append(1) or run_bob(*a))
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="gradgrad.torch")
        hvp = torch.func.jvp(grads(ours), (q, k, v), tangents)[1]
    assert len(bob_calls) == 1
    for a, b in zip(hvp, exact):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    bob_calls.clear()
    with torch.autograd.forward_ad.dual_level(), warnings.catch_warnings():
        warnings.filterwarnings("error", message="gradgrad.torch")
        x = [torch.autograd.forward_ad.make_dual(p.clone().requires_grad_(), t) for p, t in zip((q, k, v), tangents)]
        dual = torch.autograd.grad(loss(ours)(*x), x)
        hvp = [torch.autograd.forward_ad.unpack_dual(t).tangent for t in dual]
    assert len(bob_calls) == 1
    for a, b in zip(hvp, exact):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_compile_fullgraph_forward_and_backward():
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    graphs = []

    def keep(gm, example_inputs):
        graphs.append(str(gm.graph))
        return make_boxed_func(gm)

    backend = aot_autograd(fw_compiler=keep, bw_compiler=keep)
    torch._dynamo.reset()

    @torch.compile(fullgraph=True, backend=backend)
    def loss(q, k, v):
        return ggt.attention(q, k, v, is_causal=True, window=(3, None)).square().sum()

    q, k, v = inputs(1, 2, 2, 8, 8, 32, seed=12)
    loss(q, k, v).backward()
    assert len(graphs) == 2, graphs
    assert "gradgrad.attention_forward" in graphs[0]
    assert "gradgrad.attention_backward" in graphs[1]
    grads = [t.grad.clone() for t in (q, k, v)]
    want = torch.autograd.grad(reference(q, k, v, causal=True, window=(3, None)).square().sum(), (q, k, v))
    for x, y in zip(grads, want):
        torch.testing.assert_close(x, y, rtol=1e-10, atol=1e-10)


def test_compile_fullgraph_sdpa_entry():
    torch._dynamo.reset()

    @torch.compile(fullgraph=True, backend="aot_eager")
    def loss(q, k, v):  # top-left causal with Nq < Nk: the entry slices the keys
        return ggt.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).square().sum()

    q, k, v = inputs(1, 4, 2, 5, 9, 32, seed=17)
    loss(q, k, v).backward()
    want = torch.autograd.grad(math_sdpa(q, k, v, is_causal=True, enable_gqa=True).square().sum(), (q, k, v))
    for t, y in zip((q, k, v), want):
        torch.testing.assert_close(t.grad, y, rtol=1e-10, atol=1e-10)


# ----------------------------------------------------------------------------- the SDPA entry


@pytest.mark.parametrize(
    "Hq,Hkv,Nq,Nk,is_causal",
    [(2, 2, 7, 7, True), (4, 2, 5, 9, True), (2, 1, 9, 5, True), (2, 2, 6, 10, False)],
)
def test_sdpa_entry_matches_pytorch_top_left_causal(Hq, Hkv, Nq, Nk, is_causal):
    q, k, v = inputs(2, Hq, Hkv, Nq, Nk, 32, seed=Nq * Nk)
    kw = dict(is_causal=is_causal, scale=0.25, enable_gqa=Hq != Hkv)
    ours = chain(lambda *x: ggt.scaled_dot_product_attention(*x, **kw), q, k, v, 2)
    ref = chain(lambda *x: math_sdpa(*x, **kw), q, k, v, 2)
    assert_chains_equal(ours, ref)


def test_sdpa_entry_falls_back_to_pytorch_for_masks_and_dropout():
    q, k, v = inputs(1, 2, 2, 6, 6, 32, seed=13)
    mask = torch.rand(6, 6, generator=torch.Generator().manual_seed(0)) > 0.3
    mask |= torch.eye(6, dtype=torch.bool)
    torch.testing.assert_close(
        ggt.scaled_dot_product_attention(q, k, v, attn_mask=mask), math_sdpa(q, k, v, attn_mask=mask)
    )
    torch.manual_seed(0)
    a = ggt.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    torch.manual_seed(0)
    b = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    torch.testing.assert_close(a, b)


class TinyAttention(torch.nn.Module):
    """The way Hugging Face-style models call attention: F.scaled_dot_product_attention at run time."""

    def __init__(self, dim=32, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim, dtype=torch.float32)

    def forward(self, x):
        B, N, D = x.shape
        q, k, v = self.qkv(x).view(B, N, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, N, D)


def second_order_meta_gradient(model, x):
    params = dict(model.named_parameters())
    loss = torch.func.functional_call(model, params, (x,)).square().mean()
    grads = torch.autograd.grad(loss, list(params.values()), create_graph=True)
    adapted = {n: p - 0.1 * g for (n, p), g in zip(params.items(), grads)}
    outer = torch.func.functional_call(model, adapted, (x,)).square().mean()
    return torch.autograd.grad(outer, list(params.values()))


def test_patch_sdpa_routes_a_model_and_restores_pytorch():
    torch.manual_seed(0)
    model, x = TinyAttention(), torch.randn(2, 16, 32)
    with pytest.raises(RuntimeError, match="derivative for .* is not implemented"):
        second_order_meta_gradient(model, x)
    original = F.scaled_dot_product_attention
    with ggt.patch_sdpa():
        with ggt.patch_sdpa():
            assert F.scaled_dot_product_attention is ggt.scaled_dot_product_attention
        assert F.scaled_dot_product_attention is ggt.scaled_dot_product_attention  # nested exit keeps it
        ours = second_order_meta_gradient(model, x)
    assert F.scaled_dot_product_attention is original
    with sdpa_kernel(SDPBackend.MATH):
        want = second_order_meta_gradient(model, x)
    for a, b in zip(ours, want):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------- zero copies


def test_inputs_are_read_in_place_and_outputs_come_from_torch():
    q, k, v = (t.detach() for t in inputs(1, 4, 2, 8, 8, 32, seed=14))
    assert _C._data_ptr(q) == q.data_ptr()
    qt = q.transpose(2, 3)
    assert _C._data_ptr(qt) == qt.data_ptr()  # a strided view: the same memory, not a copy
    # gg's CPU allocator is not used by a call on contiguous inputs: no input copy, no output.
    before = _C._cpu_memory_stats()[2]
    O, L = torch.ops.gradgrad.attention_forward(q, k, v, None, False, None, None)
    dO = torch.randn_like(O)
    dq, dk, dv = torch.ops.gradgrad.attention_backward(q, k, v, O, L, dO, None, None, False, None, None)
    torch.ops.gradgrad.attention_backward_backward(q, k, v, O, L, dO, None, dq, dk, dv, None, False, None, None)
    assert _C._cpu_memory_stats()[2] == before
    # A strided input handed to _C directly is made contiguous by gg (one allocation per copy).
    O2, L2 = torch.empty_like(O), torch.empty_like(L)
    ks = k.transpose(2, 3).contiguous().transpose(2, 3)
    assert not ks.is_contiguous()
    _C.attention_forward(q, ks, v, O2, L2)
    assert _C._cpu_memory_stats()[2] == before + 1
    torch.testing.assert_close(O2, O, rtol=0, atol=0)


def test_strided_inputs_give_the_same_results():
    q, k, v = inputs(2, 2, 2, 7, 7, 32, seed=15)
    qs = q.detach().transpose(1, 2).contiguous().transpose(1, 2).requires_grad_()  # (B, N, H, d) memory
    ours = chain(lambda q, k, v: ggt.attention(q, k, v, is_causal=True), qs, k, v, 3)
    ref = chain(lambda *x: reference(*x, causal=True), q, k, v, 3)
    assert_chains_equal(ours, ref)


@pytest.mark.skipif(not (torch.cuda.is_available() and _C.cuda_available()), reason="needs CUDA in torch and gradgrad")
def test_cuda_runs_on_the_current_stream():
    q, k, v = (t.detach().cuda().requires_grad_() for t in inputs(1, 2, 2, 64, 64, 64, seed=16, dtype=torch.float32))
    want = chain(lambda *x: reference(*x, causal=True), q, k, v, 4)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        got = chain(lambda *x: ggt.attention(*x, is_causal=True), q, k, v, 4)
    torch.cuda.current_stream().wait_stream(side)
    assert_chains_equal(got, want, tol=1e-4)


def relative_error(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-300)).item()


# Across the CUDA kernels' tiles: the sizes of CASES times 16, every dtype.
@pytest.mark.skipif(not (torch.cuda.is_available() and _C.cuda_available()), reason="needs CUDA in torch and gradgrad")
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", ["causal", "gqa_causal", "nq_gt_nk_gqa_left_window", "two_sided_window"])
def test_cuda_chain_within_twice_the_math_backends_error(name, dtype):
    """O, first and second derivatives on CUDA against the f64 math backend: each error at most
    twice that of PyTorch's math backend in the same dtype (plus a floor at f64's rounding)."""
    B, Hq, Hkv, Nq, Nk, d, causal, window = CASES[name]
    q, k, v = (t.detach().to(dtype).cuda() for t in inputs(B, Hq, Hkv, 16 * Nq, 16 * Nk, d, seed=20))
    run = lambda fn, ty: chain(fn, *(t.to(ty).requires_grad_() for t in (q, k, v)), 5)  # noqa: E731
    ours = run(lambda *x: ggt.attention(*x, is_causal=causal, window=window, enable_gqa=True), dtype)
    theirs = run(lambda *x: reference(*x, causal=causal, window=window), dtype)
    exact = run(lambda *x: reference(*x, causal=causal, window=window), f64)
    flat = lambda c: [c[0], *c[1], *c[2]]  # noqa: E731
    for what, a, b, x in zip(["O", "dQ", "dK", "dV", "gQ", "gK", "gV"], flat(ours), flat(theirs), flat(exact)):
        ours_err, theirs_err = relative_error(a, x), relative_error(b, x)
        assert ours_err <= 2 * theirs_err + 1e-12, f"{what}: {ours_err:.3g} against the math backend's {theirs_err:.3g}"


def forward_over_reverse_errors(device, dtype, monkeypatch):
    """Each H·v of a scalar of attention by forward over reverse (jvp of grad), ours and the math
    backend's in `dtype`, as relative errors against the math backend's in f64, and the number of
    BoB kernel calls ours made (the backward level's tangent)."""
    B, Hq, Hkv, Nq, Nk, d, causal, window = CASES["gqa_causal"]
    q, k, v = (t.detach().to(device) for t in inputs(B, Hq, Hkv, 16 * Nq, 16 * Nk, d, seed=25))
    g = torch.Generator().manual_seed(26)
    tangents = [torch.randn(t.shape, generator=g, dtype=f64).to(device) for t in (q, k, v)]

    def hvp(fn, ty):
        grads = torch.func.grad(lambda q, k, v: fn(q, k, v).float().sin().sum(), argnums=(0, 1, 2))
        return torch.func.jvp(grads, tuple(t.to(ty) for t in (q, k, v)), tuple(t.to(ty) for t in tangents))[1]

    bob_calls = []
    run_bob = ggt._run_backward_backward
    monkeypatch.setattr(ggt, "_run_backward_backward", lambda *a: bob_calls.append(1) or run_bob(*a))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # on CUDA the forward's tangent is the composite
        ours = hvp(lambda *x: ggt.attention(*x, is_causal=causal, window=window, enable_gqa=True), dtype)
    theirs = hvp(lambda *x: reference(*x, causal=causal, window=window), dtype)
    exact = hvp(lambda *x: reference(*x, causal=causal, window=window), f64)
    return [(relative_error(a, x), relative_error(b, x)) for a, b, x in zip(ours, theirs, exact)], len(bob_calls)


@pytest.mark.skipif(not (torch.cuda.is_available() and _C.cuda_available()), reason="needs CUDA in torch and gradgrad")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_forward_over_reverse_runs_the_fused_bob(dtype, monkeypatch):
    """On CUDA the backward level's tangent runs the fused BoB once, and each H·v's error is at
    most twice the math backend's in the same dtype (plus a floor at f64's rounding)."""
    errors, bob_calls = forward_over_reverse_errors("cuda", dtype, monkeypatch)
    assert bob_calls == 1
    for what, (ours_err, theirs_err) in zip("qkv", errors):
        assert ours_err <= 2 * theirs_err + 1e-12, f"H·v for {what}: {ours_err:.3g} against {theirs_err:.3g}"


# ----------------------------------------------------------------------------- bad inputs


def raises(exc, *pieces):
    return pytest.raises(exc, match=".*".join(map(str, pieces)))


def test_bad_inputs_raise_with_gradgrads_message():
    q = torch.randn(1, 4, 5, 32, dtype=f64)
    k = torch.randn(1, 2, 6, 32, dtype=f64)
    with raises(ValueError, "gg::attention_forward_out: q must be \\(B, Hq, Nq, d\\)", "\\[4, 5, 32\\]"):
        ggt.attention(q[0], k, k, enable_gqa=True)
    with raises(ValueError, "gg::attention_forward_out: q and k must have the same head dim", "d = 32", "d = 16"):
        ggt.attention(q, k[..., :16], k[..., :16], enable_gqa=True)
    with raises(ValueError, "gg::attention_forward_out", "Hq = 4", "multiple", "Hkv = 3"):
        k3 = torch.randn(1, 3, 6, 32, dtype=f64)
        ggt.attention(q, k3, k3, enable_gqa=True)
    with raises(ValueError, "gg::attention_forward_out: window_left must be >= 0", "-2"):
        ggt.attention(q, k, k, window=(-2, None), enable_gqa=True)
    with raises(ValueError, "gg::attention_forward_out: causal = true means window_right = 0", "3"):
        ggt.attention(q, k, k, is_causal=True, window=(None, 3), enable_gqa=True)
    with raises(TypeError, "gg::attention_forward_out", "f64", "f32"):
        ggt.attention(q, k.float(), k, enable_gqa=True)
    with raises(TypeError, "gg::attention_forward_out: q has DLPack dtype code 0"):
        ggt.attention(q.long(), k.long(), k.long(), enable_gqa=True)
    with raises(ValueError, "gradgrad.torch.attention", "Hq = 4", "Hkv = 2", "enable_gqa"):
        ggt.attention(q, k, k)
    jvp_message = "gg::attention_forward_jvp_out: kt has shape \\[1, 4, 5, 32\\], expected \\[1, 2, 6, 32\\]"
    with raises(ValueError, jvp_message):
        _C.attention_forward_jvp(q, k, k, q, q, None, torch.empty_like(q), torch.empty(1, 4, 5, dtype=f64))
    with raises(ValueError, "gg::attention_backward_out: dO has shape \\[1, 4, 6, 32\\], expected \\[1, 4, 5, 32\\]"):
        O, L = torch.ops.gradgrad.attention_forward(q, k, k, None, False, None, None)
        torch.ops.gradgrad.attention_backward(q, k, k, O, L, torch.randn(1, 4, 6, 32, dtype=f64), None, None,
                                              False, None, None)


def test_package_imports_without_torch():
    code = "import sys, gradgrad; assert 'torch' not in sys.modules and 'numpy' not in sys.modules, sys.modules"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    assert gradgrad.__version__
