#!/usr/bin/env bash
# Installs the build tree into a scratch prefix, then configures, builds and runs a consumer
# project that uses find_package(gradgrad CONFIG).  Usage: check.sh <build-dir> <scratch-dir>
set -euo pipefail
build="$1"; scratch="$2"; here="$(cd "$(dirname "$0")" && pwd)"
rm -rf "$scratch" && mkdir -p "$scratch"
cmake --install "$build" --prefix "$scratch/prefix" >"$scratch/install.log"
cmake -S "$here" -B "$scratch/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$scratch/prefix" >"$scratch/configure.log"
cmake --build "$scratch/consumer" >"$scratch/build.log"
"$scratch/consumer/consumer"
