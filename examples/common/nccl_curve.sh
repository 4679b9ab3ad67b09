#!/usr/bin/env bash
# An example's data-parallel run over NCCL against its run on one GPU: the --smoke run on one
# GPU, the same on N GPUs (scripts/launch.sh N ... --nccl, one process per GPU), and each
# PHASE's loss curve compared (rank 0's metrics.jsonl) by compare_loss_curves.
#   nccl_curve.sh N LAUNCH COMPARE PROGRAM OUT TOL PHASE...
set -uo pipefail
n=$1 launch=$2 compare=$3 program=$4 out=$5 tol=$6
shift 6
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if ((gpus < 1)); then echo "no CUDA device"; exit 0; fi
if ((gpus < n)); then echo "fewer GPUs than ranks ($gpus < $n)"; exit 0; fi
rm -rf "$out"
"$program" --smoke --device cuda --out "$out/one" >"$out.one.log" 2>&1 || { tail -20 "$out.one.log"; exit 1; }
bash "$launch" "$n" "$program" --smoke --device cuda --nccl --out "$out/nccl" >"$out.nccl.log" 2>&1 ||
  { tail -40 "$out.nccl.log"; exit 1; }
"$compare" "$out/one/metrics.jsonl" "$out/nccl/metrics.jsonl" "$tol" "$@"
