#!/usr/bin/env bash
# On the GPU machine: a quick loop for attention-kernel work. Builds the GPU tests and the
# attention benchmark (sm_90a), runs the attention tests, then the benchmark with the Hopper
# (wgmma) kernels on and off, then Nsight Compute on one launch of each kernel named in
# GG_NCU_KERNELS (regexes; default "fwd dkdv"), and optionally (GG_SASS=1) the SASS of the
# attention kernels. Logs go to $OUT (packed into one tgz); prints a short table last.
#   GG_TEST_FILTER   gtest filter (default: the attention tests)
#   GG_NCU_KERNELS   kernel-name regexes for ncu; "" skips ncu
#   GG_NCU_WGMMA     which configurations ncu profiles: "1 0" (default) or "1"
#   GG_NCU_DETAILS=1 also every raw metric of the pipe, stall and instruction-mix sections
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT="${OUT:-$PWD/gpu-logs}"; mkdir -p "$OUT"
B="${GG_GPU_BUILD:-build-gpu}"
L="$OUT/logs"; mkdir -p "$L"
cmake -S . -B "$B" -G Ninja -DGG_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DGG_BUILD_EXAMPLES=OFF >"$L/build.log" 2>&1 &&
  cmake --build "$B" -j "$(nproc)" --target gg_gpu_tests bench_attention_gpu >>"$L/build.log" 2>&1 ||
  { tail -30 "$L/build.log"; exit 1; }
GG_REQUIRE_GPU=1 "$B/tests/gg_gpu_tests" --gtest_filter="${GG_TEST_FILTER:-*CudaAttentionHopper*:CudaAttention.*:*CudaAttentionLowPrecision*}" \
  >"$L/tests.log" 2>&1
echo "tests: $(grep -E '^\[  PASSED|^\[  FAILED' "$L/tests.log" | head -2 | tr '\n' ' ')"
grep -E "Failure|FAILED  \]" -A3 "$L/tests.log" | head -20
# configurations "wgmma:bob_ef[:ws[:pp[:det]]]" (GG_AB_CONFIGS; "-" = the default): Hopper kernels
# with the default BoB schedule, with each pass-1 schedule forced (0 split, 1 E/F first), with the
# warp-specialised kernels off (ws 0), ping-pong in the kernels of mask pp (kernels.h), or det 0
# (the fused backward: GG_ATTENTION_DETERMINISTIC=0), and mma.sync only
for cfg in ${GG_AB_CONFIGS:-1:- 1:0 1:1 1:-:0 0:-}; do
  IFS=: read -r w ef ws pp det <<<"$cfg"
  [ "$ef" = - ] && ef=""
  [ "${ws:--}" = - ] && ws=""
  [ "${pp:--}" = - ] && pp=""
  [ "${det:--}" = - ] && det=""
  for nd in "4096,16384 64" "16384 128"; do
    set -- $nd
    GG_ATTENTION_WGMMA=$w GG_ATTENTION_BOB_EF=$ef GG_ATTENTION_WS=$ws GG_ATTENTION_PINGPONG=$pp \
      GG_ATTENTION_DETERMINISTIC=$det "$B/bench/bench_attention_gpu" --n "$1" --d "$2" |
      sed "s/^{/{\"bob_ef\":\"${ef:--}\",\"ws\":\"${ws:--}\",\"pp\":\"${pp:--}\",\"det\":\"${det:--}\",/"
  done
done >"$OUT/ab.jsonl" 2>>"$L/build.log"
if command -v ncu >/dev/null && [ -n "${GG_NCU_KERNELS-fwd dkdv}" ]; then
  for w in ${GG_NCU_WGMMA:-1 0}; do
    for k in ${GG_NCU_KERNELS-fwd dkdv}; do
      GG_ATTENTION_WGMMA=$w ncu --clock-control none -k regex:$k --launch-skip 2 --launch-count 1 \
        --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section Occupancy \
        "$B/bench/bench_attention_gpu" --n 16384 --reps 1 >>"$L/ncu.txt" 2>&1
      # every raw metric of the pipe, scheduler, stall and instruction-mix sections (a separate run:
      # a metric this ncu lacks cannot spoil the summary above)
      [ "${GG_NCU_DETAILS:-0}" = 1 ] && GG_ATTENTION_WGMMA=$w ncu --clock-control none -k regex:$k --launch-skip 2 \
        --launch-count 1 --section ComputeWorkloadAnalysis --section InstructionStats --section SchedulerStats \
        --section WarpStateStats --page raw "$B/bench/bench_attention_gpu" --n 16384 --reps 1 >>"$L/ncu-raw.txt" 2>&1
    done
  done
  grep -E "attention_(fwd|bwd|bob)_[a-z0-9_]*kernel<|Duration|Compute \(SM\) Throughput|L1/TEX Cache Throughput|Achieved Occupancy|Warp Cycles Per Issued|Registers Per" "$L/ncu.txt" | cut -c1-150
fi
if [ "${GG_SASS:-0}" = 1 ] && command -v cuobjdump >/dev/null; then
  for f in "$B"/CMakeFiles/gradgrad.dir/kernels/cuda/attention_*.cu.o; do
    cuobjdump -sass "$f" >"$L/$(basename "$f" .cu.o).sass" 2>&1
  done
fi
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
python3 - "$OUT/ab.jsonl" <<'PY'
import json, sys
print(f"{'kernel':9} {'ef':>3} {'ws':>3} {'pp':>3} {'det':>3} {'N':>6} {'d':>4} {'fwd ms':>8} {'fwd TF':>7} {'fwdbwd':>8} {'bob ms':>8} {'chain ms':>9}")
for line in open(sys.argv[1]):
    if not line.startswith('{'): continue
    r = json.loads(line)
    if 'error' in r: print(r); continue
    print(f"{r['fwd_kernel']:9} {r.get('bob_ef', '-'):>3} {r.get('ws', '-'):>3} {r.get('pp', '-'):>3} {r.get('det', '-'):>3} {r['N']:>6} {r['d']:>4} {r['fwd_ms']:8.3f} {r['fwd_TFLOPs']:7.1f} {r['fwdbwd_ms']:8.3f} {r['bob_ms']:8.2f} {r['chain_ms']:9.2f}")
PY
