#!/usr/bin/env python3
"""Regenerates the GPU tables of docs/benchmarks.md from the results files in bench/results/.

scripts/bench-gpu.sh writes one file per benchmark (cuda.jsonl, attention.jsonl, long.jsonl,
options.jsonl, dist.jsonl): a first line {"bench": "meta", ...} with the card, the date, the commit and the
command, then one JSON object per measurement. Where options.jsonl or dist.jsonl does not exist
(not measured yet), its block says so. Each table of docs/benchmarks.md sits between two markers,

  <!-- make_tables: NAME -->
  ...
  <!-- end make_tables: NAME -->

and this script replaces what is between them with the table built from bench/results/NAME.jsonl.

  python3 bench/make_tables.py            rewrite docs/benchmarks.md in place
  python3 bench/make_tables.py --check    exit 1 if the page is not what the results give
  python3 bench/make_tables.py --print attention   print one block to stdout
  python3 bench/make_tables.py --summary FILE      chain times and ratios of an options.jsonl
"""
import argparse
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench", "results")
PAGE = os.path.join(ROOT, "docs", "benchmarks.md")

# The published Triton (FlashBoB) chain on an H200, d = 64, non-causal, B = 1, H = 16, in ms: figures
# quoted by the issue that set the targets, not measured by us. The target is a chain at most 0.67x.
TRITON_CHAIN_MS = {4096: 3.33, 8192: 9.63, 16384: 36.8}


def read(name):
    """The meta line and the measurement lines of bench/results/NAME.jsonl."""
    return read_path(os.path.join(RESULTS, name + ".jsonl"))


def read_path(path):
    """The meta line and the measurement lines of a results file."""
    meta, rows = {}, []
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            r = json.loads(line)
            if r.get("bench") == "meta":
                meta = r
            else:
                rows.append(r)
    return meta, rows


def header(meta):
    lines = [f"Card: {meta.get('card', '?')}"
             + (f" (driver {meta['driver']})" if meta.get("driver") else "")
             + f", {meta.get('date', '?')}, commit {meta.get('commit', '?')}. Command:", "",
             "```sh", meta.get("command", "?"), "```"]
    if meta.get("note"):
        lines += ["", meta["note"][0].upper() + meta["note"][1:] + "."]
    return lines


def ms(x):
    if x is None:
        return "—"
    return f"{x:.3f}" if x < 10 else f"{x:.1f}" if x < 1000 else f"{x:.0f}"


def ratio(a, b):
    return "—" if a is None or b is None else f"{a / b:.3f}×"


def table(head, rows):
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---:" for _ in head) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return out


def load_attention(rows):
    """Our lines (default mode and GG_ATTENTION_DETERMINISTIC=0) and PyTorch's, keyed by (d, causal, N)."""
    ours, any_order, torch = {}, {}, {}
    for r in rows:
        if "N" not in r:
            continue
        key = (r.get("d"), bool(r.get("causal")), r["N"])
        if r.get("impl") == "gradgrad" and "fwd_ms" in r:
            (ours if r.get("deterministic", True) else any_order)[key] = r
        elif "sdpa_fwd_ms" in r or "bob" in r:
            torch[key] = r
    return ours, any_order, torch


