"""Issue 14 step 40's probe (stop 45): the sparse absorbed MLA kernel with all 64 heads in one program (BH 64) at
B = 32 and 128 (gate.bench_mla's decode shape: r_kv 512, 2051 selected rows of a 32K cache), over its entry
blocks, pipeline stages and selection splits, beside ours (None: the splits ours picks).

CUDA-graph replays of impl.mla.sparse_absorbed alone in 5 alternating rounds; prints median [min-max] and the
percentage of copy speed (the selected rows' bytes at the copy ceiling measured in the same run). It only times:
the variants' outputs are not compared with ours (scripts/mla_prefetch_probe.py --configs compares).

    PYTHONPATH=. python3 scripts/mla_bh64_probe.py OUT.json
"""
from __future__ import annotations

import sys

# name: sparse_absorbed's config (BH 64 everywhere, 8 warps)
CONFIGS = {"d": dict(bh=64, bw=32, num_warps=8, num_stages=2), "e": dict(bh=64, bw=64, num_warps=8, num_stages=2),
           "f": dict(bh=64, bw=32, num_warps=8, num_stages=3), "g": dict(bh=64, bw=32, num_warps=8, num_stages=4)}
# B: [(splits, config name; "" is ours)]
RUNS = {32: [(None, ""), (4, "d"), (4, "f"), (3, "f"), (2, "f"), (4, "g")],
        128: [(None, ""), (None, "f"), (None, "g"), (2, "f")]}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    from gate.bench_mla import DN, R, W, decode_inputs
    from gate.benchlib import alternating, copy_ceiling, graph, write_json
    from impl import mla as im
    copy_bw = copy_ceiling()
    out = {}
    for B, runs in RUNS.items():
        _, latent, _, idx, lengths, q_abs = decode_inputs(B, 32768)
        fns = {f"{c or 'ours'}_ns{ns}": graph(lambda ns=ns, cfg=CONFIGS.get(c, {}): im.sparse_absorbed(
            q_abs, latent, idx, lengths, DN ** -0.5, ns, cfg)) for ns, c in runs}
        res = alternating(fns, 5)
        floor_us = 1e6 * B * W * R * 2 / copy_bw
        for n, r in res.items():
            print(f"B={B} {n:12s} {r['median_us']:8.2f} us [{r['min_us']:.2f}-{r['max_us']:.2f}] "
                  f"{100 * floor_us / r['median_us']:5.1f} % of copy")
        out[B] = res
    write_json(argv[0] if argv else None, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
