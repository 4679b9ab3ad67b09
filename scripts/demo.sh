#!/usr/bin/env bash
# One command on a fresh Debian 12 machine: installs what is missing, builds, runs the main demo.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
gg_install_deps
gg_configure
gg_build --target higher_order
exec "$GG_BUILD/examples/higher_order" "$@"
