"""Issue 14 step 34's candidate: ours' KDA chunked prefill with X = (I + A)^-1 handed from the off-diagonal kernel
to the W / U kernel in the W / U dots' operand dtype (`SplitTiles(x_w=True)`): bf16 on a bf16 run, all ten lower
16 x 16 blocks of a chunk's X (the diagonal ones included) stored by the off-diagonal kernel, which holds them
in registers for its substitution anyway.

Before it, the diagonal kernel stored X's diagonal blocks and the off-diagonal kernel its six others in float32,
and the W / U kernel loaded all ten and rounded them to bf16 at once (its dots' operands). Rounding where X is
stored instead of where it is loaded gives the W / U kernel the same bits in half of the bytes it reads for X
(10 -> 5 KB a chunk and head); the off-diagonal kernel writes 5 KB of bf16 for its 6 KB of float32. At
H = 64, T = 16K: ~100 MB less of the pass's ~7 GB. The contract is kda.chunked's and every path's, and this
candidate claims more: ours' bits on every input (tests/test_kda_x_w.py, on the CPU and on the GPU in bf16):

    python3 -m gate.cli gate --device cuda --candidate impl.candidates.kda_x_w:Candidate --baseline triton \\
        --check kda.chunked --check kda.causal --check kda.paths --check kda.packed --check kda.batch \\
        --check kda.sublayer --check kda.rerun --check kda.device_report --check model.paths

On a float32 run (the CPU interpreter's) X stays float32 and the option only moves where its blocks are stored,
so the CPU runs the new stores too.

Ours since step 34 landed with step 35 (impl.kda.SplitTiles.x_w = True; the gate passed on the H100 at seeds 24-26,
bench_results/issue14_h100_2026-12-06_stop43b/: the W / U kernel 450.3 -> 431.6 us at H = 64, T = 16K): this
candidate is step 34 alone (aqk_lower off), kept so that its gate can be replayed against an older ours. Batch
invariance: claimed, as ours (fixed tiles, per-(chunk, head) arithmetic).
"""
from __future__ import annotations

import types

from impl import kda as _kda

BATCH_INVARIANT = ("chunked",)
TILES = _kda.SplitTiles(x_w=True, aqk_lower=False)


def chunked(q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
    """impl.kda.chunked with X handed to the W / U kernel in its dots' operand dtype."""
    return _kda._chunked(q, k, v, g, beta, state, chunk, cu_seqlens, boundary_states, split=TILES)


def chunked_ex(q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
    """impl.kda.chunked_ex (no host read; the NaN report on the device) with the same option."""
    return _kda._chunked(q, k, v, g, beta, state, chunk, cu_seqlens, boundary_states, split=TILES, sync=False)


# no gated_chunked, as ours: the sublayer makes g in torch and calls this chunked (one change against ours)
Candidate = types.SimpleNamespace(kda=types.SimpleNamespace(chunked=chunked, chunked_ex=chunked_ex,
                                                            BATCH_INVARIANT=BATCH_INVARIANT))
