"""Issue 14 step 21: ours' intra-chunk kernel with the kk and qk products of each column block as ONE dot,
[k e^(Γ-ref); q e^(Γ-ref)] [2 BT, BK] against the shared column factor (intra_stack=True), on top of step 18's
measured winners (forward-substitution inverse, 168-register cap). The same products, rows and accumulation
order as ours; bitwise ours on the CPU interpreter (tests/test_kda_intra_blocked.py). The compiled sm_90 code
has a third fewer warpgroup waits and an eighth fewer barriers in the K loop (docs/optimization_log.md
step 21):

    python3 -m gate.cli gate --device cuda --candidate impl.candidates.kda_intra_stacked:Candidate \\
        --baseline triton --check kda.chunked --check kda.causal --check kda.paths --check kda.packed \\
        --check kda.batch
"""
from __future__ import annotations

import types

from impl import kda as _kda
from impl.candidates.kda_intra_tuned import MAXNREG

BATCH_INVARIANT = ("chunked",)


def chunked(q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
    """impl.kda.chunked with the stacked kk / qk dot, forward substitution, and the 168-register cap."""
    return _kda._chunked(q, k, v, g, beta, state, chunk, cu_seqlens, boundary_states, inv_merge=False,
                         intra_maxnreg=MAXNREG, intra_stack=True)


Candidate = types.SimpleNamespace(kda=types.SimpleNamespace(chunked=chunked, BATCH_INVARIANT=BATCH_INVARIANT))