def attention_block(meta, rows):
    ours, any_order, torch = load_attention(rows)
    out = header(meta)
    for d in (64, 128):
        for causal in (False, True):
            sizes = sorted(n for (dd, c, n) in ours if dd == d and c == causal)
            if not sizes:
                continue
            triton = d == 64 and not causal
            out += ["", f"**d = {d}, {'causal' if causal else 'non-causal'}** (ms; ratios are ours / theirs)", ""]
            head = ["N", "fwd", "SDPA fwd", "ratio", "fwd+bwd", "SDPA fwd+bwd", "ratio", "BoB", "chain",
                    "composite chain", "ratio"] + (["Triton chain", "ratio"] if triton else []) + ["chain peak GiB"]
            body = []
            for n in sizes:
                o, t = ours[(d, causal, n)], torch.get((d, causal, n), {})
                comp = t.get("chain_ms")
                row = [n, ms(o["fwd_ms"]), ms(t.get("sdpa_fwd_ms")), ratio(o["fwd_ms"], t.get("sdpa_fwd_ms")),
                       ms(o["fwdbwd_ms"]), ms(t.get("sdpa_fwdbwd_ms")), ratio(o["fwdbwd_ms"], t.get("sdpa_fwdbwd_ms")),
                       ms(o["bob_ms"]), ms(o["chain_ms"]), ms(comp) if comp else ("OOM" if t.get("bob") == "OOM" else "—"),
                       ratio(o["chain_ms"], comp)]
                if triton:
                    tr = TRITON_CHAIN_MS.get(n)
                    row += [ms(tr), f"**{ratio(o['chain_ms'], tr)}**" if tr else "—"]
                row.append(f"{o['chain_peak_GiB']:.3f}")
                body.append(row)
            out += table(head, body)
            sizes = sorted(n for (dd, c, n) in any_order if dd == d and c == causal)
            if sizes:
                out += ["", "The same with `GG_ATTENTION_DETERMINISTIC=0` (query-side additions in any order):", ""]
                head = ["N", "fwd+bwd", "ratio to SDPA", "BoB", "chain"] + (["ratio to Triton"] if triton else [])
                body = []
                for n in sizes:
                    o, t = any_order[(d, causal, n)], torch.get((d, causal, n), {})
                    row = [n, ms(o["fwdbwd_ms"]), ratio(o["fwdbwd_ms"], t.get("sdpa_fwdbwd_ms")), ms(o["bob_ms"]),
                           ms(o["chain_ms"])]
                    if triton:
                        tr = TRITON_CHAIN_MS.get(n)
                        row.append(f"**{ratio(o['chain_ms'], tr)}**" if tr else "—")
                    body.append(row)
                out += table(head, body)
    return out


def long_block(meta, rows):
    out = header(meta) + [""]
    body = []
    for r in sorted((r for r in rows if r.get("mode") == "chain_only"), key=lambda r: r["N"]):
        if "error" in r:
            body.append([f"{r['N']:,}", r["error"], "—", "—", "—"])
            continue
        body.append([f"{r['N']:,}", (f"{r['chain_ms'] / 1000:.3f} s" if r["chain_ms"] < 1000 else f"{r['chain_ms'] / 1000:.3g} s"), f"{r['chain_peak_GiB']:.3f}",
                     f"{r['inputs_GiB']:.2f}", f"{r['chain_TFLOPs']:.0f}"])
    first = next((r for r in rows if r.get("mode") == "chain_only"), {})
    out += [f"B = {first.get('B', '?')}, H = {first.get('H', '?')}, d = {first.get('d', '?')}, "
            f"{first.get('dtype', '?')}, {'causal' if first.get('causal') else 'non-causal'}, default mode, one chain "
            "per N (`--chain-only`).", ""]
    out += table(["N", "chain", "peak GiB above the inputs", "inputs GiB", "TFLOP/s (46·N²·d per head)"], body)
    return out


def cuda_block(meta, rows):
    by = {}
    for r in rows:
        by.setdefault(r.get("bench"), []).append(r)
    body = []
    copy = by.get("copy", [{}])[0]
    for r in by.get("add", []):
        body.append(["f32 add, two 1 GiB inputs", f"{r['GBps']:.0f} GB/s", f"copy {copy.get('GBps', 0):.0f} GB/s",
                     f"{r['of_copy']:.0%} of copy"])
    for r in by.get("sum", []):
        body.append(["f32 sum of 1 GiB", f"{r['GBps']:.0f} GB/s", f"copy {copy.get('GBps', 0):.0f} GB/s",
                     f"{r['of_copy']:.0%} of copy"])
    for r in by.get("matmul", []):
        body.append([f"matmul {r['n']}³ {r['dtype']}", f"{r['gg_ms']:.3f} ms ({r['gg_TFLOPs']:.0f} TFLOP/s)",
                     f"cuBLAS {r['cublas_ms']:.3f} ms", f"{r['ratio']:.3f}×"])
    torch = {r["width"]: r for r in by.get("mlp_step_torch", [])}
    for r in by.get("mlp_step", []):
        t = torch.get(r["width"], {})
        body.append([f"MLP double-backward step, batch {r['batch']}, width {r['width']}", f"{r['ms']:.3f} ms",
                     f"PyTorch {t['ms']:.3f} ms" if t else "—", ratio(r["ms"], t.get("ms"))])
    return header(meta) + [""] + table(["figure", "gradgrad", "reference (same run)", "ratio"], body)


