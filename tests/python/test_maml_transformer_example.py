"""examples/maml_transformer: the --smoke run and its metrics, PyTorch's SDPA failing on the
second-order meta-gradient, the non-finite check, and gradgrad against PyTorch's math backend
(the meta-gradient, then a few meta-iterations, in f64)."""

import dataclasses
import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import gradgrad

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "maml_transformer" / "maml_transformer.py"
f64 = torch.float64


def load_example():
    spec = importlib.util.spec_from_file_location("maml_transformer", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


mt = load_example()


def run_example(*args):
    """The example in a subprocess on the CPU, seeing the gradgrad package this test imports; one
    OpenMP thread unless the caller's environment sets a count."""
    env = dict(os.environ)
    package_root = str(Path(gradgrad.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    env.setdefault("OMP_NUM_THREADS", "1")
    return subprocess.run([sys.executable, str(EXAMPLE), "--device", "cpu", *args], capture_output=True,
                          text=True, env=env, timeout=600)


def summary_of(result):
    lines = [line for line in result.stdout.splitlines() if line.startswith("summary ")]
    assert lines, result.stdout + result.stderr
    return json.loads(lines[-1][len("summary "):])


def read_metrics(path):
    """metrics.jsonl checked as examples/common/check_metrics.cpp checks the C++ examples'."""
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert records[0]["example"] == "maml_transformer" and isinstance(records[0]["config"], dict)
    for r in records[1:]:
        assert isinstance(r.get("phase"), str) and r["phase"] != "error", r
        if "loss" in r:
            assert r["step"] >= 1 and math.isfinite(r["loss"]) and "time_s" in r, r
    return records


def test_smoke_trains_and_adaptation_helps(tmp_path):
    r = run_example("--smoke", "--out", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    s = summary_of(r)
    records = read_metrics(tmp_path / "metrics.jsonl")
    steps = [x["step"] for x in records[1:] if x["phase"] == "maml"]
    assert steps == list(range(1, len(steps) + 1)) and len(steps) == records[0]["config"]["iterations"]
    assert {(x["weights"], x["inner_steps"]) for x in records[1:] if x["phase"] == "eval"} == {
        (w, n) for w in ("initial", "meta-trained") for n in (0, 1)}
    cells = s["eval"]["meta-trained"]
    values = [s["meta_loss_first_third"], s["meta_loss_last_third"], *cells.values(), *s["eval"]["initial"].values()]
    assert all(math.isfinite(v) for v in values), s
    assert s["meta_loss_last_third"] < s["meta_loss_first_third"], s
    # One SGD step on the support points lowers the held-out query loss of the meta-trained
    # weights (at the initial weights it does not: that is what meta-training bought).
    assert cells["1"] < cells["0"], s


def pytorch_sdpa_has_second_derivative():
    q = torch.randn(1, 2, 6, 8, requires_grad=True)
    (g,) = torch.autograd.grad(F.scaled_dot_product_attention(q, q, q).square().sum(), q, create_graph=True)
    try:
        torch.autograd.grad(g.square().sum(), q)
    except RuntimeError:
        return False
    return True


def test_pytorch_sdpa_fails_on_the_meta_gradient():
    if pytorch_sdpa_has_second_derivative():
        pytest.skip(f"torch {torch.__version__} differentiates its CPU SDPA backward")
    r = run_example("--smoke", "--attention", "torch", "--iterations", "2")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "derivative for aten::_scaled_dot_product_" in r.stderr, r.stderr
    assert "pytorch/pytorch#116350" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr, r.stderr


def test_non_finite_meta_loss_ends_the_run(tmp_path):
    r = run_example("--smoke", "--iterations", "5", "--meta-lr", "1e30", "--out", str(tmp_path))
    last = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["phase"] == "error" and "non-finite" in last["error"], last
    assert r.returncode == 1, r.stdout + r.stderr
    assert "error: non-finite metric: meta-loss" in r.stderr, r.stderr


@pytest.fixture
def one_thread():
    """One CPU thread for the in-process runs (OpenMP regions cost more than they give here)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def tiny_model(cfg, seed=0):
    torch.manual_seed(seed)
    return mt.Regressor(cfg).to(f64)


class RecordOps(TorchDispatchMode):
    """Records the name of every operator dispatched while active."""

    def __init__(self):
        super().__init__()
        self.ops = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.add(str(func))
        return func(*args, **(kwargs or {}))


def ops_run(fn):
    """fn()'s result and the names of the operators that ran in it ("gradgrad.attention_forward.default", ...)."""
    with RecordOps() as recorder:
        result = fn()
    return result, recorder.ops


def test_gradgrad_and_math_give_the_same_meta_gradient_f64(one_thread):
    cfg = mt.Config(**mt.SMOKE)
    model = tiny_model(cfg)
    episode = mt.sample_episode(torch.Generator().manual_seed(1), cfg, 3, f64, torch.device("cpu"))
    with mt.attention_backend("gradgrad"):
        ours, ops = ops_run(lambda: mt.meta_gradient(model, episode, cfg.inner_lr))
    assert "gradgrad.attention_backward_backward.default" in ops  # the meta-gradient ran the fused BoB
    with mt.attention_backend("math"):
        ref, ops = ops_run(lambda: mt.meta_gradient(model, episode, cfg.inner_lr))
    assert not any(op.startswith("gradgrad.") for op in ops)
    assert len(ours) == len(ref) == len(list(model.parameters()))
    for (name, _), a, b in zip(model.named_parameters(), ours, ref):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10, msg=lambda m: f"{name}: {m}")
    assert max(g.abs().max().item() for g in ref) > 1e-3  # not vacuous


def test_gradgrad_and_math_train_alike_f64(one_thread):
    cfg = dataclasses.replace(mt.Config(**mt.SMOKE), iterations=3, log_every=3)
    runs = {}
    for name in ("gradgrad", "math"):
        model = tiny_model(cfg)
        with mt.attention_backend(name):
            losses = mt.train(model, cfg, seed=0, dtype=f64, device=torch.device("cpu"), log=lambda line: None)
        runs[name] = losses, [p.detach() for p in model.parameters()]
    (ours, ours_params), (ref, ref_params) = runs["gradgrad"], runs["math"]
    torch.testing.assert_close(torch.tensor(ours, dtype=f64), torch.tensor(ref, dtype=f64), rtol=1e-10, atol=1e-12)
    for a, b in zip(ours_params, ref_params):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
