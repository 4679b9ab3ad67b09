#!/usr/bin/env python3
"""Second-order MAML of a small transformer in plain PyTorch, through gradgrad's attention.

The model (Regressor) is ordinary torch.nn code that calls F.scaled_dot_product_attention. MAML
adapts it to each task with an SGD step taken by torch.autograd.grad(..., create_graph=True) on
torch.func.functional_call, so the meta-gradient differentiates attention's backward: a second
derivative of attention. PyTorch's fused SDPA kernels have none (pytorch/pytorch#116350,
learn2learn#429); gradgrad's attention has one (its fused backward-over-backward kernel), and
gradgrad.torch.patch_sdpa() routes the model's calls there with no change to the model.

Tasks: sinusoids y = A sin(x - phi), A ~ U[0.1, 5], phi ~ U[0, pi], x ~ U[-5, 5] (Finn et al.
2017). A point is a token [x, y, is_target]; a target token carries 0 in place of y and the model
predicts y there. There are no positions: attention sees each sequence as a set.
  inner (support) loss: the K support points split into halves A and B give two sequences,
      "A as context, predict B" and "B as context, predict A" (no token sees its own label);
  outer (query) loss: all K support points as context, the query points as targets.
One inner SGD step (alpha) per task, Adam on the shared initial weights.

  --attention gradgrad   (default) the model's SDPA calls run gradgrad's fused kernels
  --attention math       PyTorch's math backend (composite ops, N x N scores): the reference;
                         the same seed gives gradgrad's numbers up to rounding
  --attention torch      PyTorch's default SDPA: where it picks a fused kernel (the CPU's flash
                         kernel, CUDA's flash or memory-efficient one) the first meta-gradient
                         fails with PyTorch's error, reported in one line

Prints the meta-loss during training, then the query MSE on held-out tasks (their own seed)
before adaptation (0 steps) and after SGD steps on the support loss, for the initial and the
meta-trained weights, and a last line `summary {json}`. Exit codes: 0 success, 1 a non-finite
loss or evaluation, 2 PyTorch's missing derivative of its SDPA backward (--attention torch).

usage: PYTHONPATH=build-py/python python3 examples/maml_transformer/maml_transformer.py [--smoke]
On a busy CPU use one thread (--threads 1 or OMP_NUM_THREADS=1): gradgrad's CPU kernels open
OpenMP regions at any size, which cost more than they give at these sizes.
The functions are importable (tests/python/test_maml_transformer_example.py) and import gradgrad
only for --attention gradgrad.
"""
import argparse
import contextlib
import dataclasses
import json
import math
import re
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call
from torch.nn.attention import SDPBackend, sdpa_kernel

EVAL_SEED = 2017  # held-out tasks, independent of --seed


@dataclasses.dataclass
class Config:
    d_model: int = 32
    heads: int = 4
    blocks: int = 2
    mlp: int = 64
    shots: int = 10  # K support points per task (even: two halves)
    queries: int = 10  # query points per task
    meta_batch: int = 8  # tasks per meta-iteration
    iterations: int = 1000
    inner_lr: float = 0.01  # alpha: the inner SGD step, in training and at test time
    meta_lr: float = 1e-3  # Adam
    eval_tasks: int = 200
    eval_steps: tuple = (0, 1, 5)
    log_every: int = 50


# A fixed, small amount of work for CI.
SMOKE = dict(d_model=16, heads=2, blocks=1, mlp=32, meta_batch=4, iterations=60, inner_lr=0.03,
             meta_lr=3e-3, eval_tasks=40, eval_steps=(0, 1), log_every=20)


# ----------------------------------------------------------------------------- the model
class SelfAttention(nn.Module):
    def __init__(self, d_model, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.out = nn.Linear(d_model, d_model, bias=False)

    def forward(self, h):  # (B, N, D) -> (B, N, D)
        B, N, D = h.shape
        q, k, v = self.qkv(h).view(B, N, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        o = F.scaled_dot_product_attention(q, k, v)  # looked up at each call: patch_sdpa() reroutes it
        return self.out(o.transpose(1, 2).reshape(B, N, D))


class Block(nn.Module):  # pre-norm: h + attn(LN(h)), then h + mlp(LN(h))
    def __init__(self, d_model, heads, mlp):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(d_model), SelfAttention(d_model, heads)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, mlp), nn.GELU(), nn.Linear(mlp, d_model))

    def forward(self, h):
        h = h + self.attn(self.ln1(h))
        return h + self.mlp(self.ln2(h))


