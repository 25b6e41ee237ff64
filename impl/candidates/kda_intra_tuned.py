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


def candidate(**extra):
    """A Candidate whose kda.chunked is impl.kda._chunked with step 18's winners (forward substitution, the
    168-register cap) and `extra` options (steps 21 and 23's candidates add theirs)."""
    options = dict(intra="columns", inv_merge=False, intra_maxnreg=MAXNREG, **extra)

    def chunked(q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
        return _kda._chunked(q, k, v, g, beta, state, chunk, cu_seqlens, boundary_states, **options)
    chunked.__doc__ = f"impl.kda.chunked with {', '.join(f'{k}={v!r}' for k, v in options.items())}."
    return types.SimpleNamespace(kda=types.SimpleNamespace(chunked=chunked, BATCH_INVARIANT=BATCH_INVARIANT))


Candidate = candidate()
chunked = Candidate.kda.chunked
