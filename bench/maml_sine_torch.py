#!/usr/bin/env python3
"""PyTorch twin of examples/maml_sine: ms per MAML meta-iteration, for comparison with gradgrad.

Same algorithm and sizes as the C++ example: sinusoid tasks (A ~ U[0.1, 5], phase ~ U[0, pi],
x ~ U[-5, 5]), MLP 1-40-40-1 ReLU, MSE, meta-batch 25 tasks with K = 10 support and 10 query
points, one inner SGD step (alpha = 0.01) with create_graph=True (second order, or
--first-order), Adam 1e-3 on the shared parameters. The tasks of a meta-batch are batched
exactly as in the C++ code: parameters are expanded to (T, in, out), the forward is a batched
matmul, and the inner loss is the sum over tasks of each task's MSE, so its gradient with
respect to the expanded parameters is the stack of per-task gradients.

Task sampling happens on the host (numpy-free: torch CPU generator) and is copied to the device
each iteration, like the C++ example. Prints one JSON line:
  {"impl": "torch", "device": "cuda", "order": "second", "ms_per_iter": ..., ...}

usage: python3 bench/maml_sine_torch.py --device cuda [--iterations 500] [--warmup 50]

--evaluate adds the example's evaluation to the JSON line ("eval"): after training, 600 held-out
tasks (their own generator, seed 2017) are fine-tuned with plain SGD (alpha = 0.01) on K = 5, 10,
20 support points, with the query MSE over 100 points after 0 / 1 / 5 / 10 steps, over the
tasks on which SGD did not diverge, and the count of those on which it did (support loss after
the last step not below the first, or not finite), the rule of examples/maml_sine/report.h.
`--warmup 0 --iterations 70000 --evaluate` is the paper's schedule.
"""
import argparse
import json
import math
import time

import torch

HIDDEN = 40
META_BATCH, SHOTS = 25, 10
INNER_LR, META_LR = 0.01, 1e-3


def sample_batch(gen, device, tasks=META_BATCH, n=SHOTS, n_query=None):
    """Support and query sets, x, y of shape (T, n, 1) and (T, n_query or n, 1), for `tasks` random
    sinusoids."""
    amp = 0.1 + 4.9 * torch.rand(tasks, 1, 1, generator=gen)
    phase = math.pi * torch.rand(tasks, 1, 1, generator=gen)
    out = []
    for points in (n, n_query or n):  # support, query
        x = -5.0 + 10.0 * torch.rand(tasks, points, 1, generator=gen)
        out.append((x.to(device), (amp * torch.sin(x - phase)).to(device)))
    return out


def init_mlp(device):
    """{W1, b1, W2, b2, W3, b3}, weights (in, out) and biases (1, out), nn.Linear's init."""
    params = []
    for fan_in, fan_out in [(1, HIDDEN), (HIDDEN, HIDDEN), (HIDDEN, 1)]:
        bound = 1.0 / math.sqrt(fan_in)
        params.append((torch.rand(fan_in, fan_out, device=device) * 2 - 1) * bound)
        params.append((torch.rand(1, fan_out, device=device) * 2 - 1) * bound)
    return [p.requires_grad_() for p in params]


def forward(p, x):  # x (T, N, 1) -> (T, N, 1); p shared (broadcast) or per task (T, ...)
    h = torch.relu(torch.matmul(x, p[0]) + p[1])
    h = torch.relu(torch.matmul(h, p[2]) + p[3])
    return torch.matmul(h, p[4]) + p[5]


def meta_loss(shared, support, query, second_order):
    tasks = support[0].shape[0]
    task_params = [p.expand(tasks, *p.shape) for p in shared]  # (T, in, out), stride-0 views
    inner = torch.nn.functional.mse_loss(forward(task_params, support[0]), support[1]) * tasks
    grads = torch.autograd.grad(inner, task_params, create_graph=second_order)
    adapted = [p - INNER_LR * g for p, g in zip(task_params, grads)]
    return torch.nn.functional.mse_loss(forward(adapted, query[0]), query[1])


EVAL_TASKS, EVAL_QUERY, EVAL_SHOTS, EVAL_STEPS = 600, 100, (5, 10, 20), (0, 1, 5, 10)


def evaluate(shared, device):
    """{"K5": {"mse": [after 0, 1, 5, 10 steps], "diverged": n, "tasks": 600}, ...}."""
    gen = torch.Generator().manual_seed(2017)
    (sx, sy), (qx, qy) = sample_batch(gen, device, EVAL_TASKS, max(EVAL_SHOTS), EVAL_QUERY)
    out = {}
    for k in EVAL_SHOTS:
        x, y = sx[:, :k], sy[:, :k]
        params = [p.detach().expand(EVAL_TASKS, *p.shape).clone() for p in shared]
        per_task = lambda p, xs, ys: ((forward(p, xs) - ys) ** 2).mean((1, 2))  # noqa: E731
        query, first = [], per_task(params, x, y).detach()
        for step in range(max(EVAL_STEPS) + 1):
            if step in EVAL_STEPS:
                query.append(per_task(params, qx, qy).detach())
            if step == max(EVAL_STEPS):
                break
            params = [p.requires_grad_() for p in params]
            grads = torch.autograd.grad(per_task(params, x, y).sum(), params)
            params = [(p - INNER_LR * g).detach() for p, g in zip(params, grads)]
        last = per_task(params, x, y).detach()
        kept = torch.isfinite(last) & (last < first)
        out[f"K{k}"] = {"mse": [q[kept].mean().item() for q in query], "diverged": int((~kept).sum()),
                        "tasks": EVAL_TASKS}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cpu", "cuda"])
    ap.add_argument("--iterations", type=int, default=500, help="timed meta-iterations")
    ap.add_argument("--warmup", type=int, default=50, help="untimed meta-iterations first")
    ap.add_argument("--first-order", action="store_true", help="detach the inner gradient (FOMAML)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    ap.add_argument("--evaluate", action="store_true", help="evaluate on held-out tasks after training")
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda but torch.cuda.is_available() is False")
    if args.threads > 0:
        torch.set_num_threads(args.threads)

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    device = torch.device(args.device)
    params = init_mlp(device)
    opt = torch.optim.Adam(params, lr=META_LR)
    second_order = not args.first_order

    def step():
        support, query = sample_batch(gen, device)
        loss = meta_loss(params, support, query, second_order)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    for _ in range(args.warmup):
        step()
    sync()
    start = time.perf_counter()
    for _ in range(args.iterations):
        loss = step()
    sync()
    elapsed = time.perf_counter() - start
    print(json.dumps({
        "impl": "torch",
        "torch": torch.__version__,
        "device": args.device,
        "gpu": torch.cuda.get_device_name() if device.type == "cuda" else None,
        "threads": torch.get_num_threads(),
        "order": "first" if args.first_order else "second",
        "meta_batch": META_BATCH, "shots": SHOTS, "hidden": HIDDEN,
        "warmup": args.warmup, "iterations": args.iterations,
        "ms_per_iter": 1e3 * elapsed / args.iterations,
        "final_meta_loss": loss.item(),
        **({"eval": evaluate(params, device)} if args.evaluate else {}),
    }))


if __name__ == "__main__":
    main()
