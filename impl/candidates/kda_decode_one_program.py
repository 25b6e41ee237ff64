"""Our KDA decode as it ran before issue 14 step 16: one program a head (vs=1), whatever the batch. The peer
the value-split decode is gated and timed beside (docs/optimization_log.md step 16).

The namespace brings only `decode` (ours with vs=1); our sublayer composes over it. Every value block is
computed by the same code either way, so outputs and states are the same bits (tests/test_kda_decode_split.py):

    python3 -m gate.cli gate --candidate triton --baseline impl.candidates.kda_decode_one_program:Candidate \\
        --check kda.decode --check kda.paths --check kda.sublayer

Batch invariance: claimed for `decode`, as ours (impl.kda.BATCH_INVARIANT).
"""
from __future__ import annotations

import types

from impl import kda as _kda

# ours claims bitwise batch invariance for decode; so does this (a head's blocks in one program at every B)
BATCH_INVARIANT = ("decode",)


def decode(w, z, f, b, state, inplace=False, num_warps=None, bv=None, num_stages=0):
    """impl.kda.decode with one program a head (vs=1)."""
    return _kda.decode(w, z, f, b, state, inplace, num_warps, bv, num_stages, vs=1)


Candidate = types.SimpleNamespace(kda=types.SimpleNamespace(decode=decode, BATCH_INVARIANT=BATCH_INVARIANT))
