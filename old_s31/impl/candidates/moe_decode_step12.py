"""Our MoE's decode glue and tiles as they were before issue 14 step 13: the peer step 13 is gated and timed
against (docs/optimization_log.md).

Step 13 changed three things at decode, each kept here in its earlier form:
- the router kernel's token tile: 16 tokens a program everywhere (ours: one token a program on a GPU);
- the alignment's pad slots: found by a last [BS, BE] pass (ours: written first, the pairs after a barrier);
- the grouped GEMM tile at <= 16 pairs: BK 128 (ours: BK 256).
Routing and alignment are bitwise ours (the same integers and float32 values); the GEMMs sum K in other
steps, so their outputs differ by rounding:

    python3 -m gate.cli gate --device cuda --candidate triton \\
        --baseline impl.candidates.moe_decode_step12:Candidate --check moe.forward --check nvfp4.gate
    PYTHONPATH=. python3 scripts/profile_replay.py --peer impl.candidates.moe_decode_step12:Candidate
"""
from __future__ import annotations

import functools
import types

from impl import moe as _moe
from impl.candidates import moe_namespace


def router_tile(N, BE):
    """Step 12's router launch: 16 tokens a program, the warps by the expert tile's width."""
    return 16, 16 if BE >= 512 else (8 if BE >= 256 else 4)


def tiles(D, I, w4a4=False, pairs=0, pairs_per_expert=64.0):
    """Step 12's impl.moe._tiles: BK 128 at <= 16 pairs."""
    got = _moe._tiles(D, I, w4a4, pairs, pairs_per_expert)
    return (16, 32, 128, 4) if got == (16, 32, 256, 4) else got


def grouped(x2, ids, wts, E, I, dense=None, nv=None, limit=10.0, w4a4=False, split=None):
    """impl.moe._grouped with step 12's tiles and pad-slot pass (float32 out, a candidate's contract)."""
    P = ids.numel()
    t = tiles(x2.shape[1], I, w4a4, P, P / max(1, min(E, P)))
    return _moe._grouped(x2, ids, wts, E, I, dense, nv, limit, w4a4, tiles=t, split=split,
                         align_fn=functools.partial(_moe.align, fill=False))


def route(w, x):
    """impl.moe.route with step 12's token tile."""
    return _moe.route_with(w, x, tile=router_tile)


MOE = moe_namespace(__name__, route=route, grouped=grouped)
Candidate = types.SimpleNamespace(moe=MOE)
