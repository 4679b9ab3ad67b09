#!/usr/bin/env bash
# Installs the build tree into a scratch prefix, then configures, builds and runs a consumer
# project that uses find_package(gradgrad CONFIG). The consumer puts first on its include path a
# folder holding a header that stops the build at every path an installed gradgrad header has
# below include/gradgrad/ (core/dtype.h, ops/ops.h, ...): the build passes only if every
# installed header resolves to its own package.
# Usage: check.sh <build-dir> <scratch-dir> [extra cmake arguments for the consumer...]
set -euo pipefail
build="$1"; scratch="$2"; shift 2; here="$(cd "$(dirname "$0")" && pwd)"
rm -rf "$scratch" && mkdir -p "$scratch"
step() {  # step <name> <command...>: quiet on success, the step's log on failure
  local name="$1"; shift
  if ! "$@" >"$scratch/$name.log" 2>&1; then
    echo "package check: $name failed: $*" >&2
    tail -40 "$scratch/$name.log" >&2
    exit 1
  fi
}
step install cmake --install "$build" --prefix "$scratch/prefix"
# The exported link interface names targets that the package config finds on the consumer's
# machine: no library path of the machine that built it, no empty entry.
targets="$(find "$scratch/prefix" -name gradgradTargets.cmake)"
if grep -nE 'LINK_ONLY:>|INTERFACE_LINK_LIBRARIES "[^"]*/[^"]*\.(so|a)' "$targets" >&2; then
  echo "package check: $targets exports an empty entry or a library path" >&2; exit 1
fi
headers="$scratch/prefix/include/gradgrad"
[ -f "$headers/core/tensor.h" ] || { echo "package check: no headers under $headers" >&2; exit 1; }
(cd "$headers" && find . -mindepth 2 -name '*.h') | while read -r h; do
  mkdir -p "$scratch/clash/$(dirname "$h")"
  echo "#error \"the consumer's own ${h#./} was included instead of gradgrad's\"" >"$scratch/clash/$h"
done
step configure cmake -S "$here" -B "$scratch/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$scratch/prefix" \
  -DGG_CLASH_DIR="$scratch/clash" "$@"
step build cmake --build "$scratch/consumer"
"$scratch/consumer/consumer"