# ---------------------------------------------------------------- attention options
# options.jsonl (scripts/bench-gpu.sh options): bench_attention_gpu lines tagged with a "group":
# "gqa" (grouped heads beside Hkv = Hq), "window" (windowed causal beside the dense causal chain),
# "rect" (Nq != Nk beside square chains). Lines that are "skipped" or carry an "error" show as such.


def options_key(r):
    return (r.get("group"), r.get("d"), bool(r.get("causal")), r.get("hq"), r.get("hkv"),
            r.get("nq"), r.get("nk"), r.get("window_left"), r.get("window_right"))


def find(rows, group, d, causal, hq, hkv, nq, nk, wl=None, wr=None):
    key = (group, d, causal, hq, hkv, nq, nk, wl, wr)
    return next((r for r in rows if options_key(r) == key), None)


def chain_of(r):
    return None if r is None or "error" in r or r.get("mode") == "skipped" else r.get("chain_ms")


def chain_cell(r):
    if r is None:
        return "—"
    if "error" in r:
        return "error: " + r["error"][:80].replace("|", "/")
    if r.get("mode") == "skipped":
        return f"skipped (estimated {r['estimated_chain_ms'] / 1000:.0f} s)"
    return ms(r["chain_ms"])


def timed(r):
    if r is None or chain_of(r) is None:
        return "—"
    return "one chain" if r.get("mode") == "chain_only" else f"median of {r.get('reps', '?')}"


def mask_name(r):
    return "causal" if r.get("causal") else "full"


def gqa_reference(rows, r):
    """The line with Hkv = Hq and otherwise r's configuration."""
    hq = r.get("hq")
    return find(rows, "gqa", r.get("d"), bool(r.get("causal")), hq, hq, r.get("nq"), r.get("nk"))


def window_reference(rows, r):
    """The dense chain with r's causal flag and size, and its time scaled by the visible fractions."""
    dense = find(rows, "window", r.get("d"), bool(r.get("causal")), r.get("hq"), r.get("hkv"),
                 r.get("nq"), r.get("nk"))
    t = chain_of(dense)
    if t is None or not dense.get("visible_fraction") or r.get("visible_fraction") is None:
        return dense, None
    return dense, t * r["visible_fraction"] / dense["visible_fraction"]


def rect_reference(rows, r):
    """The square chain at N = Nk with r's mask."""
    nk = r.get("nk")
    return find(rows, "rect", r.get("d"), bool(r.get("causal")), r.get("hq"), r.get("hkv"), nk, nk)


def ratio_of(a, b):
    return None if a is None or b is None else a / b


def peak(r):
    return None if chain_of(r) is None else r.get("chain_peak_GiB")


def group_rows(rows, group):
    return [r for r in rows if r.get("group") == group]


def windowed(r):
    return r.get("window_left") is not None or r.get("window_right") is not None


