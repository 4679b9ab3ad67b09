#!/usr/bin/env bash
# Installs the build tree into a scratch prefix, then configures, builds and runs a consumer
# project that uses find_package(gradgrad CONFIG).
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
step configure cmake -S "$here" -B "$scratch/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$scratch/prefix" "$@"
step build cmake --build "$scratch/consumer"
"$scratch/consumer/consumer"
