#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: builds the GPU benchmarks (Release, sm_90a) and runs them with
# their PyTorch references in the same process tree, so that both sides are measured on one card
# in one run. Each benchmark overwrites its results file, whose first line records the card, the
# driver, the date, the commit and the command:
#
#   scripts/bench-gpu.sh [cuda|attention|long|options|dist|ab|all ...]  (default: all = cuda attention long)
#
#   cuda       bench_cuda (add/sum bandwidth, matmul against cuBLAS, an MLP double-backward step)
#              and bench/mlp_torch.py                                  -> bench/results/cuda.jsonl
#   attention  bench_attention_gpu beside bench/attention_torch.py, d = 64 and 128, causal and
#              not, N = 1K-32K, B = 1, H = 16, bf16; the d = 64 configurations once more with
#              GG_ATTENTION_DETERMINISTIC=0                            -> bench/results/attention.jsonl
#              GG_BENCH_N (e.g. 4096,16384), GG_BENCH_CONFIGS ("d:mask" pairs, e.g. "64: 64:causal")
#              and GG_BENCH_NONDET (the configurations also run in any-order mode) narrow it.
#   long       one chain at N = 65536, 262144, 1048576 (B = 1, H = 8, d = 64): time and peak
#              memory; minutes at 1M                                   -> bench/results/long.jsonl
#   ab         GG_AB_BASE=<another source tree>: builds that tree's bench_attention_gpu in its own
#              build folder beside ours, runs old and new alternately (two alternations) at
#              N = 4096, 16384, 65536 (GG_AB_N) for d = 64 and 128, causal and not, grouped heads
#              (Hkv = 4 of Hq = 16) and a causal window of 4096 keys (GG_AB_CONFIGS: "d[:causal]
#              [:hkvH][:wW]" items), and prints the medians of fwd, fwd+bwd and chain with new/old
#              ratios. GG_AB_REPS sets the repeats per measurement (default 5). Lines go to
#              $OUT/ab.jsonl, not to bench/results.
#   options    bench_attention_gpu on grouped heads, windows and Nq != Nk, each beside its dense
#              reference in the same run; B = 1, Hq = 16, bf16       -> bench/results/options.jsonl
#              (a) "gqa": Hkv = 16, 4, 1 at N = 16K and 64K for d = 64 full and causal, d = 128 full
#              (b) "window": causal, window_left = 4096, d = 64, N = 64K and 256K, beside the dense
#                  causal chain at the same N (timed as a median at both sizes, about 40 s at 256K)
#              (c) "rect": Nq = 4K, Nk = 64K, causal (bottom-right), d = 64, beside the square
#                  causal chains at N = 4K and 64K
#              Each line carries its "group". The stages are timed (median of GG_BENCH_OPTIONS_REPS,
#              default 2) where the first chain of a size took at most GG_BENCH_OPTIONS_CHAIN_ONLY_MS
#              (default 1000); above, the line is that one chain (as --chain-only). A size whose
#              chain, estimated from the previous size by the visible pairs, would exceed
#              GG_BENCH_OPTIONS_MAX_CHAIN_MS (default 45000) gets a "skipped" line. With the dense
#              chain at 64K, d = 64 taking 3 s and the generic kernels 20x slower than the dense
#              ones, this keeps the mode under about 5 minutes. GG_BENCH_OPTIONS_N (e.g. 4096,16384)
#              replaces the sizes of (a), GG_BENCH_OPTIONS_WINDOW_N those of (b). Ends with a table
#              of chain times and ratios to the references (bench/make_tables.py --summary).
#              Not part of "all" (it runs for minutes on the generic kernels).
#   dist       bench_dist under scripts/launch.sh, one process per GPU: the sequence-parallel chain
#              (B = 1, H = 8, d = 64, bf16, causal, ring schedule, zig-zag) on one GPU and on all of
#              them (GG_DIST_RANKS, e.g. "1 2 4 8") at N = 64K and 256K (median of 3; with more than
#              one GPU the all-gather schedule too) and 1M (one chain; GG_DIST_N, GG_DIST_LONG_N),
#              then 4M on the most ranks; the one-GPU process also times gg::attention's chain, the
#              baseline of the speed-ups                                   -> bench/results/dist.jsonl
#              Not part of "all".
#   python     bench/attention_python.py on the CUDA build of the Python extension (imported from
#              the build folder; needs nanobind, pytest and torch, from .whl where the machine has
#              no registry): the chain through gradgrad.torch beside the same chain through the
#              C++ API in one process, first order beside PyTorch's SDPA, the chain beside SDPA's
#              math backend, and the per-call Python overhead at N = 128  -> bench/results/python.jsonl
#              GG_BENCH_PYTHON_ARGS passes arguments (e.g. "--quick"). Then, where jvp-flash-attention
#              is importable or its wheel is in .whl, the --jvp-flash rows. Not part of "all".
#
# Then: python3 bench/make_tables.py (docs/benchmarks.md) and python3 bench/plot_attention.py.
# Logs go to $OUT (default ./gpu-logs). GG_GPU_BUILD names the build folder (default build-gpu).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
what=" ${*:-all} "
want() { [[ "$what" == *" all "* || "$what" == *" $1 "* ]]; }
OUT="${OUT:-$PWD/gpu-logs}"
mkdir -p "$OUT" bench/results
BUILD="${GG_GPU_BUILD:-build-gpu}"
if [[ "$what" == *" ab "* && -z "${GG_AB_BASE:-}" ]]; then
  echo "bench-gpu: ab needs GG_AB_BASE=<directory of the other source tree>"; exit 2
