"""Our DSA indexer as it selected before issue 14 step 15: the pooled keys pooled again from the whole cache
on every call, instead of read from the pooled-key cache. The peer the cache's read path is timed beside.

The namespace brings `index_rows` and `index` (ours) and neither optional pooled-cache function
(impl.registry.OPTIONAL_FUNCTIONS): our MLA sublayer then keeps the cache with ours (the state is the same)
and selects with `index`, which runs dsa_pool_fwd_kernel over all ceil(T / P_k) pools. The selections are
the same bits (tests/test_dsa_pooled.py), so the gate and the replay compare two equal paths:

    python3 -m gate.cli gate --candidate impl.candidates.dsa_repool:Candidate --baseline triton \\
        --check mla.paths,model.paths
    PYTHONPATH=. python3 scripts/profile_replay.py --kinds dsa-full+sparse --context 131072 \\
        --peer impl.candidates.dsa_repool:Candidate

Batch invariance: claimed for nothing, as ours (impl.dsa.BATCH_INVARIANT).
"""
from __future__ import annotations

import types

from impl import dsa as _dsa

BATCH_INVARIANT = ()


class DSA:
    """The dsa namespace: ours without the pooled-key cache's read (and append) functions."""

    BATCH_INVARIANT = BATCH_INVARIANT
    index_rows = staticmethod(_dsa.index_rows)
    index = staticmethod(_dsa.index)


Candidate = types.SimpleNamespace(dsa=DSA)
