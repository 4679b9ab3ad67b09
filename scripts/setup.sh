#!/usr/bin/env bash
# Installs what the build needs on Debian 12 (only what is missing), then configures build/.
# Sourced by demo.sh and test.sh. Quiet on success; on failure says what failed.
set -euo pipefail

GG_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
GG_BUILD="${GG_BUILD:-$GG_ROOT/build}"

gg_die() { echo "gradgrad setup: $*" >&2; exit 1; }

gg_install_deps() {
  local pkgs=(cmake ninja-build g++ pkg-config libeigen3-dev libspdlog-dev libfmt-dev libgtest-dev libgmock-dev
              libbenchmark-dev libcli11-dev nlohmann-json3-dev gnuplot-nox graphviz)
  local missing=()
  for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  command -v apt-get >/dev/null || gg_die "missing packages (${missing[*]}) and no apt-get: install them by hand"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "gradgrad setup: installing ${missing[*]}" >&2
  if ! $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/tmp/gg-apt.log 2>&1; then
    $sudo apt-get update -q >/tmp/gg-apt-update.log 2>&1 || true
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/tmp/gg-apt.log 2>&1 \
      || { tail -20 /tmp/gg-apt.log >&2; gg_die "apt-get install failed (log: /tmp/gg-apt.log)"; }
  fi
}

gg_configure() {
  local log="$GG_BUILD/configure.log"
  mkdir -p "$GG_BUILD"
  if ! cmake -S "$GG_ROOT" -B "$GG_BUILD" -G Ninja -DGG_CUDA="${GG_CUDA:-AUTO}" "$@" >"$log" 2>&1; then
    tail -30 "$log" >&2
    gg_die "cmake configure failed (full log: $log)"
  fi
}

gg_build() {
  local log="$GG_BUILD/build.log"
  if ! cmake --build "$GG_BUILD" -j "$(nproc)" "$@" >"$log" 2>&1; then
    grep -E "error|Error" -A5 "$log" | head -60 >&2
    gg_die "build failed (full log: $log)"
  fi
}
