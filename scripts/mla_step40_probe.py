"""Issue 14 step 40's probe: ours' sparse absorbed MLA decode against impl.candidates.mla_heads64 (64 heads a
program, entry blocks of 32, one wave of splits, from 16 query rows on) at the bench's decode shape (H = 64,
r_kv = 512, 2051 selected rows of a 32K cache: gate.bench_mla.decode_inputs), in the same run.

Parts (each first checked, then timed as CUDA-graph replays in --repeats alternating rounds, median [min-max]):
  decode  B = 16 ... 256: the kernel alone (sparse_absorbed) and the whole attention (attend: W_UK, the kernel,
          W_UV), ours and the candidate; each attend held to the float64 oracle on rows 0 and B-1 first
          (gate.bench_mla's bound), refused above it
  paged   B = 32 / 128 on 64-token pages in shuffled order: the kernel alone, ours and the candidate; each paged
          output must be the contiguous cache's bits
  small   B = 1 / 4 / 8 (below 16 rows the candidate is ours): ours against 64 heads a program at several split
          counts; each variant's rel-L2 to ours' output printed before it is timed
Percent of copy: the selected rows' bytes (B · 2051 · 512 · 2) at the copy ceiling measured in the same run.

    PYTHONPATH=. python3 scripts/mla_step40_probe.py [--parts decode,paged,small] [--repeats 5] [--json F]
"""
from __future__ import annotations

import argparse
import sys

import torch

DECODE_B = (16, 32, 64, 96, 128, 256)
PAGED_B = (32, 128)
SMALL = {1: (16, 32), 4: (4, 8, 16), 8: (2, 4, 8)}      # B: split counts tried with 64 heads a program
HEADS64 = dict(bh=64, bw=32, num_warps=8, num_stages=3)


def _report(tag, res, floor_us, base="ours"):
    for n, r in res.items():
        ratio = res[base]["median_us"] / r["median_us"]
        print(f"  {tag} {n:18s} {r['median_us']:9.2f} us [{r['min_us']:.2f}-{r['max_us']:.2f}] "
              f"{100 * floor_us / r['median_us']:5.1f} % of copy  ours/this {ratio:.3f}x", flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--parts", default="decode,paged,small")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--cache", type=int, default=32768)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    parts = set(args.parts.split(","))
    from gate.bench_mla import DN, R, W, _check_decode, decode_inputs
    from gate.benchlib import alternating, copy_ceiling, graph, rel_l2, to_np, write_json
    from impl import mla as im
    from impl.candidates.mla_heads64 import mla as cm
    from invariants.contracts import bench_bound
    copy_bw = copy_ceiling()
    print(f"copy ceiling {copy_bw / 1e12:.2f} TB/s", flush=True)
    bound = bench_bound("mla", "absorbed", "output", "bfloat16")
    out, refused, T, sc = {"copy_TBps": copy_bw / 1e12}, 0, args.cache, DN ** -0.5
    if "decode" in parts:
        for B in DECODE_B:
            w, latent, q, idx, lengths, q_abs = decode_inputs(B, T)
            errs = {n: _check_decode(w, q, latent, idx, lengths, sorted({0, B - 1}), ns) for n, ns in
                    (("ours", im), ("heads64", cm))}
            print(f"B={B} rel-L2 to the oracle: " + ", ".join(f"{n} {e:.2e}" for n, e in errs.items())
                  + f" (bound {bound:.0e})", flush=True)
            if not all(e <= bound for e in errs.values()):
                refused += 1
                print(f"B={B}: REFUSED, above the bound", flush=True)
                continue
            fns = {"ours": graph(lambda: im.sparse_absorbed(q_abs, latent, idx, lengths, sc)),
                   "heads64": graph(lambda: cm.sparse_absorbed(q_abs, latent, idx, lengths, sc)),
                   "ours_attend": graph(lambda: im.attend(w, q, latent, idx, lengths)),
                   "heads64_attend": graph(lambda: cm.attend(w, q, latent, idx, lengths))}
            res = alternating(fns, args.repeats)
            _report(f"B={B}", res, 1e6 * B * W * R * 2 / copy_bw)
            out[f"decode_B{B}"] = {"errs": errs, **res}
            del w, latent, q, idx, lengths, q_abs, fns
            torch.cuda.empty_cache()
    if "paged" in parts:
        for B in PAGED_B:
            _, latent, _, idx, lengths, q_abs = decode_inputs(B, T)
            G = 64
            M = T // G
            table = torch.randperm(B * M, device="cuda").reshape(B, M)
            pool = torch.empty(B * M, G, R, device="cuda", dtype=latent.dtype)
            pool[table.reshape(-1)] = latent.reshape(B * M, G, R)
            kw = dict(block_table=table, page_size=G)
            for n, ns in (("ours", im), ("heads64", cm)):
                same = torch.equal(ns.sparse_absorbed(q_abs, pool, idx, lengths, sc, **kw),
                                   ns.sparse_absorbed(q_abs, latent, idx, lengths, sc))
                print(f"B={B} paged {n}: {'the contiguous bits' if same else 'NOT the contiguous bits'}",
                      flush=True)
                refused += not same
            fns = {"ours": graph(lambda: im.sparse_absorbed(q_abs, pool, idx, lengths, sc, **kw)),
                   "heads64": graph(lambda: cm.sparse_absorbed(q_abs, pool, idx, lengths, sc, **kw)),
                   "ours_contiguous": graph(lambda: im.sparse_absorbed(q_abs, latent, idx, lengths, sc))}
            res = alternating(fns, args.repeats)
            _report(f"B={B} paged", res, 1e6 * B * W * R * 2 / copy_bw)
            out[f"paged_B{B}"] = res
            del latent, pool, fns
            torch.cuda.empty_cache()
    if "small" in parts:
        for B, counts in SMALL.items():
            _, latent, _, idx, lengths, q_abs = decode_inputs(B, T)
            ref = im.sparse_absorbed(q_abs, latent, idx, lengths, sc)
            fns = {"ours": graph(lambda: im.sparse_absorbed(q_abs, latent, idx, lengths, sc))}
            for ns in counts:
                o = im.sparse_absorbed(q_abs, latent, idx, lengths, sc, ns, HEADS64)
                print(f"B={B} heads64 splits {ns}: rel-L2 to ours {rel_l2(to_np(o), to_np(ref)):.2e}", flush=True)
                fns[f"heads64_ns{ns}"] = graph(lambda ns=ns: im.sparse_absorbed(q_abs, latent, idx, lengths, sc,
                                                                                 ns, HEADS64))
            res = alternating(fns, args.repeats)
            _report(f"B={B}", res, 1e6 * B * W * R * 2 / copy_bw)
            out[f"small_B{B}"] = res
    write_json(args.json, out)
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
