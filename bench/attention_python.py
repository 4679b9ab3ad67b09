#!/usr/bin/env python3
"""gradgrad's attention through PyTorch (gradgrad.torch) beside the same work through the C++ API,
in one process on one GPU (scripts/bench-gpu.sh python -> bench/results/python.jsonl).

The C++ side runs in the extension's bench hooks (_C._bench_chain, _C._bench_forward) on the same
torch tensors, so both sides share the card, the inputs and the process. One JSON object per line:

  {"bench": "chain", ...}     the chain (forward, gradient with create_graph, gradient of
                              <qt, dQ> + <kt, dK> + <vt, dV> w.r.t. q, k, v and dO): torch_ms
                              through gradgrad.torch, cpp_ms through gg::attention and gg::grad
  {"bench": "first", ...}     forward + gradient w.r.t. q, k, v: gradgrad_ms through
                              gradgrad.torch, sdpa_ms through F.scaled_dot_product_attention
                              (PyTorch's default backend choice)
  {"bench": "math", ...}      the chain through gradgrad.torch beside the same chain through SDPA
                              on its math backend (the one with a double backward), until the
                              math backend runs out of memory ("math_ms": "OOM")
  {"bench": "jvp_flash", ...} (--jvp-flash) jvp-flash-attention's JVP beside gradgrad's forward
                              and chain on the same shape, with the JVP's error (bench_jvp_flash)
  {"bench": "overhead", ...}  per-call time of gradgrad.torch.attention (inputs that require
                              grad, forward only) and of the same forward through the C++ API, in
                              a loop of `calls` calls; overhead_us is their difference; and
                              its parts in the same run: floor_us (PyTorch's autograd.Function
                              of the same shape, allocation included), alloc_us (O and L),
                              binding_us (one _C call minus the same call inside C++)

Times are medians of --reps runs after a warm-up, the two sides alternating; the chain sides are
timed from a synchronised start to a synchronised end.

  python3 bench/attention_python.py [--quick] [--reps 5]
"""
import argparse
import json
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.dlpack import to_dlpack

import gradgrad.torch as gt
from gradgrad import _C


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


DEVICE = "cuda"


def DTYPE():
    return torch.bfloat16 if DEVICE == "cuda" else torch.float32


def sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def stream():
    return torch.cuda.current_stream().cuda_stream if DEVICE == "cuda" else 0


def wall(fn):
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - t0


def inputs(B, Hq, Hkv, N, d, dtype, seed=0):
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    qs, ks = (B, Hq, N, d), (B, Hkv, N, d)
    mk = lambda s: torch.randn(s, device=DEVICE, dtype=dtype, generator=g)
    q, k, v, dO = mk(qs), mk(ks), mk(ks), mk(qs)
    qt, kt, vt = mk(qs), mk(ks), mk(ks)
    for t in (q, k, v, dO):
        t.requires_grad_(True)
    return q, k, v, dO, qt, kt, vt


def torch_chain(attn, q, k, v, dO, qt, kt, vt):
    o = attn(q, k, v)
    dq, dk, dv = torch.autograd.grad(o, (q, k, v), dO, create_graph=True)
    s = (dq * qt).sum() + (dk * kt).sum() + (dv * vt).sum()
    torch.autograd.grad(s, (q, k, v, dO))


def bench_chain(cfg, reps):
    B, Hq, Hkv, N, d, causal, left = cfg
    q, k, v, dO, qt, kt, vt = inputs(B, Hq, Hkv, N, d, DTYPE())
    right = 0 if causal else None
    attn = lambda q, k, v: gt.attention(q, k, v, is_causal=causal, window=(left, None), enable_gqa=Hq != Hkv)
    cpp = lambda: _C._bench_chain(
        *(to_dlpack(t.detach()) for t in (q, k, v, dO, qt, kt, vt)), None, causal, left, right, stream(), 1
    )
    py = lambda: wall(lambda: torch_chain(attn, q, k, v, dO, qt, kt, vt))
    py(), cpp()  # warm-up
    t_py, t_cpp = [], []
    for _ in range(reps):
        t_py.append(py())
        t_cpp.append(cpp())
    row = dict(bench="chain", B=B, Hq=Hq, Hkv=Hkv, N=N, d=d, dtype=str(DTYPE()).replace("torch.", ""), causal=causal, window_left=left)
    row.update(torch_ms=round(1e3 * median(t_py), 3), cpp_ms=round(1e3 * median(t_cpp), 3))
    row["torch_over_cpp"] = round(row["torch_ms"] / row["cpp_ms"], 4)
    return row


