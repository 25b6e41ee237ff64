"""Our DSA indexer with the pooled keys of before issue 14 step 9: the peer its pooling kernel is timed beside.

`impl.dsa.pool_keys` pools the cached rows in one launch (dsa_pool_fwd_kernel); here `index` pools them
with `impl.dsa.pool_keys_torch` (~28 torch launches: float copies of the packed rows, the member grid,
gathers, the masked softmax, NaN-to-zero, the weighted sum). Everything after the pooling is ours, so the
selections differ only where two pool scores are closer than the pooling's float32 rounding:

    PYTHONPATH=. python3 scripts/profile_replay.py --kinds dsa-full+sparse --peer impl.candidates.dsa_pool_torch:Candidate
    python3 -m gate.cli gate --candidate impl.candidates.dsa_pool_torch:Candidate --baseline triton --check dsa.index

Batch invariance: claimed for nothing, as ours (impl.dsa.BATCH_INVARIANT).
"""
from __future__ import annotations

import types

from impl import dsa as _dsa

BATCH_INVARIANT = ()


def index(w, a, q_lat, packed_all, mask=None):
    """impl.dsa.index with the torch pooling."""
    return _dsa.index_with(w, a, q_lat, packed_all, mask, pool=_dsa.pool_keys_torch)


class DSA:
    """The dsa namespace: `index` (and `index_rows`, ours) with the torch pooling."""

    BATCH_INVARIANT = BATCH_INVARIANT
    index_rows = staticmethod(_dsa.index_rows)
    index = staticmethod(index)


Candidate = types.SimpleNamespace(dsa=DSA)
