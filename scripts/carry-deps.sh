#!/usr/bin/env bash
# Copies the header-only libraries the examples need (CLI11, nlohmann-json), as installed on this
# machine by its package manager, into .deps/ (git-ignored), laid out as an install prefix. Use it
# to build the examples on a machine that has no package registry: copy .deps/ along with the
# source tree and configure with -DCMAKE_PREFIX_PATH=$PWD/.deps (scripts/gpu-examples.sh does this
# by itself when .deps/ exists). On Debian: apt-get install libcli11-dev nlohmann-json3-dev first.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
for p in /usr/include/CLI /usr/include/nlohmann /usr/share/cmake/CLI11 /usr/share/cmake/nlohmann_json; do
  [ -e "$p" ] || { echo "carry-deps: $p not found (install libcli11-dev and nlohmann-json3-dev)"; exit 1; }
done
rm -rf .deps
mkdir -p .deps/include .deps/share/cmake
cp -r /usr/include/CLI /usr/include/nlohmann .deps/include/
cp -r /usr/share/cmake/CLI11 /usr/share/cmake/nlohmann_json .deps/share/cmake/
du -sh .deps
