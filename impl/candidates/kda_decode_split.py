"""Issue 14 step 16's candidate: our KDA decode with a head's value blocks split over several programs while
B·H < 2 · SMs (impl.kda._value_splits; the in-place conv window written by the last program to arrive).
Ours since issue 14 step 39 (docs/optimization_log.md steps 16 and 39): kept so its gate can be replayed.

The namespace brings only `decode` (ours with vs="auto"); our sublayer composes over it. Every value block
is computed by the same code either way, so outputs and states are the same bits
(tests/test_kda_decode_split.py):

    python3 -m gate.cli gate --candidate impl.candidates.kda_decode_split:Candidate --baseline triton \\
        --check kda.decode --check kda.paths --check kda.sublayer --check kda.batch

Batch invariance: claimed for `decode`, as ours (impl.kda.BATCH_INVARIANT): the split count follows B·H,
not the values, and a block's arithmetic does not depend on which program runs it.
"""
from __future__ import annotations

import types

from impl import kda as _kda

BATCH_INVARIANT = ("decode",)


def decode(w, z, f, b, state, inplace=False, num_warps=None, bv=None, num_stages=0):
    """impl.kda.decode with the value blocks split over programs at small B·H (vs="auto")."""
    return _kda.decode(w, z, f, b, state, inplace, num_warps, bv, num_stages, vs="auto")


Candidate = types.SimpleNamespace(kda=types.SimpleNamespace(decode=decode, BATCH_INVARIANT=BATCH_INVARIANT))
