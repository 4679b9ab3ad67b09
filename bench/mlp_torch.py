#!/usr/bin/env python3
"""PyTorch twin of bench/bench_cuda.cpp's MLP step: forward + backward(create_graph) + double
backward (gradient penalty) of a 3-layer tanh MLP, batch 256, widths 64 and 1024, f32 on the GPU.
One JSON line per width: ms per step (median of 30 after 5 warm-up steps, synchronised)."""
import json, math, time
import torch

torch.backends.cuda.matmul.allow_tf32 = False


def main():
    dev = "cuda"
    for width in (64, 1024):
        batch = 256
        g = torch.Generator(device=dev).manual_seed(0)
        X = torch.randn(batch, width, device=dev, generator=g)
        Y = torch.randn(batch, 1, device=dev, generator=g)
        W = [torch.randn(width, width, device=dev, generator=g) / math.sqrt(width),
             torch.randn(width, width, device=dev, generator=g) / math.sqrt(width),
             torch.randn(width, 1, device=dev, generator=g) / math.sqrt(width)]
        for w in W:
            w.requires_grad_(True)

        def step():
            h = torch.tanh(X @ W[0])
            h = torch.tanh(h @ W[1])
            loss = torch.mean((h @ W[2] - Y) ** 2)
            gs = torch.autograd.grad(loss, W, create_graph=True)
            penalty = sum((gi * gi).sum() for gi in gs)
            torch.autograd.grad(loss + penalty, W)

        for _ in range(5):
            step()
        torch.cuda.synchronize()
        times = []
        for _ in range(30):
            t = time.perf_counter(); step(); torch.cuda.synchronize()
            times.append((time.perf_counter() - t) * 1e3)
        times.sort()
        print(json.dumps({"bench": "mlp_step_torch", "batch": batch, "width": width, "ms": times[len(times) // 2],
                          "torch": torch.__version__}), flush=True)


if __name__ == "__main__":
    main()
