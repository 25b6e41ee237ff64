"""Issue 14 step 32's candidate: ours' KDA chunked prefill with the diagonal-block kernel's NaN report taken from
Γ_last's row and β, gathered across the K tiles as a mask and stored after them by each lane that holds a NaN
(`SplitTiles(diag_nan_last=True)`; the stores inside the K loop, its first form, measured 25 us slower).

Step 31's ablation timed the kernel's NaN count at ~55 us of its ~1090 at H = 64, T = 16K on an H100: two
cross-thread sums over the block's [16, 64] Γ tile each K tile and one over β, in a kernel bound by latency at
255 registers. The report itself is the same: Γ is a running sum along the chunk, so a NaN in g at any of its
rows (or a +inf meeting a -inf) is in Γ_last, the chunk's last row, which the kernel loads anyway for
k e^(Γ_last - Γ); a masked store from every lane that sees a NaN needs no sum. The outputs are the same bits
(nothing but the report's code changes). The contract is kda.device_report's (the report names g or β wherever
the NaN sits) and every path's:

    python3 -m gate.cli gate --device cuda --candidate impl.candidates.kda_diag_nan_last:Candidate --baseline triton \\
        --check kda.chunked --check kda.causal --check kda.paths --check kda.packed --check kda.batch \\
        --check kda.sublayer --check kda.rerun --check kda.device_report --check model.paths

Ours since step 32 landed (impl.kda.SplitTiles.diag_nan_last = True; scripts/gpu_stop42.sh, bench_results/
issue14_h100_2026-12-06_stop42*/): this candidate is ours now, kept so that its gate can be replayed against an
older ours (`--baseline` a namespace with SplitTiles(diag_nan_last=False)).
Batch invariance: claimed, as ours (fixed tiles, per-(chunk, head) arithmetic).
"""
from __future__ import annotations

import types

from impl import kda as _kda

BATCH_INVARIANT = ("chunked",)
TILES = _kda.SplitTiles(diag_nan_last=True, off_ftz=False, x_w=False, aqk_lower=False)


def chunked(q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
    """impl.kda.chunked with the diagonal kernel's NaN report from Γ_last and β, no reduction."""
    return _kda._chunked(q, k, v, g, beta, state, chunk, cu_seqlens, boundary_states, split=TILES)


def chunked_ex(q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
    """impl.kda.chunked_ex (no host read; the NaN report on the device) with the same option."""
    return _kda._chunked(q, k, v, g, beta, state, chunk, cu_seqlens, boundary_states, split=TILES, sync=False)


# no gated_chunked, as ours: the sublayer makes g in torch and calls this chunked (one change against ours)
Candidate = types.SimpleNamespace(kda=types.SimpleNamespace(chunked=chunked, chunked_ex=chunked_ex,
                                                            BATCH_INVARIANT=BATCH_INVARIANT))
