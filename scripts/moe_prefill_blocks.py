"""Blocks and computed rows of the grouped MoE GEMMs at prefill, per block height BM (issue 14 step 22).

Each block of BM (token, slot) pairs of one expert dequantizes that expert's whole NVFP4 weight once, and
runs BM rows of bf16 MMA whether or not they hold pairs. So for a routing, blocks = Σ_e ceil(p_e / BM)
prices the dequantization and blocks x BM prices the MMA. Routing as gate.bench_moe draws it (uniform
top-8 of 288 experts, a seeded generator):

    python3 scripts/moe_prefill_blocks.py [--tokens 1024,4096,16384] [--bm 64,128,256] [--json F]
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from gate.benchlib import write_json  # noqa: E402

E, K_TOP = 288, 8


def blocks(counts: np.ndarray, bm: int) -> tuple[int, int]:
    """(blocks, computed rows) of one routing's per-expert pair counts at block height bm."""
    b = int(np.ceil(counts / bm).sum())
    return b, b * bm


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tokens", default="1024,4096,16384")
    p.add_argument("--bm", default="64,128,256")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    gen = torch.Generator().manual_seed(a.seed)
    rows = []
    print(f"{'N':>6s} {'BM':>4s} {'pairs/expert mean [min-max]':>28s} {'blocks':>7s} {'rows':>7s} {'useful':>6s}")
    for n in (int(t) for t in a.tokens.split(",")):
        ids = torch.rand(n, E, generator=gen).argsort(-1)[:, :K_TOP]
        c = np.bincount(ids.flatten().numpy(), minlength=E)
        for bm in (int(b) for b in a.bm.split(",")):
            b, r = blocks(c, bm)
            rows.append(dict(tokens=n, bm=bm, mean=float(c.mean()), min=int(c.min()), max=int(c.max()),
                             blocks=b, rows=r, useful=float(c.sum() / r)))
            print(f"{n:>6d} {bm:>4d} {c.mean():>14.1f} [{c.min():>4d}-{c.max():>4d}]      {b:>7d} {r:>7d} "
                  f"{c.sum() / r:>6.2f}")
    write_json(a.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
