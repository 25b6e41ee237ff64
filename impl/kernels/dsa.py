"""DSA indexer score kernel (SPEC §8.4, §8.5); the host wrappers are in impl/dsa.py.

Letters: B batch, S queries, T cached tokens, H indexer heads (H_i), K index head dim (d_i),
P kept pools.
"""
import triton
import triton.language as tl


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
