"""Issue 14 step 27's candidate: ours' split intra pass with q e^Γ, k e^(Γ_last - Γ) and β k e^Γ made by the
diagonal-block kernel, which holds q, k and Γ of its rows already (impl.kda.SplitTiles(diag_qk=True)). The W / U
kernel then reads β k e^Γ (in W's operand dtype) instead of q, k and Γ, and writes W and U only: its bytes
fall from ~2.9 to ~1.24 GB at H = 64, T = 16K (docs/optimization_log.md step 27).

The same expressions on the same values as ours, so the same bits (tests/test_kda_intra_split.py holds that
on the CPU and, in bf16, on the GPU); its gate is ours':

    python3 -m gate.cli gate --device cuda --candidate impl.candidates.kda_split_qk:Candidate \\
        --baseline triton --check kda.chunked --check kda.causal --check kda.paths --check kda.packed \\
        --check kda.batch
"""
from __future__ import annotations

import types

from impl import kda as _kda

BATCH_INVARIANT = ("chunked",)
TILES = _kda.SplitTiles(diag_qk=True)


def chunked(q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
    """impl.kda.chunked with the diagonal kernel making q e^Γ, k e^(Γ_last - Γ) and β k e^Γ."""
    return _kda._chunked(q, k, v, g, beta, state, chunk, cu_seqlens, boundary_states, intra="split", split=TILES)


Candidate = types.SimpleNamespace(kda=types.SimpleNamespace(chunked=chunked, BATCH_INVARIANT=BATCH_INVARIANT))
