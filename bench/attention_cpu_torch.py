#!/usr/bin/env python3
"""PyTorch reference for bench_attention_cpu (bench/bench_attention_cpu.cpp), on the CPU.

scripts/bench-cpu.sh runs it beside our benchmark with the same sizes and thread count, so that
both sides are measured on one machine in one run. The chain is the one bench_attention_cpu
times: forward, the gradient w.r.t. q, k, v with create_graph, then the gradient of
<Qt,dQ> + <Kt,dK> + <Vt,dV> w.r.t. q, k, v and dO, all from scratch. Attention is
torch.nn.functional.scaled_dot_product_attention on its math backend, the only CPU backend with
a double backward (the default CPU kernel has none). f32, B = 1, H = 1.

It prints one JSON object per line: first the PyTorch version and thread count, then one line
per (N, mask) with chain_ms (median of the timed repeats after one warm-up), min_ms and runs.

  python3 bench/attention_cpu_torch.py --n 1024,4096 --d 64 --threads 2 --repeats 5
"""
import argparse
import json
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def chain(q, k, v, d_out, q_t, k_t, v_t, causal):
    with sdpa_kernel(SDPBackend.MATH):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        dq, dk, dv = torch.autograd.grad(out, (q, k, v), d_out, create_graph=True)
        inner = (dq * q_t).sum() + (dk * k_t).sum() + (dv * v_t).sum()
        torch.autograd.grad(inner, (q, k, v, d_out))


def run_case(n, d, causal, repeats):
    gen = torch.Generator().manual_seed(0)
    shape = (1, 1, n, d)
    q, k, v, d_out, q_t, k_t, v_t = [torch.randn(shape, generator=gen) for _ in range(7)]
    for t in (q, k, v, d_out):
        t.requires_grad_(True)
    chain(q, k, v, d_out, q_t, k_t, v_t, causal)  # warm-up
    samples = []
    for _ in range(repeats):
        begin = time.perf_counter()
        chain(q, k, v, d_out, q_t, k_t, v_t, causal)
        samples.append((time.perf_counter() - begin) * 1e3)
    samples.sort()
    return {"impl": "torch_math", "dtype": "f32", "B": 1, "H": 1, "N": n, "d": d, "causal": causal,
            "stage": "chain", "median_ms": samples[len(samples) // 2], "min_ms": samples[0], "runs": repeats}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", default="1024,4096", help="comma-separated sequence lengths")
    parser.add_argument("--d", type=int, default=64, help="head dimension")
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    parser.add_argument("--repeats", type=int, default=5, help="timed chains per case after one warm-up")
    parser.add_argument("--mask", choices=["full", "causal", "both"], default="both")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(json.dumps({"impl": "torch_math", "torch": torch.__version__, "threads": torch.get_num_threads()}),
          flush=True)
    masks = {"full": [False], "causal": [True], "both": [False, True]}[args.mask]
    for n in (int(x) for x in args.n.split(",")):
        for causal in masks:
            print(json.dumps(run_case(n, args.d, causal, args.repeats)), flush=True)


if __name__ == "__main__":
    main()
