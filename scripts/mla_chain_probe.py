"""Issue 14 step 48's probe: how much of the sparse MLA kernel's time at B >= 32 is the gather's memory latency.

The kernel (impl.mla.sparse_absorbed, ours' launch) timed on the same queries over three selections of W entries a
row: `random` (the bench's: random complete pools and the tail, every row read from HBM), `contig` (positions 0..W-1:
the same bytes, in address order) and `hot` (positions j mod 64: every row's 64 distinct cache rows stay in L2, so the
gathers are L2 hits; repeated positions are not a valid DSA selection, so this calls the kernel's launcher directly,
past the attention's input checks). If `hot` is far faster than `random`, the gather's latency is the gap to the
bytes floor and a producer warp that overlaps it with the dots is worth writing; if close, the dependent chain of
dots and online softmax is, and a producer gains little. CUDA graphs, --repeats alternating rounds.

    PYTHONPATH=. python3 scripts/mla_chain_probe.py [--repeats 5] [--json F]
"""
from __future__ import annotations

import argparse
import sys

import torch

SHAPES = ((32, 32768), (128, 32768))
HOT_ROWS = 64


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    from gate.bench_mla import DN, decode_inputs
    from gate.benchlib import alternating, graph, rel_l2, to_np, write_json
    from impl import mla as im
    out = {}
    for B, T in SHAPES:
        _, latent, _, idx, lengths, q_abs = decode_inputs(B, T)
        W = idx.shape[-1]
        j = torch.arange(W, device=idx.device)
        sels = {"random": idx, "contig": j.expand(B, 1, W).contiguous(),
                "hot": (j % HOT_ROWS).expand(B, 1, W).contiguous()}
        # the launcher is timed, so it is checked first against torch's softmax over the same gathered rows; a
        # selection above 2e-2 is not timed (as gate.bench_mla.time_decode_forms), and without "random" nothing is
        ok = {}
        for name, sel in sels.items():
            rows = latent[torch.arange(B, device=idx.device)[:, None], sel[:, 0]].float()      # [B, W, R]
            s = torch.einsum("bhr,bwr->bhw", q_abs[:, 0].float(), rows) * DN ** -0.5
            ref = torch.einsum("bhw,bwr->bhr", s.softmax(-1), rows)
            got = im.sparse_absorbed(q_abs, latent, sel, lengths, DN ** -0.5)[:, 0].float()
            e = rel_l2(to_np(got), to_np(ref))
            print(f"B={B} {name}: rel-L2 {e:.2e} (torch float32){'' if e <= 2e-2 else ': NOT timed'}", flush=True)
            if e <= 2e-2:
                ok[name] = sel
        if "random" not in ok:
            print(f"B={B}: the random selection failed its check; this shape is not timed", flush=True)
            out[f"B{B}_T{T}"] = dict(error="random selection above 2e-2 rel-L2")
            continue
        fns = {n: graph(lambda sel=sel: im.sparse_absorbed(q_abs, latent, sel, lengths, DN ** -0.5))
               for n, sel in ok.items()}
        res = alternating(fns, args.repeats)
        bytes_sel = B * W * latent.shape[-1] * 2
        for n, r in res.items():
            print(f"  B={B} T={T} {n:7s} {r['median_us']:8.2f} us [{r['min_us']:.2f}-{r['max_us']:.2f}]  "
                  f"{bytes_sel / r['median_us'] / 1e3:7.1f} GB/s of selected rows  "
                  f"random/this {res['random']['median_us'] / r['median_us']:.3f}x", flush=True)
        out[f"B{B}_T{T}"] = dict(times=res, selected_bytes=bytes_sel)
        del latent, fns
        torch.cuda.empty_cache()
    write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
