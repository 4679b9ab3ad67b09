#!/usr/bin/env bash
# Fails if ptxas serialises the warpgroup MMAs of a Hopper attention kernel: it then waits after
# every wgmma, a slowdown of 1.5-2x that compiles, passes every test and shows only as an `info`
# line of `ptxas -v` (C7510-C7520, "wgmma.mma_async instructions are serialized"). It happened on
# small changes: a branch inside a wgmma group, registers of a pending group read or written
# before its wait (docs/kernels.md, section 2). Compiles each attention file for sm_90a as the
# library does, without a GPU.   Usage: scripts/check-wgmma-pipelined.sh [nvcc]
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
nvcc="${1:-nvcc}"
command -v "$nvcc" >/dev/null || { echo "check-wgmma-pipelined: no nvcc, skipped"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
for f in kernels/cuda/attention_fwd.cu kernels/cuda/attention_bwd.cu kernels/cuda/attention_bwd_bwd.cu; do
  if ! out=$("$nvcc" -cubin -arch=sm_90a -std=c++17 -O3 -DNDEBUG -DGG_HAS_CUDA=1 -DGG_CUDA_SM90A=1 -I. \
               -Xptxas -v "$f" -o "$tmp/k.cubin" 2>&1); then
    echo "$out" | tail -20
    echo "check-wgmma-pipelined: $f does not compile"
    fail=1
    continue
  fi
  kernels=$(grep -c "Compiling entry function" <<<"$out")
  serial=$(grep -i "serialized" <<<"$out" | sed -E 's/.*\((C[0-9]+)\).*due to (.*) in the function (.*)/\1 \3: \2/' | tr -d "'")
  if [ -n "$serial" ]; then
    echo "$serial"
    echo "check-wgmma-pipelined: $f: ptxas serialises wgmma in the kernels above"
    fail=1
  else
    echo "check-wgmma-pipelined: $f: $kernels kernels, no wgmma serialised"
  fi
done
exit $fail