fi

py=OFF
if [[ "$what" == *" python "* ]]; then
  python3 -c "import nanobind" 2>/dev/null || { [ -d .whl ] &&
    python3 -m pip install -q --no-index --find-links .whl nanobind >"$OUT/pip.log" 2>&1; }
  py=ON
fi
configure_and_build() {  # source dir, build dir, log name, targets...
  local src=$1 dir=$2 log=$3; shift 3
  if ! cmake -S "$src" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGG_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
         -DGG_BUILD_BENCH=ON -DGG_BUILD_EXAMPLES=OFF -DGG_BUILD_TESTS=OFF -DGG_PYTHON=$py >"$OUT/$log.log" 2>&1 ||
     ! cmake --build "$dir" -j "$(nproc)" --target "$@" >>"$OUT/$log.log" 2>&1; then
    tail -40 "$OUT/$log.log"; echo "bench-gpu: build of $src failed ($OUT/$log.log)"; exit 1
  fi
}
targets=()
want cuda && targets+=(bench_cuda)
{ want attention || want long || [[ "$what" == *" ab "* || "$what" == *" options "* ]]; } &&
  targets+=(bench_attention_gpu)
[[ "$what" == *" dist "* ]] && targets+=(bench_dist)
[ $py = ON ] && targets+=(_C)
configure_and_build . "$BUILD" build "${targets[@]}"

card="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
driver="$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"
# GG_COMMIT names the code where the tree was copied without its own git history
commit="${GG_COMMIT:-$(git describe --always --dirty 2>/dev/null || echo unknown)}"
start() {  # results file name, command: truncates the file and writes its meta line
  python3 - "$1" "$card" "$driver" "$(date -u +%F)" "$commit" "$2" >"bench/results/$1.jsonl" <<'PY'
import json, sys
name, card, driver, date, commit, command = sys.argv[1:]
print(json.dumps({"bench": "meta", "results": name, "card": card, "driver": driver, "date": date,
                  "commit": commit, "command": command}, separators=(",", ":")))
PY
}
ours="$BUILD/bench/bench_attention_gpu"
rc=0

if want cuda; then
  start cuda "scripts/bench-gpu.sh cuda"
  "$BUILD/bench/bench_cuda" >>bench/results/cuda.jsonl 2>"$OUT/bench_cuda.err" || rc=1
  PYTHONUNBUFFERED=1 python3 bench/mlp_torch.py >>bench/results/cuda.jsonl 2>"$OUT/mlp_torch.err" || rc=1
fi

