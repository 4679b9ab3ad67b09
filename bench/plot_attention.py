#!/usr/bin/env python3
"""Draws docs/img/attention.png from bench/results/attention.jsonl with gnuplot (pngcairo): time
against N for d = 64, non-causal, bf16: our chain and forward + backward in both modes, PyTorch's
composite chain and SDPA forward + backward from the same run, and the published Triton chain.

  python3 bench/plot_attention.py [results.jsonl] [out.png]
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tables import RESULTS, ROOT, TRITON_CHAIN_MS, load_attention, read_path  # noqa: E402

src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(RESULTS, "attention.jsonl")
png = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "docs", "img", "attention.png")
meta, rows = read_path(src)
ours, any_order, torch = load_attention(rows)


def pick(table, field, n):
    r = table.get((64, False, n))
    return "NaN" if r is None or field not in r else r[field]


sizes = sorted({n for (d, c, n) in list(ours) + list(torch) if d == 64 and not c})
tmp = tempfile.mkdtemp()
with open(os.path.join(tmp, "d.dat"), "w") as f:
    for n in sizes:
        cols = [pick(ours, "chain_ms", n), pick(torch, "chain_ms", n), pick(ours, "fwdbwd_ms", n),
                pick(torch, "sdpa_fwdbwd_ms", n), pick(any_order, "fwdbwd_ms", n), pick(any_order, "chain_ms", n)]
        f.write(f"{n} " + " ".join(str(c) for c in cols) + "\n")
with open(os.path.join(tmp, "t.dat"), "w") as f:
    for n, t in sorted(TRITON_CHAIN_MS.items()):
        f.write(f"{n} {t} {0.67 * t}\n")
card = meta.get("card", "one GPU")
date = meta.get("date", "")
script = f"""set terminal pngcairo size 900,720 enhanced font 'Sans,11'
set output '{os.path.abspath(png)}'
set title "Attention on {card}, bf16, B=1, H=16, d=64, non-causal ({date}, one run)"
set logscale xy 2
set xlabel 'sequence length N'
set ylabel 'time (ms)'
set grid
set key outside below Left reverse maxrows 4
plot 'd.dat' u 1:2 w lp lw 2 pt 7 lc rgb '#1f77b4' t 'gradgrad chain (fwd + bwd(create\\_graph) + BoB), deterministic', \\
     '' u 1:3 w lp lw 2 pt 5 lc rgb '#d62728' t 'PyTorch composite chain (out of memory beyond 8K)', \\
     '' u 1:4 w lp lw 2 dt 2 pt 7 lc rgb '#1f77b4' t 'gradgrad fwd + bwd, deterministic', \\
     '' u 1:5 w lp lw 2 dt 2 pt 5 lc rgb '#ff7f0e' t 'PyTorch SDPA fwd + bwd', \\
     '' u 1:6 w lp lw 1 dt 3 pt 6 lc rgb '#1f77b4' t 'gradgrad fwd + bwd, additions in any order', \\
     '' u 1:7 w lp lw 1 dt 3 pt 6 lc rgb '#9467bd' t 'gradgrad chain, additions in any order', \\
     't.dat' u 1:2 w lp lw 1 pt 9 lc rgb '#2ca02c' t 'Triton BoB chain (published figures, not this run)', \\
     '' u 1:3 w l lw 2 dt 4 lc rgb '#2ca02c' t 'target: 0.67 x Triton'
"""
with open(os.path.join(tmp, "p.gp"), "w") as f:
    f.write(script)
subprocess.run(["gnuplot", "p.gp"], cwd=tmp, check=True)
print("wrote", os.path.relpath(png, ROOT))
