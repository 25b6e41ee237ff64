"""Issue 14 step 26's candidate: KDA chunked prefill with ours' one intra-chunk kernel split into four launches
(intra="split", impl/kda.py), feeding ours' state + output kernel unchanged:

  Γ          kda_chunk_cumsum_fwd_kernel: the chunk-local cumsum of g (or of gate(f + dt_bias): `gated_chunked`)
  diagonal   kda_intra_diag_fwd_kernel: one small program per (chunk, 16-row block, head); both products
             through the block's first row, the strong-decay pairs (the softplus gate) in the same program,
             then X_ii = (I + β A_ii)^-1
  off-diag   kda_intra_offdiag_fwd_kernel: the six blocks below the diagonal through their ROW block's first row
             (both factors <= 1: exact for any gate), then X's lower blocks by block forward substitution
  W / U      kda_intra_wu_split_fwd_kernel: W, U as [64, 64] x [64, 64] dots on bf16 operands (X kept float32
             in memory), q e^Γ, k e^(Γ_last - Γ), e^Γ_last

The same quantities as ours' intra kernel, rounded differently, so the contract is kda.chunked's and every
path's, not ours' bits (docs/optimization_log.md step 26):

    python3 -m gate.cli gate --device cuda --candidate impl.candidates.kda_intra_split:Candidate \\
        --baseline triton --check kda.chunked --check kda.causal --check kda.paths --check kda.packed \\
        --check kda.batch --check kda.sublayer --check kda.scale

Batch invariance: claimed for `chunked`, as ours: every launch's tiles are fixed (impl.kda.SplitTiles), and a
program's arithmetic depends on its own (chunk, head) rows only.
"""
from __future__ import annotations

import types

from impl import kda as _kda

BATCH_INVARIANT = ("chunked",)
# step 26's tiles, as gated (ours since step 27 makes q e^Γ, k e^(Γ_last - Γ), β k e^Γ in the diagonal kernel,
# the same bits, and runs the off-diagonal kernel on K tiles of 32; step 29 runs the diagonal one on K tiles of 64)
TILES = _kda.SplitTiles(diag_qk=False, off_bk=16, diag_bk=32, diag_sub_first=False, diag_gamma=False, diag_ftz=False, diag_nan_last=False, off_ftz=False, x_w=False, aqk_lower=False)


def chunked(q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
    """impl.kda.chunked with the intra-chunk pass split in four launches (intra="split")."""
    return _kda._chunked(q, k, v, g, beta, state, chunk, cu_seqlens, boundary_states, intra="split", split=TILES)


def gated_chunked(q, k, v, f, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True, *,
                  A_log, dt_bias=None, lower_bound=None):
    """chunked(q, k, v, gate(f + dt_bias, A_log, lower_bound), beta, ...) with the gate made by the Γ kernel
    (issue 14 step 24's fusion on the split pass).

    Args:
        f: [B, T, H, K] the gate's input before dt_bias;  A_log: [H];  dt_bias: [H·K] or None;
        lower_bound: None (the softplus gate) or a float
    Returns:
        as chunked: o [B, T, H, V], final [N, H, K, V] float32, boundary states or None
    """
    return _kda._chunked(q, k, v, f, beta, state, chunk, cu_seqlens, boundary_states, intra="split", split=TILES,
                         gate=(A_log, dt_bias, lower_bound))


Candidate = types.SimpleNamespace(kda=types.SimpleNamespace(chunked=chunked, gated_chunked=gated_chunked,
                                                            BATCH_INVARIANT=BATCH_INVARIANT))
