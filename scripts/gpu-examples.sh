#!/usr/bin/env bash
# On the GPU machine: builds the users' programs (sm_90a, Release) and runs them on the GPU:
# maml_sine beside its PyTorch twin (bench/maml_sine_torch.py) on the GPU (eager and with
# --cuda-graph) and on the CPU, in the same call, with the time ratios to PyTorch;
# maml_attention's fused-vs-composite check and long-context runs; ttt_e2e.
# The examples need CLI11 and nlohmann-json. For a machine without a package registry, run
# `scripts/gpu-examples.sh --carry-deps` on one that has them (Debian: libcli11-dev,
# nlohmann-json3-dev): it copies their headers and CMake files into .deps/ (git-ignored), laid out
# as an install prefix, and exits. Copy .deps/ along with the tree: this script configures with it
# when .deps/ exists. Logs and metrics go to $OUT; a short table is printed last.
# Usage: scripts/gpu-examples.sh [maml|attention|ttt|all|dist ...]   (default all; dist: maml_sine
#        data-parallel over NCCL on 1, 2, 4, 8 GPUs (GG_DIST_RANKS), 25 tasks per GPU)
#        scripts/gpu-examples.sh --carry-deps
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
carry_deps() {  # the installed header-only libraries -> .deps/
  local p
  for p in /usr/include/CLI /usr/include/nlohmann /usr/share/cmake/CLI11 /usr/share/cmake/nlohmann_json; do
    [ -e "$p" ] || { echo "carry-deps: $p not found (install libcli11-dev and nlohmann-json3-dev)"; return 1; }
  done
  rm -rf .deps && mkdir -p .deps/include .deps/share/cmake &&
    cp -r /usr/include/CLI /usr/include/nlohmann .deps/include/ &&
    cp -r /usr/share/cmake/CLI11 /usr/share/cmake/nlohmann_json .deps/share/cmake/ && du -sh .deps
}
if [ "${1:-}" = --carry-deps ]; then carry_deps; exit; fi
FINAL="${OUT:-$PWD/gpu-logs}"
OUT="$(mktemp -d)"   # everything lands here; packed into one archive in $FINAL at the end
mkdir -p "$FINAL"
BUILD="${GG_GPU_BUILD:-build-gpu}"
what="${*:-all}"
want() { [[ " $what " == *" all "* || " $what " == *" $1 "* ]]; }
summary="$OUT/examples-summary.txt"
: >"$summary"
row() { printf '%-44s %s\n' "$1" "$2" | tee -a "$summary"; }
prefix=()
[ -d .deps ] && prefix=(-DCMAKE_PREFIX_PATH="$PWD/.deps")

