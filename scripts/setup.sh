#!/usr/bin/env bash
# Installs what the build needs on Debian 12 (only what is missing), then configures build/.
# Sourced by demo.sh and test.sh. Quiet on success; on failure says what failed.
set -euo pipefail

GG_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
GG_BUILD="${GG_BUILD:-$GG_ROOT/build}"

gg_die() { echo "gradgrad setup: $*" >&2; exit 1; }

gg_install_deps() {
  local pkgs=(cmake ninja-build g++ pkg-config libeigen3-dev libspdlog-dev libfmt-dev libgtest-dev libgmock-dev
              libbenchmark-dev libcli11-dev nlohmann-json3-dev gnuplot-nox graphviz python3-dev python3-venv)
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

# The Python package (python/, pyproject.toml) installed into the venv $GG_BUILD/venv, which sees
# the system's site-packages (an installed torch is used as it is), with what its tests need:
# torch (when missing: from the package index pip is set up with, or from GG_TORCH_INDEX_URL, such
# as PyTorch's CPU-only wheel index, a smaller download) and pytest.
# The build requirements come from .whl/ when it exists (scripts/python-wheels.sh fills it, for a
# machine without a registry), else from the registry; the wheel's CMake tree is $GG_BUILD/python
# (incremental) and GG_PY_CUDA (default OFF: the C++ build has compiled the CUDA kernels already)
# is its GG_CUDA. Sets GG_VENV_PYTHON.
gg_python_install() {
  local venv="$GG_BUILD/venv" log="$GG_BUILD/python-install.log"
  local from=()
  mkdir -p "$GG_BUILD"
  : >"$log"
  [ -d "$GG_ROOT/.whl" ] && from=(--no-index --find-links "$GG_ROOT/.whl")
  GG_VENV_PYTHON="$venv/bin/python"
  [ -x "$GG_VENV_PYTHON" ] || python3 -m venv --system-site-packages "$venv" >>"$log" 2>&1 \
    || { tail -20 "$log" >&2; gg_die "python3 -m venv failed (log: $log)"; }
  local pip=("$GG_VENV_PYTHON" -m pip install -q --disable-pip-version-check)
  if ! "$GG_VENV_PYTHON" -c "import torch" >/dev/null 2>&1; then
    echo "gradgrad setup: installing torch into $venv" >&2
    local index=()
    [ -z "${GG_TORCH_INDEX_URL:-}" ] || index=(--index-url "$GG_TORCH_INDEX_URL")
    "${pip[@]}" "${index[@]}" torch >>"$log" 2>&1 \
      || { tail -20 "$log" >&2; gg_die "pip install torch failed (log: $log)"; }
  fi
  "${pip[@]}" "${from[@]}" scikit-build-core nanobind pytest >>"$log" 2>&1 \
    || { tail -20 "$log" >&2; gg_die "pip install of the build requirements failed (log: $log)"; }
  if ! CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" "${pip[@]}" --no-build-isolation --no-deps --force-reinstall \
      -Cbuild-dir="$GG_BUILD/python" -Ccmake.define.GG_CUDA="${GG_PY_CUDA:-OFF}" "$GG_ROOT" >>"$log" 2>&1; then
    grep -E "error|Error" -A5 "$log" | head -60 >&2
    gg_die "pip install . failed (full log: $log)"
  fi
}
