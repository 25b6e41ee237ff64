"""Issue 14 step 45's forms timed: the sparse absorbed MLA decode (impl.mla.attend) of ours against
- `w`: the first form (impl.candidates.mla_splits_w: one-block splits from W below 8 query rows, 2 stages, as gated),
- `w1`: the second (impl.candidates.mla_splits_w1: the same with one pipeline stage below 8 rows),
- `b1`: the one-block splits at one query row only (impl.candidates.mla_splits_b1),
- `one`: step 46's candidate (impl.candidates.mla_merge_one_round: ours with the merge in one round of loads),
- `w1_one`: w1 with step 46's one-round merge,
- `w1_t4096`, `w1_t16384`: w1 with merge tiles of 4096 (BJ 64 x 64 ranks: 512 programs at rank 512, B = 1) and
  16384 (BJ 64 x 256 ranks; 4 warps as ours: 128 float32 a thread) instead of 8192,
at B = 1 (128K and 32K) and B = 2, 4, 7, 8, 32 (32K; from 8 rows on w, w1 and b1 are ours' launch). Each form held to the float64 oracle first
(gate.bench_mla.time_decode_forms), then timed as CUDA-graph replays in --repeats alternating rounds (the bench's zeroing
L2 flush), then, at the first shape, the profiler's kernel times.

    PYTHONPATH=. python3 scripts/mla_b1_merge_probe.py [--repeats 5] [--json F] [--forms b1,one]
"""
from __future__ import annotations

import argparse
import sys

import torch

SHAPES = ((1, 131072), (1, 32768), (2, 32768), (4, 32768), (7, 32768), (8, 32768), (32, 32768))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", default=None)
    p.add_argument("--forms", default=None, help="comma-separated forms to time (ours always); default: all")
    args = p.parse_args(argv)
    from gate.bench_mla import decode_inputs, time_decode_forms
    from gate.benchlib import kernel_times, write_json
    from impl import mla as im
    from impl.candidates import mla_merge_one_round, mla_splits_b1, mla_splits_w, mla_splits_w1
    from impl.candidates.mla_heads64 import module_copy
    forms = {"ours": im, "w": mla_splits_w.mla, "w1": mla_splits_w1.mla, "b1": mla_splits_b1.mla,
             "one": mla_merge_one_round.mla}
    m = module_copy("probe_w1_one", MERGE_ONE_ROUND=True)
    m._launch_config, m._splits, m._merge_plan = (mla_splits_w1._launch_config, mla_splits_w._splits,
                                                  mla_splits_w._merge_plan)
    forms["w1_one"] = m
    for tile in (4096, 16384):
        m = module_copy(f"probe_w1_t{tile}")
        m._launch_config, m._splits = mla_splits_w1._launch_config, mla_splits_w._splits
        m._merge_plan = mla_splits_w.tile_plan(tile)
        forms[f"w1_t{tile}"] = m
    if args.forms:
        keep = {"ours", *args.forms.split(",")}
        unknown = keep - set(forms)
        if unknown:
            p.error(f"--forms: unknown {sorted(unknown)} (known: {', '.join(forms)})")
        forms = {k: v for k, v in forms.items() if k in keep}
    out = {}
    for B, T in SHAPES:
        w, latent, q, idx, lengths, _ = decode_inputs(B, T)
        res, fns = time_decode_forms(forms, w, q, latent, idx, lengths, args.repeats, f"B={B} T={T}")
        out[f"B{B}_T{T}"] = dict(times=res)
        if (B, T) == SHAPES[0]:
            for name, ns in forms.items():
                ks = kernel_times(lambda ns=ns: ns.attend(w, q, latent, idx, lengths), calls=20, width=60)
                print(f"  kernels of {name}: " + "; ".join(f"{k} {us:.2f}" for k, us in ks.items()), flush=True)
                out[f"B{B}_T{T}"][f"kernels_{name}"] = ks
        del latent, fns
        torch.cuda.empty_cache()
    write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
