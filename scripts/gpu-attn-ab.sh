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
#   GG_NCU_CHAIN     sizes N ("8192 16384"): every kernel of one chain (--chain-only) with its
#                    duration and clock, from ncu, into ncu-chain.csv; "" (default) skips it
#   GG_AB_SIZES      "N,N d;N d" (default "4096,16384 64;16384 128"): the benchmark's sizes
#   GG_NCU_CHAIN_ENV NAME=VALUE[,...]: each chain of GG_NCU_CHAIN once more with these set
#   GG_NCU_CHAIN_D   head dimension of those chains (default 64)
#   GG_NCU_CHAIN_DET GG_ATTENTION_DETERMINISTIC for those chains (default 0: the opt-in mode; 1:
#                    the default, ordered mode); GG_NCU_CHAIN_ENV can still override it
#   GG_AB_BASE       a source tree of another version (e.g. ab-base/, ignored by git: `git archive
#                    REV -- CMakeLists.txt cmake core autograd ops kernels bench tests examples
#                    gradgrad.h docs/tutorial.md | tar -x -C ab-base`, sent with the device tool's
#                    carry): its benchmark is built too, and each configuration runs on both
#                    builds, one after the other (lines marked "base" in x)
#   GG_SMI=1         samples the SM clock, power and throttle reasons every 50 ms during the A/B
#                    runs (nvidia-smi, into smi.csv)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT="${OUT:-$PWD/gpu-logs}"; mkdir -p "$OUT"
B="${GG_GPU_BUILD:-build-gpu}"
L="$OUT/logs"; mkdir -p "$L"
cmake -S . -B "$B" -G Ninja -DGG_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DGG_BUILD_EXAMPLES=OFF >"$L/build.log" 2>&1 &&
  cmake --build "$B" -j "$(nproc)" --target gg_gpu_tests bench_attention_gpu >>"$L/build.log" 2>&1 ||
  { tail -30 "$L/build.log"; exit 1; }
BINS="$B/bench/bench_attention_gpu"
if [ -n "${GG_AB_BASE:-}" ]; then
  cmake -S "$GG_AB_BASE" -B "$B-base" -G Ninja -DGG_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DGG_BUILD_EXAMPLES=OFF \
    >"$L/build-base.log" 2>&1 && cmake --build "$B-base" -j "$(nproc)" --target bench_attention_gpu >>"$L/build-base.log" 2>&1 ||
    { tail -30 "$L/build-base.log"; exit 1; }
  BINS="$BINS $B-base/bench/bench_attention_gpu"
fi
GG_REQUIRE_GPU=1 "$B/tests/gg_gpu_tests" --gtest_filter="${GG_TEST_FILTER:-*CudaAttentionHopper*:CudaAttention.*:*CudaAttentionLowPrecision*}" \
  >"$L/tests.log" 2>&1
echo "tests: $(grep -E '^\[  PASSED|^\[  FAILED' "$L/tests.log" | head -2 | tr '\n' ' ')"
grep -E "Failure|FAILED  \]" -A3 "$L/tests.log" | head -20
# configurations "wgmma:bob_ef[:ws[:pp[:det]]]" (GG_AB_CONFIGS; "-" = the default): Hopper kernels
# with the default BoB schedule, with each pass-1 schedule forced (0 split, 1 E/F first), with the
# warp-specialised kernels off (ws 0), ping-pong in the kernels of mask pp (kernels.h), or det 0
# (the fused backward: GG_ATTENTION_DETERMINISTIC=0), and mma.sync only
# a sixth field, NAME=VALUE[,NAME=VALUE...], sets more environment variables for that configuration
[ "${GG_SMI:-0}" = 1 ] && { nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active \
  --format=csv -lms 50 >"$OUT/smi.csv" 2>&1 & SMI_PID=$!; }
