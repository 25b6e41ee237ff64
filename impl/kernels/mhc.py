"""Triton kernels of mHC (oracle/mhc.py). Host wrappers live in impl/mhc.py.

Letters: R token rows (B·S), N streams, D hidden size per stream, K = N·D projection input,
BN/BD/BK tiles (powers of two covering N, a D-block, a K-block).

coeff      one program per token row: two passes over the row's N·D inputs. Pass 1 accumulates Σx² and
           the three projections fn_pre·x, fn_post·x, fn_comb·x over K-blocks (RMSNorm is a per-row
           scalar, so the projection of z is the projection of x times rstd: no second read for it);
           then sigmoids, the row softmax and the Sinkhorn iterations on an [BN, BN] register tile;
           pass 2 reads X once more by D-blocks for the collapse u = Σ_n pre[n] X[n].
write_back one program per (token row, D-block): X_new[n] = post[n]·y + Σ_m C[m, n] X[m], in float32
           (float64 for float64 streams: the reference does the write-back in the model dtype).
"""
import triton
import triton.language as tl


@triton.jit
def mhc_coeff_fwd_kernel(
    x, fn, base, scale,
    pre, post, comb, u,
    iters, hc_eps, rms_eps,
    N: tl.constexpr, D: tl.constexpr,
    BN: tl.constexpr, BD: tl.constexpr, BK: tl.constexpr,
):
    i_r = tl.program_id(0).to(tl.int64)
    K: tl.constexpr = N * D
    o_n = tl.arange(0, BN)
    mask_n = o_n < N
    mask_nn = mask_n[:, None] & mask_n[None, :]
    # fn rows of comb[m, n]: 2N + m·N + n (row-major), one [BN, BN] tile of row indices
    o_cr = 2 * N + o_n[:, None] * N + o_n[None, :]

    b_ss = tl.zeros([BK], dtype=tl.float32)
    b_ypre = tl.zeros([BN], dtype=tl.float32)
    b_ypost = tl.zeros([BN], dtype=tl.float32)
    b_ycomb = tl.zeros([BN, BN], dtype=tl.float32)
    for i_k in range(tl.cdiv(K, BK)):
        o_k = i_k * BK + tl.arange(0, BK)
        mask_k = o_k < K
        b_x = tl.load(x + i_r * K + o_k, mask=mask_k, other=0.).to(tl.float32)
        b_ss += b_x * b_x
        mask_nk = mask_n[:, None] & mask_k[None, :]
        p_f = fn + o_n[:, None].to(tl.int64) * K + o_k[None, :]
        b_f = tl.load(p_f, mask=mask_nk, other=0.).to(tl.float32)
        b_ypre += tl.sum(b_f * b_x[None, :], 1)
        b_f = tl.load(p_f + N * K, mask=mask_nk, other=0.).to(tl.float32)
        b_ypost += tl.sum(b_f * b_x[None, :], 1)
        p_fc = fn + o_cr[:, :, None].to(tl.int64) * K + o_k[None, None, :]
        b_fc = tl.load(p_fc, mask=mask_nn[:, :, None] & mask_k[None, None, :], other=0.).to(tl.float32)
        b_ycomb += tl.sum(b_fc * b_x[None, None, :], 2)
    b_rstd = 1. / tl.sqrt(tl.sum(b_ss, 0) / K + rms_eps)

    b_s0 = tl.load(scale).to(tl.float32)
    b_s1 = tl.load(scale + 1).to(tl.float32)
    b_s2 = tl.load(scale + 2).to(tl.float32)
    b_bpre = tl.load(base + o_n, mask=mask_n, other=0.).to(tl.float32)
    b_bpost = tl.load(base + N + o_n, mask=mask_n, other=0.).to(tl.float32)
    b_bcomb = tl.load(base + o_cr, mask=mask_nn, other=0.).to(tl.float32)
    b_pre = tl.sigmoid(b_ypre * b_rstd * b_s0 + b_bpre) + hc_eps
    b_post = 2. * tl.sigmoid(b_ypost * b_rstd * b_s1 + b_bpost)

    # padded columns get -inf (out of the softmax); padded rows stay finite and are zeroed after it
    b_l = tl.where(mask_n[None, :], b_ycomb * b_rstd * b_s2 + b_bcomb, float("-inf"))
    b_e = tl.exp(b_l - tl.max(b_l, 1)[:, None])
    b_c = tl.where(mask_nn, b_e / tl.sum(b_e, 1)[:, None] + hc_eps, 0.)
    b_c = b_c / (tl.sum(b_c, 0)[None, :] + hc_eps)
    for _ in range(iters - 1):
        b_c = b_c / (tl.sum(b_c, 1)[:, None] + hc_eps)
        b_c = b_c / (tl.sum(b_c, 0)[None, :] + hc_eps)

    tl.store(pre + i_r * N + o_n, b_pre, mask=mask_n)
    tl.store(post + i_r * N + o_n, b_post, mask=mask_n)
    tl.store(comb + i_r * N * N + o_n[:, None] * N + o_n[None, :], b_c, mask=mask_nn)

    b_p = tl.where(mask_n, b_pre, 0.)
    for i_d in range(tl.cdiv(D, BD)):
        o_d = i_d * BD + tl.arange(0, BD)
        mask_d = o_d < D
        p_x = x + i_r * K + o_n[:, None] * D + o_d[None, :]
        b_x = tl.load(p_x, mask=mask_n[:, None] & mask_d[None, :], other=0.).to(tl.float32)
        b_u = tl.sum(b_p[:, None] * b_x, 0)
        tl.store(u + i_r * D + o_d, b_u.to(u.dtype.element_ty), mask=mask_d)


@triton.jit
def mhc_write_back_fwd_kernel(
    x, y, post, comb, x_new,
    N: tl.constexpr, D: tl.constexpr,
    BN: tl.constexpr, BD: tl.constexpr, ACC: tl.constexpr,
):
    i_r, i_d = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
    o_n = tl.arange(0, BN)
    mask_n = o_n < N
    o_d = i_d * BD + tl.arange(0, BD)
    mask_d = o_d < D
    mask_nd = mask_n[:, None] & mask_d[None, :]
    # SPEC §4: the coefficients are cast to the model dtype before the write-back
    b_post = tl.load(post + i_r * N + o_n, mask=mask_n, other=0.).to(x.dtype.element_ty).to(ACC)
    p_c = comb + i_r * N * N + o_n[:, None] * N + o_n[None, :]
    b_c = tl.load(p_c, mask=mask_n[:, None] & mask_n[None, :], other=0.)
    b_c = b_c.to(x.dtype.element_ty).to(ACC)                                   # [BN m, BN n]
    b_y = tl.load(y + i_r * D + o_d, mask=mask_d, other=0.).to(ACC)
    p_x = i_r * N * D + o_n[:, None] * D + o_d[None, :]
    b_x = tl.load(x + p_x, mask=mask_nd, other=0.).to(ACC)                    # [BN m, BD]
    # Cᵀ X: output stream n sums over m, the first axis of both the C tile and the X tile
    b_o = tl.sum(b_c[:, :, None] * b_x[:, None, :], 0) + b_post[:, None] * b_y[None, :]
    tl.store(x_new + p_x, b_o.to(x_new.dtype.element_ty), mask=mask_nd)
