#!/usr/bin/env python3
"""Per-kernel durations of one attention chain, side by side, from Nsight Compute CSVs.

Each CSV is what scripts/gpu-attn-ab.sh writes for GG_NCU_CHAIN (ncu --csv with the metric
gpu__time_duration.sum, one chain of bench_attention_gpu --chain-only). The kernels are matched by
their order in the chain; a column per file, in µs. The input set-up (random_kernel) is left out
of the totals. Kernels alone under ncu: no overlap between them, no launch gaps, caches flushed.

  python3 scripts/ncu-chain-table.py A.csv [B.csv ...] [--small 200]

--small: also sum the kernels shorter than this many µs in the first file (the chain's small
kernels: merges, conversions, element-wise ops of the loss), per file.
"""
import argparse
import csv
import sys

UNITS = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}


def read_chain(path):
    """[(kernel name, µs)] in launch order."""
    with open(path, newline="") as f:
        lines = f.read().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        sys.exit(f"{path}: no ncu CSV header (\"ID\",...) found")
    rows = []
    for r in csv.DictReader(lines[start:]):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        unit = r["Metric Unit"]
        if unit not in UNITS:
            sys.exit(f"{path}: unknown unit {unit!r}")
        rows.append((r["Kernel Name"], float(r["Metric Value"].replace(",", "")) * UNITS[unit]))
    return rows


def short(name, width=58):
    name = name.replace("(anonymous namespace)::", "").replace("gg::kernels::cuda::", "")
    return name if len(name) <= width else name[: width - 1] + "…"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", nargs="+")
    ap.add_argument("--small", type=float, default=200.0)
    a = ap.parse_args()
    chains = [read_chain(p) for p in a.csv]
    n = max(len(c) for c in chains)
    print("%-4s %-58s" % ("#", "kernel (first file)") + "".join(" %12s" % f"[{i}]" for i in range(len(chains))))
    totals = [0.0] * len(chains)
    small = [0.0] * len(chains)
    for k in range(n):
        name = chains[0][k][0] if k < len(chains[0]) else ""
        cells = []
        for i, c in enumerate(chains):
            if k >= len(c):
                cells.append(" %12s" % "-")
                continue
            us = c[k][1]
            cells.append(" %12.1f" % us)
            if "random_kernel" in c[k][0]:
                continue
            totals[i] += us
            if k < len(chains[0]) and chains[0][k][1] < a.small:
                small[i] += us
        print("%-4d %-58s" % (k, short(name)) + "".join(cells))
    print("%-63s" % "total (without the input set-up), µs" + "".join(" %12.1f" % t for t in totals))
    print("%-63s" % f"kernels under {a.small:g} µs in [0], µs" + "".join(" %12.1f" % s for s in small))
    for i, p in enumerate(a.csv):
        print(f"[{i}] {p}")


if __name__ == "__main__":
    main()
