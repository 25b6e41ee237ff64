"""Our DSA selection as issue 14 step 10 landed it: each threshold pass counts its 2^RB digits as a
[BS, BP, 2^RB] tile, over tiles of at most 1024 pools (before step 12 packed the counts in one int64 and
took 2048-pool tiles). The peer step 12 is gated and timed against; the selections are equal (the same
rule, exact):

    python3 -m gate.cli gate --device cuda --candidate triton \\
        --baseline impl.candidates.dsa_select_digits:Candidate --check dsa.index --check dsa.rerun \\
        --check dsa.batch --check mla.paths
    PYTHONPATH=. python3 scripts/profile_replay.py --kinds dsa-full+sparse \\
        --peer impl.candidates.dsa_select_digits:Candidate --repeats 5

Batch invariance: claimed for nothing, as ours (impl.dsa.BATCH_INVARIANT).
"""
from __future__ import annotations

import types

import triton

from impl import dsa as _dsa
from impl import interpreted

BATCH_INVARIANT = ()


def select_pools(I, pool_last, member_idx, val, n_vis, first, k_sel: int, width: int, tail: bool,
                 block_pools=None, radix_bits=None):
    """impl.dsa.select_pools with unpacked digit counts and tiles of at most 1024 pools on a GPU."""
    P = I.shape[-1] if I.ndim == 3 else 0
    if block_pools is None and not interpreted():
        block_pools = min(triton.next_power_of_2(max(P, 1)), 1024)
    return _dsa.select_pools(I, pool_last, member_idx, val, n_vis, first, k_sel, width, tail,
                             block_pools=block_pools, radix_bits=radix_bits, packed=False)


def index(w, a, q_lat, packed_all, mask=None):
    """impl.dsa.index with step 10's selection."""
    return _dsa.index_with(w, a, q_lat, packed_all, mask, select=select_pools)


class DSA:
    """The dsa namespace: `index` (and `index_rows`, ours) with step 10's selection."""

    BATCH_INVARIANT = BATCH_INVARIANT
    index_rows = staticmethod(_dsa.index_rows)
    index = staticmethod(index)


Candidate = types.SimpleNamespace(dsa=DSA)
