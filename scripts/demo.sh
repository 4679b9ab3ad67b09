#!/usr/bin/env bash
# One command on a fresh Debian 12 machine: installs what is missing, builds, runs the main demo:
# examples/maml_sine (second-order MAML on the sinusoid benchmark; a few minutes on 2 CPU cores).
# Arguments go to the demo (e.g. --full for the paper's 70,000 meta-iterations, --device cpu).
# GG_DEMO=higher_order runs the teaching example instead.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
gg_install_deps
gg_configure
demo="${GG_DEMO:-maml_sine}"
gg_build --target "$demo"
case "$demo" in
  maml_sine) exec "$GG_BUILD/examples/maml_sine/maml_sine" --out "$GG_BUILD/maml_sine_out" "$@" ;;
  higher_order) exec "$GG_BUILD/examples/higher_order" --out "$GG_BUILD/higher_order_out" "$@" ;;
  *) gg_die "unknown GG_DEMO=$demo (maml_sine or higher_order)" ;;
esac
