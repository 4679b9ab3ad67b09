#!/usr/bin/env bash
# On the GPU machine: builds (sm_90a, Release), runs the GPU benchmarks and their PyTorch twins
# in the same call, and writes bench/results/<card>-<date>.jsonl (copied to $OUT with the logs).
# Prints a short table last.  Usage: scripts/bench-gpu.sh [cuda|attention|long|ab|all ...]   (default all)
#   attention: d = 64 and 128, causal and not, N = 1K-32K, each beside the PyTorch anchor;
#       GG_BENCH_CONFIGS (e.g. "64:" or "64: 64:causal") and GG_BENCH_N narrow it.
#   long: the chain alone at N = 65536, 262144, 1048576 (B = 1, H = 8, d = 64, bf16): time and peak
#       memory (minutes at 1M).
#   ab: the attention benchmark at N = 4096 and 16384 (d = 64, 128; causal d = 64) twice, with the
#       Hopper (wgmma) kernels on and off (GG_ATTENTION_WGMMA=0): a quick A/B of kernel versions.
#   atomic: bench_atomic_rate (bench/atomic_rate.cu) at N = 8192 and 16384, H = 16: the fused BoB's
#       query-side additions alone, by kind of addition (only when named; not part of all).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
what=" ${*:-all} "
want() { [[ "$what" == *" all "* || "$what" == *" $1 "* ]]; }
OUT="${OUT:-$PWD/gpu-logs}"
mkdir -p "$OUT" bench/results
BUILD="${GG_GPU_BUILD:-build-gpu}"
card="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr ' ' '-')"
day="$(date -u +%F)"
results="bench/results/${card}-${day}.jsonl"
# The PyTorch reference for the attention benchmark: ../shared/anchors beside a checkout, or a copy
# carried into .anchors/ (through the device tool: carry [".anchors"]). Without it the attention
# numbers would have no side-by-side reference, so that is an error, before anything is built.
anchor=../shared/anchors/torch_attention.py
[ -f "$anchor" ] || anchor=.anchors/torch_attention.py
if want attention && [ ! -f "$anchor" ]; then
  echo "bench-gpu: attention asked for, but no PyTorch anchor (../shared/anchors/torch_attention.py or .anchors/; carry .anchors)"
  exit 1
fi
targets="bench_cuda"
[ "$what" = " cuda " ] || targets="$targets bench_attention_gpu"
[[ "$what" == *" atomic "* ]] && targets="$targets bench_atomic_rate"
[ "$what" = " atomic " ] && targets="bench_atomic_rate"
: >"$results"

if ! cmake -S . -B "$BUILD" -G Ninja -DGG_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DGG_BUILD_BENCH=ON \
      ${GG_CMAKE_ARGS:-} >"$OUT/bench-configure.log" 2>&1 ||
   ! cmake --build "$BUILD" -j "$(nproc)" --target $targets >"$OUT/bench-build.log" 2>&1; then
  tail -40 "$OUT/bench-build.log" "$OUT/bench-configure.log" 2>/dev/null; echo "bench-gpu: build failed"; exit 1
fi
# tree: the code as it ran (scripts/tree-id.sh); commit: HEAD only where that is HEAD's code, else
# "unknown" (the GPU machine's copy carries an older snapshot of .git, whose HEAD is not
# the code; there scripts/tree-id.sh --find ID names the commit)
tree=$(scripts/tree-id.sh)
commit=unknown
[ "$tree" = "$(scripts/tree-id.sh --commit HEAD 2>/dev/null)" ] && commit=$(git rev-parse --short HEAD)
echo "{\"bench\":\"run\",\"card\":\"$card\",\"date\":\"$day\",\"commit\":\"$commit\",\"tree\":\"$tree\"}" >>"$results"

if want cuda; then
  "$BUILD/bench/bench_cuda" >>"$results" 2>"$OUT/bench_cuda.err"
  PYTHONUNBUFFERED=1 python3 bench/mlp_torch.py >>"$results" 2>"$OUT/mlp_torch.err"
fi
if [[ "$what" == *" ab "* ]]; then
  for w in 1 0; do
    for cfg in "--d 64" "--d 128" "--d 64 --causal"; do
      GG_ATTENTION_WGMMA=$w "$BUILD/bench/bench_attention_gpu" --n 4096,16384 --heads 16 $cfg >>"$results" \
        2>>"$OUT/bench_attention_gpu.err"
    done
  done
fi
if want attention; then
  # GG_BENCH_CONFIGS: "d:mask" pairs (mask "" or "causal"); the default is all four. Each runs our
  # benchmark, then the anchor, so a configuration's lines are always side by side in one run;
  # those in GG_BENCH_NONDET (default "64:") then ours once more with the fused backward.
  sizes="${GG_BENCH_N:-1024,4096,8192,16384,32768}"
  for cfg in ${GG_BENCH_CONFIGS:-64: 64:causal 128: 128:causal}; do
    d=${cfg%%:*} c=${cfg##*:}
    [ -n "$c" ] && c="--$c"
    "$BUILD/bench/bench_attention_gpu" --n "$sizes" --d "$d" --heads 16 $c \
      >>"$results" 2>>"$OUT/bench_attention_gpu.err"
    PYTHONUNBUFFERED=1 python3 "$anchor" --n "$sizes" --d "$d" --heads 16 $c \
      >>"$results" 2>>"$OUT/torch_attention.err"
    # the fused backward (nondeterministic dQ, kernels.h) in the configurations of GG_BENCH_NONDET
    if [[ " ${GG_BENCH_NONDET-64:} " == *" $cfg "* ]]; then
      GG_ATTENTION_DETERMINISTIC=0 "$BUILD/bench/bench_attention_gpu" --n "$sizes" --d "$d" --heads 16 $c \
        >>"$results" 2>>"$OUT/bench_attention_gpu.err"
    fi
  done
fi
if [[ "$what" == *" atomic "* ]]; then
  for n in 8192 16384; do "$BUILD/bench/bench_atomic_rate" "$n" 16 5 >>"$results" 2>>"$OUT/bench_atomic_rate.err"; done
fi
if want long; then
  "$BUILD/bench/bench_attention_gpu" --chain-only --n 65536,262144,1048576 --d 64 --heads 8 >>"$results" \
    2>>"$OUT/bench_attention_gpu.err"
fi
cp "$results" "$OUT/"
echo
echo "results: $results"
python3 - "$results" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print("  ".join(f"{k}={v}" for k, v in r.items()))
PY
