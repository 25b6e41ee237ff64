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

import torch
import triton
import triton.language as tl

from impl import dsa as _dsa
from impl import interpreted
from impl.kernels.dsa import _select_keys

BATCH_INVARIANT = ()
# the widest tile of pools on a GPU: 2048 (ours: 1024)
BP_GPU = 2048


@triton.jit
def dsa_select_packed_fwd_kernel(
    I, pool_last, member_idx, val, n_vis, first, indices, scores, candidate,
    S, P, T, k_sel, W,
    M: tl.constexpr, TAIL: tl.constexpr, ONE: tl.constexpr, RB: tl.constexpr,
    BS: tl.constexpr, BP: tl.constexpr, BM: tl.constexpr, BW: tl.constexpr,
):
    """impl.kernels.dsa.dsa_select_fwd_kernel with each pass's digit counts packed in one int64 reduction
    (RB <= 2); the same arguments and outputs."""
    i_s, i_b = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
    o_s = i_s * BS + tl.arange(0, BS).to(tl.int64)
    o_p = tl.arange(0, BP).to(tl.int64)
    mask_s = o_s < S
    offset = T - S
    b_q = mask_s & (tl.load(val + i_b * T + offset + o_s, mask=mask_s, other=0) != 0)
    row = i_b * S + o_s

    # candidates per query: a pad query, or one with fewer than k_sel candidates, picks fewer
    if ONE:
        b_key, b_c, b_i = _select_keys(I, pool_last, i_b, o_s, o_p, S, P, offset)
        b_n = tl.sum(b_c.to(tl.int64), 1)
    else:
        b_n = tl.zeros([BS], dtype=tl.int64)
        for p0 in range(0, P, BP):
            _, b_c, _ = _select_keys(I, pool_last, i_b, o_s, p0 + o_p, S, P, offset)
            b_n += tl.sum(b_c.to(tl.int64), 1)
    b_k = tl.where(b_q, tl.minimum(b_n, k_sel), 0)

    # the threshold, RB bits a pass from the top: count(key >= t) >= k holds for t = 0 whenever k > 0;
    # with k = 0 every digit qualifies and t ends above every key
    b_t = tl.zeros([BS], dtype=tl.int64)
    for i in range(32 // RB):
        shift = 32 - RB * (i + 1)
        b_unit = (b_t * 0 + 1) << shift
        # digits 1 .. 2^RB - 1 counted in 20-bit fields of one int64 (P < 2^20): one block-wide reduction
        # a pass over a [BS, BP] tile, where ours counts a [BS, BP, 2^RB] one
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

    # keys above t are all picked; ties at t fill the remaining picks, lowest pool first
    if ONE:
        b_gt = tl.sum((b_key > b_t[:, None]).to(tl.int64), 1)
    else:
        b_gt = tl.zeros([BS], dtype=tl.int64)
        for p0 in range(0, P, BP):
            b_kc, _, _ = _select_keys(I, pool_last, i_b, o_s, p0 + o_p, S, P, offset)
            b_gt += tl.sum((b_kc > b_t[:, None]).to(tl.int64), 1)
    b_need = b_k - b_gt
    b_sel = tl.zeros([BS], dtype=tl.int64)          # pools picked so far: the next pick's rank
    b_tie = tl.zeros([BS], dtype=tl.int64)          # ties at t met so far
    b_f = tl.load(first + i_b)
    b_nv = tl.load(n_vis + row, mask=mask_s, other=0)
    b_start = b_f + b_nv - b_nv % M                 # the tail's pool: its first token
    b_hit = tl.zeros([BS], dtype=tl.int64)          # that pool was picked
    o_m = tl.arange(0, BM).to(tl.int64)
    for p0 in range(0, P, BP):
        o_pc = p0 + o_p
        if ONE:
            b_kc, b_cc, b_ic = b_key, b_c, b_i
        else:
            b_kc, b_cc, b_ic = _select_keys(I, pool_last, i_b, o_s, o_pc, S, P, offset)
        mask = mask_s[:, None] & (o_pc < P)[None, :]
        p_out = row[:, None] * P + o_pc[None, :]
        tl.store(scores + p_out, tl.where(b_cc, b_ic, float("-inf")), mask=mask)
        tl.store(candidate + p_out, b_cc.to(tl.int8), mask=mask)
        b_eq = (b_kc == b_t[:, None]).to(tl.int64)
        b_rk = b_tie[:, None] + tl.cumsum(b_eq, 1) - b_eq
        b_pick = ((b_kc > b_t[:, None]) | ((b_eq > 0) & (b_rk < b_need[:, None]))).to(tl.int64)
        b_rank = b_sel[:, None] + tl.cumsum(b_pick, 1) - b_pick                       # [BS, BP]
        b_pf = tl.load(member_idx + (i_b * P + o_pc) * M, mask=o_pc < P, other=-1)    # first member
        p_ix = indices + row[:, None, None] * W + b_rank[:, :, None] * M + o_m[None, None, :]
        tl.store(p_ix, b_pf[None, :, None] + o_m[None, None, :],
                 mask=(b_pick > 0)[:, :, None] & (o_m < M)[None, None, :] & (b_rank < k_sel)[:, :, None])
        b_hit += tl.sum(((b_pick > 0) & (b_pf[None, :] == b_start[:, None])).to(tl.int64), 1)
        b_sel += tl.sum(b_pick, 1)
        b_tie += tl.sum(b_eq, 1)

    b_end = b_sel * M
    if TAIL:
        # SPEC §8.7: tokens start + o, o < tau = n_vis mod M, that are cached, visible and real
        b_tt = b_start[:, None] + o_m[None, :]                                        # [BS, BM]
        b_in = b_q[:, None] & (o_m[None, :] < (b_nv % M)[:, None]) & (b_tt < T) \
            & (b_tt <= (offset + o_s)[:, None]) & (b_hit == 0)[:, None]
        b_ok = b_in & (tl.load(val + i_b * T + b_tt, mask=b_in, other=0) != 0)
        b_o = b_ok.to(tl.int64)
        tl.store(indices + row[:, None] * W + b_end[:, None] + tl.cumsum(b_o, 1) - b_o, b_tt, mask=b_ok)
        b_end += tl.sum(b_o, 1)
    for w0 in range(0, W, BW):
        o_w = w0 + tl.arange(0, BW).to(tl.int64)
        tl.store(indices + row[:, None] * W + o_w[None, :], tl.full([BS, BW], -1, tl.int64),
                 mask=mask_s[:, None] & (o_w < W)[None, :] & (o_w[None, :] >= b_end[:, None]))


def select_pools(I, pool_last, member_idx, val, n_vis, first, k_sel: int, width: int, tail: bool,
                 block_pools=None, radix_bits=None):
    """impl.dsa.select_pools with the packed counts: radix_bits 1 or 2 (default 2), tiles up to BP_GPU."""
    B, S, P, T, M = _dsa._check_select(I, pool_last, member_idx, val, n_vis, first, k_sel, width)
    dev = I.device
    indices = torch.empty(B, S, width, dtype=torch.int64, device=dev)
    scored = torch.empty(B, S, P, dtype=torch.float32, device=dev)
    candidate = torch.empty(B, S, P, dtype=torch.bool, device=dev)
    if B * S == 0:
        return indices, scored, candidate
    RB = radix_bits or 2
    if RB not in (1, 2):
        raise ValueError(f"radix_bits: expected 1 or 2 (packed counts), got {RB}")
    if P >= 1 << 20:
        raise ValueError(f"I: {P} pools, expected fewer than 2^20 (20-bit packed counts)")
    BS = 16 if interpreted() else 1
    BP = block_pools or min(triton.next_power_of_2(max(P, 1)), 16 if interpreted() else BP_GPU)
    dsa_select_packed_fwd_kernel[(triton.cdiv(S, BS), B)](
        I.contiguous(), pool_last.to(torch.int64).contiguous(), member_idx.contiguous(),
        val.contiguous().view(torch.int8), n_vis.to(torch.int64).contiguous(), first.to(torch.int64).contiguous(),
        indices, scored, candidate.view(torch.int8), S, P, T, k_sel, width,
        M=M, TAIL=bool(tail and M > 1), ONE=P <= BP, RB=RB, BS=BS, BP=BP, BM=triton.next_power_of_2(M),
        BW=8 if interpreted() else 1024, num_warps=4 if interpreted() else 8)
    return indices, scored, candidate


def index(w, a, q_lat, packed_all, mask=None):
    """impl.dsa.index with the packed-count selection."""
    return _dsa.index_with(w, a, q_lat, packed_all, mask, select=select_pools)


class DSA:
    """The dsa namespace: `index` (and `index_rows`, ours) with the packed-count selection."""

    BATCH_INVARIANT = BATCH_INVARIANT
    index_rows = staticmethod(_dsa.index_rows)
    index = staticmethod(index)


Candidate = types.SimpleNamespace(dsa=DSA)
