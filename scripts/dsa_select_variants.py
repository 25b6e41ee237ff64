"""Issue 14 step 10: time impl.dsa.select_pools (one kernel) at each search step and warp count beside its
torch form select_pools_torch, at the released geometry's selection (pools of 4, 512 picks, 2051 slots),
each timed from a CUDA graph (triton.testing.do_bench_cudagraph: GPU time, no host launch cost). Every
variant's picks are checked equal to the defaults' first (a variant that is wrong is not timed).

    PYTHONPATH=. python3 scripts/dsa_select_variants.py [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import statistics

import torch
import triton.testing

from impl import dsa
from impl.candidates import dsa_select_digits


def inputs(B, S, T, M=4, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    val = torch.ones(B, T, dtype=torch.bool, device="cuda")
    first = torch.zeros(B, dtype=torch.int64, device="cuda")
    P = -(-T // M)        # every pool, as under a CUDA-graph capture: an incomplete last one is invalid
    member_idx = torch.arange(P * M, device="cuda").view(1, P, M).expand(B, P, M).contiguous()
    pool_last = torch.where(member_idx[..., -1] < T, member_idx[..., -1], -1)
    I = torch.randn(B, S, P, generator=g, device="cuda")
    pos = torch.arange(T - S, T, device="cuda")
    cand = pool_last[:, None, :] <= pos[None, :, None]
    I = I.masked_fill(~cand, -3.4028234663852886e38)     # as the score kernel writes non-candidates
    n_vis = torch.cumsum(val, 1)[:, T - S:]
    return I, pool_last, member_idx, val, n_vis, first


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=None)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    rows = []
    # 4097 cached tokens: a 4096-token context and the decoded one (1025 pools, as the layer replay's)
    for B, S, T in ((1, 1, 4096), (1, 1, 4097), (32, 1, 4097), (1, 64, 4097), (1, 1, 8192), (1, 1, 16384)):
        x = inputs(B, S, T)
        P = x[0].shape[-1]
        k_sel, W = min(512, P), 2051
        ref = dsa.select_pools(*x, k_sel, W, True)[0]
        ref_sets = ref.sort(-1).values
        variants = {"torch": lambda: dsa.select_pools_torch(*x, k_sel, W, True)}
        # ours: packed counts, tiles of up to 2048 pools (step 12); step 10's unpacked counts over tiles
        # of up to 1024 pools (impl.candidates.dsa_select_digits) at each digit width
        for rb in (1, 2):
            variants[f"kernel rb{rb}"] = lambda rb=rb: dsa.select_pools(*x, k_sel, W, True, radix_bits=rb)
        for rb in (1, 2, 4):
            variants[f"digits rb{rb}"] = lambda rb=rb: dsa_select_digits.select_pools(*x, k_sel, W, True, radix_bits=rb)
        for name, fn in variants.items():
            try:
                got = fn()[0]
            except Exception as e:          # a variant triton cannot compile is reported, not fatal
                print(f"B={B:3d} S={S:3d} T={T:5d} P={P:5d} {name:16s} FAILED: {type(e).__name__}: "
                      f"{str(e).splitlines()[0][:120]}", flush=True)
                rows.append(dict(B=B, S=S, T=T, P=P, variant=name, error=str(e)[:300]))
                continue
            same = torch.equal(got.sort(-1).values, ref_sets)
            ts = [triton.testing.do_bench_cudagraph(fn, rep=50) * 1e3 for _ in range(args.repeats)] if same else []
            row = dict(B=B, S=S, T=T, P=P, variant=name, same_set=same,
                       us_median=statistics.median(ts) if ts else None, us_min=min(ts) if ts else None,
                       us_max=max(ts) if ts else None)
            rows.append(row)
            print(f"B={B:3d} S={S:3d} T={T:5d} P={P:5d} {name:16s} same={same} "
                  + (f"{row['us_median']:8.1f} us [{row['us_min']:.1f}-{row['us_max']:.1f}]" if ts else "NOT TIMED"),
                  flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
