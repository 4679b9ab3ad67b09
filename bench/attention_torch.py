#!/usr/bin/env python3
"""PyTorch reference for bench_attention_gpu (bench/bench_attention_gpu.cpp), on a CUDA GPU.

scripts/bench-gpu.sh runs it right after our benchmark with the same sizes, so that both sides
are measured on one card in one run. It prints one JSON object per line on stdout: first a line
with the PyTorch version and the card, then one line per N with these fields (milliseconds,
median of the timed repeats after warm-up, timed with CUDA events):

  sdpa_fwd_ms      torch.nn.functional.scaled_dot_product_attention, forward only (no grad)
  sdpa_fwdbwd_ms   the same forward, then the gradient w.r.t. q, k, v for a cotangent dO
  chain_ms         the composite attention (softmax(s·QKᵀ)·V from ordinary ops): forward, first
                   gradient with create_graph, then the gradient of <Qt,dQ> + <Kt,dK> + <Vt,dV>
                   w.r.t. q, k, v and dO, all from scratch
  chain_peak_GiB   peak device memory of one chain (torch.cuda.max_memory_allocated)
  bob_ms           the last gradient of the chain alone, its first-order graph already built
  "bob": "OOM"     the composite chain ran out of device memory

  python3 bench/attention_torch.py --n 1024,4096 --d 64 --heads 16 --dtype bf16 [--causal]
"""
import argparse
import json
import math

import torch
import torch.nn.functional as F

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32, "f64": torch.float64}


def timed(fn, warmup, repeats):
    """Median time of fn() in ms: warm-up calls first, then each repeat between two CUDA events."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        begin = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        begin.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        samples.append(begin.elapsed_time(end))
    samples.sort()
    return samples[len(samples) // 2]


def composite(q, k, v, causal):
    """Attention from ordinary ops: the N×N scores and probabilities are real tensors. The
    softmax runs in f32 and its result is cast back, as a mixed-precision model would do."""
    n = q.shape[-2]
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    if causal:
        above = torch.triu(torch.ones(n, n, dtype=torch.bool, device=q.device), diagonal=1)
        scores = scores.masked_fill(above, float("-inf"))
    probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
    return probs @ v


def run_size(args, n):
    dtype = DTYPES[args.dtype]
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    shape = (args.batch, args.heads, n, args.d)
    q, k, v, d_out, q_t, k_t, v_t = [torch.randn(shape, device="cuda", dtype=dtype, generator=gen) for _ in range(7)]
    inputs = (q, k, v, d_out)
    for t in inputs:
        t.requires_grad_(True)
    row = {"B": args.batch, "H": args.heads, "N": n, "d": args.d, "dtype": args.dtype, "causal": args.causal}

    if dtype != torch.float64:  # SDPA has no fused f64 kernel worth comparing with
        def sdpa_forward():
            with torch.no_grad():
                F.scaled_dot_product_attention(q, k, v, is_causal=args.causal)

        def sdpa_forward_backward():
            out = F.scaled_dot_product_attention(q, k, v, is_causal=args.causal)
            torch.autograd.grad(out, (q, k, v), d_out)

        row["sdpa_fwd_ms"] = timed(sdpa_forward, 2, args.reps)
        row["sdpa_fwdbwd_ms"] = timed(sdpa_forward_backward, 2, args.reps)

    if not args.skip_composite:
        def inner_loss():
            out = composite(q, k, v, args.causal)
            dq, dk, dv = torch.autograd.grad(out, (q, k, v), d_out, create_graph=True)
            return (dq * q_t).sum() + (dk * k_t).sum() + (dv * v_t).sum()

        try:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            row["chain_ms"] = timed(lambda: torch.autograd.grad(inner_loss(), inputs), 1, args.composite_reps)
            row["chain_peak_GiB"] = torch.cuda.max_memory_allocated() / 2**30
            loss = inner_loss()
            row["bob_ms"] = timed(lambda: torch.autograd.grad(loss, inputs, retain_graph=True), 1, args.composite_reps)
            del loss
        except torch.OutOfMemoryError:  # fields measured before the failure stay in the row
            row["bob"] = "OOM"
    torch.cuda.empty_cache()
    print(json.dumps(row), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", default="1024,4096,8192,16384,32768", help="comma-separated sequence lengths")
    parser.add_argument("--d", type=int, default=64, help="head dimension")
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--reps", type=int, default=5, help="timed repeats of the SDPA measurements")
    parser.add_argument("--composite-reps", type=int, default=3, help="timed repeats of the composite chain")
    parser.add_argument("--skip-composite", action="store_true", help="only the SDPA timings")
    args = parser.parse_args()
    # Exact f32 products on both sides: our f32 kernels do not use TF32 either.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    print(json.dumps({"impl": "torch", "torch": torch.__version__, "gpu": torch.cuda.get_device_name()}), flush=True)
    for n in (int(x) for x in args.n.split(",")):
        run_size(args, n)


if __name__ == "__main__":
    main()
