"""Issue 14 steps 54 and 55's probe: the sparse absorbed MLA decode, ours against step 54's candidate (`qstrides`:
q_abs read through its strides, impl.candidates.mla_q_strides) and step 55's (`outuv`: that, and the unsplit kernel's
output in W_UV's dtype, impl.candidates.mla_out_uv), with `merge1` (step 54's candidate with the split merge in one
round of loads, step 46's switch: a timing only, to see whether the merge's two rounds are the merge's cost at
B = 16-64), step 57's (`partbf16`: the split partials in bf16, impl.candidates.mla_part_bf16) and step 58's
(`stageo`: the bf16 output staged through shared memory, impl.candidates.mla_stage_o; the decode only, as
sparse_absorbed alone writes float32) and step 59's (`partstaged`: bf16 partials, the staged epilogue and a 2-warp
merge, impl.candidates.mla_part_bf16_staged) and step 60's (`pdl`: the split merge launched as a programmatic
dependent of the sparse kernel, impl.candidates.mla_merge_pdl) on a 32K cache (and B = 1 at 128K), one query a row. `ours2`: a second copy of ours (the same code,
its own compile and graph): the control, ours' ratio to it is the probe's noise between identical launches.

Per shape: sparse_absorbed (the bench's "kernel": the sparse kernel and the split merge) and the whole decode
(attend: the W_UK fold, the kernel, the merge, W_UV; held to the float64 oracle first), CUDA-graph replays in
--repeats alternating rounds (gate.benchlib.alternating: each the median of a do_bench loop), ours' time over each
form's printed as x; then each form's kernels' device times at B = 32 and 128 (profiler).

    PYTHONPATH=. python3 scripts/mla_q_probe.py [--forms ours,qstrides,outuv,merge1] [--shapes 1x32768,32x32768]
        [--repeats 5] [--json F]
"""
from __future__ import annotations

import argparse
import sys

import torch

SHAPES = ((1, 131072), (1, 32768), (4, 32768), (8, 32768), (16, 32768), (32, 32768), (64, 32768), (128, 32768),
          (256, 32768))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--forms", default="ours,qstrides,outuv,merge1",
                   help="comma-separated forms (ours always): ours2, qstrides, outuv, merge1, partbf16, stageo, "
                        "partstaged, pdl")
    p.add_argument("--shapes", default=None, help="comma-separated BxT (default: B = 1 at 128K and 32K, 4-256 at 32K)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    from gate.bench_mla import DN, decode_inputs, time_decode_forms
    from gate.benchlib import alternating, graph, kernel_times, write_json
    from impl import mla as im
    from impl.candidates import (mla_merge_pdl, mla_out_uv, mla_part_bf16, mla_part_bf16_staged, mla_q_strides,
                                 mla_stage_o)
    from impl.candidates.mla_heads64 import module_copy
    merge1 = module_copy("scripts.mla_q_probe.merge1", Q_STRIDES=True, MERGE_ONE_ROUND=True)
    forms = {"ours": im, "ours2": module_copy("scripts.mla_q_probe.ours2"), "qstrides": mla_q_strides.mla,
             "outuv": mla_out_uv.mla, "merge1": merge1, "partbf16": mla_part_bf16.mla, "stageo": mla_stage_o.mla,
             "partstaged": mla_part_bf16_staged.mla, "pdl": mla_merge_pdl.mla}
    keep = {"ours", *args.forms.split(",")}
    if keep - set(forms):
        p.error(f"--forms: unknown {sorted(keep - set(forms))} (known: {', '.join(forms)})")
    forms = {n: ns for n, ns in forms.items() if n in keep}
    shapes = SHAPES if args.shapes is None else [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    out = {}
    for B, T in shapes:
        w, latent, q, idx, lengths, q_abs = decode_inputs(B, T)
        kern = {n: graph(lambda ns=ns: ns.sparse_absorbed(q_abs, latent, idx, lengths, DN ** -0.5))
                for n, ns in forms.items()}
        res = alternating(kern, args.repeats)
        sel = B * idx.shape[-1] * latent.shape[-1] * latent.element_size()
        for n, r in res.items():
            print(f"  B={B} T={T} kernel {n:9s} {r['median_us']:8.2f} us [{r['min_us']:.2f}-{r['max_us']:.2f}]  "
                  f"{sel / r['median_us'] / 1e3:7.1f} GB/s of selected rows  "
                  f"ours/this {res['ours']['median_us'] / r['median_us']:.3f}x", flush=True)
        att, fns = time_decode_forms(forms, w, q, latent, idx, lengths, args.repeats, f"B={B} T={T} attend")
        row = dict(kernel=res, attend=att, selected_bytes=sel)
        if B in (32, 128) and T == 32768:
            row["parts"] = {}
            for n, ns in forms.items():
                parts = kernel_times(lambda ns=ns: ns.attend(w, q, latent, idx, lengths), calls=10, top=None,
                                     width=60)
                row["parts"][n] = parts
                print(f"  B={B} attend {n:9s} device {sum(parts.values()):.1f} us: " +
                      ", ".join(f"{k[:36]} {v}" for k, v in parts.items()), flush=True)
        out[f"B{B}_T{T}"] = row
        del latent, kern, fns
        torch.cuda.empty_cache()
    write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
