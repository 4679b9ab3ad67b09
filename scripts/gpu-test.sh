#!/usr/bin/env bash
# On the GPU machine (H200): builds the GPU test binary with CUDA for sm_90a, runs the GPU tests
# (ctest label gpu) with GG_REQUIRE_GPU=1 (a skip is a failure), then compute-sanitizer memcheck
# on part of the GPU test binary (the op table and every attention kernel) and racecheck on a small case of each attention kernel. (The CPU suite runs in CI: scripts/test.sh.) Logs go to $OUT (default ./gpu-logs); a short table is last.
# The Python package's tests run too (tests/python on the CUDA build of gradgrad._C in the same
# build folder, imported from $BUILD/python) where nanobind is importable or can be installed
# from .whl (the GPU machine has no package registry); GG_GPU_PYTHON=0 skips them.
# Usage: scripts/gpu-test.sh [gtest filter for memcheck]   (GG_GPU_SANITIZE=0 skips both sanitizers)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT="${OUT:-$PWD/gpu-logs}"
mkdir -p "$OUT"
BUILD="${GG_GPU_BUILD:-build-gpu}"
# memcheck: the op table and a small case of every attention kernel, the tail splits included
MEMCHECK_FILTER="${1:-Cuda.*:Ops/CudaOpTable.F32*:CudaAttention.PoisonedOutputs:CudaAttention.HopperForwardPoisonedAndDeterministic:CudaAttention.HopperFusedTailSplit:CudaAttention.HopperForwardTailSplit:CudaAttentionOptionsEdges.*:Dtypes/CudaAttentionOptionsEmptyRows.*:Cases/CudaAttentionOptions.OptionsMatchCpu/tiles_gqa_window:HeadDims/CudaAttentionOptionsTensorCores.WithinTwiceGeneric/0:HeadDims/CudaAttentionOptionsTensorCores.WithinTwiceGeneric/1:CudaAttention.BobStagesOverKeyBlocks}"
status() { printf '%-28s %s\n' "$1" "$2" | tee -a "$OUT/summary.txt"; }
: >"$OUT/summary.txt"

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$OUT/gpu.txt" 2>&1
status "gpu" "$(head -1 "$OUT/gpu.txt")"
status "date" "$(date -u +%FT%TZ)"
status "commit" "${GG_COMMIT:-$(git describe --always --dirty 2>/dev/null || echo unknown)}"

py_targets=()
if [ "${GG_GPU_PYTHON:-1}" != 0 ]; then
  python3 -c "import nanobind, pytest" 2>/dev/null || { [ -d .whl ] &&
    python3 -m pip install -q --no-index --find-links .whl nanobind pytest >"$OUT/pip.log" 2>&1; }
  python3 -c "import nanobind, pytest, torch" 2>/dev/null && py_targets=(_C)
fi
if ! cmake -S . -B "$BUILD" -G Ninja -DGG_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DGG_BUILD_EXAMPLES=OFF \
     -DGG_PYTHON="$([ ${#py_targets[@]} -gt 0 ] && echo ON || echo OFF)" >"$OUT/configure.log" 2>&1; then
  tail -30 "$OUT/configure.log"; status "configure" "FAILED"; exit 1
fi
t_build=$SECONDS
if ! cmake --build "$BUILD" -j "$(nproc)" --target gg_gpu_tests gg_dist_gpu_tests "${py_targets[@]}" >"$OUT/build.log" 2>&1; then
  grep -E "error" -A5 "$OUT/build.log" | head -60; status "build" "FAILED"; exit 1
fi
status "build" "ok ($((SECONDS - t_build)) s)"

(cd "$BUILD" && GG_REQUIRE_GPU=1 ctest -L gpu -j 8 --output-on-failure --timeout 600 >"$OUT/ctest-gpu.log" 2>&1)
gpu_rc=$?
status "ctest -L gpu" "$(grep -E 'tests passed' "$OUT/ctest-gpu.log" | tail -1) (rc $gpu_rc)"
if [ $gpu_rc -ne 0 ]; then grep -E "Failure|FAILED|Expected|error" "$OUT/ctest-gpu.log" | head -40; fi
py_rc=0
if [ ${#py_targets[@]} -gt 0 ]; then
  # with pytest-xdist, in worker processes: a test that crashes its process is reported as failed
  # and the others still run, their tracebacks kept
  xdist=(); python3 -c "import xdist" 2>/dev/null && xdist=(-n 4)
  PYTHONPATH="$PWD/$BUILD/python" python3 -X faulthandler -m pytest -q -rfE --tb=short -p no:cacheprovider \
    "${xdist[@]}" tests/python >"$OUT/pytest.log" 2>&1
  py_rc=$?
  status "pytest (CUDA build)" "$(tail -1 "$OUT/pytest.log" | sed 's/^=* *//; s/ *=*$//') (rc $py_rc)"
  [ $py_rc -eq 0 ] || grep -E "^FAILED|Error" "$OUT/pytest.log" | head -20
else
  status "pytest (CUDA build)" "skipped (no nanobind/pytest/torch)"
fi
# the determinism switch's initial value from the environment (atomic mode), and the attention
# tests that run the fused sweeps with it
GG_REQUIRE_GPU=1 GG_ATTENTION_DETERMINISTIC=0 "$BUILD/tests/gg_gpu_tests" \
  --gtest_filter="CudaAttention.DeterministicSwitch:CudaAttention.AutogradChain:*LowPrecisionLarge*:HeadDims/CudaAttentionOptionsTensorCores.WithinTwiceGeneric/*" >"$OUT/atomic-mode.log" 2>&1
atomic_rc=$?
status "atomic mode" "$(grep -E '^\[  PASSED|^\[  FAILED' "$OUT/atomic-mode.log" | head -1) (rc $atomic_rc)"

if [ "${GG_GPU_SANITIZE:-1}" = 0 ]; then
  status "memcheck" "skipped (GG_GPU_SANITIZE=0)"
elif command -v compute-sanitizer >/dev/null; then
  compute-sanitizer --tool memcheck --error-exitcode 3 "$BUILD/tests/gg_gpu_tests" --gtest_filter="$MEMCHECK_FILTER" \
    >"$OUT/memcheck.log" 2>&1
  mc_rc=$?
  status "memcheck" "$(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1) (rc $mc_rc, filter $MEMCHECK_FILTER)"
  # racecheck (shared-memory hazards) on a small case of every attention kernel: forward, backward
  # and BoB on each path (PoisonedOutputs), the Hopper forward, and the general-mask instances
  # (grouped heads, Nq != Nk and windows) of the generic and sm_90a kernels. (The BoB stages'
  # test takes about 300 s under racecheck: run it alone with that tool's filter when they change.)
  RACE_FILTER="CudaAttention.PoisonedOutputs:CudaAttention.HopperForwardPoisonedAndDeterministic:Dtypes/CudaAttentionOptionsEmptyRows.*:Cases/CudaAttentionOptions.OptionsMatchCpu/d32_gqa_two_sided:CudaAttentionOptionsEdges.Deterministic"
  compute-sanitizer --tool racecheck --error-exitcode 3 "$BUILD/tests/gg_gpu_tests" --gtest_filter="$RACE_FILTER" \
    >"$OUT/racecheck.log" 2>&1
  rc_rc=$?
  status "racecheck" "$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/racecheck.log" | tail -1) (rc $rc_rc, filter $RACE_FILTER)"
else
  status "memcheck" "compute-sanitizer not found"
fi
echo
cat "$OUT/summary.txt"
[ $gpu_rc -eq 0 ] && [ $atomic_rc -eq 0 ] && [ $py_rc -eq 0 ]
