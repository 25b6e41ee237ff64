"""Issue 14 step 49's probe: ours' sparse absorbed MLA decode against the producer-warp-group candidate
(impl.candidates.mla_producer) at B = 8-256 on a 32K cache (one query a row).

--check    (run first, under a short timeout: a hang in an mbarrier ring shows here, not inside the gate) the
           candidate's kernel against torch's softmax over the same gathered rows at B = 8 (16 splits) and 128 (no
           split), on selections with -1 entries and entries past a shorter row's length; exit 1 above 2e-2
           rel-L2 or if the producer kernel did not run
(default)  per shape: the kernel alone (impl.mla.sparse_absorbed, CUDA-graph replays in --repeats alternating
           rounds) and the whole decode (attend: the kernel, the merge, W_UK / W_UV; gate.bench_mla's
           time_decode_forms, held to the float64 oracle first), ours over the candidate's time printed as x

    PYTHONPATH=. python3 scripts/mla_producer_probe.py [--check] [--repeats 5] [--json F]
"""
from __future__ import annotations

import argparse
import sys

import torch

SHAPES = ((8, 32768), (16, 32768), (32, 32768), (64, 32768), (128, 32768), (256, 32768))


def check() -> int:
    from gate.bench_mla import DN, decode_inputs
    from gate.benchlib import rel_l2, to_np
    from impl.candidates import mla_producer as cand
    worst = 0.0
    for B in (8, 128):
        _, latent, _, idx, lengths, q_abs = decode_inputs(B, 4096)
        # holes the gather must skip: -1 entries, and entries past row 0's shorter length
        idx = idx.clone()
        idx[:, :, ::7] = -1
        lengths = lengths.clone()
        lengths[0] = 1000
        rows_ok = (idx >= 0) & (idx < lengths[:, None, None])
        before = cand.launched["producer"]
        got = cand.mla.sparse_absorbed(q_abs, latent, idx, lengths, DN ** -0.5)[:, 0].float()
        torch.cuda.synchronize()
        ran = cand.launched["producer"] - before
        rows = latent[torch.arange(B, device=idx.device)[:, None], idx[:, 0].clamp(min=0)].float()
        s = torch.einsum("bhr,bwr->bhw", q_abs[:, 0].float(), rows) * DN ** -0.5
        s = s.masked_fill(~rows_ok[:, 0, None, :], float("-inf"))
        ref = torch.einsum("bhw,bwr->bhr", s.softmax(-1), rows)
        e = rel_l2(to_np(got), to_np(ref))
        worst = max(worst, e)
        print(f"check B={B}: producer launches {ran}, rel-L2 {e:.2e} against torch float32", flush=True)
        if ran == 0:
            print("the producer kernel did not run (impl.candidates.mla_producer.applies refused)", flush=True)
            return 1
    return 0 if worst <= 2e-2 else 1


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--check", action="store_true", help="the correctness check alone (see above)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if args.check:
        return check()
    from gate.bench_mla import DN, decode_inputs, time_decode_forms
    from gate.benchlib import alternating, graph, write_json
    from impl import mla as im
    from impl.candidates import mla_producer as cand
    out = {}
    for B, T in SHAPES:
        w, latent, q, idx, lengths, q_abs = decode_inputs(B, T)
        kern = {n: graph(lambda ns=ns: ns.sparse_absorbed(q_abs, latent, idx, lengths, DN ** -0.5))
                for n, ns in (("ours", im), ("producer", cand.mla))}
        res = alternating(kern, args.repeats)
        sel = B * idx.shape[-1] * latent.shape[-1] * latent.element_size()
        for n, r in res.items():
            print(f"  B={B} T={T} kernel {n:9s} {r['median_us']:8.2f} us [{r['min_us']:.2f}-{r['max_us']:.2f}]  "
                  f"{sel / r['median_us'] / 1e3:7.1f} GB/s of selected rows  "
                  f"ours/this {res['ours']['median_us'] / r['median_us']:.3f}x", flush=True)
        att, fns = time_decode_forms({"ours": im, "producer": cand.mla}, w, q, latent, idx, lengths, args.repeats,
                                     f"B={B} T={T} attend")
        out[f"B{B}_T{T}"] = dict(kernel=res, attend=att, selected_bytes=sel)
        del latent, kern, fns
        torch.cuda.empty_cache()
    print(f"launched: {cand.launched}", flush=True)
    write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