for cfg in ${GG_AB_CONFIGS:-1:- 1:0 1:1 1:-:0 0:-}; do
  IFS=: read -r w ef ws pp det x <<<"$cfg"
  [ "${x:--}" = - ] && x="GG_AB_UNUSED=1"
  [ "$ef" = - ] && ef=""
  [ "${ws:--}" = - ] && ws=""
  [ "${pp:--}" = - ] && pp=""
  [ "${det:--}" = - ] && det=""
  IFS=';' read -ra sizes <<<"${GG_AB_SIZES:-4096,16384 64;16384 128}"
  for nd in "${sizes[@]}"; do
    set -- $nd
    for bin in $BINS; do
      xb="$x"; [ "$bin" != "$B/bench/bench_attention_gpu" ] && xb="base,$x"
      env ${x//,/ } GG_ATTENTION_WGMMA=$w GG_ATTENTION_BOB_EF=$ef GG_ATTENTION_WS=$ws GG_ATTENTION_PINGPONG=$pp \
        GG_ATTENTION_DETERMINISTIC=$det "$bin" --n "$1" --d "$2" |
        sed "s/^{/{\"x\":\"${xb}\",\"bob_ef\":\"${ef:--}\",\"ws\":\"${ws:--}\",\"pp\":\"${pp:--}\",\"det\":\"${det:--}\",/"
    done
  done
done >"$OUT/ab.jsonl" 2>>"$L/build.log"
[ -n "${SMI_PID:-}" ] && kill "$SMI_PID"
if command -v ncu >/dev/null && [ -n "${GG_NCU_CHAIN:-}" ]; then
  # each size as is, then (GG_NCU_CHAIN_ENV: NAME=VALUE[,...]) once more with those variables set
  for n in $GG_NCU_CHAIN; do
    for e in "" ${GG_NCU_CHAIN_ENV:+"$GG_NCU_CHAIN_ENV"}; do
      env GG_ATTENTION_DETERMINISTIC="${GG_NCU_CHAIN_DET:-0}" ${e//,/ } ncu --clock-control none --csv \
        --metrics gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second "$B/bench/bench_attention_gpu" --n "$n" \
        --d "${GG_NCU_CHAIN_D:-64}" --chain-only >"$OUT/ncu-chain-$n${e:+-env}.csv" 2>>"$L/ncu-chain.log"
    done
  done
fi
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
print(f"{'x':16} {'kernel':9} {'ef':>3} {'ws':>3} {'pp':>3} {'det':>3} {'N':>6} {'d':>4} {'fwd ms':>8} {'fwd TF':>7} {'fwdbwd':>8} {'bob ms':>8} {'chain ms':>9}")
for line in open(sys.argv[1]):
    if not line.startswith('{'): continue
    r = json.loads(line)
    if 'error' in r: print(r); continue
    print(f"{r.get('x', '-')[:16]:16} {r['fwd_kernel']:9} {r.get('bob_ef', '-'):>3} {r.get('ws', '-'):>3} {r.get('pp', '-'):>3} {r.get('det', '-'):>3} {r['N']:>6} {r['d']:>4} {r['fwd_ms']:8.3f} {r['fwd_TFLOPs']:7.1f} {r['fwdbwd_ms']:8.3f} {r['bob_ms']:8.2f} {r['chain_ms']:9.2f}")
PY
for f in "$OUT"/ncu-chain-*.csv; do
  [ -f "$f" ] || continue
  python3 - "$f" <<'PY'
import csv, sys, collections, re
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
rows = rows[[r[0] for r in rows].index("ID"):] if any(r[0] == "ID" for r in rows) else []
if not rows: print(sys.argv[1], "no rows"); sys.exit()
h = rows[0]; ki, mi, vi = h.index("Kernel Name"), h.index("Metric Name"), h.index("Metric Value")
ids = h.index("ID")
per = collections.OrderedDict()
for r in rows[1:]:
    per.setdefault(r[ids], {"k": re.sub(r"[<(].*", "", r[ki])[:44]})[r[mi]] = float(r[vi].replace(",", ""))
agg = collections.OrderedDict()
for v in per.values():
    a = agg.setdefault(v["k"], [0, 0.0, 0.0]); a[0] += 1; a[1] += v.get("gpu__time_duration.sum", 0) / 1e6
    a[2] = v.get("sm__cycles_elapsed.avg.per_second", 0) / 1e9
print(sys.argv[1].split("/")[-1], f"{len(per)} kernels, {sum(a[1] for a in agg.values()):.3f} ms")
for k, a in agg.items(): print(f"  {k:44} x{a[0]:<3} {a[1]:8.3f} ms  {a[2]:.2f} GHz")
PY
done
[ -f "$OUT/smi.csv" ] || exit 0
python3 - "$OUT/smi.csv" <<'PY'
import sys, statistics
c, p, r = [], [], {}
for line in open(sys.argv[1]).read().splitlines()[1:]:
    f = [x.strip() for x in line.split(",")]
    try: clk, pw = float(f[1].split()[0]), float(f[2].split()[0])
    except (ValueError, IndexError): continue
    if pw > 250: c.append(clk); p.append(pw); r[f[4]] = r.get(f[4], 0) + 1
if c: print(f"smi (samples over 250 W: {len(c)}): SM clock median {statistics.median(c):.0f} MHz (min {min(c):.0f}), power median {statistics.median(p):.0f} W, reasons {r}")
PY
