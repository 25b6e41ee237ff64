"""Whether ours' KDA prefill gives the same bits with the diagonal-block kernel on K tiles of 32 (ours after step
27) and of 64 (ours since step 29), on the GPU in bf16 at K = V = 128 (issue 14 step 29).

Why it might: tl.dot(a, b, acc) chains its tensor-core steps along K into the accumulator, so two K tiles of 32
and one of 64 add the same products in the same order. Under strong decays (the softplus gate) the exact pairs
pass sums over each K tile apart, so there the bits may differ (within kda.chunked's contract: the gate).
Prints, per case, torch.equal of output / final / boundary states and the largest relative difference.

    PYTHONPATH=. python3 scripts/kda_tile_bits.py
"""
from __future__ import annotations

import sys

import torch


def main() -> int:
    from impl import kda as ik
    from tests.test_kda_intra_blocked import _inputs
    cases = [("bounded, g in [-5, 0)", 2, 1000, 4, -5.0, None), ("weak, g in [-0.1, 0)", 1, 700, 3, -0.1, None),
             ("packed, an empty document", 1, 700, 2, -1.0, [0, 130, 130, 700]),
             ("strong, g in [-200, 0)", 1, 300, 3, -200.0, None)]
    for name, B, T, H, lo, cu in cases:
        _, work = _inputs(B, T, H, 128, 128, lo=lo, device="cuda", dtype=torch.bfloat16, state=cu is None)
        cu_t = None if cu is None else torch.tensor(cu, device="cuda")
        state = work[5] if cu is None else None
        a = ik._chunked(*work[:5], state, 64, cu_t, True, split=ik.SplitTiles(diag_bk=32))
        b = ik._chunked(*work[:5], state, 64, cu_t, True, split=ik.SplitTiles(diag_bk=64))
        parts = []
        for what, x, y in zip(("output", "final", "boundary"), a, b):
            d = ((x.float() - y.float()).norm() / y.float().norm().clamp_min(1e-30)).item()
            parts.append(f"{what} {'bitwise' if torch.equal(x, y) else f'DIFFERS rel {d:.2e}'}")
        print(f"{name:30s} B={B} T={T} H={H}: " + "; ".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
