"""Issue 14 step 9 (a candidate, NOT landed, NOT measured on a GPU; docs/optimization_log.md): the DSA
indexer's pooled keys in one kernel instead of ~20 torch launches.

Step 8's profile of the dsa-full+sparse decode step: 259 of its 585 us of kernel time are torch kernels
(127 launches), most of them the indexer's. `impl.dsa.pool_keys` re-pools the whole cache every step in
torch: two float copies of the packed rows, the member index grid, gathers of the gate and key rows,
the masked softmax over the members, NaN-to-zero, the weighted sum. Here `dsa_pool_fwd_kernel` does all
of it per (block of pools, row): each member's packed row read once, the softmax over the P_k members per
channel in registers (an empty pool gives 0, as the oracle), and it writes kbar, the member tokens and
the pools' validity. `first` (each row's first real token) stays torch (its reduction runs over T), and
so does the eager compaction to the kept pools.

    python3 -m gate.cli gate --candidate impl.candidates.dsa_pool_fused:Candidate --baseline triton \\
        --check dsa.index --check dsa.pool_keys --check mla.sublayer --check model.paths

Batch invariance: claimed for nothing, as ours (impl.dsa.BATCH_INVARIANT).
"""
from __future__ import annotations

import types

import torch
import triton
import triton.language as tl

import impl
from impl import dsa as _dsa
from impl import kernel_operand

BATCH_INVARIANT = ()


@triton.jit
def dsa_pool_fwd_kernel(
    packed, ape, first, kbar, member_idx, pool_valid,
    T, NP,
    K: tl.constexpr, M: tl.constexpr, BPL: tl.constexpr, BM: tl.constexpr, BK: tl.constexpr,
):
    """kbar[b, p, c] = Σ_m softmax_m(gsc[t_m, c] + ape[m, c]) · kI[t_m, c] over the real members t_m =
    first[b] + p·M + m < T of pool p (an empty pool: 0), member_idx[b, p, m] = first[b] + p·M + m,
    pool_valid[b, p] = all M members real; one program per (BPL pools, row b).
    packed: [B, T, 2K + 1] float (kI | gsc | valid flag), ape: [M, K] float32, first: [B] int64."""
    i_p, i_b = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
    o_p = i_p * BPL + tl.arange(0, BPL).to(tl.int64)
    o_m = tl.arange(0, BM).to(tl.int64)
    o_c = tl.arange(0, BK)
    mask_p, mask_m, mask_c = o_p < NP, o_m < M, o_c < K
    b_f = tl.load(first + i_b)
    b_t = b_f + o_p[:, None] * M + o_m[None, :]                                   # [BPL, BM] member tokens
    b_in = mask_p[:, None] & mask_m[None, :] & (b_t < T)
    p_row = packed + (i_b * T + b_t) * (2 * K + 1)
    b_val = tl.load(p_row + 2 * K, mask=b_in, other=0.).to(tl.float32) > 0.5
    b_ok = b_in & b_val                                                            # real members
    mask3 = b_ok[:, :, None] & mask_c[None, None, :]
    b_k = tl.load(p_row[:, :, None] + o_c[None, None, :], mask=mask3, other=0.).to(tl.float32)
    b_g = tl.load(p_row[:, :, None] + K + o_c[None, None, :], mask=mask3, other=0.).to(tl.float32)
    b_a = tl.load(ape + o_m[:, None] * K + o_c[None, :], mask=mask_m[:, None] & mask_c[None, :], other=0.)
    b_lam = tl.where(mask3, b_g + b_a[None, :, :], float("-inf"))                 # [BPL, BM, BK]
    b_top = tl.max(b_lam, 1)                                                      # finite where any member is real
    # members that are not real weigh 0 (an empty pool sums to 0, and K̄ is 0 below, as the oracle's);
    # exp takes 0 there, not -inf - -inf
    b_e = tl.where(mask3, tl.exp(tl.where(mask3, b_lam - b_top[:, None, :], 0.)), 0.)
    b_z = tl.sum(b_e, 1)
    b_kbar = tl.sum(b_e * b_k, 1) / tl.where(b_z > 0, b_z, 1.)                    # empty pool: 0
    tl.store(kbar + (i_b * NP + o_p)[:, None] * K + o_c[None, :], b_kbar, mask=mask_p[:, None] & mask_c[None, :])
    tl.store(member_idx + (i_b * NP + o_p)[:, None] * M + o_m[None, :], b_t,
             mask=mask_p[:, None] & mask_m[None, :])
    b_all = tl.sum((b_ok | ~mask_m[None, :]).to(tl.int32), 1) == BM
    tl.store(pool_valid + i_b * NP + o_p, b_all.to(tl.int8), mask=mask_p)


def pool_keys(packed, ape, kpool: int, keep_all: bool = False):
    """impl.dsa.pool_keys (same arguments, same returns) with the pooling in one kernel."""
    B, T, K, _, first = _dsa.pool_anchor(packed, ape, kpool)
    dev = packed.device
    n_p = -(-T // kpool)
    kbar = torch.empty(B, n_p, K, device=dev, dtype=torch.float32)
    idx = torch.empty(B, n_p, kpool, device=dev, dtype=torch.int64)
    valid = torch.empty(B, n_p, device=dev, dtype=torch.int8)
    if B * n_p:
        BPL = 16 if impl.interpreted() else 8
        dsa_pool_fwd_kernel[(triton.cdiv(n_p, BPL), B)](
            kernel_operand(packed), ape.float().contiguous(), first, kbar, idx, valid, T, n_p,
            K=K, M=kpool, BPL=BPL, BM=triton.next_power_of_2(kpool), BK=triton.next_power_of_2(max(K, 16)),
            num_warps=4)
    pool_valid = valid.bool()
    kept = pool_valid.any(0)
    if keep_all:
        return kbar, idx, pool_valid, first, kept
    return kbar[:, kept].contiguous(), idx[:, kept], pool_valid[:, kept], first, kept


def index(w, a, q_lat, packed_all, mask=None):
    """impl.dsa.index with this pool_keys."""
    return _dsa.index_with(w, a, q_lat, packed_all, mask, pool=pool_keys)


class DSA:
    """The dsa namespace: `index` (and `index_rows`, ours) with the fused pooling."""

    BATCH_INVARIANT = BATCH_INVARIANT
    index_rows = staticmethod(_dsa.index_rows)
    index = staticmethod(index)


Candidate = types.SimpleNamespace(dsa=DSA)
