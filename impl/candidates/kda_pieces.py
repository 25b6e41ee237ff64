"""Issue 14 step 36's candidate: ours' KDA chunked prefill with a long B = 1 row run in four pieces along its tokens,
each piece's state pass on a second stream beside the next piece's intra pass (`SplitTiles(pieces=4)`).

Before it, the state pass (one program a (V-block, head): 128 programs at H = 64, one an SM) ran after the whole
intra pass, the GPU otherwise idle behind its chunk-by-chunk chain. In pieces, the state pass of piece p runs while
piece p + 1's Γ, diagonal, off-diagonal and W / U kernels run, from piece p - 1's final float32 state: the same
launches on fewer chunks each, the same arithmetic, so the same bits (tests/test_kda_pieces.py, on the CPU and on
the GPU in bf16, a captured graph included). A row is cut only where its state pass runs without segments and each
piece holds PIECE_MIN_CHUNKS chunks (16 on a GPU). The contract is kda.chunked's and every path's; kda.scale's
GPU pins (B = 1 rows of 16K and 64K tokens, each equal bit for bit to itself in an unpieced batch) judge it at size:

    python3 -m gate.cli gate --device cuda --candidate impl.candidates.kda_pieces:Candidate --baseline triton \\
        --check kda.scale --check kda.chunked --check kda.causal --check kda.paths --check kda.packed \\
        --check kda.batch --check kda.sublayer --check kda.rerun --check kda.device_report --check model.paths

Batch invariance: claimed, as ours (a pieced row has the bits of the same row in a batch).
"""
from __future__ import annotations

import types

from impl import kda as _kda

BATCH_INVARIANT = ("chunked",)
TILES = _kda.SplitTiles(pieces=4)


def chunked(q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
    """impl.kda.chunked with a long B = 1 row in four pieces, the state pass beside the intra pass."""
    return _kda._chunked(q, k, v, g, beta, state, chunk, cu_seqlens, boundary_states, split=TILES)


def chunked_ex(q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
    """impl.kda.chunked_ex (no host read; the NaN report on the device) with the same option."""
    return _kda._chunked(q, k, v, g, beta, state, chunk, cu_seqlens, boundary_states, split=TILES, sync=False)


# no gated_chunked, as ours: the sublayer makes g in torch and calls this chunked (one change against ours)
Candidate = types.SimpleNamespace(kda=types.SimpleNamespace(chunked=chunked, chunked_ex=chunked_ex,
                                                            BATCH_INVARIANT=BATCH_INVARIANT))
