#!/usr/bin/env python3
"""Instruction counts of the tensor-core loops in a cubin, without a GPU.

For each kernel that issues warpgroup MMAs (HGMMA) or mma.sync (HMMA), prints its instruction
count and, for the innermost loop (a backward branch) that contains a tensor-core instruction:
how many instructions it spans, how many of them are HGMMA/HMMA, R2UR (a value moved into a
uniform register: in a hot loop usually a wgmma descriptor that ptxas could not keep uniform,
docs/kernels.md, section 2), MUFU (exp2) and STSM/LDSM. A loop with both a masked and an unmasked
path counts both. Usage:

  nvcc -cubin -arch=sm_90a -std=c++17 -O3 -DNDEBUG -DGG_HAS_CUDA=1 -DGG_CUDA_SM90A=1 -I. \\
       kernels/cuda/attention_bwd_bwd.cu -o /tmp/bob.cubin
  scripts/sass-loops.py /tmp/bob.cubin [regex on the kernel's name, demangled or mangled]

cuobjdump comes from PATH, or from $CUOBJDUMP.
"""
import collections
import os
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
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    cuobjdump = os.environ.get("CUOBJDUMP") or shutil.which("cuobjdump")
    if not cuobjdump:
        sys.exit("sass-loops: no cuobjdump (PATH or $CUOBJDUMP)")
    pattern = re.compile(args[1]) if len(args) > 1 else None
    print(f"{'kernel':70} {'all':>6} {'loop':>6} {'mma':>5} {'R2UR':>5} {'MUFU':>5} {'STSM/LDSM':>9}")
    for name, instrs in functions(args[0], cuobjdump).items():
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
