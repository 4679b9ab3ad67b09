#!/usr/bin/env bash
# Forward mode on this machine's CPU: builds bench_forward_mode (CPU-only, the default native
# build, in build-bench-cpu/ as scripts/bench-cpu.sh does) and runs it once on GG_BENCH_THREADS
# threads (default 2; on a shared machine 1 is steadier), the median of GG_BENCH_REPEATS runs
# (default 7), f32: gg::func::jvp against the double-VJP JVP on an MLP of width 64, 256 and 1024
# and on fused attention at N 256 and 1024, H·v through attention by forward over reverse against
# reverse over reverse at the same N, and jacfwd against jacrev for n, m in {4, 16, 64, 256}.
# Writes bench/results/forward_mode.jsonl (a meta line with the machine, date, commit and command,
# then the program's lines) and regenerates docs/benchmarks.md (bench/make_tables.py); the table
# is printed last.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
GG_BUILD="$GG_ROOT/build-bench-cpu"
gg_install_deps
gg_configure -DGG_CUDA=OFF -DCMAKE_BUILD_TYPE=Release -DGG_BUILD_EXAMPLES=ON -DGG_BUILD_TESTS=OFF
gg_build --target bench_forward_mode

threads="${GG_BENCH_THREADS:-2}" repeats="${GG_BENCH_REPEATS:-7}" command="scripts/bench-forward.sh"
# the command as run, with the variables that changed it (the meta line records it)
[ -z "${GG_BENCH_REPEATS:-}" ] || command="GG_BENCH_REPEATS=$repeats $command"
[ -z "${GG_BENCH_THREADS:-}" ] || command="GG_BENCH_THREADS=$threads $command"
results="$GG_ROOT/bench/results/forward_mode.jsonl" scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
OMP_NUM_THREADS="$threads" "$GG_BUILD/bench/bench_forward_mode" --widths 64,256,1024 --attention-n 256,1024 \
  --sizes 4,16,64,256 --repeats "$repeats" --json "$scratch/rows.jsonl" >"$scratch/out.log" 2>&1 \
  || { cat "$scratch/out.log" >&2; exit 1; }
python3 - "$results" "$scratch/rows.jsonl" "$threads" "$repeats" "$GG_ROOT/bench" "$command" <<'PY'
import datetime, json, subprocess, sys
sys.path.insert(0, sys.argv[5])
from make_tables import machine_description, ROOT
out, rows, threads, repeats, _, command = sys.argv[1:7]
commit = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True,
                        text=True).stdout.strip() or "?"
meta = {"bench": "meta", "results": "forward_mode", "machine": machine_description(), "threads": int(threads),
        "repeats": int(repeats), "date": datetime.date.today().isoformat(), "commit": commit,
        "command": command}
with open(out, "w") as f:
    f.write(json.dumps(meta) + "\n")
    for line in open(rows):
        if line.strip():
            f.write(json.dumps(json.loads(line)) + "\n")
PY
python3 "$GG_ROOT/bench/make_tables.py" >/dev/null
python3 "$GG_ROOT/bench/make_tables.py" --print forward_mode
