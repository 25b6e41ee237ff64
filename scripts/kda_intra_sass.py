"""Static SASS counts of the KDA intra-chunk kernels per (chunk, head), without a GPU (issue 14 step 18).

Compiles `kda_intra_chunked_fwd_kernel` (ours) and step 18's pair `kda_intra_kk_fwd_kernel` +
`kda_intra_wu_fwd_kernel` for sm_90 with the triton wheel's ptxas (gate/compile_check.py's records), finds
each loop (a backward branch) and weights its body by its trip count (the K-tile loops run K / BK
times, the V-tile loop V / BV; the loops appear in the source's order), then prints per program and per
(chunk, head): issued instructions (per warp x warps), tensor-core MMAs (HMMA), exponentials (MUFU.EX2),
shared-memory traffic (LDS / STS / LDSM), global loads and stores, registers and spill bytes.

    python3 scripts/kda_intra_sass.py                        # ours at BK 32 / 4 warps, the pair at a sweep
    python3 scripts/kda_intra_sass.py --json out.json

Static counts ignore stalls and memory time: they say how much issue work a design leaves, which is what
the 16-row pair was built to cut. The H200 runs Triton 3.6: set PYTHONPATH to a 3.6 install to match it.
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import sys

os.environ.pop("TRITON_INTERPRET", None)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from gate.benchlib import write_json  # noqa: E402
from scripts.sass_loop import _compile  # noqa: E402

K = V = 128
BV = 64
# (kernel, loop trip counts in source order as functions of BK)
LOOPS = {
    "kda_intra_chunked_fwd_kernel": lambda bk: (K // bk, K // bk, V // BV),
    "kda_intra_kk_fwd_kernel": lambda bk: (K // bk,) * 4,
    "kda_intra_wu_fwd_kernel": lambda bk: (K // bk, V // BV),
}
GROUPS = {"HMMA": ("HMMA",), "HGMMA": ("HGMMA",), "MUFU.EX2": ("MUFU.EX2",), "shared": ("LDS", "STS", "LDSM"),
          "global ld": ("LDG",), "global st": ("STG",), "spill": ("STL", "LDL"),
          # the waits a staged wgmma costs: warpgroup arrive / depbar, and the CTA barriers around staging
          "wg sync": ("WARPGROUP",), "BAR": ("BAR",)}


def weighted_ops(sass: str, trips) -> tuple[collections.Counter, int]:
    """Opcode counts of one warp's run: straight-line code once, each loop body (outermost backward
    branches, in address order) times its trip count. Returns the counts and the loops found."""
    lines = sass.splitlines()
    labels = {m.group(1): i for i, l in enumerate(lines) if (m := re.match(r"\s*(\.L_x_\d+):", l))}
    loops = []
    for i, l in enumerate(lines):
        m = re.search(r"BRA\s+`\((\.L_x_\d+)\)", l)
        if m and labels.get(m.group(1), i) < i:
            loops.append((labels[m.group(1)], i))
    loops = [lp for lp in loops if not any(o[0] <= lp[0] and lp[1] <= o[1] and o != lp for o in loops)]
    loops.sort()
    weight = [1] * len(lines)
    for (a, b), t in zip(loops, list(trips) + [1] * len(loops)):
        for i in range(a, b + 1):
            weight[i] = t
    ops = collections.Counter()
    for i, l in enumerate(lines):
        m = re.match(r"\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)", l)
        if m:
            ops[m.group(1)] += weight[i]
    return ops, len(loops)


def measure(name: str, bk: int, warps: int, extra: dict = None):
    """One kernel's weighted counts at BK / warps; extra: constexprs to set (ours' STACK, INV_MERGE)."""
    from gate import compile_check as cc
    rec = next(r for r in cc.RECORDS if r.name == name)
    rec = rec._replace(constexprs={**rec.constexprs, "BK": bk, **(extra or {})}, options=dict(num_warps=warps))
    sass, _, usage = _compile(rec, 90)
    ops, n_loops = weighted_ops(sass, LOOPS[name](bk))
    row = dict(kernel=name, BK=bk, warps=warps, loops=n_loops, variant=" ".join(f"{k}={v}" for k, v in
                                                                             (extra or {}).items()), **usage,
               per_warp=sum(ops.values()), per_program=sum(ops.values()) * warps)
    for g, prefixes in GROUPS.items():
        row[g] = sum(n for op, n in ops.items() if op.startswith(prefixes)) * warps
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    import triton
    print(f"triton {triton.__version__}, sm_90, K = V = {K}, BV {BV}; counts per program = per (chunk, head)")
    cols = ("per_program", "HMMA", "HGMMA", "MUFU.EX2", "shared", "global ld", "global st", "spill", "wg sync",
            "BAR")
    print(f"{'kernel':36s} {'BK':>3s} {'w':>2s} {'regs':>4s} {'spillB':>6s} " + " ".join(f"{c:>11s}" for c in cols))
    rows = []
    ours = "kda_intra_chunked_fwd_kernel"
    # ours, then step 21's stacked kk / qk dot (with either inverse), then step 18's pair
    configs = [(ours, bk, 4, None) for bk in (32, 64)] + [
        (ours, 32, 4, {"STACK": True}), (ours, 32, 4, {"STACK": True, "INV_MERGE": False}),
        (ours, 32, 4, {"GC": True}), (ours, 32, 4, {"GC": True, "INV_MERGE": False}),
        (ours, 32, 4, {"GC": True, "STACK": True, "INV_MERGE": False})] + [
        (n, bk, w, None) for n in ("kda_intra_kk_fwd_kernel", "kda_intra_wu_fwd_kernel")
        for bk in (16, 32) for w in (1, 2, 4)]
    for name, bk, w, extra in configs:
        r = measure(name, bk, w, extra)
        rows.append(r)
        print(f"{r['kernel']:36s} {bk:>3d} {w:>2d} {r['regs']:>4d} {r['spill']:>6d} "
              + " ".join(f"{r[c]:>11d}" for c in cols) + (f"  {r['variant']}" if r["variant"] else ""), flush=True)
    write_json(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
