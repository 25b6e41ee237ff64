"""Triton kernels of KDA (oracle/kda.py). Host wrappers live in impl/kda.py.

Letters: B batch, T tokens, N sequences, H heads, K key dim, V value dim, C conv channels, W conv width,
BT chunk (64), BC sub-chunk (16), NC = BT // BC, BK/BV tiles, NSEG segments of a sequence's chunks.

Chunked prefill is three launches (four with segments):
  intra   per (chunk, head): Γ, the kk and qk matrices, (I + A)^-1, W, U, q⊙e^Γ, k⊙e^(Γ_last-Γ), e^Γ_last
  state   per (head, V-block, sequence segment): the chunk recurrence, emitting outputs and boundary states
  combine per (head, V-block, sequence): M_s = P_s M_(s-1) + B_s across segments (two-level scan)
"""
import triton
import triton.language as tl


@triton.jit
def _intra_column_block(b_k, b_q, b_gc, b_A, b_Aqk, i_s: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr,
                        PRECISION: tl.constexpr, ANCHOR: tl.constexpr):
    """Adds columns [i_s BC, i_s BC + BC) of the kk and qk products over one K-block to b_A, b_Aqk [BT, BT].

    The exp(Γ) factorisation overflows over 64 tokens (e^320 for g = -5), so every column block takes a
    reference at one of its rows: the row factor e^(Γ_i - ref) (rows >= the block) and the column factor
    e^(ref - Γ_j) (rows of the block). Both come from the same difference, so the diagonal products
    e^(Γ_i - Γ_i) stay exactly 1. The reference is the block's FIRST row (ANCHOR 0): every row i >= it
    then depends on gates at rows <= i only, so outputs before a position are bitwise independent of
    anything after it (kda.causal). A later row (the middle, ANCHOR 7) halves the column factor's range
    but makes rows above it depend on later gates in their last bits (fla-org/flash-linear-attention
    #1240 shipped that leak). With the first row, the column factor reaches e^(15 |g|): e^75 at the
    -5 lower bound, inside float32's e^88.
    """
    o_t = tl.arange(0, BT)
    b_ref = tl.sum(tl.where((o_t == i_s * BC + ANCHOR)[:, None], b_gc, 0.), 0)
    b_d = b_gc - b_ref[None, :]
    b_er = tl.exp(tl.where((o_t >= i_s * BC)[:, None], b_d, float("-inf")))
    b_kc = b_k * tl.exp(tl.where(((o_t >= i_s * BC) & (o_t < i_s * BC + BC))[:, None], -b_d, float("-inf")))
    b_A = tl.dot(b_k * b_er, tl.trans(b_kc), b_A, input_precision=PRECISION)
    b_Aqk = tl.dot(b_q * b_er, tl.trans(b_kc), b_Aqk, input_precision=PRECISION)
    return b_A, b_Aqk


