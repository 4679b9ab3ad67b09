#!/usr/bin/env bash
# On a machine with an NVIDIA GPU, in one go: the GPU test suite with the sanitizers
# (scripts/gpu-test.sh), then the benchmarks named in the arguments (scripts/bench-gpu.sh;
# default: attention long). The test summary and the results files are copied to $OUT (default
# ./gpu-logs) and every log is packed into $OUT/gpu-all-logs.tgz. GG_SKIP_TESTS=1 skips the tests.
#   scripts/gpu-all.sh [cuda|attention|long|all ...]
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
FINAL="${OUT:-$PWD/gpu-logs}"
mkdir -p "$FINAL"
OUT="$(mktemp -d)"
export OUT
rc=0
if [ "${GG_SKIP_TESTS:-0}" != 1 ]; then
  scripts/gpu-test.sh >"$OUT/gpu-test.out" 2>&1 || rc=$?
  cp "$OUT/summary.txt" "$FINAL/test-summary.txt"
  cat "$OUT/summary.txt"
fi
scripts/bench-gpu.sh "${@:-attention long}" >"$OUT/bench.out" 2>&1 || rc=$?
cp "$OUT"/*.jsonl "$FINAL/" 2>/dev/null
tar czf "$FINAL/gpu-all-logs.tgz" -C "$OUT" .
tail -20 "$OUT/bench.out" | cut -c1-300
exit $rc
