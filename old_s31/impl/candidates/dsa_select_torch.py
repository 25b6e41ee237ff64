"""Our DSA indexer with the selection of before issue 14 step 10: the peer its selection kernel is timed beside.

`impl.dsa.select_pools` picks the top pools, expands them, appends the tail and compacts the row in one
launch (dsa_select_fwd_kernel); here `index` does it with `impl.dsa.select_pools_torch` (torch.topk, a
gather of the picked pools' tokens, the tail's gathers and masks, a stable sort to compact: ~25 torch
launches). Everything before the selection is ours. The two differ in order (the kernel lists picks by
pool, torch.topk by score) and, among exactly tied scores, in which pool is picked (the kernel takes the
lowest, as the oracle; torch.topk any): the same tokens otherwise.

    PYTHONPATH=. python3 scripts/profile_replay.py --kinds dsa-full+sparse --peer impl.candidates.dsa_select_torch:Candidate
    python3 -m gate.cli gate --candidate impl.candidates.dsa_select_torch:Candidate --baseline triton --check dsa.index

Batch invariance: claimed for nothing, as ours (impl.dsa.BATCH_INVARIANT).
"""
from __future__ import annotations

import types

from impl import dsa as _dsa

BATCH_INVARIANT = ()


def index(w, a, q_lat, packed_all, mask=None):
    """impl.dsa.index with the torch selection."""
    return _dsa.index_with(w, a, q_lat, packed_all, mask, select=_dsa.select_pools_torch)


class DSA:
    """The dsa namespace: `index` (and `index_rows`, ours) with the torch selection."""

    BATCH_INVARIANT = BATCH_INVARIANT
    index_rows = staticmethod(_dsa.index_rows)
    index = staticmethod(index)


Candidate = types.SimpleNamespace(dsa=DSA)
