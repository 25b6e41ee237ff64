"""Triton kernels of mHC (oracle/mhc.py). Host wrappers live in impl/mhc.py.

Letters: R token rows (B·S), N streams, D hidden size per stream, K = N·D projection input,
BR/BN/BD/BK/BKS tiles (powers of two: token rows per program, N, a D-block, a K-chunk, its sub-block).
Every row is computed alone: its bits do not depend on the rows that share its program
(tests/test_mhc_kernels.py; mhc.batch on the GPU for the tl.dot partial), so BR is a launch choice, fixed
per device (impl/mhc.py): 32 on the interpreter, whose cost is per program and per operation.

coeff      split along N·D (one program per token row was one SM reading the whole projection at decode:
           ~200 us a call at the full geometry, issue 14 step 3). Two launches:
  partial  one program per (BR token rows, BK-chunk of the row's N·D inputs): Σx² and the three projections
           fn_pre·x, fn_post·x, fn_comb·x over its chunk (RMSNorm is a per-row scalar, so the projection
           of z is the projection of x times rstd: no second read for it), one row of `part`.
  partial_dot  the same partials from a tile of BR rows: [BR, BKS] x [BKS, M] float32 tl.dot, fn read
           once per tile instead of once per row (the prefill form, issue 14 step 6). The GPU's; on the
           interpreter tl.dot is numpy's matmul, which sums a row differently by its place in the tile.
  finish   one program per (BR token rows, D-block): sums the row's NS partials in a fixed order, pre from
           them; the D-block 0 program also post, the row softmax and the Sinkhorn iterations on an
           [BN, BN] register tile, and stores the coefficients; every program writes its D-block of the
           collapse u = Σ_n pre[n] X[n].
write_back one program per (BR token rows, D-block): X_new[n] = post[n]·y + Σ_m C[m, n] X[m], in float32
           (float64 for float64 streams: the reference does the write-back in the model dtype).
"""
import triton
import triton.language as tl