class Regressor(nn.Module):
    """Tokens (B, N, 3) [x, y or 0, is_target] -> a prediction of y at every token, (B, N, 1)."""

    def __init__(self, cfg: Config):
        super().__init__()
        d = cfg.d_model
        self.embed = nn.Sequential(nn.Linear(3, d), nn.GELU(), nn.Linear(d, d))
        self.blocks = nn.Sequential(*[Block(d, cfg.heads, cfg.mlp) for _ in range(cfg.blocks)])
        self.ln_f, self.readout = nn.LayerNorm(d), nn.Linear(d, 1)

    def forward(self, tokens):
        return self.readout(self.ln_f(self.blocks(self.embed(tokens))))


# ----------------------------------------------------------------------------- tasks as tokens
def sequences(context, targets):
    """(tokens, y, is_target) of sequences made of context points (x, y) followed by target
    points (x, 0); context and targets are (x, y) pairs of shape (..., n, 1)."""
    (cx, cy), (tx, ty) = context, targets
    tokens = torch.cat([torch.cat([cx, cy, torch.zeros_like(cx)], -1),
                        torch.cat([tx, torch.zeros_like(tx), torch.ones_like(tx)], -1)], -2)
    is_target = torch.cat([torch.zeros_like(cy), torch.ones_like(ty)], -2)
    return tokens, torch.cat([cy, ty], -2), is_target


def sample_episode(gen, cfg, tasks, dtype, device):
    """(support, query) sequences of `tasks` new sinusoids, drawn in f64 on the CPU from `gen` (the
    same tasks whatever the dtype and device). support: 2 sequences of K tokens per task, each
    tensor (T, 2, K, .); query: 1 sequence of K + Q tokens per task, (T, 1, K + Q, .)."""
    amp = 0.1 + 4.9 * torch.rand(tasks, 1, 1, generator=gen, dtype=torch.float64)
    phase = math.pi * torch.rand(tasks, 1, 1, generator=gen, dtype=torch.float64)
    points = []
    for n in (cfg.shots, cfg.queries):
        x = -5.0 + 10.0 * torch.rand(tasks, n, 1, generator=gen, dtype=torch.float64)
        points.append((x.to(device, dtype), (amp * torch.sin(x - phase)).to(device, dtype)))
    (sx, sy), (qx, qy) = points
    half = cfg.shots // 2
    a, b = (sx[:, :half], sy[:, :half]), (sx[:, half:], sy[:, half:])
    pair = lambda u, w: tuple(torch.stack([s, t], 1) for s, t in zip(u, w))  # noqa: E731
    support = sequences(pair(a, b), pair(b, a))
    query = sequences((sx[:, None], sy[:, None]), (qx[:, None], qy[:, None]))
    return support, query


def task(seqs, t):
    return tuple(s[t] for s in seqs)


# ----------------------------------------------------------------------------- MAML
def loss_fn(model, params, seqs):
    """MSE at the target tokens of `seqs`, the model run with the weights `params`."""
    tokens, y, is_target = seqs
    pred = functional_call(model, params, (tokens,))
    return ((pred - y) * is_target).square().sum() / is_target.sum()


def adapt(model, params, support, inner_lr, steps=1, create_graph=True):
    """`steps` SGD steps on the support loss. create_graph keeps the inner backward (attention's
    backward included) on the tape, so that a gradient of the result is second-order MAML."""
    for _ in range(steps):
        grads = torch.autograd.grad(loss_fn(model, params, support), tuple(params.values()),
                                    create_graph=create_graph)
        params = {name: p - inner_lr * g for (name, p), g in zip(params.items(), grads)}
    return params


def meta_loss(model, params, episode, inner_lr):
    """Mean over the episode's tasks of the query loss after one inner step from `params`."""
    support, query = episode
    losses = [loss_fn(model, adapt(model, params, task(support, t), inner_lr), task(query, t))
              for t in range(support[0].shape[0])]
    return torch.stack(losses).mean()


