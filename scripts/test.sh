#!/usr/bin/env bash
# One command on a fresh Debian 12 machine: installs what is missing, builds everything and runs
# the whole test suite. GPU tests (ctest label "gpu") skip without a GPU unless GG_REQUIRE_GPU=1.
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
