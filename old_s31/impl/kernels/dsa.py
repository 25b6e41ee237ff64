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


@triton.jit
def _select_keys(I, pool_last, i_b, o_s, o_p, S, P, offset):
    """One [BS, BP] tile of a selection: (order key, candidate, score). The key orders the float32 scores
    as integers in [0, 2^32) (a candidate's; -1 for any other pool), -0 folded into +0 so that the two
    zeros tie, as they compare in the oracle's sort."""
    mask = (o_s < S)[:, None] & (o_p < P)[None, :]
    b_i = tl.load(I + (i_b * S + o_s)[:, None] * P + o_p[None, :], mask=mask, other=0.)
    b_last = tl.load(pool_last + i_b * P + o_p, mask=o_p < P, other=-1)
    b_c = mask & (b_last[None, :] >= 0) & (b_last[None, :] <= offset + o_s[:, None])
    b_bits = tl.where(b_i == 0., 0., b_i).to(tl.int32, bitcast=True).to(tl.int64)
    b_key = tl.where(b_bits >= 0, b_bits, b_bits ^ 0x7FFFFFFF) + 2147483648
    return tl.where(b_c, b_key, -1), b_c, b_i


@triton.jit
def _packed_counts(b_key, b_t, b_unit, RB: tl.constexpr, BS: tl.constexpr, BP: tl.constexpr):
    """[BS]: per query, how many of a [BS, BP] tile's keys reach t + d · unit, for each candidate digit
    d = 1 .. 2^RB - 1, the count of digit d in bits 20 (d - 1) to 20 d - 1 (one reduction for them all)."""
    b_v = tl.zeros([BS, BP], dtype=tl.int64)
    for d in tl.static_range(1, 2 ** RB):
        b_v += (b_key >= (b_t + d * b_unit)[:, None]).to(tl.int64) << (20 * (d - 1))
    return tl.sum(b_v, 1)


# P not specialized on divisibility by 16: triton 3.6 fails to lower a 2048-pool tile when it is
# (ConvertTritonGPUToLLVM, reproduced with its sm_90 compiler; 3.9 compiles both)
@triton.jit(do_not_specialize=["P"])
def dsa_select_fwd_kernel(
    I, pool_last, member_idx, val, n_vis, first, indices, scores, candidate,
    S, P, T, k_sel, W,
    M: tl.constexpr, TAIL: tl.constexpr, ONE: tl.constexpr, RB: tl.constexpr,
    BS: tl.constexpr, BP: tl.constexpr, BM: tl.constexpr, BW: tl.constexpr, PACKED: tl.constexpr,
):
    """The selection of BS queries of row b (SPEC §8.6, §8.7): the k_sel best candidate pools (ties: the
    lowest pool first, as the oracle's stable sort), expanded to their M tokens in pool order, then the
    visible tail of the current incomplete pool (when TAIL; dropped when that pool was picked), then -1
    up to W slots; a pad query selects nothing. Also scores (non-candidates -inf) and candidate (int8).

    The k-th best key is found by a threshold search, RB bits a pass over the 32 key bits (no sort):
    the largest t with at least k keys >= t. Every key above t is picked and the ties at t fill the rest.
    ONE: the P pools fit one [BS, BP] tile, held across the passes; otherwise each pass re-reads I.
    PACKED (RB <= 2, P < 2^20): a pass counts its 2^RB - 1 candidate digits in 20-bit fields of one int64,
    one reduction of a [BS, BP] tile, instead of a [BS, BP, 2^RB] count: the registers of a 2048-pool tile
    (the GPU's form); the interpreter, whose cost is per operation, takes 8-bit digits unpacked.
    I: [B, S, P] float32 scores;  pool_last: [B, P] int64 (-1: not a valid pool);  member_idx: [B, P, M];
    val: [B, T] int8 real flags;  n_vis: [B, S] int64 real tokens <= each query;  first: [B] int64;
    indices: [B, S, W] int64;  scores: [B, S, P] float32;  candidate: [B, S, P] int8.
    """
    i_s, i_b = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
    o_s = i_s * BS + tl.arange(0, BS).to(tl.int64)
    o_p = tl.arange(0, BP).to(tl.int64)
    o_d = tl.arange(0, 2 ** RB).to(tl.int64)
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
        if PACKED:
            b_unit = (b_t * 0 + 1) << shift
            if ONE:
                b_cnt = _packed_counts(b_key, b_t, b_unit, RB, BS, BP)
            else:
                b_cnt = tl.zeros([BS], dtype=tl.int64)
                for p0 in range(0, P, BP):
                    b_kc, _, _ = _select_keys(I, pool_last, i_b, o_s, p0 + o_p, S, P, offset)
                    b_cnt += _packed_counts(b_kc, b_t, b_unit, RB, BS, BP)
            b_dig = tl.zeros([BS], dtype=tl.int64)
            for d in tl.static_range(1, 2 ** RB):
                b_dig += (((b_cnt >> (20 * (d - 1))) & 0xFFFFF) >= b_k).to(tl.int64)  # counts fall with the digit
            b_t += b_dig * b_unit
        else:
            b_try = b_t[:, None] + (o_d[None, :] << shift)                            # [BS, 2^RB]
            if ONE:
                b_cnt = tl.sum((b_key[:, :, None] >= b_try[:, None, :]).to(tl.int64), 1)
            else:
                b_cnt = tl.zeros([BS, 2 ** RB], dtype=tl.int64)
                for p0 in range(0, P, BP):
                    b_kc, _, _ = _select_keys(I, pool_last, i_b, o_s, p0 + o_p, S, P, offset)
                    b_cnt += tl.sum((b_kc[:, :, None] >= b_try[:, None, :]).to(tl.int64), 1)
            b_dig = tl.sum((b_cnt >= b_k[:, None]).to(tl.int64), 1) - 1              # counts fall with the digit
            b_t += b_dig << shift

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
