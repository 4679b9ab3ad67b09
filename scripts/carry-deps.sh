#!/usr/bin/env bash
# Copies the header-only Debian libraries the examples need (CLI11, nlohmann-json) into .deps/
# (git-ignored), laid out as an install prefix, so that a device call can carry them to a GPU
# machine that has no package registry: run(carry: [".deps"]) and configure with
# -DCMAKE_PREFIX_PATH=$PWD/.deps (scripts/gpu-examples.sh does this when .deps exists).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rm -rf .deps
mkdir -p .deps/include .deps/share/cmake
cp -r /usr/include/CLI /usr/include/nlohmann .deps/include/
cp -r /usr/share/cmake/CLI11 /usr/share/cmake/nlohmann_json .deps/share/cmake/
du -sh .deps