def options_block(meta, rows):
    out = header(meta)
    gqa = sorted(group_rows(rows, "gqa"), key=lambda r: (r.get("d"), bool(r.get("causal")), r.get("nq"),
                                                         -(r.get("hkv") or 0)))
    if gqa:
        out += ["", "**Grouped heads**: chain against the chain with Hkv = Hq and otherwise the same "
                "configuration. Target: within 5% of it (ratio at most 1.05×) with a lower peak.", ""]
        body = []
        for r in gqa:
            ref = gqa_reference(rows, r)
            body.append([r.get("d"), mask_name(r), f"{r.get('nq'):,}", f"{r.get('hq')} / {r.get('hkv')}",
                         chain_cell(r), ratio(chain_of(r), chain_of(ref)),
                         "—" if peak(r) is None else f"{peak(r):.3f}", ratio(peak(r), peak(ref)), timed(r)])
        out += table(["d", "mask", "N", "Hq / Hkv", "chain ms", "ratio to Hkv = Hq", "chain peak GiB",
                      "peak ratio", "timed"], body)
    win = sorted((r for r in group_rows(rows, "window") if windowed(r)), key=lambda r: (r.get("d"), r.get("nq")))
    if win:
        out += ["", "**Sliding window**: the windowed chain against the dense chain of the same mask and "
                "size, scaled by the ratio of their visible fractions (the time a kernel would take whose "
                "cost follows the visible pairs). Target: at most 1.15× the scaled time, and linear in N.", ""]
        body = []
        for r in win:
            dense, scaled = window_reference(rows, r)
            left, right = r.get("window_left"), r.get("window_right")
            right = right if right is not None else 0 if r.get("causal") else None
            body.append([r.get("d"), f"{r.get('nq'):,}",
                         f"{'—' if left is None else left} / {'—' if right is None else right}",
                         f"{r.get('visible_fraction', 0):.4f}", chain_cell(r), timed(r), chain_cell(dense),
                         "—" if dense is None else f"{dense.get('visible_fraction', 0):.4f}", ms(scaled),
                         ratio(chain_of(r), scaled)])
        out += table(["d", "N", "window left / right", "visible fraction", "chain ms", "timed", "dense chain ms",
                      "dense visible fraction", "dense scaled", "ratio"], body)
        timed_win = [r for r in win if chain_of(r) is not None]
        for a, b in zip(timed_win, timed_win[1:]):
            if a.get("d") == b.get("d") and b.get("nq") > a.get("nq"):
                out += ["", f"From N = {a.get('nq'):,} to {b.get('nq'):,} "
                        f"({b.get('nq') / a.get('nq'):g}× N) the windowed chain takes "
                        f"{chain_of(b) / chain_of(a):.2f}× the time (linear in N: "
                        f"{b.get('nq') / a.get('nq'):g}×)."]
    rect = group_rows(rows, "rect")
    if rect:
        out += ["", "**Nq ≠ Nk** beside the square chains with the same mask (causal aligned to the bottom "
                "right). Effective TFLOP/s: 46 · visible pairs · d per head over the chain time.", ""]
        body = []
        order = sorted(rect, key=lambda r: (r.get("nq") == r.get("nk"), r.get("nk"), r.get("nq")))
        for r in order:
            tf = r.get("chain_TFLOPs") if chain_of(r) is not None else None
            body.append([f"{r.get('nq'):,}", f"{r.get('nk'):,}", r.get("d"), mask_name(r),
                         f"{r.get('visible_fraction', 0):.4f}", chain_cell(r), "—" if tf is None else f"{tf:.0f}",
                         timed(r)])
        out += table(["Nq", "Nk", "d", "mask", "visible fraction", "chain ms", "chain TFLOP/s", "timed"], body)
    if not (gqa or win or rect):
        out += ["", "No grouped-heads, window or Nq ≠ Nk lines in the results file."]
    return out


def options_summary(rows):
    """Configuration, chain ms and the ratio to its reference, one line each (plain text)."""
    lines = [f"{'configuration':<70} {'chain ms':>9} {'ratio':>8}  reference"]
    for r in rows:
        g = r.get("group")
        if g == "gqa" and r.get("hkv") != r.get("hq"):
            ref_ms, what = chain_of(gqa_reference(rows, r)), "Hkv = Hq"
        elif g == "window" and windowed(r):
            ref_ms, what = window_reference(rows, r)[1], "dense chain x visible-fraction ratio"
        elif g == "rect" and r.get("nq") != r.get("nk"):
            ref_ms, what = chain_of(rect_reference(rows, r)), f"square N = {r.get('nk')}"
        else:
            ref_ms, what = None, "(reference)"
        cfg = (f"{g} d={r.get('d')} {mask_name(r)} Hq={r.get('hq')} Hkv={r.get('hkv')} "
               f"Nq={r.get('nq')} Nk={r.get('nk')}")
        for side in ("left", "right"):
            if r.get("window_" + side) is not None:
                cfg += f" window_{side}={r['window_' + side]}"
        cell = "error" if "error" in r else "skipped" if r.get("mode") == "skipped" else ms(r.get("chain_ms"))
        lines.append(f"{cfg:<70} {cell:>9} {ratio(chain_of(r), ref_ms):>8}  {what}")
    return lines


