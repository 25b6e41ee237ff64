"""Issue 14 step 18's candidate: KDA chunked prefill with the intra-chunk work on 16-row sub-chunk pairs
(impl/kernels/kda.py `kda_intra_kk_fwd_kernel` then `kda_intra_wu_fwd_kernel`) in place of ours' one
whole-chunk kernel (`kda_intra_chunked_fwd_kernel`). NOT yet gated or timed on a GPU
(docs/optimization_log.md step 18).

The state pass and the segment combine are ours unchanged; the intra-chunk outputs (W, U, q e^Γ,
k e^(Γ_last - Γ), the qk matrix, e^Γ_last) are the same quantities, rounded differently (products
summed per 16-column block, (I + A)^-1 block by block), so the contract is kda.chunked's, not ours' bits:

    python3 -m gate.cli gate --device cuda --candidate impl.candidates.kda_intra_blocked:Candidate \\
        --baseline triton --check kda.chunked --check kda.causal --check kda.paths --check kda.packed \\
        --check kda.batch --check kda.sublayer

Batch invariance: claimed for `chunked`, as ours: a (chunk, head) program's arithmetic depends on its
own rows only, and its tiles on (H, K, V), never on the batch.

Limit: the sub-chunk products are factorised through a reference row as ours' were before stop 35, with
no exact pass for strong decays: with the softplus gate (no lower bound) a 16-row block falling past ~88
overflows to NaN. The checkpoint's bounded gate (g > -5, a fall of at most 75) is inside the range; the
softplus-gate cases that kda.chunked and kda.causal pin fail on this candidate until it gets ours' pass.
"""
from __future__ import annotations

import types

from impl import kda as _kda

BATCH_INVARIANT = ("chunked",)
# the tiles a GPU runs (scripts/kda_intra_sass.py, Triton 3.6 sm_90): 2 warps, K tiles of 16. The kk
# kernel's 20 live 16x16 accumulators spill at 4 warps (each warp holds a whole 16-row tile: Triton's
# mma layout puts the warps along M, so a 16-row dot is done by every warp); the interpreter caps tiles
# at 16 anyway
INTRA_BK, INTRA_WARPS = 16, 2


def chunked(q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
    """impl.kda.chunked with the intra-chunk pass on 16-row sub-chunk pairs (intra="blocked")."""
    return _kda._chunked(q, k, v, g, beta, state, chunk, cu_seqlens, boundary_states, intra="blocked",
                         intra_bk=INTRA_BK, intra_warps=INTRA_WARPS)


Candidate = types.SimpleNamespace(kda=types.SimpleNamespace(chunked=chunked, BATCH_INVARIANT=BATCH_INVARIANT))