@triton.jit
def kda_intra_chunked_fwd_kernel(
    q, k, v, g, beta,
    qg, kg, w, u, aqk, gl, flags,
    cu_seqlens, chunk_indices, chunk_offsets,
    T,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BC: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    IS_VARLEN: tl.constexpr, PRECISION: tl.constexpr, INV_MERGE: tl.constexpr, ANCHOR: tl.constexpr,
    OFFSET64: tl.constexpr,
):
    # 64-bit chunk bases: past B*T*H*K = 2^31 elements a 32-bit base wraps and reads another row's tokens
    # (flash-linear-attention #1080); OFFSET64 False plants exactly that (mutant kda_intra_offsets_int32)
    if OFFSET64:
        i_t, i_h, i_b = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64), tl.program_id(2).to(tl.int64)
    else:
        i_t, i_h, i_b = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    if IS_VARLEN:
        i_n = tl.load(chunk_indices + i_t * 2).to(tl.int64)
        i_t = tl.load(chunk_indices + i_t * 2 + 1).to(tl.int64)
        bos = tl.load(cu_seqlens + i_n).to(tl.int64)
        eos = tl.load(cu_seqlens + i_n + 1).to(tl.int64)
        i_c = tl.load(chunk_offsets + i_n).to(tl.int64) + i_t
    else:
        bos = i_b * T
        eos = bos + T
        i_c = i_b * tl.cdiv(T, BT) + i_t
    NC: tl.constexpr = BT // BC
    t0 = bos + i_t * BT
    o_t = tl.arange(0, BT)
    n_valid = eos - bos - i_t * BT
    mask_t = o_t < n_valid
    o_row = (t0 + o_t).to(tl.int64) * H + i_h                                   # [BT] row of [T, H]
    # int64 only in the scalar chunk base: [BT, BK] tiles of 64-bit offsets cost a register per element
    s_row = t0 * H + i_h
    o_tr = o_t[:, None] * (H * K)

    b_beta = tl.load(beta + o_row, mask=mask_t, other=0.).to(tl.float32)
    n_nan_beta = tl.sum((b_beta != b_beta).to(tl.int32), 0)
    n_nan_g = n_nan_beta * 0

    b_A = tl.zeros([BT, BT], dtype=tl.float32)
    b_Aqk = tl.zeros([BT, BT], dtype=tl.float32)
    for i_k in range(tl.cdiv(K, BK)):
        o_k = i_k * BK + tl.arange(0, BK)
        mask_k = o_k < K
        mask_tk = mask_t[:, None] & mask_k[None, :]
        o_tk = o_tr + o_k[None, :]
        b_k = tl.load(k + s_row * K + o_tk, mask=mask_tk, other=0.).to(tl.float32)
        b_q = tl.load(q + s_row * K + o_tk, mask=mask_tk, other=0.).to(tl.float32)
        b_g = tl.load(g + s_row * K + o_tk, mask=mask_tk, other=0.).to(tl.float32)
        n_nan_g += tl.sum(tl.sum((b_g != b_g).to(tl.int32), 1), 0)
        b_gc = tl.cumsum(b_g, axis=0)
        b_A, b_Aqk = _intra_column_block(b_k, b_q, b_gc, b_A, b_Aqk, 0, BT, BC, PRECISION, ANCHOR)
        b_A, b_Aqk = _intra_column_block(b_k, b_q, b_gc, b_A, b_Aqk, 1, BT, BC, PRECISION, ANCHOR)
        b_A, b_Aqk = _intra_column_block(b_k, b_q, b_gc, b_A, b_Aqk, 2, BT, BC, PRECISION, ANCHOR)
        b_A, b_Aqk = _intra_column_block(b_k, b_q, b_gc, b_A, b_Aqk, 3, BT, BC, PRECISION, ANCHOR)

    b_Aqk = tl.where(o_t[:, None] >= o_t[None, :], b_Aqk, 0.)
    tl.store(aqk + s_row * BT + (o_t[:, None] * (H * BT) + o_t[None, :]), b_Aqk.to(aqk.dtype.element_ty),
             mask=mask_t[:, None])
    b_A = tl.where(o_t[:, None] > o_t[None, :], b_A * b_beta[:, None], 0.)

    if INV_MERGE:
        # (I + A)^-1 by doubling: a block-diagonal inverse at block size S becomes one at 2S through
        # X <- X - X L_S X (L_S: the lower-left S x S blocks inside each 2S diagonal block); all dots
        b_X = tl.where(o_t[:, None] == o_t[None, :], 1., 0.)
        for i_l in tl.static_range(6):
            mask_l = ((o_t[:, None] >> (i_l + 1)) == (o_t[None, :] >> (i_l + 1))) & \
                (((o_t[:, None] >> i_l) & 1) == 1) & (((o_t[None, :] >> i_l) & 1) == 0)
            b_L = tl.where(mask_l, b_A, 0.)
            b_X = b_X - tl.dot(b_X, tl.dot(b_L, b_X, input_precision=PRECISION), input_precision=PRECISION)
    else:
        # (I + A)^-1: forward substitution inside the 16x16 diagonal blocks (all four at once),
        # then the block-lower rest as (I + E)^-1 = (I - E)(I + E^2), E = Xd L, nilpotent of order NC = 4
        o_s = tl.arange(0, NC)
        o_i = tl.arange(0, BC)
        mask_d4 = (o_s[:, None, None, None] == o_s[None, None, :, None])
        b_D = tl.sum(tl.where(mask_d4, tl.reshape(b_A, [NC, BC, NC, BC]), 0.), 2)   # [NC, BC, BC]
        b_N = tl.zeros([NC, BC, BC], dtype=tl.float32)
        for i in tl.static_range(1, BC):
            mask_i = (o_i == i)[None, :, None]
            b_a = -tl.sum(tl.where(mask_i, b_D, 0.), 1)                              # [NC, BC]
            b_a = b_a + tl.sum(b_a[:, :, None] * b_N, 1)
            b_N = tl.where(mask_i, b_a[:, None, :], b_N)
        b_N += (o_i[:, None] == o_i[None, :]).to(tl.float32)[None, :, :]
        b_Xd = tl.reshape(tl.where(mask_d4, b_N[:, :, None, :], 0.), [BT, BT])
        b_L = tl.where((o_t[:, None] // BC) > (o_t[None, :] // BC), b_A, 0.)
        b_E = tl.dot(b_Xd, b_L, input_precision=PRECISION)
        b_E2 = tl.dot(b_E, b_E, input_precision=PRECISION)
        b_P = tl.where(o_t[:, None] == o_t[None, :], 1., 0.) - b_E + b_E2 - tl.dot(b_E, b_E2, input_precision=PRECISION)
        b_X = tl.dot(b_P, b_Xd, input_precision=PRECISION)

    for i_k in range(tl.cdiv(K, BK)):
        o_k = i_k * BK + tl.arange(0, BK)
        mask_k = o_k < K
        mask_tk = mask_t[:, None] & mask_k[None, :]
        o_tk = o_tr + o_k[None, :]
        b_k = tl.load(k + s_row * K + o_tk, mask=mask_tk, other=0.).to(tl.float32)
        b_q = tl.load(q + s_row * K + o_tk, mask=mask_tk, other=0.).to(tl.float32)
        b_g = tl.load(g + s_row * K + o_tk, mask=mask_tk, other=0.).to(tl.float32)
        b_gc = tl.cumsum(b_g, axis=0)
        b_gl = tl.sum(b_g, 0)                                                   # Γ_last [BK]
        b_eg = tl.exp(b_gc)
        tl.store(qg + s_row * K + o_tk, (b_q * b_eg).to(qg.dtype.element_ty), mask=mask_tk)
        tl.store(kg + s_row * K + o_tk, (b_k * tl.exp(b_gl[None, :] - b_gc)).to(kg.dtype.element_ty), mask=mask_tk)
        b_w = tl.dot(b_X, b_k * (b_beta[:, None] * b_eg), input_precision=PRECISION)
        tl.store(w + s_row * K + o_tk, b_w.to(w.dtype.element_ty), mask=mask_tk)
        tl.store(gl + (i_c * H + i_h) * K + o_k, tl.exp(b_gl), mask=mask_k)
    for i_v in range(tl.cdiv(V, BV)):
        o_v = i_v * BV + tl.arange(0, BV)
        mask_tv = mask_t[:, None] & (o_v < V)[None, :]
        o_tv = o_t[:, None] * (H * V) + o_v[None, :]
        b_v = tl.load(v + s_row * V + o_tv, mask=mask_tv, other=0.).to(tl.float32)
        b_u = tl.dot(b_X, b_v * b_beta[:, None], input_precision=PRECISION)
        tl.store(u + s_row * V + o_tv, b_u.to(u.dtype.element_ty), mask=mask_tv)

    # a NaN gate would poison the whole state silently: flag it, the wrapper raises after the launch
    tl.store(flags, 1, mask=n_nan_g > 0)
    tl.store(flags + 1, 1, mask=n_nan_beta > 0)


@triton.jit
def kda_state_chunked_fwd_kernel(
    qg, kg, w, u, aqk, gl, o, h0, ht, hb,
    cu_seqlens, chunk_offsets, boundary_offsets,
    T, NSEG, CPS,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, VS: tl.constexpr,
    USE_INITIAL_STATE: tl.constexpr, STORE_BOUNDARY: tl.constexpr, STORE_FINAL: tl.constexpr,
    IS_VARLEN: tl.constexpr, IS_LOCAL: tl.constexpr, PRECISION: tl.constexpr,
):
    """One (V-block, head, sequence segment) walks its chunks: Vn = U - W M, o = (q e^Γ) M + Aqk Vn,
    M <- e^Γ_last M + (k e^(Γ_last-Γ))^T Vn.

    IS_LOCAL (the first pass of the two-level scan): start from zero, or from identity columns for the
    V-blocks past V (they carry the transition P with U = 0), write no outputs, store the segment's end
    state to ht ([N, NSEG, H, K, VS], VS = V + K).
    """
    i_v, i_h, i_z = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64), tl.program_id(2).to(tl.int64)
    if IS_VARLEN:
        i_n = i_z
        i_s = i_z * 0
        bos = tl.load(cu_seqlens + i_n).to(tl.int64)
        eos = tl.load(cu_seqlens + i_n + 1).to(tl.int64)
        c_off = tl.load(chunk_offsets + i_n).to(tl.int64)
        b_off = tl.load(boundary_offsets + i_n).to(tl.int64)
    else:
        i_n = i_z // NSEG
        i_s = i_z % NSEG
        bos = i_n * T
        eos = bos + T
        c_off = i_n * tl.cdiv(T, BT)
        b_off = i_n * (T // BT)
    L = eos - bos
    NT = tl.cdiv(L, BT)
    c_begin = i_s * CPS
    c_end = tl.minimum(c_begin + CPS, NT)

    o_t = tl.arange(0, BT)
    o_k = tl.arange(0, BK)
    mask_k = o_k < K
    o_v = i_v * BV + tl.arange(0, BV)
    mask_v = o_v < V
    if IS_LOCAL:
        b_h = tl.where(o_k[:, None] == (o_v - V)[None, :], 1., 0.)
        mask_h = mask_k[:, None] & (o_v < VS)[None, :]
    else:
        mask_h = mask_k[:, None] & mask_v[None, :]
        b_h = tl.zeros([BK, BV], dtype=tl.float32)
        if USE_INITIAL_STATE:
            p_h0 = h0 + ((i_n * NSEG + i_s) * H + i_h) * K * V + o_k[:, None] * V + o_v[None, :]
            b_h = tl.load(p_h0, mask=mask_h, other=0.).to(tl.float32)

    for i_c in range(c_begin, c_end):
        t0 = bos + i_c * BT
        mask_t = (i_c * BT + o_t) < L
        o_row = (t0 + o_t).to(tl.int64) * H + i_h
        mask_tk = mask_t[:, None] & mask_k[None, :]
        mask_tv = mask_t[:, None] & mask_v[None, :]
        p_tk = o_row[:, None] * K + o_k[None, :]
        b_w = tl.load(w + p_tk, mask=mask_tk, other=0.)
        b_u = tl.load(u + o_row[:, None] * V + o_v[None, :], mask=mask_tv, other=0.)
        b_hd = b_h.to(b_w.dtype)
        b_vn = b_u.to(tl.float32) - tl.dot(b_w, b_hd, input_precision=PRECISION)
        b_vnd = b_vn.to(b_w.dtype)
        if not IS_LOCAL:
            b_qg = tl.load(qg + p_tk, mask=mask_tk, other=0.)
            b_a = tl.load(aqk + o_row[:, None] * BT + o_t[None, :], mask=mask_t[:, None], other=0.)
            b_o = tl.dot(b_qg, b_hd, input_precision=PRECISION) + tl.dot(b_a, b_vnd, input_precision=PRECISION)
            tl.store(o + o_row[:, None] * V + o_v[None, :], b_o.to(o.dtype.element_ty), mask=mask_tv)
        b_kg = tl.load(kg + p_tk, mask=mask_tk, other=0.)
        b_gl = tl.load(gl + ((c_off + i_c) * H + i_h) * K + o_k, mask=mask_k, other=0.)
        b_h = b_h * b_gl[:, None] + tl.dot(tl.trans(b_kg), b_vnd, input_precision=PRECISION)
        if STORE_BOUNDARY:
            if (i_c + 1) * BT <= L:
                p_hb = hb + ((b_off + i_c) * H + i_h) * K * V + o_k[:, None] * V + o_v[None, :]
                tl.store(p_hb, b_h, mask=mask_h)

    if IS_LOCAL:
        p_ht = ht + ((i_n * NSEG + i_s) * H + i_h) * K * VS + o_k[:, None] * VS + o_v[None, :]
        tl.store(p_ht, b_h, mask=mask_h)
    elif STORE_FINAL:
        if i_s == NSEG - 1:
            p_ht = ht + (i_n * H + i_h) * K * V + o_k[:, None] * V + o_v[None, :]
            tl.store(p_ht, b_h, mask=mask_h)


@triton.jit
def kda_combine_chunked_fwd_kernel(
    h0, hl, hs, NSEG,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BK: tl.constexpr, BV: tl.constexpr,
    USE_INITIAL_STATE: tl.constexpr,
):
    """Segment start states: hs[n, s] = P_(s-1) hs[n, s-1] + B_(s-1), hs[n, 0] = h0[n].

    hl holds each segment's local end state B (columns < V) and transition P (columns >= V).
    """
    i_v, i_h, i_n = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64), tl.program_id(2).to(tl.int64)
    VS: tl.constexpr = V + K
    o_k = tl.arange(0, BK)
    mask_k = o_k < K
    o_v = i_v * BV + tl.arange(0, BV)
    mask_h = mask_k[:, None] & (o_v < V)[None, :]
    b_h = tl.zeros([BK, BV], dtype=tl.float32)
    if USE_INITIAL_STATE:
        b_h = tl.load(h0 + (i_n * H + i_h) * K * V + o_k[:, None] * V + o_v[None, :], mask=mask_h, other=0.)
    for i_s in range(NSEG):
        p_hs = hs + ((i_n * NSEG + i_s) * H + i_h) * K * V + o_k[:, None] * V + o_v[None, :]
        tl.store(p_hs, b_h, mask=mask_h)
        p_l = hl + ((i_n * NSEG + i_s) * H + i_h) * K * VS + o_k[:, None] * VS
        b_p = tl.load(p_l + V + o_k[None, :], mask=mask_k[:, None] & mask_k[None, :], other=0.)
        b_b = tl.load(p_l + o_v[None, :], mask=mask_h, other=0.)
        # tf32 would round the carried state to 10 bits once per segment; 3xtf32 keeps float32 accuracy
        # on tensor cores (an "ieee" dot of a [K, K] tile falls back to slow FMA code)
        b_h = tl.dot(b_p, b_h, input_precision="tf32x3") + b_b


@triton.jit
def kda_recurrent_fused_fwd_kernel(
    q, k, v, g, beta, o, h0, ht, cu_seqlens,
    T,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BK: tl.constexpr, BV: tl.constexpr,
    USE_INITIAL_STATE: tl.constexpr, IS_VARLEN: tl.constexpr,
):
    """Token loop per (V-block, sequence x head): decay rows, predict, delta, update, read."""
    i_v, i_nh = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
    i_n, i_h = i_nh // H, i_nh % H
    if IS_VARLEN:
        bos = tl.load(cu_seqlens + i_n).to(tl.int64)
        eos = tl.load(cu_seqlens + i_n + 1).to(tl.int64)
    else:
        bos = i_n * T
        eos = bos + T
    o_k = tl.arange(0, BK)
    mask_k = o_k < K
    o_v = i_v * BV + tl.arange(0, BV)
    mask_v = o_v < V
    mask_h = mask_k[:, None] & mask_v[None, :]
    p_h = (i_n * H + i_h) * K * V + o_k[:, None] * V + o_v[None, :]
    b_h = tl.zeros([BK, BV], dtype=tl.float32)
    if USE_INITIAL_STATE:
        b_h = tl.load(h0 + p_h, mask=mask_h, other=0.).to(tl.float32)
    for t in range(bos, eos):
        o_row = t * H + i_h
        b_q = tl.load(q + o_row * K + o_k, mask=mask_k, other=0.).to(tl.float32)
        b_k = tl.load(k + o_row * K + o_k, mask=mask_k, other=0.).to(tl.float32)
        b_g = tl.load(g + o_row * K + o_k, mask=mask_k, other=0.).to(tl.float32)
        b_v = tl.load(v + o_row * V + o_v, mask=mask_v, other=0.).to(tl.float32)
        b_beta = tl.load(beta + o_row).to(tl.float32)
        b_h = b_h * tl.exp(b_g)[:, None]
        b_d = b_beta * (b_v - tl.sum(b_h * b_k[:, None], 0))
        b_h += b_k[:, None] * b_d[None, :]
        b_o = tl.sum(b_h * b_q[:, None], 0)
        tl.store(o + o_row * V + o_v, b_o.to(o.dtype.element_ty), mask=mask_v)
    tl.store(ht + p_h, b_h, mask=mask_h)


@triton.jit
def _conv_window(z, conv_w, conv_in, i_b, ch, mask_ch, C, W: tl.constexpr, BW: tl.constexpr):
    """(new window = last W of concat(old window, z) [BK, BW], silu(Σ_j w[ch, j] window[j]) [BK]) in f32."""
    o_w = tl.arange(0, BW)
    p_old = conv_in + (i_b * C + ch[:, None]) * W + (o_w[None, :] + 1)
    b_win = tl.load(p_old, mask=mask_ch[:, None] & (o_w + 1 < W)[None, :], other=0.).to(tl.float32)
    b_z = tl.load(z + i_b * C + ch, mask=mask_ch, other=0.).to(tl.float32)
    b_win = tl.where((o_w == W - 1)[None, :], b_z[:, None], b_win)
    b_cw = tl.load(conv_w + ch[:, None] * W + o_w[None, :], mask=mask_ch[:, None] & (o_w < W)[None, :],
                   other=0.).to(tl.float32)
    b_c = tl.sum(b_win * b_cw, 1)
    return b_win, b_c * tl.sigmoid(b_c)


@triton.jit
def _decode_block(h_in, h_out, o, s_h, i_bh, i_v, b_v, b_k, b_ke, b_qe, b_eg, b_kq, b_beta, o_k, mask_k,
                  K: tl.constexpr, BV: tl.constexpr):
    """Value columns [i_v BV, i_v BV + BV) of one head's decode step: read, update, write the state."""
    o_v = i_v * BV + tl.arange(0, BV)
    mask_v = o_v < K
    mask_h = mask_k[:, None] & mask_v[None, :]
    p_h = s_h + o_k[:, None] * K + o_v[None, :]
    b_h = tl.load(h_in + p_h, mask=mask_h, other=0.)
    # this block's values: a register vector cannot be sliced, select it instead ([BK, BV] work,
    # the same order as the tile arithmetic below)
    b_vb = tl.sum(tl.where(o_k[:, None] == o_v[None, :], b_v[:, None], 0.), 0)
    b_d = b_beta * (b_vb - tl.sum(b_h * b_ke[:, None], 0))
    b_o = tl.sum(b_h * b_qe[:, None], 0) + b_kq * b_d
    b_h = b_h * b_eg[:, None] + b_k[:, None] * b_d[None, :]
    tl.store(h_out + p_h, b_h, mask=mask_h)
    tl.store(o + i_bh * K + o_v, b_o.to(o.dtype.element_ty), mask=mask_v)


@triton.jit
def kda_decode_fused_fwd_kernel(
    z, f, b, conv_w, A_log, conv_in, conv_out, h_in, h_out, o,
    lower_bound, scale,
    H: tl.constexpr, K: tl.constexpr, W: tl.constexpr,
    BK: tl.constexpr, BV: tl.constexpr, BW: tl.constexpr, NUM_STAGES: tl.constexpr,
    USE_LOWER_BOUND: tl.constexpr,
):
    """One token per (head, sequence): conv window step, SiLU, L2 (q scaled), gate, beta, delta step.

    One program owns a whole head: the q and k conv windows of a head are read for every value column,
    so splitting V across programs would race on the in-place window update. The state streams through
    in [K, BV] column blocks, so a program keeps small tiles live and several programs share an SM:
    that is what keeps enough bytes in flight. NUM_STAGES = 0 unrolls the blocks; >= 1 is a tl.range
    loop (1 = no software pipelining, which measured fastest: NOTES.md).
    """
    i_h, i_b = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
    C = 3 * H * K
    o_k = tl.arange(0, BK)
    mask_k = o_k < K
    ch = i_h * K + o_k
    w_q, b_q = _conv_window(z, conv_w, conv_in, i_b, ch, mask_k, C, W, BW)
    w_k, b_k = _conv_window(z, conv_w, conv_in, i_b, H * K + ch, mask_k, C, W, BW)
    w_v, b_v = _conv_window(z, conv_w, conv_in, i_b, 2 * H * K + ch, mask_k, C, W, BW)
    b_f = tl.load(f + i_b * H * K + ch, mask=mask_k, other=0.).to(tl.float32)
    b_a = tl.exp(tl.load(A_log + i_h).to(tl.float32))
    b_beta = tl.sigmoid(tl.load(b + i_b * H + i_h).to(tl.float32))
    # in place, a thread may overwrite a window column that another thread of this program has not read
    tl.debug_barrier()
    o_w = tl.arange(0, BW)
    p_cw = conv_out + (i_b * C + ch[:, None]) * W + o_w[None, :]
    mask_w = mask_k[:, None] & (o_w < W)[None, :]
    tl.store(p_cw, w_q.to(conv_out.dtype.element_ty), mask=mask_w)
    tl.store(p_cw + H * K * W, w_k.to(conv_out.dtype.element_ty), mask=mask_w)
    tl.store(p_cw + 2 * H * K * W, w_v.to(conv_out.dtype.element_ty), mask=mask_w)

    b_q = b_q / tl.sqrt(tl.sum(b_q * b_q, 0) + 1e-6) * scale
    b_k = b_k / tl.sqrt(tl.sum(b_k * b_k, 0) + 1e-6)
    if USE_LOWER_BOUND:
        b_g = lower_bound * tl.sigmoid(b_a * b_f)
    else:
        b_g = -b_a * tl.where(b_f > 20., b_f, tl.log(1. + tl.exp(tl.minimum(b_f, 20.))))
    # both reads go through the OLD state: r = M^T (e^g k), o = (e^g M + k d^T)^T q = M^T (e^g q) + (k.q) d
    b_eg = tl.exp(b_g)
    b_ke = b_eg * b_k
    b_qe = b_eg * b_q
    b_kq = tl.sum(b_k * b_q, 0)
    s_h = (i_b * H + i_h) * K * K
    if NUM_STAGES == 0:
        # fully unrolled: the compiler can issue every block's state load up front
        for i_v in tl.static_range(0, (K + BV - 1) // BV):
            _decode_block(h_in, h_out, o, s_h, i_b * H + i_h, i_v, b_v, b_k, b_ke, b_qe, b_eg, b_kq, b_beta,
                          o_k, mask_k, K, BV)
    else:
        for i_v in tl.range(0, tl.cdiv(K, BV), num_stages=NUM_STAGES):
            _decode_block(h_in, h_out, o, s_h, i_b * H + i_h, i_v, b_v, b_k, b_ke, b_qe, b_eg, b_kq, b_beta,
                          o_k, mask_k, K, BV)
