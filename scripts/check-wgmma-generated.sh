#!/usr/bin/env bash
# Fails if kernels/cuda/wgmma.cuh differs from what scripts/gen_wgmma.py writes: the header is
# generated, and an edit by hand (or a generator change without a rerun) would drift unnoticed.
# Needs python3 only (no GPU, no nvcc).   Usage: scripts/check-wgmma-generated.sh [python3]
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
py="${1:-python3}"
command -v "$py" >/dev/null || { echo "check-wgmma-generated: no python3, skipped"; exit 77; }
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
"$py" scripts/gen_wgmma.py >"$tmp" || { echo "check-wgmma-generated: scripts/gen_wgmma.py failed"; exit 1; }
if ! diff -u kernels/cuda/wgmma.cuh "$tmp"; then
  echo "check-wgmma-generated: kernels/cuda/wgmma.cuh is not the generator's output;" \
       "rerun: python3 scripts/gen_wgmma.py > kernels/cuda/wgmma.cuh"
  exit 1
fi
echo "check-wgmma-generated: kernels/cuda/wgmma.cuh matches scripts/gen_wgmma.py"
