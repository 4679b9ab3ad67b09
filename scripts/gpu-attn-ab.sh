#!/usr/bin/env bash
# On the GPU machine: a quick loop for attention-kernel work. Builds the GPU tests and the
# attention benchmark (sm_90a), runs the attention tests that cover the forward kernels, then the
# benchmark with the Hopper (wgmma) kernels on and off, then Nsight Compute on one forward and one
# dK dV launch of each. Writes at most 6 files to $OUT; prints a short table last.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT="${OUT:-$PWD/gpu-logs}"; mkdir -p "$OUT"
B="${GG_GPU_BUILD:-build-gpu}"
cmake -S . -B "$B" -G Ninja -DGG_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DGG_BUILD_EXAMPLES=OFF >"$OUT/build.log" 2>&1 &&
  cmake --build "$B" -j "$(nproc)" --target gg_gpu_tests bench_attention_gpu >>"$OUT/build.log" 2>&1 ||
  { tail -30 "$OUT/build.log"; exit 1; }
GG_REQUIRE_GPU=1 "$B/tests/gg_gpu_tests" --gtest_filter="${GG_TEST_FILTER:-*CudaAttentionHopper*:CudaAttention.*:*CudaAttentionLowPrecision*}" \
  >"$OUT/tests.log" 2>&1
echo "tests: $(grep -E '^\[  PASSED|^\[  FAILED' "$OUT/tests.log" | head -2 | tr '\n' ' ')"
grep -E "Failure|FAILED  \]" -A3 "$OUT/tests.log" | head -20
# three configurations: Hopper kernels (default), plus the experimental BoB pass 1, and mma.sync only
for cfg in "1 0" "1 1" "0 0"; do
  set -- $cfg
  GG_ATTENTION_WGMMA=$1 GG_ATTENTION_WGMMA_BOB1=$2 "$B/bench/bench_attention_gpu" --n 4096,16384 --d 64 | sed "s/^{/{\"bob_pass1_wgmma\":$2,/"
  GG_ATTENTION_WGMMA=$1 GG_ATTENTION_WGMMA_BOB1=$2 "$B/bench/bench_attention_gpu" --n 16384 --d 128 | sed "s/^{/{\"bob_pass1_wgmma\":$2,/"
done >"$OUT/ab.jsonl" 2>>"$OUT/build.log"
if command -v ncu >/dev/null; then
  for w in 1 0; do
    for k in ${GG_NCU_KERNELS:-fwd dkdv}; do
      GG_ATTENTION_WGMMA=$w ncu --clock-control none -k regex:$k --launch-skip 2 --launch-count 1 \
        --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section Occupancy \
        "$B/bench/bench_attention_gpu" --n 16384 --reps 1 >>"$OUT/ncu.txt" 2>&1
    done
  done
  grep -E "attention_(fwd|bwd)_[a-z_]*kernel<|Duration|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|L1/TEX Cache Throughput|Achieved Occupancy|Warp Cycles Per Issued|Registers Per|Block Limit" "$OUT/ncu.txt" | cut -c1-150
fi
python3 - "$OUT/ab.jsonl" <<'PY'
import json, sys
print(f"{'kernel':9} {'bob1':>4} {'N':>6} {'d':>4} {'fwd ms':>8} {'fwd TF':>7} {'fwdbwd':>8} {'bob ms':>8} {'chain ms':>9}")
for line in open(sys.argv[1]):
    if not line.startswith('{'): continue
    r = json.loads(line)
    if 'error' in r: print(r); continue
    print(f"{r['fwd_kernel']:9} {r.get('bob_pass1_wgmma', 0):>4} {r['N']:>6} {r['d']:>4} {r['fwd_ms']:8.3f} {r['fwd_TFLOPs']:7.1f} {r['fwdbwd_ms']:8.3f} {r['bob_ms']:8.2f} {r['chain_ms']:9.2f}")
PY
