"""Our DSA selection with the digit counts of each threshold pass packed in one reduction (issue 14 step 10's
"Next"): a candidate, NOT measured on a GPU yet.

impl.dsa.select_pools counts, each pass, how many keys reach each of the 2^RB candidate digits as a
[BS, BP, 2^RB] tile. Here the 2^RB - 1 counts (RB <= 2) are packed in 20-bit fields of one int64 and summed
in one reduction over a [BS, BP] tile. Compiled for sm_90 (`gate/compile_check.py` style, triton 3.9) it
needs 144 registers at 1024 pools and 254 at 2048, no spills, so a 2048-pool tile can hold the layer
replay's 1025 pools (4097 cached tokens, keep-all under the graph), which ours runs over two 1024-pool
tiles re-read each pass (33 us in the replay, against 11.6 us at 1024 pools).
Prediction (written before any GPU number): the kernel 33 -> ~12 us, the dsa-full+sparse replay
508.8 -> ~490 us. Everything else is ours, so the selections are equal to ours (the same rule, exact):

    python3 -m gate.cli gate --device cuda --candidate impl.candidates.dsa_select_packed:Candidate \
        --baseline triton --check dsa.index --check dsa.rerun --check dsa.batch --check mla.paths
    PYTHONPATH=. python3 scripts/profile_replay.py --kinds dsa-full+sparse \
        --peer impl.candidates.dsa_select_packed:Candidate --repeats 5

Batch invariance: claimed for nothing, as ours (impl.dsa.BATCH_INVARIANT).
"""
from __future__ import annotations

import types

import triton

from impl import dsa as _dsa
from impl import interpreted
from impl.mutants.catalogue import kernel_edited

BATCH_INVARIANT = ()
# the widest tile of pools on a GPU: 2048 (ours: 1024)
BP_GPU = 2048

# ours: each pass counts a [BS, BP, 2^RB] tile against the 2^RB candidate digits
OURS_COUNT = """\
        b_try = b_t[:, None] + (o_d[None, :] << shift)                                # [BS, 2^RB]
        if ONE:
            b_cnt = tl.sum((b_key[:, :, None] >= b_try[:, None, :]).to(tl.int64), 1)
        else:
            b_cnt = tl.zeros([BS, 2 ** RB], dtype=tl.int64)
            for p0 in range(0, P, BP):
                b_kc, _, _ = _select_keys(I, pool_last, i_b, o_s, p0 + o_p, S, P, offset)
                b_cnt += tl.sum((b_kc[:, :, None] >= b_try[:, None, :]).to(tl.int64), 1)
        b_dig = tl.sum((b_cnt >= b_k[:, None]).to(tl.int64), 1) - 1                  # counts fall with the digit
        b_t += b_dig << shift
"""
# here: digits 1 .. 2^RB - 1 (RB <= 2) counted in 20-bit fields of one int64 (P < 2^20), one block-wide
# reduction a pass over a [BS, BP] tile
PACKED_COUNT = """\
        b_unit = (b_t * 0 + 1) << shift
        if ONE:
            b_v = tl.zeros([BS, BP], dtype=tl.int64)
            for d in tl.static_range(1, 2 ** RB):
                b_v += (b_key >= (b_t + d * b_unit)[:, None]).to(tl.int64) << (20 * (d - 1))
            b_cnt = tl.sum(b_v, 1)
        else:
            b_cnt = tl.zeros([BS], dtype=tl.int64)
            for p0 in range(0, P, BP):
                b_kc, _, _ = _select_keys(I, pool_last, i_b, o_s, p0 + o_p, S, P, offset)
                b_v = tl.zeros([BS, BP], dtype=tl.int64)
                for d in tl.static_range(1, 2 ** RB):
                    b_v += (b_kc >= (b_t + d * b_unit)[:, None]).to(tl.int64) << (20 * (d - 1))
                b_cnt += tl.sum(b_v, 1)
        b_dig = tl.zeros([BS], dtype=tl.int64)
        for d in tl.static_range(1, 2 ** RB):
            b_dig += (((b_cnt >> (20 * (d - 1))) & 0xFFFFF) >= b_k).to(tl.int64)     # counts fall with the digit
        b_t += b_dig * b_unit
"""


def select_pools(I, pool_last, member_idx, val, n_vis, first, k_sel: int, width: int, tail: bool,
                 block_pools=None, radix_bits=None):
    """impl.dsa.select_pools with the packed counts: radix_bits 1 or 2 (default 2), tiles up to BP_GPU."""
    RB = radix_bits or 2
    if RB not in (1, 2):
        raise ValueError(f"radix_bits: expected 1 or 2 (packed counts), got {RB}")
    P = I.shape[-1] if I.ndim == 3 else 0
    if P >= 1 << 20:
        raise ValueError(f"I: {P} pools, expected fewer than 2^20 (20-bit packed counts)")
    if block_pools is None and not interpreted():
        block_pools = min(triton.next_power_of_2(max(P, 1)), BP_GPU)
    with kernel_edited(_dsa, "dsa_select_fwd_kernel", OURS_COUNT, PACKED_COUNT):
        return _dsa.select_pools(I, pool_last, member_idx, val, n_vis, first, k_sel, width, tail,
                                 block_pools=block_pools, radix_bits=RB)


def index(w, a, q_lat, packed_all, mask=None):
    """impl.dsa.index with the packed-count selection."""
    return _dsa.index_with(w, a, q_lat, packed_all, mask, select=select_pools)


class DSA:
    """The dsa namespace: `index` (and `index_rows`, ours) with the packed-count selection."""

    BATCH_INVARIANT = BATCH_INVARIANT
    index_rows = staticmethod(_dsa.index_rows)
    index = staticmethod(index)


Candidate = types.SimpleNamespace(dsa=DSA)
