"""Issue 14 step 29's candidate: ours' KDA chunked prefill (the split intra pass, impl/kda.py) with the
diagonal-block kernel on K tiles of 64 instead of 32 (`SplitTiles(diag_bk=64)`, 2 warps as ours).

Step 27 made that kernel store q e^Γ, k e^(Γ_last - Γ) and β k e^Γ: three [16, BK] bf16 tiles a K step, rows
H·K apart, so each row's store is BK x 2 bytes. At BK = 32 that is 64 bytes, half a 128-byte line; at 64 a
whole line, and half the K steps (each with its two 16 x 16 x BK dots and the strong-decay test).

The K tile changes the order of the kk / qk sums (two K tiles of 64 instead of four of 32), so the bits are
not ours: the contract is kda.chunked's and every path's (docs/optimization_log.md step 29):

    python3 -m gate.cli gate --device cuda --candidate impl.candidates.kda_diag64:Candidate --baseline triton \\
        --check kda.chunked --check kda.causal --check kda.paths --check kda.packed --check kda.batch \\
        --check kda.sublayer --check kda.rerun --check kda.device_report --check model.paths

Ours since step 29 landed (impl.kda.SplitTiles.diag_bk = 64): this candidate is ours now, kept so that the
gate of record (scripts/gpu_stop39.sh PARTS=gate29) can be replayed against an older ours.

On the CPU interpreter every tile is 16 (impl.kda.INTERPRETER_TILE), so this candidate is ours there: its
verdict is the GPU's. Batch invariance: claimed, as ours (fixed tiles, per-(chunk, head) arithmetic).
"""
from __future__ import annotations

import types

from impl import kda as _kda

BATCH_INVARIANT = ("chunked",)
# ours at step 29 (Γ by its own launch; step 30 took it into the intra kernels)
TILES = _kda.SplitTiles(diag_bk=64, diag_sub_first=False, diag_gamma=False, diag_ftz=False, diag_nan_last=False, off_ftz=False, x_w=False, aqk_lower=False)


def chunked(q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
    """impl.kda.chunked with the diagonal-block kernel on K tiles of 64."""
    return _kda._chunked(q, k, v, g, beta, state, chunk, cu_seqlens, boundary_states, split=TILES)


def chunked_ex(q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
    """impl.kda.chunked_ex (no host read; the NaN report on the device) on the same tiles."""
    return _kda._chunked(q, k, v, g, beta, state, chunk, cu_seqlens, boundary_states, split=TILES, sync=False)


# no gated_chunked, as ours: the sublayer makes g in torch and calls this chunked (one change against ours)
Candidate = types.SimpleNamespace(kda=types.SimpleNamespace(chunked=chunked, chunked_ex=chunked_ex,
                                                            BATCH_INVARIANT=BATCH_INVARIANT))