def bench_first(cfg, reps):
    B, Hq, Hkv, N, d, causal, _ = cfg
    q, k, v, dO, *_ = inputs(B, Hq, Hkv, N, d, DTYPE())
    gqa = Hq != Hkv

    def first(attn):
        return lambda: wall(lambda: torch.autograd.grad(attn(q, k, v), (q, k, v), dO))

    ours = first(lambda q, k, v: gt.attention(q, k, v, is_causal=causal, enable_gqa=gqa))
    sdpa = first(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa))
    ours(), sdpa()
    t_ours, t_sdpa = [], []
    for _ in range(reps):
        t_ours.append(ours())
        t_sdpa.append(sdpa())
    row = dict(bench="first", B=B, Hq=Hq, Hkv=Hkv, N=N, d=d, dtype=str(DTYPE()).replace("torch.", ""), causal=causal)
    row.update(gradgrad_ms=round(1e3 * median(t_ours), 3), sdpa_ms=round(1e3 * median(t_sdpa), 3))
    row["gradgrad_over_sdpa"] = round(row["gradgrad_ms"] / row["sdpa_ms"], 4)
    return row


def bench_math(N, d, causal, reps):
    q, k, v, dO, qt, kt, vt = inputs(1, 16, 16, N, d, DTYPE())
    ours = lambda: wall(lambda: torch_chain(lambda q, k, v: gt.attention(q, k, v, is_causal=causal), q, k, v, dO, qt, kt, vt))

    def math_chain():
        with sdpa_kernel(SDPBackend.MATH):
            torch_chain(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal), q, k, v, dO, qt, kt, vt)

    row = dict(bench="math", B=1, Hq=16, Hkv=16, N=N, d=d, dtype=str(DTYPE()).replace("torch.", ""), causal=causal)
    ours()
    t_ours = [ours() for _ in range(reps)]
    row["gradgrad_ms"] = round(1e3 * median(t_ours), 3)
    try:
        wall(math_chain)
        if DEVICE == "cuda":
            torch.cuda.reset_peak_memory_stats()
        t_math = [wall(math_chain) for _ in range(reps)]
        row["math_ms"] = round(1e3 * median(t_math), 3)
        if DEVICE == "cuda":
            row["math_peak_GiB"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        row["gradgrad_over_math"] = round(row["gradgrad_ms"] / row["math_ms"], 4)
    except torch.OutOfMemoryError:
        row["math_ms"] = "OOM"
    if DEVICE == "cuda":
        torch.cuda.empty_cache()
    return row


class _Floor(torch.autograd.Function):
    """PyTorch's own cost of an autograd.Function of the forward level's shape (three tensors
    and four options in, two fresh outputs, five tensors saved), without gradgrad's kernels."""

    @staticmethod
    def forward(ctx, q, k, v, scale, causal, left, right):
        O, L = torch.empty_like(q), gt._lse_like(q)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(q, k, v, O, L)
        ctx.options = (scale, causal, left, right)
        return O, L

    @staticmethod
    def backward(ctx, dO, dL):
        return None, None, None, None, None, None, None


def bench_overhead(B, H, N, d, calls, reps):
    """The per-call overhead and, in the same run, its parts: PyTorch's autograd.Function floor
    (_Floor, output allocation included), the allocation of O and L alone, and the binding (one
    _C call on DLPack capsules, minus the same call inside C++)."""
    q, k, v, *_ = inputs(B, H, H, N, d, DTYPE())
    qd, kd, vd = q.detach(), k.detach(), v.detach()
    O, L = gt._run_forward(qd, kd, vd, None, False, None, None)
    s = stream()

    def loop(f):
        def run():
            for _ in range(calls):
                f()
        return run

    sides = {
        "torch_us": loop(lambda: gt.attention(q, k, v)),
        "floor_us": loop(lambda: _Floor.apply(q, k, v, None, False, None, None)),
        "alloc_us": loop(lambda: (torch.empty_like(q), gt._lse_like(q))),
        "binding_call_us": loop(lambda: _C.attention_forward(
            *(to_dlpack(t) for t in (qd, kd, vd, O, L)), None, False, None, None, s)),
    }
    cpp = lambda: _C._bench_forward(*(to_dlpack(t) for t in (qd, kd, vd, O, L)), None, False, None, None, s, calls, 1)
    for f in sides.values():
        wall(f)
    cpp()
    times = {name: [] for name in [*sides, "cpp_us"]}
    for _ in range(reps):
        for name, f in sides.items():
            times[name].append(wall(f) / calls)
        times["cpp_us"].append(cpp() / calls)
    row = dict(bench="overhead", B=B, H=H, N=N, d=d, dtype=str(DTYPE()).replace("torch.", ""), calls=calls)
    row.update({name: round(1e6 * median(t), 2) for name, t in times.items()})
    row["overhead_us"] = round(row["torch_us"] - row["cpp_us"], 2)
    row["binding_us"] = round(row.pop("binding_call_us") - row["cpp_us"], 2)
    return row


def bench_jvp_flash(N, d, causal, reps):
    """jvp-flash-attention (Triton, from the registry) beside gradgrad on one shape: its JVP (the
    output and its tangent for tangents of q, k, v) and its error against the JVP of SDPA's math
    backend in f32 from the same bf16 inputs (up to N = 4096), beside gradgrad's forward and chain."""
    from jvp_flash_attention.jvp_attention import JVPAttn

    q, k, v, dO, qt, kt, vt = inputs(1, 16, 16, N, d, DTYPE())
    qd, kd, vd = q.detach(), k.detach(), v.detach()
    theirs = lambda: torch.func.jvp(lambda q, k, v: JVPAttn.fwd_dual(q, k, v, causal=causal), (qd, kd, vd), (qt, kt, vt))
    row = dict(bench="jvp_flash", B=1, Hq=16, Hkv=16, N=N, d=d, dtype=str(DTYPE()).replace("torch.", ""), causal=causal)
    try:
        o, ot = theirs()
    except Exception as e:  # noqa: BLE001 -- the row records what the package does with the shape
        row["error"] = f"{type(e).__name__}: {str(e)[:200]}"
        return row
    if N <= 4096:
        with sdpa_kernel(SDPBackend.MATH):
            f32 = [t.float() for t in (qd, kd, vd, qt, kt, vt)]
            ro, rot = torch.func.jvp(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                                     tuple(f32[:3]), tuple(f32[3:]))
        row["o_max_err"] = float((o.float() - ro).abs().max())
        row["ot_max_err"] = float((ot.float() - rot).abs().max())
        del ro, rot
    fwd = lambda: wall(lambda: gt.attention(qd, kd, vd, is_causal=causal))
    attn = lambda q, k, v: gt.attention(q, k, v, is_causal=causal)
    chain = lambda: wall(lambda: torch_chain(attn, q, k, v, dO, qt, kt, vt))
    wall(theirs), fwd(), chain()
    t_jvp, t_fwd, t_chain = [], [], []
    for _ in range(reps):
        t_jvp.append(wall(theirs))
        t_fwd.append(fwd())
        t_chain.append(chain())
    row.update(jvp_ms=round(1e3 * median(t_jvp), 3), gradgrad_fwd_ms=round(1e3 * median(t_fwd), 3),
               gradgrad_chain_ms=round(1e3 * median(t_chain), 3))
    return row


def main():
    global DEVICE
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="N up to 16K only")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU: checks that the script runs")
    ap.add_argument("--jvp-flash", action="store_true",
                    help="only the rows beside jvp-flash-attention (CUDA; the package must be importable)")
    args = ap.parse_args()
    torch.manual_seed(0)
    DEVICE = "cpu" if args.smoke else "cuda"
    card = torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu"
    print(json.dumps(dict(bench="env", card=card, torch=torch.__version__, reps=args.reps)), flush=True)
    if args.jvp_flash:
        for n in (4096, 16384):
            for d in (64, 128):
                for causal in (False, True):
                    print(json.dumps(bench_jvp_flash(n, d, causal, args.reps)), flush=True)
        return
    sizes = (256,) if args.smoke else (4096, 16384) if args.quick else (4096, 16384, 65536)
    long, heads = (sizes[-1], 2) if args.smoke else (65536, 16)
    mid = sizes[-1] if args.smoke else 16384
    dense = [(1, heads, heads, n, d, c, None) for n in sizes for d in (64, 128) for c in (False, True)]
    options = [(1, heads, heads // 4 or 1, mid, 64, False, None), (1, heads, 1, mid, 64, True, None),
               (1, heads, heads, long, 64, True, 64 if args.smoke else 4096)]
    for cfg in dense + options:
        print(json.dumps(bench_chain(cfg, args.reps)), flush=True)
    if DEVICE == "cuda":  # SDPA's fused kernels are CUDA kernels; on the CPU it is the math path
        for cfg in dense + options[:2]:
            print(json.dumps(bench_first(cfg, args.reps)), flush=True)
    for n in (128, 256) if args.smoke else (1024, 4096, 16384):
        for causal in (False, True):
            print(json.dumps(bench_math(n, 64, causal, args.reps)), flush=True)
    print(json.dumps(bench_overhead(4, 4, 128, 64, 20 if args.smoke else 1000, args.reps)), flush=True)


if __name__ == "__main__":
    main()
