#!/usr/bin/env bash
# On the GPU machine: the whole GPU test suite with memcheck and racecheck (scripts/gpu-test.sh),
# then the benchmarks named in the arguments (scripts/bench-gpu.sh; default: attention). All logs
# are packed into $OUT/gpu-all-logs.tgz; the results .jsonl and the test summary stay beside it.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
FINAL="${OUT:-$PWD/gpu-logs}"
mkdir -p "$FINAL"
export OUT="$(mktemp -d)"
rc=0
if [ "${GG_SKIP_TESTS:-0}" != 1 ]; then
  # GG_MEMCHECK_FILTER: the gtest filter for compute-sanitizer memcheck (gpu-test.sh's argument)
  scripts/gpu-test.sh ${GG_MEMCHECK_FILTER:+"$GG_MEMCHECK_FILTER"} >"$OUT/gpu-test.out" 2>&1 || rc=$?
  cp "$OUT/summary.txt" "$FINAL/test-summary.txt"
  cat "$OUT/summary.txt"
fi
scripts/bench-gpu.sh "${@:-attention}" >"$OUT/bench.out" 2>&1 || rc=$?
cp "$OUT"/*.jsonl "$FINAL/" 2>/dev/null
tar czf "$FINAL/gpu-all-logs.tgz" -C "$OUT" .
tail -40 "$OUT/bench.out" | cut -c1-400
exit $rc