def dist_block(meta, rows):
    """bench_dist's lines: the chain per N and number of ranks, and its speed-up over one rank."""
    out = header(meta) + [""]
    ok = [r for r in rows if r.get("bench") == "dist_attention"]
    first = next((r for r in ok if "error" not in r), {})
    out += [f"B = {first.get('B', '?')}, H = {first.get('H', '?')}, d = {first.get('d', '?')}, "
            f"{first.get('dtype', '?')}, {'causal' if first.get('causal') else 'non-causal'}, "
            f"{first.get('sharding', '?')} sharding; "
            + ("one process per GPU (NCCL)" if first.get("launch") == "nccl" else "ranks as threads in one process")
            + ". Speed-up: the one-GPU chain through `gg::attention` at the same N (timed in the one-rank "
            "process; the one-rank chain where that is missing) over this one.", ""]
    one = {r["N"]: r.get("fused_chain_ms", r["chain_ms"]) for r in ok if r.get("ranks") == 1 and "chain_ms" in r}
    body = []
    for r in sorted(ok, key=lambda r: (r["N"], r.get("ranks", 0), r.get("schedule", ""))):
        if "error" in r:
            body.append([f"{r['N']:,}", r.get("ranks", "?"), r.get("schedule", "?"),
                         "error: " + r["error"][:80].replace("|", "/"), "—", "—", "—"])
            continue
        t = r["chain_ms"]
        body.append([f"{r['N']:,}", r["ranks"], r.get("schedule", "?"), ms(t) if t < 1000 else f"{t / 1000:.3g} s",
                     ratio(one.get(r["N"]), t) if r["N"] in one else "—", f"{r['peak_GiB']:.2f}",
                     f"median of {r.get('reps', '?')}"])
    out += table(["N", "GPUs", "schedule", "chain", "speed-up", "peak GiB per GPU", "timed"], body)
    return out


BLOCKS = {"cuda": cuda_block, "attention": attention_block, "long": long_block, "options": options_block,
          "dist": dist_block}
# Blocks whose results file may not exist yet: the page then says so instead of a table.
OPTIONAL = {"options": "Not measured yet: `scripts/bench-gpu.sh options` writes `bench/results/options.jsonl`.",
            "dist": "Not measured yet (one GPU so far): `scripts/bench-gpu.sh dist` on a machine with several GPUs "
                    "writes `bench/results/dist.jsonl`."}


def render(name):
    if name in OPTIONAL and not os.path.exists(os.path.join(RESULTS, name + ".jsonl")):
        return OPTIONAL[name]
    meta, rows = read(name)
    return "\n".join(BLOCKS[name](meta, rows))


def regenerate(text):
    for name in BLOCKS:
        pattern = re.compile(rf"(<!-- make_tables: {name} -->\n)(?:.*?\n)?(<!-- end make_tables: {name} -->)", re.S)
        if not pattern.search(text):
            sys.exit(f"make_tables: no markers for '{name}' in {PAGE}")
        block = render(name)
        text = pattern.sub(lambda m: m.group(1) + block + "\n" + m.group(2), text)
    return text


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--print", choices=sorted(BLOCKS), dest="only")
    ap.add_argument("--summary", metavar="OPTIONS_JSONL",
                    help="print the chain times of an options results file with their ratios")
    a = ap.parse_args()
    if a.summary:
        print("\n".join(options_summary(read_path(a.summary)[1])))
        return
    if a.only:
        print(render(a.only))
        return
    old = open(PAGE).read()
    new = regenerate(old)
    if a.check:
        if new != old:
            sys.exit("make_tables: docs/benchmarks.md differs from bench/results/ (run python3 bench/make_tables.py)")
        return
    if new != old:
        open(PAGE, "w").write(new)
        print("updated", os.path.relpath(PAGE, ROOT))


if __name__ == "__main__":
    main()
