"""Issue 14 step 35's candidate: ours' KDA chunked prefill with aqk's 16-column blocks right of the diagonal
neither stored by the off-diagonal kernel nor read by the state pass (`SplitTiles(aqk_lower=True)`).

aqk ([T, H, 64] in bf16 on a bf16 run) is causal: its six blocks above the block diagonal are zeros. Before it,
the off-diagonal kernel stored those zeros and the state pass read whole 64-column rows. Each 16-column block of
a bf16 row is one 32-byte sector, so a load masked off those blocks (its `other` is the same 0) reads no DRAM
bytes for them: 3 KB a chunk and head neither written nor read, ~100 MB at H = 64, T = 16K. The contract is
kda.chunked's and every path's, and this candidate claims more: ours' bits on every input
(tests/test_kda_aqk_lower.py, on the CPU and on the GPU in bf16):

    python3 -m gate.cli gate --device cuda --candidate impl.candidates.kda_aqk_lower:Candidate --baseline triton \\
        --check kda.chunked --check kda.causal --check kda.paths --check kda.packed --check kda.batch \\
        --check kda.sublayer --check kda.rerun --check kda.device_report --check model.paths

Ours since step 35 landed with step 34 (impl.kda.SplitTiles.aqk_lower = True; the gate passed on the H100 at seeds
24-26, bench_results/issue14_h100_2026-12-06_stop43b/: the state pass 669.7 -> 657.7 us and the off-diagonal kernel
610.4 -> 604.8 at H = 64, T = 16K): this candidate is step 35 alone (x_w off), kept so that its gate can be replayed
against an older ours.
Batch invariance: claimed, as ours (fixed tiles, per-(chunk, head) arithmetic).
"""
from __future__ import annotations

import types

from impl import kda as _kda

BATCH_INVARIANT = ("chunked",)
TILES = _kda.SplitTiles(aqk_lower=True, x_w=False)


def chunked(q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
    """impl.kda.chunked with aqk's blocks above the diagonal neither stored nor read."""
    return _kda._chunked(q, k, v, g, beta, state, chunk, cu_seqlens, boundary_states, split=TILES)


def chunked_ex(q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
    """impl.kda.chunked_ex (no host read; the NaN report on the device) with the same option."""
    return _kda._chunked(q, k, v, g, beta, state, chunk, cu_seqlens, boundary_states, split=TILES, sync=False)


# no gated_chunked, as ours: the sublayer makes g in torch and calls this chunked (one change against ours)
Candidate = types.SimpleNamespace(kda=types.SimpleNamespace(chunked=chunked, chunked_ex=chunked_ex,
                                                            BATCH_INVARIANT=BATCH_INVARIANT))
