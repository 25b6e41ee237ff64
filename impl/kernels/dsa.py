"""DSA indexer kernels: the KPool pooled keys (SPEC §8) and the scores (SPEC §8.4, §8.5); the host wrappers are
in impl/dsa.py.

Letters: B batch, S queries, T cached tokens, H indexer heads (H_i), K index head dim (d_i),
P kept pools, NP = ceil(T / M) pools of M = P_k members.
"""
import triton
import triton.language as tl


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


@triton.jit
def dsa_score_fwd_kernel(
    q, w, kbar, pool_last, out,
    S, P, offset, scale,
    H: tl.constexpr, K: tl.constexpr,
    BT: tl.constexpr, BP: tl.constexpr, BK: tl.constexpr, PRECISION: tl.constexpr,
):
    """I[b, s, p] = Σ_h w[b, s, h] · relu(scale · q[b, s, h] · kbar[b, p]) for one (query block, pool block, b).

    A pool is a candidate for query s iff 0 <= pool_last[b, p] <= offset + s (its last member is
    cached, real and visible); any other pool scores float32 min, the reference's masked value.
    q: [B, S, H, K], w: [B, S, H], kbar: [B, P, K], pool_last: [B, P] int, out: [B, S, P] float32.
    """
    i_t, i_p, i_b = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64), tl.program_id(2).to(tl.int64)
    o_t = i_t * BT + tl.arange(0, BT)
    o_p = i_p * BP + tl.arange(0, BP)
    o_k = tl.arange(0, BK)
    mask_t = o_t < S
    mask_p = o_p < P
    mask_k = o_k < K

    p_kbar = kbar + (i_b * P + o_p[:, None]) * K + o_k[None, :]
    b_kbar = tl.load(p_kbar, mask=mask_p[:, None] & mask_k[None, :], other=0.)              # [BP, BK]
    b_kt = tl.trans(b_kbar)                                                                # [BK, BP]
    b_last = tl.load(pool_last + i_b * P + o_p, mask=mask_p, other=-1).to(tl.int64)        # [BP]

    b_i = tl.zeros([BT, BP], dtype=tl.float32)
    s_row = (i_b * S + o_t) * H                                                            # [BT]
    for i_h in range(H):
        p_q = q + (s_row + i_h)[:, None] * K + o_k[None, :]
        b_q = tl.load(p_q, mask=mask_t[:, None] & mask_k[None, :], other=0.)               # [BT, BK]
        b_w = tl.load(w + s_row + i_h, mask=mask_t, other=0.).to(tl.float32)              # [BT]
        b_s = tl.dot(b_q, b_kt, input_precision=PRECISION) * scale                        # [BT, BP]
        b_i += b_w[:, None] * tl.maximum(b_s, 0.)

    # the reference writes finfo(float32).min, not -inf: a top-k over a row of non-candidates stays finite
    mask_c = (b_last[None, :] >= 0) & (b_last[None, :] <= (offset + o_t)[:, None])
    b_i = tl.where(mask_c, b_i, -3.4028234663852886e38)
    p_out = out + (i_b * S + o_t[:, None]) * P + o_p[None, :]
    tl.store(p_out, b_i, mask=mask_t[:, None] & mask_p[None, :])
