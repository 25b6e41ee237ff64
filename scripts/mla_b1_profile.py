"""Where the sparse absorbed MLA decode's time goes at B = 1 (issue 14: >= 100x dense SDPA at 128K): the
profiler's kernels of one impl.mla.attend call (W_UK's einsum, the gather kernel, the split combine, W_UV's
einsum, the casts) at the bench's shape (H = 64, r_kv 512, 2051 rows of a 128K cache), beside the whole call
replayed from a CUDA graph and the two einsums' weight bytes at the copy ceiling; then the attention with its
folds written as bmm (on kv_b's views, and on contiguous re-laid weights), each checked against ours, timed in 5
alternating rounds.

    PYTHONPATH=. python3 scripts/mla_b1_profile.py [--batch 1] [--cache 131072]
"""
from __future__ import annotations

import argparse
import sys

import torch


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--cache", type=int, default=131072)
    args = p.parse_args(argv)
    from gate.bench_mla import DN, DV, H, R, decode_inputs
    from gate.benchlib import alternating, copy_ceiling, do_bench, graph, kernel_times, rel_l2, to_np
    from impl import mla as im
    copy_bw = copy_ceiling()
    w, latent, q, idx, lengths, q_abs = decode_inputs(args.batch, args.cache)
    attend = graph(lambda: im.attend(w, q, latent, idx, lengths))
    kern = graph(lambda: im.sparse_absorbed(q_abs, latent, idx, lengths, DN ** -0.5))
    weights = H * (DN + DV) * R * 2
    print(f"B={args.batch} T={args.cache}: attend {do_bench(attend) * 1e3:.2f} us, sparse_absorbed "
          f"{do_bench(kern) * 1e3:.2f} us; W_UK + W_UV bytes {weights / 1e6:.1f} MB = "
          f"{1e6 * weights / copy_bw:.2f} us at copy speed ({copy_bw / 1e12:.2f} TB/s)")
    for name, us in kernel_times(lambda: im.attend(w, q, latent, idx, lengths), calls=20, width=90).items():
        print(f"  {us:8.2f} us  {name}")
    forms = _forms(w, q, latent, idx, lengths)
    ref = forms["ours"]()
    fns = {}
    for name, fn in forms.items():
        e = rel_l2(to_np(fn()), to_np(ref))
        print(f"form {name}: rel-L2 to ours {e:.2e}")
        if e <= 1e-2:
            fns[name] = graph(fn)
    for name, r in alternating(fns, 5).items():
        print(f"  {name:12s} {r['median_us']:8.2f} us [{r['min_us']:.2f}-{r['max_us']:.2f}]")
    return 0


def _forms(w, q, latent, idx, lengths):
    """The attention with its two folds written other ways (the kernel between them unchanged), for B·S = 1
    (where [H, 1, ·] and [1, H, ·] are the same memory): einsum (ours), bmm on kv_b's strided views, bmm on
    contiguous copies of W_UK [H, N, R] and W_UV^T [H, R, V] (what a load-time re-layout would hold)."""
    from impl import mla as im
    W_UK, W_UV = im._split_kv_b(w)
    Wk, Wvt = W_UK.contiguous(), W_UV.transpose(1, 2).contiguous()
    B, S, H, N = q.shape

    def folded(Wk_, Wv_t):
        q_abs = torch.bmm(q.reshape(B * S, H, N).transpose(0, 1), Wk_).transpose(0, 1).reshape(B, S, H, -1)
        lat = im.sparse_absorbed(q_abs, latent, idx, lengths, w.nope_dim ** -0.5)
        o = torch.bmm(lat.reshape(B * S, H, -1).transpose(0, 1).to(q.dtype), Wv_t)
        return o.transpose(0, 1).reshape(B, S, H, -1)

    return {"ours": lambda: im.attend(w, q, latent, idx, lengths)[0],
            "bmm_views": lambda: folded(W_UK, W_UV.transpose(1, 2)),
            "bmm_contig": lambda: folded(Wk, Wvt)}


if __name__ == "__main__":
    sys.exit(main())
