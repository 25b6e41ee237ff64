"""Issue 14 step 49's probe: the sparse absorbed MLA decode with the Triton kernel (`chain`: ours before step 49,
impl.candidates.mla_gather_chain) against the producer warp group (`producer`: ours since stop 53,
impl.candidates.mla_producer) and step 50's candidate (`overlap`: the next block's scores during this block's
softmax, impl.candidates.mla_producer_overlap) and step 51's (`bw64`: blocks of 64 entries,
impl.candidates.mla_producer_bw64; `bw64_16`: its landing form, blocks of 64 from 16 rows on,
impl.candidates.mla_producer_bw64_16, ours since stop 54) and step 52's (`ahead`: the producer's entries a block
ahead, impl.candidates.mla_producer_ahead) at B = 8-256 on a 32K cache (one query a row).

--check [producer|overlap|bw64]  (run first, under a short timeout: a hang in an mbarrier ring shows here, not inside
           the gate) step 49's sparse kernel (impl.candidates.mla_producer), or step 50's, against torch's
           softmax over the same gathered rows at B = 8 (16 splits) and 128 (no split), on selections with -1 entries and entries past a shorter row's length;
           exit 1 above 2e-2 rel-L2 or if the producer kernel would not run there
(default)  per shape: the kernel alone (sparse_absorbed: the sparse kernel and the split merge, CUDA-graph replays
           in --repeats alternating rounds; chain's time over each form's printed as x) and the whole decode
           (attend: the kernel, the merge, W_UK / W_UV; gate.bench_mla's time_decode_forms, held to the float64
           oracle first; the producer's time over each form's)

    PYTHONPATH=. python3 scripts/mla_producer_probe.py [--check [producer|overlap|bw64]] [--forms F,..] [--repeats 5] [--json F]
"""
from __future__ import annotations

import argparse
import sys

import torch

SHAPES = ((8, 32768), (16, 32768), (32, 32768), (64, 32768), (128, 32768), (256, 32768))


def check(name: str) -> int:
    from gate.bench_mla import DN, decode_inputs
    from gate.benchlib import rel_l2, to_np
    if name == "producer":
        from impl.candidates.mla_producer import mla as im
    elif name == "bw64":
        from impl.candidates.mla_producer_bw64 import mla as im
    elif name == "ahead":
        from impl.candidates.mla_producer_ahead import mla as im
    else:
        from impl.candidates.mla_producer_overlap import mla as im
    worst = 0.0
    for B in (8, 128):
        _, latent, _, idx, lengths, q_abs = decode_inputs(B, 4096)
        # holes the gather must skip: -1 entries, and entries past row 0's shorter length
        idx = idx.clone()
        idx[:, :, ::7] = -1
        lengths = lengths.clone()
        lengths[0] = 1000
        rows_ok = (idx >= 0) & (idx < lengths[:, None, None])
        plan = im._launch(q_abs.device, B, q_abs.shape[2], idx.shape[-1], latent.shape[-1])
        ran = im._producer_applies(q_abs, latent, q_abs.shape[2], latent.shape[-1], plan)
        got = im.sparse_absorbed(q_abs, latent, idx, lengths, DN ** -0.5)[:, 0].float()
        rows = latent[torch.arange(B, device=idx.device)[:, None], idx[:, 0].clamp(min=0)].float()
        s = torch.einsum("bhr,bwr->bhw", q_abs[:, 0].float(), rows) * DN ** -0.5
        s = s.masked_fill(~rows_ok[:, 0, None, :], float("-inf"))
        ref = torch.einsum("bhw,bwr->bhr", s.softmax(-1), rows)
        e = rel_l2(to_np(got), to_np(ref))
        worst = max(worst, e)
        print(f"check {name} B={B}: producer kernel {'ran' if ran else 'NOT run'}, rel-L2 {e:.2e} against torch float32",
              flush=True)
        if not ran:
            print("the producer kernel did not run (impl.mla._producer_applies refused this launch)", flush=True)
            return 1
    return 0 if worst <= 2e-2 else 1


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--check", nargs="?", const="producer", choices=("producer", "overlap", "bw64", "ahead"),
                   help="the correctness check alone (see above), of step 49's kernel (the default), step 50's or 51's")
    p.add_argument("--forms", default="chain,producer,overlap,bw64,bw64_16,ahead",
                   help="comma-separated forms to time (chain and producer always)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if args.check:
        return check(args.check)
    from gate.bench_mla import DN, decode_inputs, time_decode_forms
    from gate.benchlib import alternating, graph, write_json
    from impl.candidates import (mla_gather_chain, mla_producer, mla_producer_ahead, mla_producer_bw64,
                                 mla_producer_bw64_16, mla_producer_overlap)
    forms = {"chain": mla_gather_chain.mla, "producer": mla_producer.mla, "overlap": mla_producer_overlap.mla,
             "bw64": mla_producer_bw64.mla, "bw64_16": mla_producer_bw64_16.mla, "ahead": mla_producer_ahead.mla}
    keep = {"chain", "producer", *args.forms.split(",")}
    unknown = keep - set(forms)
    if unknown:
        p.error(f"--forms: unknown {sorted(unknown)} (known: {', '.join(forms)})")
    forms = {n: ns for n, ns in forms.items() if n in keep}
    out = {}
    for B, T in SHAPES:
        w, latent, q, idx, lengths, q_abs = decode_inputs(B, T)
        kern = {n: graph(lambda ns=ns: ns.sparse_absorbed(q_abs, latent, idx, lengths, DN ** -0.5))
                for n, ns in forms.items()}
        res = alternating(kern, args.repeats)
        sel = B * idx.shape[-1] * latent.shape[-1] * latent.element_size()
        for n, r in res.items():
            print(f"  B={B} T={T} kernel {n:9s} {r['median_us']:8.2f} us [{r['min_us']:.2f}-{r['max_us']:.2f}]  "
                  f"{sel / r['median_us'] / 1e3:7.1f} GB/s of selected rows  "
                  f"chain/this {res['chain']['median_us'] / r['median_us']:.3f}x", flush=True)
        # time_decode_forms prints `ours`' time over each form's: here the producer kernel's blocks of 32 (step 49)
        att, fns = time_decode_forms({"ours" if n == "producer" else n: ns for n, ns in forms.items()},
                                     w, q, latent, idx, lengths, args.repeats, f"B={B} T={T} attend")
        out[f"B{B}_T{T}"] = dict(kernel=res, attend=att, selected_bytes=sel)
        del latent, kern, fns
        torch.cuda.empty_cache()
    write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