@triton.jit
def mhc_coeff_partial_fwd_kernel(
    x, fn, part, R,
    N: tl.constexpr, D: tl.constexpr,
    BR: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, BKS: tl.constexpr,
):
    i_b, i_s = tl.program_id(0), tl.program_id(1)
    K: tl.constexpr = N * D
    W: tl.constexpr = 1 + 2 * N + N * N
    NS = tl.num_programs(1)
    o_r = (i_b * BR + tl.arange(0, BR)).to(tl.int64)
    mask_r = o_r < R
    o_n = tl.arange(0, BN)
    mask_n = o_n < N
    mask_nn = mask_n[:, None] & mask_n[None, :]
    # fn rows of comb[m, n]: 2N + m·N + n (row-major), one [BN, BN] tile of row indices
    o_c = o_n[:, None] * N + o_n[None, :]
    b_ss = tl.zeros([BR], dtype=tl.float32)
    b_ypre = tl.zeros([BR, BN], dtype=tl.float32)
    b_ypost = tl.zeros([BR, BN], dtype=tl.float32)
    b_ycomb = tl.zeros([BR, BN, BN], dtype=tl.float32)
    # the chunk in BKS-wide sub-blocks: the [BR, BN, BN, BKS] product stays in registers; each fn tile
    # is read once for BR rows (at a prefill the rows share it: L2 traffic / BR)
    for i_k in range(BK // BKS):
        o_k = i_s * BK + i_k * BKS + tl.arange(0, BKS)
        mask_k = o_k < K
        b_x = tl.load(x + o_r[:, None] * K + o_k[None, :], mask=mask_r[:, None] & mask_k[None, :], other=0.)
        b_x = b_x.to(tl.float32)                                               # [BR, BKS]
        b_ss += tl.sum(b_x * b_x, 1)
        mask_nk = mask_n[:, None] & mask_k[None, :]
        p_f = fn + o_n[:, None].to(tl.int64) * K + o_k[None, :]
        b_f = tl.load(p_f, mask=mask_nk, other=0.).to(tl.float32)
        b_ypre += tl.sum(b_f[None, :, :] * b_x[:, None, :], 2)                  # [BR, BN]
        b_f = tl.load(p_f + N * K, mask=mask_nk, other=0.).to(tl.float32)
        b_ypost += tl.sum(b_f[None, :, :] * b_x[:, None, :], 2)
        p_fc = fn + (2 * N + o_c[:, :, None]).to(tl.int64) * K + o_k[None, None, :]
        b_fc = tl.load(p_fc, mask=mask_nn[:, :, None] & mask_k[None, None, :], other=0.).to(tl.float32)
        b_ycomb += tl.sum(b_fc[None, :, :, :] * b_x[:, None, None, :], 3)       # [BR, BN, BN]

    # one row of part per token: [Σx² | fn_pre·x (N) | fn_post·x (N) | fn_comb·x (N·N)] over this chunk
    p_p = part + (o_r * NS + i_s) * W
    mask_rn = mask_r[:, None] & mask_n[None, :]
    tl.store(p_p, b_ss, mask=mask_r)
    tl.store(p_p[:, None] + 1 + o_n[None, :], b_ypre, mask=mask_rn)
    tl.store(p_p[:, None] + 1 + N + o_n[None, :], b_ypost, mask=mask_rn)
    tl.store(p_p[:, None, None] + 1 + 2 * N + o_c[None, :, :], b_ycomb,
             mask=mask_r[:, None, None] & mask_nn[None, :, :])


@triton.jit
def mhc_coeff_partial_dot_fwd_kernel(
    x, fn, part, R,
    N: tl.constexpr, D: tl.constexpr,
    BR: tl.constexpr, BM: tl.constexpr, BK: tl.constexpr, BKS: tl.constexpr, PRECISION: tl.constexpr,
):
    i_b, i_s = tl.program_id(0), tl.program_id(1)
    K: tl.constexpr = N * D
    M: tl.constexpr = (2 + N) * N
    NS = tl.num_programs(1)
    o_r = (i_b * BR + tl.arange(0, BR)).to(tl.int64)
    mask_r = o_r < R
    # fn's M rows in the projection order of `part` (pre, post, comb): one [BR, BM] product for all three
    o_m = tl.arange(0, BM)
    mask_m = o_m < M
    b_ss = tl.zeros([BR], dtype=tl.float32)
    b_y = tl.zeros([BR, BM], dtype=tl.float32)
    for i_k in range(BK // BKS):
        o_k = i_s * BK + i_k * BKS + tl.arange(0, BKS)
        mask_k = o_k < K
        b_x = tl.load(x + o_r[:, None] * K + o_k[None, :], mask=mask_r[:, None] & mask_k[None, :], other=0.)
        b_x = b_x.to(tl.float32)                                               # [BR, BKS]
        b_ss += tl.sum(b_x * b_x, 1)
        p_f = fn + o_m[None, :].to(tl.int64) * K + o_k[:, None]
        b_f = tl.load(p_f, mask=mask_k[:, None] & mask_m[None, :], other=0.).to(tl.float32)   # [BKS, BM]
        # "ieee": the FMA dot; "tf32x3": three tensor-core products of the split operands, near float32. In
        # both a row's bits do not depend on the rows beside it in the tile (mhc.batch on the GPU holds it)
        b_y = tl.dot(b_x, b_f, b_y, input_precision=PRECISION)
    p_p = part + (o_r * NS + i_s) * (1 + M)
    tl.store(p_p, b_ss, mask=mask_r)
    tl.store(p_p[:, None] + 1 + o_m[None, :], b_y, mask=mask_r[:, None] & mask_m[None, :])


@triton.jit
def mhc_coeff_finish_fwd_kernel(
    part, base, scale, x,
    pre, post, comb, u,
    R, iters, hc_eps, rms_eps,
    N: tl.constexpr, D: tl.constexpr, NS: tl.constexpr,
    BR: tl.constexpr, BN: tl.constexpr, BS: tl.constexpr, BD: tl.constexpr,
):
    i_b, i_d = tl.program_id(0), tl.program_id(1)
    K: tl.constexpr = N * D
    W: tl.constexpr = 1 + 2 * N + N * N
    o_r = (i_b * BR + tl.arange(0, BR)).to(tl.int64)
    mask_r = o_r < R
    o_n = tl.arange(0, BN)
    mask_n = o_n < N
    mask_nn = mask_n[:, None] & mask_n[None, :]
    o_c = o_n[:, None] * N + o_n[None, :]
    o_s = tl.arange(0, BS)
    mask_rs = mask_r[:, None] & (o_s < NS)[None, :]
    mask_rsn = mask_rs[:, :, None] & mask_n[None, None, :]
    p_p = part + (o_r[:, None] * NS + o_s[None, :]) * W                         # [BR, BS]
    # the chunks' partials summed in one fixed order: a token's coefficients do not follow its batch
    b_ss = tl.sum(tl.load(p_p, mask=mask_rs, other=0.), 1)
    b_rstd = 1. / tl.sqrt(b_ss / K + rms_eps)                                  # [BR]
    b_ypre = tl.sum(tl.load(p_p[:, :, None] + 1 + o_n[None, None, :], mask=mask_rsn, other=0.), 1)
    b_bpre = tl.load(base + o_n, mask=mask_n, other=0.).to(tl.float32)
    # every D-block program needs pre for its part of u; computing it again is cheaper than a launch
    b_pre = tl.sigmoid(b_ypre * b_rstd[:, None] * tl.load(scale).to(tl.float32) + b_bpre[None, :]) + hc_eps

    if i_d == 0:
        mask_rn = mask_r[:, None] & mask_n[None, :]
        mask_rnn = mask_r[:, None, None] & mask_nn[None, :, :]
        b_ypost = tl.sum(tl.load(p_p[:, :, None] + 1 + N + o_n[None, None, :], mask=mask_rsn, other=0.), 1)
        p_c = p_p[:, :, None, None] + 1 + 2 * N + o_c[None, None, :, :]
        b_ycomb = tl.sum(tl.load(p_c, mask=mask_rs[:, :, None, None] & mask_nn[None, None, :, :], other=0.), 1)
        b_bpost = tl.load(base + N + o_n, mask=mask_n, other=0.).to(tl.float32)
        b_bcomb = tl.load(base + 2 * N + o_c, mask=mask_nn, other=0.).to(tl.float32)
        b_post = 2. * tl.sigmoid(b_ypost * b_rstd[:, None] * tl.load(scale + 1).to(tl.float32) + b_bpost[None, :])
        # padded columns get -inf (out of the softmax); padded rows stay finite and are zeroed after it
        b_l = b_ycomb * b_rstd[:, None, None] * tl.load(scale + 2).to(tl.float32) + b_bcomb[None, :, :]
        b_l = tl.where(mask_n[None, None, :], b_l, float("-inf"))              # [BR, BN m, BN n]
        b_e = tl.exp(b_l - tl.max(b_l, 2)[:, :, None])
        b_c = tl.where(mask_nn[None, :, :], b_e / tl.sum(b_e, 2)[:, :, None] + hc_eps, 0.)
        b_c = b_c / (tl.sum(b_c, 1)[:, None, :] + hc_eps)
        for _ in range(iters - 1):
            b_c = b_c / (tl.sum(b_c, 2)[:, :, None] + hc_eps)
            b_c = b_c / (tl.sum(b_c, 1)[:, None, :] + hc_eps)
        tl.store(pre + o_r[:, None] * N + o_n[None, :], b_pre, mask=mask_rn)
        tl.store(post + o_r[:, None] * N + o_n[None, :], b_post, mask=mask_rn)
        tl.store(comb + o_r[:, None, None] * N * N + o_c[None, :, :], b_c, mask=mask_rnn)

    o_d = i_d * BD + tl.arange(0, BD)
    mask_d = o_d < D
    p_x = x + o_r[:, None, None] * K + o_n[None, :, None] * D + o_d[None, None, :]
    mask_nd = mask_n[:, None] & mask_d[None, :]
    b_x = tl.load(p_x, mask=mask_r[:, None, None] & mask_nd[None, :, :], other=0.).to(tl.float32)
    b_u = tl.sum(tl.where(mask_n[None, :], b_pre, 0.)[:, :, None] * b_x, 1)    # [BR, BD]
    tl.store(u + o_r[:, None] * D + o_d[None, :], b_u.to(u.dtype.element_ty),
             mask=mask_r[:, None] & mask_d[None, :])


@triton.jit
def mhc_write_back_fwd_kernel(
    x, y, post, comb, x_new, R,
    N: tl.constexpr, D: tl.constexpr,
    BR: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr, ACC: tl.constexpr,
):
    i_b, i_d = tl.program_id(0), tl.program_id(1).to(tl.int64)
    o_r = (i_b * BR + tl.arange(0, BR)).to(tl.int64)
    mask_r = o_r < R
    o_n = tl.arange(0, BN)
    mask_n = o_n < N
    o_d = i_d * BD + tl.arange(0, BD)
    mask_d = o_d < D
    mask_rn = mask_r[:, None] & mask_n[None, :]
    mask_rnd = mask_rn[:, :, None] & mask_d[None, None, :]
    # SPEC §4: the coefficients are cast to the model dtype before the write-back
    p_post = post + o_r[:, None] * N + o_n[None, :]
    b_post = tl.load(p_post, mask=mask_rn, other=0.).to(x.dtype.element_ty).to(ACC)          # [BR, BN]
    p_c = comb + o_r[:, None, None] * N * N + o_n[None, :, None] * N + o_n[None, None, :]
    b_c = tl.load(p_c, mask=mask_rn[:, :, None] & mask_n[None, None, :], other=0.)
    b_c = b_c.to(x.dtype.element_ty).to(ACC)                                   # [BR, BN m, BN n]
    b_y = tl.load(y + o_r[:, None] * D + o_d[None, :], mask=mask_r[:, None] & mask_d[None, :], other=0.)
    b_y = b_y.to(ACC)                                                          # [BR, BD]
    p_x = o_r[:, None, None] * N * D + o_n[None, :, None] * D + o_d[None, None, :]
    b_x = tl.load(x + p_x, mask=mask_rnd, other=0.).to(ACC)                   # [BR, BN m, BD]
    # Cᵀ X: output stream n sums over m, the second axis of both the C tile and the X tile
    b_o = tl.sum(b_c[:, :, :, None] * b_x[:, :, None, :], 1) + b_post[:, :, None] * b_y[:, None, :]
    tl.store(x_new + p_x, b_o.to(x_new.dtype.element_ty), mask=mask_rnd)
