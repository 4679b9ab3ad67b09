#!/usr/bin/env bash
# Fails if ptxas serialises the warpgroup MMAs of a Hopper attention kernel: it then waits after
# every wgmma, a slowdown of 1.5-2x that compiles, passes every test and shows only as an `info`
# line of `ptxas -v` (C7510-C7520, "wgmma.mma_async instructions are serialized"). It happened on
# small changes: a branch inside a wgmma group, registers of a pending group read or written
# before its wait (docs/kernels.md, section 2). Compiles each attention file for sm_90a as the
# library does, without a GPU.
#
# With --loops it also prints, from the SASS (cuobjdump from PATH or $CUOBJDUMP), for each kernel
# that issues warpgroup MMAs (HGMMA) or mma.sync (HMMA), its instruction count and, for the
# innermost loop (a backward branch) that contains a tensor-core instruction: how many
# instructions it spans, how many of them are HGMMA/HMMA, R2UR (a value moved into a uniform
# register: in a hot loop usually a wgmma descriptor that ptxas could not keep uniform,
# docs/kernels.md, section 2), MUFU (exp2) and STSM/LDSM. A loop with both a masked and an
# unmasked path counts both. An optional regex picks kernels by name (demangled or mangled).
#
# Usage: scripts/check-wgmma-pipelined.sh [nvcc]
#        scripts/check-wgmma-pipelined.sh --loops [regex] [nvcc]
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
loops=0 pattern=""
if [ "${1:-}" = --loops ]; then
  loops=1 pattern="${2:-}"
  shift $(($# < 2 ? $# : 2))
  cuobjdump="${CUOBJDUMP:-$(command -v cuobjdump)}"
  [ -n "$cuobjdump" ] || { echo "check-wgmma-pipelined: --loops needs cuobjdump (PATH or \$CUOBJDUMP)"; exit 2; }
fi
nvcc="${1:-nvcc}"
command -v "$nvcc" >/dev/null || { echo "check-wgmma-pipelined: no nvcc, skipped"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

sass_loops() {  # cubin: the tensor-core loop table of its kernels
  python3 - "$1" "$cuobjdump" "$pattern" <<'PY'
import collections
import re
import shutil
import subprocess
import sys

INSTR = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)([^;]*);")
BRANCH_TARGET = re.compile(r"0x([0-9a-f]+)")


def functions(cubin, cuobjdump):
    """{name: [(address, opcode, operands)]} from cuobjdump -sass."""
    out = subprocess.run([cuobjdump, "-sass", cubin], capture_output=True, text=True, check=True).stdout
    fns, name = {}, None
    for line in out.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            name = m.group(1)
            fns[name] = []
            continue
        m = INSTR.match(line)
        if m and name:
            fns[name].append((int(m.group(1), 16), m.group(2), m.group(3)))
    return fns


def demangle(name):
    """kernel<template arguments> without namespaces and parameters (c++filt where there is one)."""
    if shutil.which("c++filt"):
        name = subprocess.run(["c++filt", name], capture_output=True, text=True).stdout.strip()
    name = re.sub(r"\w+::|\(anonymous namespace\)::|^void ", "", name)
    depth = 0
    for i in range(len(name) - 1, -1, -1):  # drop the parameter list: the last balanced (...)
        depth += {")": 1, "(": -1}.get(name[i], 0)
        if depth == 0 and name[i] == "(":
            return name[:i].replace(" ", "")
    return name.replace(" ", "")


def innermost_tensor_loop(instrs):
    """The shortest [target, branch] range of a backward branch that contains HGMMA or HMMA."""
    best = None
    for addr, op, args in instrs:
        if not op.startswith("BRA"):
            continue
        m = BRANCH_TARGET.search(args)
        if not m or int(m.group(1), 16) >= addr:
            continue
        lo = int(m.group(1), 16)
        body = [o for a, o, _ in instrs if lo <= a <= addr]
        if any(o.startswith(("HGMMA", "HMMA")) for o in body) and (best is None or len(body) < len(best)):
            best = body
    return best


def main():
    cubin, cuobjdump, pattern = sys.argv[1], sys.argv[2], re.compile(sys.argv[3]) if sys.argv[3] else None
    print(f"{'kernel':70} {'all':>6} {'loop':>6} {'mma':>5} {'R2UR':>5} {'MUFU':>5} {'STSM/LDSM':>9}")
    for name, instrs in functions(cubin, cuobjdump).items():
        short = demangle(name)
        if pattern and not (pattern.search(short) or pattern.search(name)):
            continue
        if not any(op.startswith(("HGMMA", "HMMA")) for _, op, _ in instrs):
            continue
        body = innermost_tensor_loop(instrs) or []
        c = collections.Counter(op.split(".")[0] for op in body)
        print(f"{short[:70]:70} {len(instrs):6} {len(body):6} {c['HGMMA'] + c['HMMA']:5} {c['R2UR']:5} "
              f"{c['MUFU']:5} {c['STSM'] + c['LDSM']:9}")


if __name__ == "__main__":
    main()
PY
}

fail=0
for f in kernels/cuda/attention/fwd_sm90.cu kernels/cuda/attention/bwd_sm90.cu kernels/cuda/attention/bwd_bwd_sm90.cu; do
  if ! out=$("$nvcc" -cubin -arch=sm_90a -std=c++17 -O3 -DNDEBUG -DGG_HAS_CUDA=1 -DGG_CUDA_SM90A=1 -I. \
               -Xptxas -v "$f" -o "$tmp/k.cubin" 2>&1); then
    echo "$out" | tail -20
    echo "check-wgmma-pipelined: $f does not compile"
    fail=1
    continue
  fi
  kernels=$(grep -c "Compiling entry function" <<<"$out")
  serial=$(grep -i "serialized" <<<"$out" | sed -E 's/.*\((C[0-9]+)\).*due to (.*) in the function (.*)/\1 \3: \2/' | tr -d "'")
  if [ -n "$serial" ]; then
    echo "$serial"
    echo "check-wgmma-pipelined: $f: ptxas serialises wgmma in the kernels above"
    fail=1
  else
    echo "check-wgmma-pipelined: $f: $kernels kernels, no wgmma serialised"
  fi
  if [ $loops = 1 ]; then
    sass_loops "$tmp/k.cubin" || fail=1
  fi
done
exit $fail
