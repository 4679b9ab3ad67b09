#!/usr/bin/env bash
# Starts N processes of a gg::dist program on this machine, one per GPU, with the variables
# that gg::dist::NcclGroup::create() reads (the same names as torchrun):
#   RANK, LOCAL_RANK  0 .. N-1 (LOCAL_RANK picks the GPU)
#   WORLD_SIZE        N
#   GG_DIST_INIT_FILE a fresh file in a temporary directory, where rank 0 leaves NCCL's id
# Waits for all of them. When one fails, the others are stopped (they could be waiting for it
# forever); the exit status is then non-zero and the failed ranks are named on stderr.
#
#   scripts/launch.sh 2 build/tests/dist/gg_dist_gpu_tests
#   scripts/launch.sh 8 build/examples/maml_sine/maml_sine --device cuda --nccl
set -uo pipefail

if [[ $# -lt 2 || ! $1 =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: $0 N PROGRAM [ARGS...]   (N >= 1 processes)" >&2
  exit 2
fi
n=$1
shift

dir=$(mktemp -d "${TMPDIR:-/tmp}/gg_dist.XXXXXX") || exit 2
pids=()
declare -A done_rank  # ranks already waited for
# Each rank runs in its own process group (job control on), so stopping a rank stops whatever
# it started too.
set -m
stop() { kill -TERM -- "-$1" 2>/dev/null; }
cleanup() {
  for ((o = 0; o < ${#pids[@]}; o++)); do
    [[ -z ${done_rank[$o]:-} ]] && stop "${pids[$o]}"
  done
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

export WORLD_SIZE=$n LOCAL_WORLD_SIZE=$n GG_DIST_INIT_FILE="$dir/init"
for ((r = 0; r < n; r++)); do
  RANK=$r LOCAL_RANK=$r "$@" &
  pids+=($!)
done

status=0
running=$n
while ((running > 0)); do
  for ((r = 0; r < n; r++)); do
    [[ -n ${done_rank[$r]:-} ]] && continue
    pid=${pids[$r]}
    kill -0 "$pid" 2>/dev/null && continue
    wait "$pid"
    rc=$?
    done_rank[$r]=1
    running=$((running - 1))
    if ((rc != 0)); then
      echo "launch.sh: rank $r exited with status $rc" >&2
      if ((status == 0)); then
        status=$rc
        for ((o = 0; o < n; o++)); do
          [[ -z ${done_rank[$o]:-} ]] && stop "${pids[$o]}"
        done
      fi
    fi
  done
  ((running > 0)) && sleep 0.1
done
exit "$status"
