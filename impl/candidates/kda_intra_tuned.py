"""Issue 14 step 18's measured winners combined: ours' intra-chunk kernel inverting by forward substitution
(inv_merge=False) at a 168-register cap (3 programs an SM instead of 2). Each alone measured ~7 % faster
than ours at H = 64, T = 16384 in step 18's sweep (3.93 / 4.00 against 4.22 ms); the same kernel and
arithmetic as ours' sweep option `inv_merge=False` otherwise (docs/optimization_log.md step 18):

    python3 -m gate.cli gate --device cuda --candidate impl.candidates.kda_intra_tuned:Candidate \\
        --baseline triton --check kda.chunked --check kda.causal --check kda.paths --check kda.packed \\
        --check kda.batch
"""
from __future__ import annotations

import types

from impl import kda as _kda

BATCH_INVARIANT = ("chunked",)
MAXNREG = 168


def chunked(q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
    """impl.kda.chunked with (I + A)^-1 by forward substitution and the intra kernel capped at 168 registers."""
    return _kda._chunked(q, k, v, g, beta, state, chunk, cu_seqlens, boundary_states, inv_merge=False,
                         intra_maxnreg=MAXNREG)


Candidate = types.SimpleNamespace(kda=types.SimpleNamespace(chunked=chunked, BATCH_INVARIANT=BATCH_INVARIANT))
