#!/usr/bin/env python3
"""Plots chain time vs N (gradgrad vs PyTorch composite, non-causal, bf16, d=64) from a results
file written by scripts/bench-gpu.sh, with gnuplot (pngcairo).
  python3 bench/plot_attention.py bench/results/<card>-<date>-attention.jsonl docs/img/attention.png
"""
import os, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from table_attention import TRITON, load  # noqa: E402

src, png = sys.argv[1], sys.argv[2]
lines, nondet, torch_lines = load(src)
ours = {n: (r["fwd_ms"], r["fwdbwd_ms"], r["chain_ms"]) for (d, c, n), r in lines.items() if d == 64 and not c}
sdpa = {n: (r["sdpa_fwd_ms"], r["sdpa_fwdbwd_ms"]) for (d, c, n), r in torch_lines.items() if d == 64 and not c}
# GG_ATTENTION_DETERMINISTIC=0: the fused sweeps' additions in any order
fused = {n: r["fwdbwd_ms"] for (d, c, n), r in nondet.items() if d == 64 and not c}
fused_chain = {n: r["chain_ms"] for (d, c, n), r in nondet.items() if d == 64 and not c}
torch_chain = {n: r["chain_ms"] for (d, c, n), r in torch_lines.items() if d == 64 and not c and "chain_ms" in r}
tmp = tempfile.mkdtemp()
with open(os.path.join(tmp, "t.dat"), "w") as f:
    for n, ms in sorted(TRITON.items()):  # quoted, not measured in this run; with the 0.67x target
        f.write(f"{n} {ms} {0.67 * ms}\n")
with open(os.path.join(tmp, "d.dat"), "w") as f:
    for n in sorted(set(ours) | set(sdpa)):
        cols = [ours.get(n, ("NaN",) * 3)[2], torch_chain.get(n, "NaN"), ours.get(n, ("NaN",) * 3)[1],
                sdpa.get(n, ("NaN", "NaN"))[1], fused.get(n, "NaN"), fused_chain.get(n, "NaN")]
        f.write(f"{n} " + " ".join(str(c) for c in cols) + "\n")
script = f"""set terminal pngcairo size 900,600 enhanced font 'Sans,11'
set output '{os.path.abspath(png)}'
set title "Attention on one H200, bf16, B=1, H=16, d=64, non-causal (same run)"
set logscale xy 2
set xlabel 'sequence length N'
set ylabel 'time (ms)'
set grid
set key top left
plot 'd.dat' u 1:2 w lp lw 2 pt 7 lc rgb '#1f77b4' t 'gradgrad chain (fwd + bwd(create\\_graph) + BoB), deterministic', \\
     '' u 1:3 w lp lw 2 pt 5 lc rgb '#d62728' t 'PyTorch composite chain (OOM beyond 8K)', \\
     '' u 1:4 w lp lw 2 dt 2 pt 7 lc rgb '#1f77b4' t 'gradgrad fwd + bwd', \\
     '' u 1:5 w lp lw 2 dt 2 pt 5 lc rgb '#ff7f0e' t 'PyTorch SDPA (cuDNN) fwd + bwd', \\
     '' u 1:6 w lp lw 1 dt 3 pt 6 lc rgb '#1f77b4' t 'gradgrad fwd + bwd, additions in any order (opt-in)', \\
     '' u 1:7 w lp lw 1 dt 3 pt 6 lc rgb '#9467bd' t 'gradgrad chain, additions in any order (opt-in)', \\
     't.dat' u 1:2 w lp lw 1 pt 9 lc rgb '#2ca02c' t 'Triton BoB chain (figures quoted in the issue, not this run)', \\
     '' u 1:3 w l lw 1 dt 3 lc rgb '#2ca02c' t 'target: 0.67 x Triton'
"""
open(os.path.join(tmp, "p.gp"), "w").write(script)
subprocess.run(["gnuplot", "p.gp"], cwd=tmp, check=True)
print("wrote", png)