def meta_gradient(model, episode, inner_lr):
    params = dict(model.named_parameters())
    return torch.autograd.grad(meta_loss(model, params, episode, inner_lr), tuple(params.values()))


def attention_backend(name):
    """The context in which the model's F.scaled_dot_product_attention calls run `name`."""
    if name == "gradgrad":
        import gradgrad.torch as ggt
        return ggt.patch_sdpa()
    if name == "math":
        return sdpa_kernel(SDPBackend.MATH)
    return contextlib.nullcontext()  # "torch": whichever backend PyTorch picks


# ----------------------------------------------------------------------------- metrics.jsonl
class Metrics:
    """DIR/metrics.jsonl in the examples' one format (docs/examples.md): a first line with the
    example and its configuration, then objects with a "phase"; training lines carry "step",
    "loss" and "time_s" (every step of a run of at most 200 steps, every 10th of a longer one).
    Without a folder nothing is written."""

    def __init__(self, out, config):
        self.file = None
        if out:
            import os
            os.makedirs(out, exist_ok=True)
            self.file = open(os.path.join(out, "metrics.jsonl"), "w")
            self.write({"example": "maml_transformer", "config": config})

    def write(self, record):
        if self.file:
            self.file.write(json.dumps(record) + "\n")
            self.file.flush()

    def train_step(self, phase, step, steps, loss, time_s):
        if steps <= 200 or step % 10 == 0 or step == steps:
            self.write({"phase": phase, "step": step, "loss": loss, "time_s": time_s})


# ----------------------------------------------------------------------------- checks
class NonFiniteMetric(Exception):
    pass


def check_finite(name, value, where):
    if not math.isfinite(value):
        raise NonFiniteMetric(f"{name} = {value} ({where})")
    return value


MISSING_DERIVATIVE = re.compile(r"derivative for aten::_scaled_dot_product_\w+_backward is not implemented")


# ----------------------------------------------------------------------------- training, evaluation
def train(model, cfg, seed, dtype, device, log=print, metrics=None):
    """Meta-trains `model` in place with Adam; returns the meta-loss of every iteration."""
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.meta_lr)
    losses, start = [], time.perf_counter()
    for it in range(1, cfg.iterations + 1):
        loss = meta_loss(model, dict(model.named_parameters()),
                         sample_episode(gen, cfg, cfg.meta_batch, dtype, device), cfg.inner_lr)
        losses.append(check_finite("meta-loss", loss.item(), f"iteration {it}"))
        if metrics:
            metrics.train_step("maml", it, cfg.iterations, losses[-1], time.perf_counter() - start)
        opt.zero_grad(set_to_none=True)
        loss.backward()  # through the inner step's backward: attention's second derivative
        opt.step()
        if it % cfg.log_every == 0 or it == cfg.iterations:
            recent = losses[-cfg.log_every:]
            log(f"  iteration {it:5d}   meta-loss {sum(recent) / len(recent):.4f} (mean of the last "
                f"{len(recent)})   {1e3 * (time.perf_counter() - start) / it:.1f} ms per iteration")
    return losses


def evaluate(model, params, cfg, dtype, device):
    """{steps: [query MSE of each held-out task after `steps` SGD steps]} for cfg.eval_steps."""
    gen = torch.Generator().manual_seed(EVAL_SEED)
    support, query = sample_episode(gen, cfg, cfg.eval_tasks, dtype, device)
    mse = {s: [] for s in cfg.eval_steps}
    for t in range(cfg.eval_tasks):
        p = {name: w.detach().requires_grad_() for name, w in params.items()}
        for step in range(max(cfg.eval_steps) + 1):
            if step in mse:
                with torch.no_grad():
                    mse[step].append(loss_fn(model, p, task(query, t)).item())
            if step < max(cfg.eval_steps):
                p = {n: w.detach().requires_grad_()
                     for n, w in adapt(model, p, task(support, t), cfg.inner_lr, create_graph=False).items()}
    return mse


def mean_ci95(v):
    m = sum(v) / len(v)
    sd = math.sqrt(sum((x - m) ** 2 for x in v) / max(len(v) - 1, 1))
    return m, 1.96 * sd / math.sqrt(len(v))


