"""Issue 14 steps 42 and 43 timed: the whole sparse absorbed MLA decode (impl.mla.attend: W_UK's fold, the gather
kernel, the split merge, W_UV) of ours against step 42's candidate (the merge in one pass, written in bf16:
impl.candidates.mla_merge) and step 43's (that merge with W_UV applied at <= 2 query rows:
impl.candidates.mla_merge_uv), at the bench's decode shape (H = 64, r_kv = 512, 2051 selected rows:
gate.bench_mla.decode_inputs); at B = 1 also step 43's kernel in other tiles and at other split counts, and the
profiler's kernels of each form.

Each variant is first held to the float64 oracle on its first and last row (gate.bench_mla._check_decode; above
the bench's 2e-2 it is not timed), then every variant is timed as CUDA-graph replays in --repeats alternating
rounds (gate.benchlib.alternating: each the median of a do_bench loop that flushes L2 between calls).

    PYTHONPATH=. python3 scripts/mla_merge_probe.py [--repeats 5] [--json F]
"""
from __future__ import annotations

import argparse
import sys

import torch

SHAPES = ((1, 131072), (1, 32768), (2, 32768), (4, 32768), (8, 32768), (32, 32768), (128, 32768))
# step 43's kernel in other tiles (B = 1 only): registers checked for sm_90 first (gate/compile_check.py)
UV_TILES = {"uv_bk128_nw8": dict(BK=128, BV=64, num_warps=8), "uv_bv32": dict(BK=64, BV=32, num_warps=4)}
UV_SPLITS = (8, 17, 33)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    from gate.bench_mla import _check_decode, decode_inputs
    from gate.benchlib import alternating, graph, kernel_times, write_json
    from impl import mla as im
    from impl.candidates.mla_heads64 import module_copy
    from impl.candidates.mla_merge import mla as m42
    from impl.candidates.mla_merge_uv import mla as m43
    tiles = {n: module_copy(f"probe_{n}", ROWS_UV=2, MERGE_UV_CONFIG=cfg) for n, cfg in UV_TILES.items()}
    out = {}
    for B, T in SHAPES:
        w, latent, q, idx, lengths, _ = decode_inputs(B, T)
        forms = {"ours": (im, None), "merge": (m42, None), "merge_uv": (m43, None)}
        if B == 1:
            forms.update({n: (ns, None) for n, ns in tiles.items()})
            forms.update({f"merge_uv_ns{s}": (m43, s) for s in UV_SPLITS})
        fns, errs = {}, {}
        for name, (ns, splits) in forms.items():
            try:
                e = _check_decode(w, q, latent, idx, lengths, sorted({0, B - 1}), ns) if splits is None else \
                    _rel_to(ns, im, w, q, latent, idx, lengths, splits)
            except Exception as ex:  # a variant that fails to launch is a result, not the probe's end
                print(f"B={B} T={T} {name}: {type(ex).__name__}: {str(ex)[:200]}", flush=True)
                continue
            errs[name] = e
            print(f"B={B} T={T} {name}: rel-L2 {e:.2e} ({'oracle' if splits is None else 'ours'})", flush=True)
            if e <= 2e-2:
                fns[name] = graph(lambda ns=ns, s=splits: ns.attend(w, q, latent, idx, lengths, s))
        res = alternating(fns, args.repeats)
        for n, r in res.items():
            print(f"  B={B} T={T} {n:16s} {r['median_us']:8.2f} us [{r['min_us']:.2f}-{r['max_us']:.2f}]  "
                  f"ours/this {res['ours']['median_us'] / r['median_us']:.3f}x", flush=True)
        out[f"B{B}_T{T}"] = dict(times=res, errors=errs)
        if B == 1 and T == SHAPES[0][1]:
            for name in ("ours", "merge", "merge_uv"):
                ns = forms[name][0]
                print(f"  kernels of {name}:", flush=True)
                for k, us in kernel_times(lambda: ns.attend(w, q, latent, idx, lengths), calls=20, width=70).items():
                    print(f"    {us:8.2f} us  {k}", flush=True)
        del latent, fns
        torch.cuda.empty_cache()
    write_json(args.json, out)
    return 0


def _rel_to(ns, ref_ns, w, q, latent, idx, lengths, splits) -> float:
    """rel-L2 of ns.attend at `splits` splits against ref_ns.attend at its own (a split count is not the
    oracle's business: ours at its own count was held to the oracle above)."""
    from gate.benchlib import rel_l2, to_np
    return rel_l2(to_np(ns.attend(w, q, latent, idx, lengths, splits)[0]),
                  to_np(ref_ns.attend(w, q, latent, idx, lengths)[0]))


if __name__ == "__main__":
    sys.exit(main())
