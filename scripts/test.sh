#!/usr/bin/env bash
# One command on a fresh Debian 12 machine: installs what is missing, builds everything and runs
# the whole test suite. GPU tests (ctest label "gpu") skip without a GPU unless GG_REQUIRE_GPU=1.
# Then the robustness stages: the fuzzer over a fixed number of programs from seed 1, and the CPU
# suite, the edge-case suite and the fuzzer again in a CPU-only build under AddressSanitizer +
# UndefinedBehaviorSanitizer (build-asan/; GG_SANITIZE=0 skips it); between them the Python
# package, built by pip into build/venv without CUDA (torch from the registry when missing), and
# its tests (tests/python). Every stage does a fixed amount of work, so any machine reaches the
# same verdict. Hunting for new failures is a separate,
# open-ended run: GG_FUZZ_SECONDS=S fuzzes for S seconds instead, from a fresh seed unless
# GG_FUZZ_SEED=X is given. Quiet on success: one line per stage.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
gg_install_deps
gg_configure
gg_build
cd "$GG_BUILD"
if ! ctest --output-on-failure -j "$(nproc)" --timeout 900 >ctest.log 2>&1; then
  grep -vE "^\s*[0-9]+/[0-9]+ Test +#[0-9]+: .* Passed" ctest.log | tail -80 >&2
  gg_die "tests failed (full log: $GG_BUILD/ctest.log)"
fi
summary="$(grep -E 'tests passed' ctest.log | tail -1)"
skipped="$(grep -c '(Skipped)' ctest.log || true)"
echo "gradgrad: $summary; $skipped skipped (GPU tests skip without a GPU unless GG_REQUIRE_GPU=1)"

# The fuzzer's work: gg_fuzz's default program count from seed 1; fewer under the sanitizers.
fuzz_args=()
fuzz_asan_args=(--programs 60000 --seed 1)
if [ -n "${GG_FUZZ_SECONDS:-}" ]; then
  fuzz_args=(--seconds "$GG_FUZZ_SECONDS")
  [ -z "${GG_FUZZ_SEED:-}" ] || fuzz_args+=(--seed "$GG_FUZZ_SEED")
  fuzz_asan_args=("${fuzz_args[@]}")
fi
# Runs a stage's command with its output in $log; on failure prints the log's tail and stops.
gg_stage() {
  local name="$1" log="$2"
  shift 2
  if ! "$@" >"$log" 2>&1; then
    tail -60 "$log" >&2
    gg_die "$name failed (full log: $log)"
  fi
}
gg_stage "edge cases" "$GG_BUILD/edge.log" "$GG_BUILD/tests/edge/gg_edge"
gg_stage "fuzzer" "$GG_BUILD/fuzz.log" "$GG_BUILD/tests/fuzz/gg_fuzz" "${fuzz_args[@]}"
echo "gradgrad: $(tail -1 "$GG_BUILD/edge.log" | sed 's/^gradgrad //'); $(tail -1 "$GG_BUILD/fuzz.log")"

# ---- the Python package: built with pip into a venv, its tests on the CPU (tests/python)
gg_python_install
gg_stage "Python tests" "$GG_BUILD/pytest.log" "$GG_VENV_PYTHON" -m pytest -q -p no:cacheprovider "$GG_ROOT/tests/python"
echo "gradgrad (Python): $(tail -1 "$GG_BUILD/pytest.log" | sed 's/^=* *//; s/ *=*$//')"

[ "${GG_SANITIZE:-1}" = 0 ] && exit 0
# ---- the same suites under ASan + UBSan (CPU only; any report fails the run)
GG_BUILD="$GG_ROOT/build-asan"
san="-fsanitize=address,undefined -fsanitize=float-cast-overflow -fno-sanitize-recover=all -fno-omit-frame-pointer"
gg_configure -DGG_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGG_BUILD_EXAMPLES=OFF -DGG_BUILD_BENCH=OFF \
  "-DCMAKE_CXX_FLAGS=$san" "-DCMAKE_EXE_LINKER_FLAGS=$san" "-DCMAKE_SHARED_LINKER_FLAGS=$san"
gg_build --target gg_tests gg_memory_tests gg_dist_tests gg_edge gg_fuzz
# allocator_may_return_null: the edge cases ask for 2^62 bytes on purpose and expect
# gg::OutOfMemoryError, not an ASan abort.
export ASAN_OPTIONS="allocator_may_return_null=1:detect_leaks=1:abort_on_error=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
export LSAN_OPTIONS="suppressions=$GG_ROOT/scripts/lsan.supp:print_suppressions=0:${LSAN_OPTIONS:-}"
cd "$GG_BUILD"
gg_stage "CPU suite under ASan/UBSan" "$GG_BUILD/gtest.log" ./tests/gg_tests --gtest_brief=1
gg_stage "memory suite under ASan/UBSan" "$GG_BUILD/gtest-memory.log" ./tests/gg_memory_tests --gtest_brief=1
gg_stage "gg::dist suite under ASan/UBSan" "$GG_BUILD/gtest-dist.log" ./tests/dist/gg_dist_tests --gtest_brief=1
gg_stage "edge cases under ASan/UBSan" "$GG_BUILD/edge.log" ./tests/edge/gg_edge
gg_stage "fuzzer under ASan/UBSan" "$GG_BUILD/fuzz.log" ./tests/fuzz/gg_fuzz "${fuzz_asan_args[@]}"
if grep -qE "runtime error:|ERROR: AddressSanitizer|ERROR: LeakSanitizer" "$GG_BUILD"/*.log; then
  grep -hE -A5 "runtime error:|ERROR: AddressSanitizer|ERROR: LeakSanitizer" "$GG_BUILD"/*.log | head -40 >&2
  gg_die "sanitizer report (logs: $GG_BUILD/*.log)"
fi
echo "gradgrad (ASan/UBSan): CPU suite passed; $(tail -1 edge.log | sed 's/^gradgrad //'); $(tail -1 fuzz.log)"