def run(args, cfg, dtype, device, metrics=None):
    """Meta-training and evaluation under the chosen attention; the summary dict."""
    torch.manual_seed(args.seed)
    model = Regressor(cfg).to(device, dtype)
    initial = {n: p.detach().clone() for n, p in model.named_parameters()}
    print(f"meta-training: {cfg.iterations} iterations of {cfg.meta_batch} tasks, K = {cfg.shots}, "
          f"{cfg.queries} query points, alpha = {cfg.inner_lr}, Adam {cfg.meta_lr}")
    start = time.perf_counter()
    losses = train(model, cfg, args.seed, dtype, device, metrics=metrics)
    train_s = time.perf_counter() - start
    third = max(len(losses) // 3, 1)
    first, last = sum(losses[:third]) / third, sum(losses[-third:]) / third
    print(f"  meta-loss, mean of the first third {first:.4f}, of the last third {last:.4f} ({train_s:.1f} s)")

    print(f"query MSE on {cfg.eval_tasks} held-out tasks after SGD steps (alpha = {cfg.inner_lr}) on "
          f"K = {cfg.shots} support points, mean ± 95% CI")
    print(f"  {'weights':<13}" + "".join(f"{f'{s} step' + 's' * (s != 1):>18}" for s in cfg.eval_steps))
    table = {}
    for label, params in (("initial", initial), ("meta-trained", dict(model.named_parameters()))):
        mse = evaluate(model, params, cfg, dtype, device)
        cells = {s: mean_ci95(v) for s, v in mse.items()}
        print(f"  {label:<13}" + "".join(f"{m:>10.4f} ± {ci:<6.4f}" for m, ci in cells.values()))
        for s, (m, ci) in cells.items():
            check_finite("query MSE", m, f"evaluation, {label} weights, {s} steps")
            if metrics:
                metrics.write({"phase": "eval", "weights": label, "inner_steps": s, "mse": m, "ci95": ci})
        table[label] = {str(s): m for s, (m, _) in cells.items()}
    return {"attention": args.attention, "device": str(device), "dtype": args.dtype,
            "iterations": cfg.iterations, "train_s": train_s, "meta_loss_first_third": first,
            "meta_loss_last_third": last, "eval": table}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--attention", choices=["gradgrad", "math", "torch"], default="gradgrad")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    ap.add_argument("--smoke", action="store_true", help="a fixed, small amount of work (CI)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--iterations", type=int, help=f"meta-iterations (default {Config.iterations})")
    ap.add_argument("--meta-lr", type=float, help=f"Adam's learning rate (default {Config.meta_lr})")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
    ap.add_argument("--out", help="folder for metrics.jsonl (none: not written)")
    args = ap.parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda but torch.cuda.is_available() is False")
    cfg = Config(**(SMOKE if args.smoke else {}))
    cfg.iterations = args.iterations or cfg.iterations
    cfg.meta_lr = args.meta_lr or cfg.meta_lr
    dtype, device = getattr(torch, args.dtype), torch.device(args.device)
    print(f"MAML of a transformer (d_model {cfg.d_model}, {cfg.heads} heads, blocks: {cfg.blocks}), "
          f"attention: {args.attention}, {args.device}, {args.dtype}, torch {torch.__version__}")
    config = {**dataclasses.asdict(cfg), "attention": args.attention, "device": args.device, "dtype": args.dtype,
              "seed": args.seed}
    metrics = Metrics(args.out, config)
    try:
        with attention_backend(args.attention):
            summary = run(args, cfg, dtype, device, metrics)
    except NonFiniteMetric as e:
        metrics.write({"phase": "error", "error": f"non-finite metric: {e}"})
        print(f"error: non-finite metric: {e}", file=sys.stderr)
        return 1
    except RuntimeError as e:
        missing = MISSING_DERIVATIVE.search(str(e))
        if not missing:
            raise
        print(f"error: PyTorch's SDPA cannot give the second-order meta-gradient: \"{missing.group(0)}\" "
              "(its fused kernels' backward has no derivative, pytorch/pytorch#116350); run with "
              "--attention gradgrad (or math)", file=sys.stderr)
        return 2
    metrics.write({"phase": "summary", **{k: v for k, v in summary.items() if k != "eval"}})
    print("summary " + json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
