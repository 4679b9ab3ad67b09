#!/usr/bin/env bash
# Puts the Python package's build and test requirements, as wheels, in .whl/ (git-ignored), for a
# machine without a package registry (the GPU machine): scripts/test.sh, and pip install .
# --no-build-isolation after `pip install --no-index --find-links .whl scikit-build-core nanobind`,
# then build offline. Pure-Python wheels: they install on any Python >= 3.9. torch itself is not
# among them (it is large and CUDA-specific): the machine that runs the tests must have it.
set -euo pipefail
GG_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# --no-deps with the dependencies listed, as pure-Python (py3-none-any) wheels: the same set
# whatever Python runs this script (tomli and exceptiongroup are needed below Python 3.11 only).
python3 -m pip download -q --no-deps --only-binary=:all: --implementation py --python-version 3.10 \
  --platform any -d "$GG_ROOT/.whl" scikit-build-core nanobind packaging pathspec tomli exceptiongroup \
  typing_extensions pytest iniconfig pluggy pygments
echo "gradgrad: $(ls "$GG_ROOT/.whl" | wc -l) wheels in $GG_ROOT/.whl"