row "gpu" "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
row "date / commit" "$(date -u +%FT%TZ) ${GG_COMMIT:-$(git describe --always --dirty 2>/dev/null || echo unknown)}"
# GG_NATIVE_ARCH: the CPU kernels use this machine's vector units (AVX2/AVX-512), as PyTorch's
# CPU kernels do by run-time dispatch; without it Eigen is limited to SSE2 on x86-64.
if ! cmake -S . -B "$BUILD" -G Ninja -DGG_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_BUILD_TYPE=Release \
      -DGG_BUILD_EXAMPLES=ON -DGG_NATIVE_ARCH=ON "${prefix[@]}" >"$OUT/ex-configure.log" 2>&1 ||
   ! cmake --build "$BUILD" -j "$(nproc)" --target ${GG_EXAMPLE_TARGETS:-maml_sine maml_attention ttt_e2e} >"$OUT/ex-build.log" 2>&1; then
  tail -30 "$OUT/ex-configure.log" "$OUT/ex-build.log"; row "build" "FAILED"; cp "$OUT"/*.log "$FINAL/"; exit 1
fi
EX="$BUILD/examples"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.2fx", a / b; else printf "n/a" }'; }
ms() {  # maml_sine prints "time per meta-iteration: X ms" last; the others "X ms per (outer) step"
  grep -oE "time per meta-iteration: [0-9.]+ ms" "$1" | tail -1 | grep . || grep -oE "[0-9.]+ ms per (outer step|step)" "$1" | tail -1
}

if want maml; then
  num() { grep -oE "[0-9]+\.[0-9]+" <<<"$1" | head -1; }
  torch_ms() { grep -oE '"ms_per_iter": [0-9.]+' "$1" | grep -oE "[0-9.]+$"; }
  for dev in ${GG_EXAMPLE_DEVICES:-cuda cpu}; do
    export OMP_NUM_THREADS=2
    for order in second first; do
      flag=(); [ $order = first ] && flag=(--first-order)
      tag="${dev}_$order"
      timeout 300 "$EX/maml_sine/maml_sine" --device $dev --iterations 2000 "${flag[@]}" --out "$OUT/ms_$tag" \
        >"$OUT/maml_sine_$tag.log" 2>&1
      rc=$?
      eager="$(ms "$OUT/maml_sine_$tag.log")"
      row "maml_sine $dev $order order (gradgrad)" "$eager rc $rc"
      graph=""
      if [ $dev = cuda ]; then  # the same run with the meta-gradient replayed from a CUDA graph
        timeout 300 "$EX/maml_sine/maml_sine" --device cuda --cuda-graph --iterations 2000 "${flag[@]}" \
          --out "$OUT/ms_graph_$tag" >"$OUT/maml_sine_graph_$tag.log" 2>&1
        rc=$?
        graph="$(ms "$OUT/maml_sine_graph_$tag.log")"
        row "maml_sine $dev $order order (gradgrad --cuda-graph)" "$graph rc $rc"
      fi
      timeout 300 python3 bench/maml_sine_torch.py --device $dev --iterations 1000 --warmup 50 "${flag[@]}" \
        >"$OUT/maml_torch_$tag.log" 2>&1
      row "maml_sine $dev $order order (torch)" "$(tail -1 "$OUT/maml_torch_$tag.log")"
      t="$(torch_ms "$OUT/maml_torch_$tag.log")"
      r="eager $(ratio "$(num "$eager")" "$t")"
      [ -n "$graph" ] && r="$r, --cuda-graph $(ratio "$(num "$graph")" "$t")"
      row "maml_sine $dev $order order: gradgrad / torch" "$r"
    done
  done
  unset OMP_NUM_THREADS
fi
if want attention; then
  M="$EX/maml_attention/maml_attention"
  timeout 120 "$M" --device cuda --check --out "$OUT/mattn" >"$OUT/maml_attention_check.log" 2>&1
  row "maml_attention --check (cuda)" "rc $? $(grep -m1 -iE 'fused vs composite' "$OUT/maml_attention_check.log")"
  for n in ${GG_LONG_CONTEXT:-4096 16384 32768 65536}; do
    timeout 300 "$M" --device cuda --long-context "$n" --out "$OUT/mattn" >"$OUT/maml_attention_long_$n.log" 2>&1
    row "maml_attention --long-context $n" "rc $?"
    grep -E "fused|composite" "$OUT/maml_attention_long_$n.log" | tail -4 | sed 's/^/    /' | tee -a "$summary"
  done
fi
if [[ " $what " == *" dist "* ]]; then  # not part of "all": it wants several GPUs
  # Data-parallel maml_sine, one process per GPU over NCCL, with 25 tasks per GPU (weak scaling):
  # efficiency = the time per meta-iteration on one GPU over that on P.
  gpus=$(nvidia-smi -L | grep -c '^GPU')
  t1=""
  for p in ${GG_DIST_RANKS:-1 2 4 8}; do
    ((p > gpus)) && continue
    timeout 600 bash scripts/launch.sh "$p" "$EX/maml_sine/maml_sine" --device cuda --nccl --iterations 2000 \
      --meta-batch $((25 * p)) --out "$OUT/ms_dp$p" >"$OUT/maml_sine_dp$p.log" 2>&1
    rc=$?
    t="$(grep -oE "time per meta-iteration: [0-9.]+" "$OUT/maml_sine_dp$p.log" | grep -oE "[0-9.]+$" | sort -g | tail -1)"
    [ "$p" = 1 ] && t1="$t"
    row "maml_sine data parallel, $p GPU(s), $((25 * p)) tasks" \
      "${t:-?} ms per meta-iteration, efficiency $(ratio "$t1" "$t") rc $rc"
  done
fi
if want ttt; then
  timeout 420 "$EX/ttt_e2e/ttt_e2e" --device cuda --out "$OUT/ttt" >"$OUT/ttt_e2e_cuda.log" 2>&1
  row "ttt_e2e --device cuda" "rc $?"
  tail -25 "$OUT/ttt_e2e_cuda.log" | tee -a "$summary"
fi
tar czf "$FINAL/examples-logs.tgz" -C "$OUT" .
cp "$summary" "$FINAL/"
echo
cat "$summary"
