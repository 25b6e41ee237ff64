"""Issue 14 step 44's probe: the sparse absorbed MLA decode (impl.mla.attend) below ROWS_64 query rows at other
selection-split counts. Ours splits a 2051-entry selection 16 ways there (W_SPLIT 129): each program walks 3
blocks of 64 entries, the last holding ONE entry. 17 splits (W_SPLIT 121) walk 2 blocks; 11 splits (W_SPLIT 187)
3 full ones; 33 splits (W_SPLIT 63) one block; blocks of 32 at 33 splits two. Rows >= ROWS_64 (64 heads a
program, blocks of 32, one wave): B = 16 at 8 splits (W_SPLIT 257: 8 blocks and one entry) against 9.

Each variant is held to the float64 oracle on its first and last row first (above 2e-2 it is not timed), then
timed as CUDA-graph replays in --repeats alternating rounds (gate.benchlib.alternating: each the median of a
do_bench loop that flushes L2 between calls).

    PYTHONPATH=. python3 scripts/mla_split_probe.py [--repeats 5] [--json F] [--w-alone]

--w-alone: the split count taken from W alone (33 one-block splits at every row count below 8, so a row's bits
would not depend on its batch) against ours' 16, at B = 1, 2, 4, 7 (32K), nothing else.
"""
from __future__ import annotations

import argparse
import sys

import torch

SHAPES = ((1, 131072), (1, 32768), (2, 32768), (4, 32768), (16, 32768))
SPLITS = {1: (16, 17, 11, 22, 33), 2: (16, 17, 11), 4: (16, 17, 11), 16: (8, 9)}
BW32 = dict(bh=16, bw=32, num_warps=8, num_stages=2)     # ours below ROWS_64 but blocks of 32
BW32_SPLITS = (33, 65)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", default=None)
    p.add_argument("--w-alone", action="store_true")
    args = p.parse_args(argv)
    shapes, splits_by_b = SHAPES, SPLITS
    if args.w_alone:
        shapes = ((1, 32768), (2, 32768), (4, 32768), (7, 32768))
        splits_by_b = {b: (16, 33) for b, _ in shapes}
    from gate.bench_mla import W, decode_inputs, decode_refs
    from gate.benchlib import alternating, graph, kernel_times, rel_l2, to_np, write_json
    from impl import mla as im
    from impl.candidates.mla_heads64 import module_copy
    base_cfg = im._launch_config
    bw32 = module_copy("probe_bw32", _launch_config=lambda rows, BR: dict(BW32) if rows < im.ROWS_64
                       else base_cfg(rows, BR))
    out = {}
    for B, T in shapes:
        w, latent, q, idx, lengths, _ = decode_inputs(B, T)
        refs = decode_refs(w, q, latent, idx, sorted({0, B - 1}))         # once a shape, for every form
        forms = {("ours" if s == splits_by_b[B][0] else f"ns{s}"): (im, s) for s in splits_by_b[B]}
        if B < im.ROWS_64 and not args.w_alone:
            forms.update({f"bw32_ns{s}": (bw32, s) for s in BW32_SPLITS})
        fns, errs, plans = {}, {}, {}
        for name, (ns, s) in forms.items():
            try:
                o = ns.attend(w, q, latent, idx, lengths, s)[0]
                e = max(rel_l2(to_np(o[b:b + 1]), r) for b, r in refs.items())
                plan = ns._launch(latent.device, B, 64, W, 512, s)
            except Exception as ex:  # a variant that fails to launch is a result, not the probe's end
                print(f"B={B} T={T} {name}: {type(ex).__name__}: {str(ex)[:200]}", flush=True)
                continue
            errs[name], plans[name] = e, {k: plan[k] for k in ("bh", "bw", "splits", "w_split")}
            print(f"B={B} T={T} {name}: rel-L2 {e:.2e} (oracle); plan {plans[name]}", flush=True)
            if e <= 2e-2:
                fns[name] = graph(lambda ns=ns, s=s: ns.attend(w, q, latent, idx, lengths, s))
        res = alternating(fns, args.repeats)
        for n, r in res.items():
            print(f"  B={B} T={T} {n:12s} {r['median_us']:8.2f} us [{r['min_us']:.2f}-{r['max_us']:.2f}]  "
                  f"ours/this {res['ours']['median_us'] / r['median_us']:.3f}x", flush=True)
        out[f"B{B}_T{T}"] = dict(times=res, errors=errs, plans=plans)
        if B == 1 and T == shapes[0][1] and not args.w_alone:
            for name in ("ours", "ns17", "ns33"):
                ns, s = forms[name]
                print(f"  kernels of {name}:", flush=True)
                for k, us in kernel_times(lambda: ns.attend(w, q, latent, idx, lengths, s), calls=20,
                                          width=70).items():
                    print(f"    {us:8.2f} us  {k}", flush=True)
        del latent, fns
        torch.cuda.empty_cache()
    write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