if want attention; then
  sizes="${GG_BENCH_N:-1024,4096,8192,16384,32768}"
  configs="${GG_BENCH_CONFIGS:-64: 64:causal 128: 128:causal}"
  nondet="${GG_BENCH_NONDET-64: 64:causal}"
  env_desc=""
  for v in GG_BENCH_N GG_BENCH_CONFIGS GG_BENCH_NONDET; do [ -n "${!v+x}" ] && env_desc+="$v=\"${!v}\" "; done
  start attention "${env_desc}scripts/bench-gpu.sh attention"
  for cfg in $configs; do
    d=${cfg%%:*} mask=${cfg##*:}
    causal=()
    [ -n "$mask" ] && causal=(--causal)
    args=(--n "$sizes" --d "$d" --heads 16 --batch 1 --dtype bf16 "${causal[@]}")
    "$ours" "${args[@]}" >>bench/results/attention.jsonl 2>>"$OUT/bench_attention_gpu.err" || rc=1
    PYTHONUNBUFFERED=1 python3 bench/attention_torch.py "${args[@]}" >>bench/results/attention.jsonl \
      2>>"$OUT/attention_torch.err" || rc=1
    if [[ " $nondet " == *" $cfg "* ]]; then
      GG_ATTENTION_DETERMINISTIC=0 "$ours" "${args[@]}" >>bench/results/attention.jsonl \
        2>>"$OUT/bench_attention_gpu.err" || rc=1
    fi
  done
fi

if want long; then
  start long "scripts/bench-gpu.sh long"
  "$ours" --chain-only --n 65536,262144,1048576 --d 64 --heads 8 --batch 1 --dtype bf16 \
    >>bench/results/long.jsonl 2>>"$OUT/bench_attention_gpu.err" || rc=1
fi

if [ $py = ON ]; then
  start python "scripts/bench-gpu.sh python ${GG_BENCH_PYTHON_ARGS:-}"
  # shellcheck disable=SC2086
  PYTHONPATH="$PWD/$BUILD/python" PYTHONUNBUFFERED=1 python3 bench/attention_python.py ${GG_BENCH_PYTHON_ARGS:-} |
    grep -v '"bench": "meta"' >>bench/results/python.jsonl 2>"$OUT/attention_python.err" || rc=1
  # the rows beside jvp-flash-attention, where it is importable (or its wheel is in .whl)
  jvp_path="$PWD/$BUILD/python"
  if ! python3 -c "import jvp_flash_attention" 2>/dev/null && ls .whl/jvp_flash_attention-*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --target "$BUILD/site-jvp" .whl/jvp_flash_attention-*.whl \
      >"$OUT/pip-jvp.log" 2>&1 && jvp_path="$jvp_path:$PWD/$BUILD/site-jvp"
  fi
  if PYTHONPATH="$jvp_path" python3 -c "import jvp_flash_attention" 2>/dev/null; then
    PYTHONPATH="$jvp_path" PYTHONUNBUFFERED=1 python3 bench/attention_python.py --jvp-flash |
      grep -v '"bench": "meta"' >>bench/results/python.jsonl 2>"$OUT/attention_python_jvp.err" || rc=1
  fi
fi

if [[ "$what" == *" options "* ]]; then
  env_desc=""
  for v in GG_BENCH_OPTIONS_N GG_BENCH_OPTIONS_WINDOW_N GG_BENCH_OPTIONS_REPS GG_BENCH_OPTIONS_CHAIN_ONLY_MS \
           GG_BENCH_OPTIONS_MAX_CHAIN_MS; do
    [ -n "${!v+x}" ] && env_desc+="$v=\"${!v}\" "
  done
  start options "${env_desc}scripts/bench-gpu.sh options"
  limits=(--reps "${GG_BENCH_OPTIONS_REPS:-2}" --chain-only-above "${GG_BENCH_OPTIONS_CHAIN_ONLY_MS:-1000}"
          --skip-above "${GG_BENCH_OPTIONS_MAX_CHAIN_MS:-45000}")
  options_run() {  # group, bench_attention_gpu arguments: appends its lines tagged with the group
    local group=$1 t0=$SECONDS
    shift
    "$ours" --heads 16 --batch 1 --dtype bf16 "${limits[@]}" "$@" 2>>"$OUT/bench_attention_gpu.err" |
      sed "s/^{/{\"group\":\"$group\",/" >>bench/results/options.jsonl
    [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
    echo "options: $group $* ($((SECONDS - t0)) s)"
  }
  gqa_n="${GG_BENCH_OPTIONS_N:-16384,65536}"
  for cfg in "64" "64 --causal" "128"; do
    for hkv in 16 4 1; do
      # shellcheck disable=SC2086  # cfg is "d [--causal]"
      options_run gqa --n "$gqa_n" --d $cfg --hkv $hkv
    done
  done
  window_n="${GG_BENCH_OPTIONS_WINDOW_N:-65536,262144}"
  # the dense reference is timed as a median at every size (3.3 s a chain at 256K), not as one
  # cold chain: a ratio of two medians
  options_run window --n "$window_n" --d 64 --causal --chain-only-above 100000
  options_run window --n "$window_n" --d 64 --causal --window-left 4096
  options_run rect --n 4096,65536 --d 64 --causal
  options_run rect --n 4096 --nk 65536 --d 64 --causal
  python3 bench/make_tables.py --summary bench/results/options.jsonl || rc=1
fi

if [[ "$what" == *" dist "* ]]; then
  gpus=$(nvidia-smi -L | grep -c '^GPU')
  ranks="${GG_DIST_RANKS:-$( ((gpus > 1)) && echo "1 $gpus" || echo 1)}"
  env_desc=""
  for v in GG_DIST_RANKS GG_DIST_N GG_DIST_LONG_N; do [ -n "${!v+x}" ] && env_desc+="$v=\"${!v}\" "; done
  start dist "${env_desc}scripts/bench-gpu.sh dist"
  dist_run() {  # ranks, bench_dist arguments
    local p=$1 t0=$SECONDS
    shift
    timeout 900 bash scripts/launch.sh "$p" "$BUILD/bench/bench_dist" --heads 8 --d 64 --dtype bf16 --causal "$@" \
      >>bench/results/dist.jsonl 2>>"$OUT/bench_dist.err" || rc=1
    echo "dist: $p GPU(s) $* ($((SECONDS - t0)) s)"
  }
  most=0
  for p in $ranks; do
    dist_run "$p" --n "${GG_DIST_N:-65536,262144}" --reps 3
    ((p > 1)) && dist_run "$p" --n "${GG_DIST_N:-65536,262144}" --reps 3 --schedule all_gather
    dist_run "$p" --n "${GG_DIST_LONG_N:-1048576}" --reps 1 --warmup 0
    ((p > most)) && most=$p
  done
  ((most > 1)) && dist_run "$most" --n 4194304 --reps 1 --warmup 0
  python3 bench/make_tables.py --print dist || rc=1
fi

if [[ "$what" == *" ab "* ]]; then
  base_build="$BUILD-base"
  configure_and_build "$GG_AB_BASE" "$base_build" build-base bench_attention_gpu
  old="$base_build/bench/bench_attention_gpu"
  : >"$OUT/ab.jsonl"
  ab_configs="${GG_AB_CONFIGS:-64 64:causal 128 128:causal 64:hkv4 64:causal:hkv4 128:causal:hkv4 64:causal:w4096}"
  for round in 1 2; do
    for cfg in $ab_configs; do
      args=(--d "${cfg%%:*}")
      for part in $(tr ':' ' ' <<<"${cfg#*:}"); do
        case $part in
          causal) args+=(--causal) ;;
          hkv*) args+=(--hkv "${part#hkv}") ;;
          w*) args+=(--window-left "${part#w}") ;;
        esac
      done
      for side in new old; do
        bin=$ours
        [ $side = old ] && bin=$old
        "$bin" --n "${GG_AB_N:-4096,16384,65536}" "${args[@]}" --heads 16 --batch 1 --dtype bf16 \
            --reps "${GG_AB_REPS:-5}" 2>>"$OUT/ab.err" |
          sed "s/^{/{\"side\":\"$side\",\"round\":$round,/" >>"$OUT/ab.jsonl"
      done
    done
  done
  echo "A/B: new = this tree, old = $GG_AB_BASE; medians over both rounds (ms); ratios new/old"
  python3 - "$OUT/ab.jsonl" <<'PY'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "fwd_ms" not in r:
        continue
    key = (r["d"], r["causal"], r["hkv"], r["window_left"] or 0, r["N"])
    for f in ("fwd_ms", "fwdbwd_ms", "chain_ms"):
        runs.setdefault((key, r["side"], f), []).append(r[f])
