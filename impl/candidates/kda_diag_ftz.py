"""Issue 14 step 31's candidate: ours' KDA chunked prefill with the diagonal-block kernel's exps (the two factors
of its kk / qk products and q e^Γ, k e^(Γ_last - Γ), β k e^Γ) as ex2.approx.ftz (`SplitTiles(diag_ftz=True)`).

Stop 41's Nsight Compute pass found 12 % of that kernel's instructions in tl.exp's fix-up for results below
float32's normal range (a compare, a halving and a squaring around each MUFU.EX2, four exps an element a K
tile), in a kernel bound by latency at 12.5 % occupancy. The ablation probe timed the flushed exps at -135 us of
its 1088 at H = 64, T = 16K on an H100, with the same output and state bits as ours at that shape.

A result below e^-87.3 becomes 0 instead of a denormal: a factor that low meets a partner of at most e^75 (the
factorised range), so a term below e^-12 of the products it joins can be lost, under strong decays only. The
contract is kda.chunked's and every path's:

    python3 -m gate.cli gate --device cuda --candidate impl.candidates.kda_diag_ftz:Candidate --baseline triton \\
        --check kda.chunked --check kda.causal --check kda.paths --check kda.packed --check kda.batch \\
        --check kda.sublayer --check kda.rerun --check kda.device_report --check model.paths

On the CPU interpreter (no PTX) the option keeps tl.exp, so this candidate is ours there: its verdict is the GPU's.

Ours since step 31 landed (impl.kda.SplitTiles.diag_ftz = True) on the gate of record (scripts/gpu_stop41b.sh
PARTS=gate31, bench_results/issue14_h100_2026-12-06_stop41b/): this candidate is ours now, kept so that gate can be
replayed against an older ours (`--baseline` a namespace with SplitTiles(diag_ftz=False)).
Batch invariance: claimed, as ours (fixed tiles, per-(chunk, head) arithmetic).
"""
from __future__ import annotations

import types

from impl import kda as _kda

BATCH_INVARIANT = ("chunked",)
TILES = _kda.SplitTiles(diag_ftz=True, diag_nan_last=False, off_ftz=False, x_w=False, aqk_lower=False)


def chunked(q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
    """impl.kda.chunked with the diagonal kernel's exps flushed below float32's normal range."""
    return _kda._chunked(q, k, v, g, beta, state, chunk, cu_seqlens, boundary_states, split=TILES)


def chunked_ex(q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
    """impl.kda.chunked_ex (no host read; the NaN report on the device) with the same option."""
    return _kda._chunked(q, k, v, g, beta, state, chunk, cu_seqlens, boundary_states, split=TILES, sync=False)


# no gated_chunked, as ours: the sublayer makes g in torch and calls this chunked (one change against ours)
Candidate = types.SimpleNamespace(kda=types.SimpleNamespace(chunked=chunked, chunked_ex=chunked_ex,
                                                            BATCH_INVARIANT=BATCH_INVARIANT))
