#!/usr/bin/env bash
# The fused CPU attention chain beside PyTorch's, side by side on this machine in one run:
# builds bench_attention_cpu (CPU-only, the default native build, in build-bench-cpu/), then runs
# it and bench/attention_cpu_torch.py (PyTorch's math-backend chain) alternately, GG_BENCH_ROUNDS
# rounds (default 2), both on GG_BENCH_THREADS threads (default 2), f32, B 1, H 1, d 64,
# N 1024 and 4096, full and causal; and, alternately in the same rounds, the second-order MAML
# meta-iteration of examples/maml_sine (2000 meta-iterations) beside its PyTorch twin
# (bench/maml_sine_torch.py, 1000 after 50 of warm-up). Writes bench/results/attention_cpu.jsonl
# and regenerates docs/benchmarks.md (bench/make_tables.py); the tables are printed last.
# Needs python3 with torch (pip install torch).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
GG_BUILD="$GG_ROOT/build-bench-cpu"
gg_install_deps
gg_configure -DGG_CUDA=OFF -DCMAKE_BUILD_TYPE=Release -DGG_BUILD_EXAMPLES=ON -DGG_BUILD_TESTS=OFF
gg_build --target bench_attention_cpu maml_sine
python3 -c "import torch" 2>/dev/null || gg_die "bench-cpu: python3 cannot import torch (pip install torch)"

threads="${GG_BENCH_THREADS:-2}" rounds="${GG_BENCH_ROUNDS:-2}" sizes=1024,4096
results="$GG_ROOT/bench/results/attention_cpu.jsonl" scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
ours=(env OMP_NUM_THREADS="$threads" "$GG_BUILD/bench/bench_attention_cpu" --sizes "$sizes" --mask both
      --repeats 5 --max-seconds 10)
theirs=(python3 "$GG_ROOT/bench/attention_cpu_torch.py" --n "$sizes" --threads "$threads" --repeats 5)
for round in $(seq 1 "$rounds"); do
  "${ours[@]}" --json "$scratch/ours.jsonl" >/dev/null 2>"$scratch/ours.log" || { cat "$scratch/ours.log" >&2; exit 1; }
  sed "s/^{/{\"round\":$round,/" "$scratch/ours.jsonl" >>"$scratch/all.jsonl"
  "${theirs[@]}" >"$scratch/theirs.jsonl"
  grep -v '"torch":' "$scratch/theirs.jsonl" | sed "s/^{/{\"round\": $round, /" >>"$scratch/all.jsonl"
  # the MAML meta-iteration: one JSON row per side, {"bench": "maml_step", "impl", "ms", "round"}
  OMP_NUM_THREADS="$threads" "$GG_BUILD/examples/maml_sine/maml_sine" --device cpu --iterations 2000 \
    --out "$scratch/maml" >"$scratch/maml.log" 2>&1 || { cat "$scratch/maml.log" >&2; exit 1; }
  python3 -c 'import json, sys
ms = [json.loads(l) for l in open(sys.argv[1])][-1]["maml_ms_per_iteration"]
print(json.dumps({"round": int(sys.argv[2]), "bench": "maml_step", "impl": "gradgrad", "ms": ms}))' \
    "$scratch/maml/metrics.jsonl" "$round" >>"$scratch/all.jsonl"
  python3 "$GG_ROOT/bench/maml_sine_torch.py" --device cpu --threads "$threads" --iterations 1000 --warmup 50 |
    python3 -c 'import json, sys
r = json.loads(sys.stdin.read())
print(json.dumps({"round": int(sys.argv[1]), "bench": "maml_step", "impl": "torch", "ms": r["ms_per_iter"]}))' \
      "$round" >>"$scratch/all.jsonl"
done
torch_version="$(python3 -c 'import torch; print(torch.__version__)')"
python3 - "$results" "$scratch/all.jsonl" "$threads" "$rounds" "$torch_version" "$GG_ROOT/bench" <<'PY'
import datetime, json, subprocess, sys
sys.path.insert(0, sys.argv[6])
from make_tables import machine_description, ROOT
out, rows, threads, rounds, torch_version = sys.argv[1:6]
commit = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True,
                        text=True).stdout.strip() or "?"
meta = {"bench": "meta", "results": "attention_cpu", "machine": machine_description(), "threads": int(threads),
        "rounds": int(rounds), "torch": torch_version, "date": datetime.date.today().isoformat(), "commit": commit,
        "command": "scripts/bench-cpu.sh"}
with open(out, "w") as f:
    f.write(json.dumps(meta) + "\n")
    for line in open(rows):
        if line.strip():
            f.write(json.dumps(json.loads(line)) + "\n")
PY
python3 "$GG_ROOT/bench/make_tables.py" >/dev/null
python3 "$GG_ROOT/bench/make_tables.py" --print attention_cpu