keys = sorted({k for (k, _, _) in runs})
print(f"{'d':>4} {'mask':>7} {'Hkv':>4} {'win':>5} {'N':>6} | {'fwd old':>8} {'new':>8} | {'f+b old':>8} {'new':>8} | "
      f"{'chain old':>9} {'new':>8} | {'fwd':>6} {'f+b':>6} {'chain':>6}")
for k in keys:
    med = {(s, f): statistics.median(runs[(k, s, f)]) for s in ("old", "new") for f in ("fwd_ms", "fwdbwd_ms", "chain_ms")
           if (k, s, f) in runs}
    if len(med) < 6:
        print(f"{k[0]:>4} {'causal' if k[1] else 'full':>7} {k[2]:>4} {k[3]:>5} {k[4]:>6} | missing lines (see ab.err)")
        continue
    r = {f: med[("new", f)] / med[("old", f)] for f in ("fwd_ms", "fwdbwd_ms", "chain_ms")}
    print(f"{k[0]:>4} {'causal' if k[1] else 'full':>7} {k[2]:>4} {k[3]:>5} {k[4]:>6} | {med[('old', 'fwd_ms')]:8.3f} {med[('new', 'fwd_ms')]:8.3f} | "
          f"{med[('old', 'fwdbwd_ms')]:8.3f} {med[('new', 'fwdbwd_ms')]:8.3f} | {med[('old', 'chain_ms')]:9.3f} "
          f"{med[('new', 'chain_ms')]:8.3f} | {r['fwd_ms']:6.3f} {r['fwdbwd_ms']:6.3f} {r['chain_ms']:6.3f}")
PY
fi

ran=()
for f in cuda attention long; do want $f && ran+=("$f"); done
[[ "$what" == *" options "* ]] && ran+=(options)
[ $py = ON ] && ran+=(python)
for f in "${ran[@]}"; do
  [ -s "bench/results/$f.jsonl" ] && cp "bench/results/$f.jsonl" "$OUT/" &&
    echo "wrote bench/results/$f.jsonl ($(($(wc -l <"bench/results/$f.jsonl") - 1)) lines)"
done
grep -h '"error"' bench/results/*.jsonl 2>/dev/null | head -5
[ $rc -eq 0 ] || echo "bench-gpu: a benchmark exited with an error (logs in $OUT)"
exit $rc
