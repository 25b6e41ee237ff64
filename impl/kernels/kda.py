"""Triton kernels of KDA (oracle/kda.py). Host wrappers live in impl/kda.py.

Letters: B batch, T tokens, N sequences, H heads, K key dim, V value dim, C conv channels, W conv width,
BT chunk (64), BC sub-chunk (16), NC = BT // BC, BK/BV tiles, NSEG segments of a sequence's chunks.

Chunked prefill (ours since issue 14 step 26: impl.kda.INTRA = "split") is five launches (six with segments):
  Γ        per (chunk, head): the chunk-local cumsum of g (kda_chunk_cumsum_fwd_kernel)
  diagonal per (chunk, 16-row block, head): the block's kk and qk products through its first row, the
           strong-decay pairs (_intra_pairs) in the same program, (I + β A_ii)^-1, q⊙e^Γ, k⊙e^(Γ_last-Γ), β k⊙e^Γ
  off-diag per (chunk, head): the blocks below the diagonal through their row block's first row, X's merge
  W / U    per (chunk, head): W = X (β k⊙e^Γ), U = X (β v), e^Γ_last
  state    per (head, V-block, sequence segment): the chunk recurrence, emitting outputs and boundary states
  combine  per (head, V-block, sequence): M_s = P_s M_(s-1) + B_s across segments (two-level scan)
The whole-chunk intra kernel (kda_intra_chunked_fwd_kernel, intra="columns", ours before step 26) does the
first four in one program per (chunk, head). Strong decays (the softplus gate: a 16-row block falling past
SPAN_MAX) flag its launch; the wrapper then runs it again compiled with PAIRS, which adds the products the
factorisation left out, and the state pass after it.
"""
import triton
import triton.language as tl

# how far Γ may fall below a 16-row block's reference row for the factorised products (_intra_column_block):
# the most the checkpoint's bounded gate reaches (15 steps of g > -5); _outside_factor_range says why
SPAN_MAX = tl.constexpr(75.0)


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
    -5 lower bound, inside float32's e^88. Entries past SPAN_MAX (stronger gates: _outside_factor_range)
    are left out here and added whole by _intra_pairs in the PAIRS launch. The third value is the block
    rows' fall below the reference (0 on other rows): the caller keeps its maximum to flag that launch.
    """
    o_t = tl.arange(0, BT)
    b_ref = tl.sum(tl.where((o_t == i_s * BC + ANCHOR)[:, None], b_gc, 0.), 0)
    b_d = b_gc - b_ref[None, :]
    b_er = tl.exp(tl.where((o_t >= i_s * BC)[:, None], b_d, float("-inf")))
    b_kc = b_k * tl.exp(tl.where(((o_t >= i_s * BC) & (o_t < i_s * BC + BC))[:, None] & (b_d >= -SPAN_MAX),
                                 -b_d, float("-inf")))
    b_A = tl.dot(b_k * b_er, tl.trans(b_kc), b_A, input_precision=PRECISION)
    b_Aqk = tl.dot(b_q * b_er, tl.trans(b_kc), b_Aqk, input_precision=PRECISION)
    return b_A, b_Aqk, tl.where(((o_t >= i_s * BC) & (o_t < i_s * BC + BC))[:, None], -b_d, 0.)


@triton.jit
def _intra_column_block_stacked(b_k, b_q, b_gc, b_S, i_s: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr,
                                BK: tl.constexpr, PRECISION: tl.constexpr, ANCHOR: tl.constexpr):
    """_intra_column_block with the kk and qk products as ONE dot: [k e^(Γ-ref); q e^(Γ-ref)] [2 BT, BK]
    against the same column factor, accumulated in b_S [2 BT, BT] (kk rows first): half the dots an
    iteration, each staged and waited once (issue 14 step 21)."""
    o_t = tl.arange(0, BT)
    b_ref = tl.sum(tl.where((o_t == i_s * BC + ANCHOR)[:, None], b_gc, 0.), 0)
    b_d = b_gc - b_ref[None, :]
    b_er = tl.exp(tl.where((o_t >= i_s * BC)[:, None], b_d, float("-inf")))
    b_kc = b_k * tl.exp(tl.where(((o_t >= i_s * BC) & (o_t < i_s * BC + BC))[:, None] & (b_d >= -SPAN_MAX),
                                 -b_d, float("-inf")))
    b_a = tl.reshape(tl.permute(tl.join(b_k * b_er, b_q * b_er), (2, 0, 1)), [2 * BT, BK])
    return tl.dot(b_a, tl.trans(b_kc), b_S, input_precision=PRECISION), \
        tl.where(((o_t >= i_s * BC) & (o_t < i_s * BC + BC))[:, None], -b_d, 0.)


@triton.jit
def _outside_factor_range(b_gc, BT: tl.constexpr, BC: tl.constexpr, ANCHOR: tl.constexpr):
    """[BT, BK] True where Γ has fallen more than SPAN_MAX = 75 below its BC-row block's reference row: there
    _intra_column_block's column factor e^(ref - Γ) leaves the range it is exact in (it leaves them out).

    75 is the most the checkpoint's bounded gate can reach (15 steps of g > -5). Past it the factor nears
    float32's e^88 (inf: NaN outputs) and its row partner e^(Γ - ref) nears e^-87 (denormal: flushed to 0
    on a GPU), and a term up to e^(span - 87) of the products is lost. The softplus gate (no lower bound)
    gets there with |g| > 5 a token. Whether an entry is in depends on its own row and the rows above it
    in its block only, so which path a product takes is as causal as the products (kda.causal, bitwise)."""
    o_t = tl.arange(0, BT)
    b_over = b_gc != b_gc
    for i_s in tl.static_range(BT // BC):
        b_ref = tl.sum(tl.where((o_t == i_s * BC + ANCHOR)[:, None], b_gc, 0.), 0)
        rows = (o_t >= i_s * BC) & (o_t < i_s * BC + BC)
        b_over = b_over | (rows[:, None] & (b_gc - b_ref[None, :] < -SPAN_MAX))
    return b_over


@triton.jit
def _intra_pairs(b_k, b_q, b_gc, b_over, b_A, b_Aqk, BT: tl.constexpr):
    """Adds the kk and qk products' terms of the key entries b_over marks (the ones _intra_column_block leaves
    out) to b_A, b_Aqk [BT, BT], one key column at a time, each pair's decay e^(Γ_i - Γ_j) (i >= j: never
    above 1) taken whole: exact for any gate, on CUDA cores. Only the PAIRS launch has it, over every K
    tile of a chunk in which some block fell past SPAN_MAX."""
    o_t = tl.arange(0, BT)
    for j in range(BT):
        sel = o_t == j
        b_kj = tl.sum(tl.where(sel[:, None] & b_over, b_k, 0.), 0)
        b_gj = tl.sum(tl.where(sel[:, None], b_gc, 0.), 0)
        # only the marked entries' decays are taken: another's may be no row's (a -inf Γ past the end)
        b_e = tl.exp(tl.where((o_t >= j)[:, None] & (b_kj != 0.)[None, :], b_gc - b_gj[None, :],
                              float("-inf"))) * b_kj[None, :]
        b_a, b_aq = tl.sum(b_k * b_e, 1), tl.sum(b_q * b_e, 1)
        # only a real term touches b_A: x + (-0.) and x + 0. can differ in a zero's sign, and whether a chunk
        # runs this pass depends on later rows (kda.causal compares bits)
        b_A = tl.where(sel[None, :] & (b_a != 0.)[:, None], b_A + b_a[:, None], b_A)
        b_Aqk = tl.where(sel[None, :] & (b_aq != 0.)[:, None], b_Aqk + b_aq[:, None], b_Aqk)
    return b_A, b_Aqk


@triton.jit
def _row_at(b, r, R: tl.constexpr):
    """Row r of a [R, BK] register tile, exactly: a masked sum whose other rows enter as zeros (a register
    tile cannot be indexed by row)."""
    return tl.sum(tl.where((tl.arange(0, R) == r)[:, None], b, 0.), 0)


@triton.jit
def _chunk_gamma(b_g, o_t, mask_t, n_valid, BT: tl.constexpr, GC: tl.constexpr):
    """(Γ [BT, BK], Γ_last [BK]) of one K tile: g's cumulative sum along the chunk's tokens, or, with GC,
    Γ as loaded (kda_chunk_cumsum_fwd_kernel computed it; issue 14 step 23)."""
    if GC:
        # the scan along the tokens is a chain of shared-memory exchanges between warps (17 % of the intra
        # kernel's instructions). Rows past the chunk's last token hold Γ's last value, as the scan of
        # their zero g would: a 0 there puts e^(0 - ref) (e^165 at ref = -165) against their zero k, and
        # inf * 0 is NaN
        b_last = _row_at(b_g, tl.minimum(n_valid, BT) - 1, BT)
        return tl.where(mask_t[:, None], b_g, b_last[None, :]), b_last
    else:
        return tl.cumsum(b_g, axis=0), tl.sum(b_g, 0)


@triton.jit
def _intra_chunk(cu_seqlens, chunk_indices, chunk_offsets, T, BT: tl.constexpr, IS_VARLEN: tl.constexpr,
                 OFFSET64: tl.constexpr):
    """(head, chunk within its sequence, chunk over all sequences, sequence begin, sequence end) of a program."""
    return _intra_chunk_at(tl.program_id(0), tl.program_id(1), tl.program_id(2), cu_seqlens, chunk_indices,
                           chunk_offsets, T, BT, IS_VARLEN, OFFSET64)


@triton.jit
def _intra_chunk_at(i_t, i_h, i_b, cu_seqlens, chunk_indices, chunk_offsets, T, BT: tl.constexpr,
                    IS_VARLEN: tl.constexpr, OFFSET64: tl.constexpr):
    """_intra_chunk of the (chunk, head, row) ids given (a grid that packs more into an axis splits it first)."""
    # 64-bit chunk bases: past B*T*H*K = 2^31 elements a 32-bit base wraps and reads another row's tokens
    # (flash-linear-attention #1080); OFFSET64 False plants exactly that (mutant kda_intra_offsets_int32)
    if OFFSET64:
        i_t, i_h, i_b = i_t.to(tl.int64), i_h.to(tl.int64), i_b.to(tl.int64)
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
    return i_h, i_t, i_c, bos, eos


@triton.jit
def kda_intra_chunked_fwd_kernel(
    q, k, v, g, beta,
    qg, kg, w, u, aqk, gl, flags,
    cu_seqlens, chunk_indices, chunk_offsets,
    T,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BC: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    IS_VARLEN: tl.constexpr, PRECISION: tl.constexpr, INV_MERGE: tl.constexpr, ANCHOR: tl.constexpr,
    OFFSET64: tl.constexpr, STACK: tl.constexpr = False, GC: tl.constexpr = False, PAIRS: tl.constexpr = False,
):
    i_h, i_t, i_c, bos, eos = _intra_chunk(cu_seqlens, chunk_indices, chunk_offsets, T, BT, IS_VARLEN, OFFSET64)
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
    b_fall = tl.zeros([BT, BK], dtype=tl.float32)

    b_A = tl.zeros([BT, BT], dtype=tl.float32)
    b_Aqk = tl.zeros([BT, BT], dtype=tl.float32)
    b_S = tl.zeros([2 * BT, BT], dtype=tl.float32)
    for i_k in range(tl.cdiv(K, BK)):
        o_k = i_k * BK + tl.arange(0, BK)
        mask_k = o_k < K
        mask_tk = mask_t[:, None] & mask_k[None, :]
        o_tk = o_tr + o_k[None, :]
        b_k = tl.load(k + s_row * K + o_tk, mask=mask_tk, other=0.).to(tl.float32)
        b_q = tl.load(q + s_row * K + o_tk, mask=mask_tk, other=0.).to(tl.float32)
        b_g = tl.load(g + s_row * K + o_tk, mask=mask_tk, other=0.).to(tl.float32)
        n_nan_g += tl.sum(tl.sum((b_g != b_g).to(tl.int32), 1), 0)
        b_gc, _ = _chunk_gamma(b_g, o_t, mask_t, n_valid, BT, GC)
        # b_f*: each block's rows' fall below its reference (the column factor's exponent), kept entry-wise
        # and reduced once after the loop: a reduction here would cost barriers every K tile
        if STACK:
            b_S, b_f0 = _intra_column_block_stacked(b_k, b_q, b_gc, b_S, 0, BT, BC, BK, PRECISION, ANCHOR)
            b_S, b_f1 = _intra_column_block_stacked(b_k, b_q, b_gc, b_S, 1, BT, BC, BK, PRECISION, ANCHOR)
            b_S, b_f2 = _intra_column_block_stacked(b_k, b_q, b_gc, b_S, 2, BT, BC, BK, PRECISION, ANCHOR)
            b_S, b_f3 = _intra_column_block_stacked(b_k, b_q, b_gc, b_S, 3, BT, BC, BK, PRECISION, ANCHOR)
        else:
            b_A, b_Aqk, b_f0 = _intra_column_block(b_k, b_q, b_gc, b_A, b_Aqk, 0, BT, BC, PRECISION, ANCHOR)
            b_A, b_Aqk, b_f1 = _intra_column_block(b_k, b_q, b_gc, b_A, b_Aqk, 1, BT, BC, PRECISION, ANCHOR)
            b_A, b_Aqk, b_f2 = _intra_column_block(b_k, b_q, b_gc, b_A, b_Aqk, 2, BT, BC, PRECISION, ANCHOR)
            b_A, b_Aqk, b_f3 = _intra_column_block(b_k, b_q, b_gc, b_A, b_Aqk, 3, BT, BC, PRECISION, ANCHOR)
        # rows past a partial chunk's end hold Γ's last value, so they add no fall
        b_fall = tl.maximum(b_fall, tl.maximum(tl.maximum(b_f0, b_f1), tl.maximum(b_f2, b_f3)))
    fall = tl.max(tl.max(b_fall, 1), 0)
    if STACK:
        b_A, b_Aqk = tl.split(tl.permute(tl.reshape(b_S, [2, BT, BT]), (1, 2, 0)))
    # the entries the column blocks left out, only where some block fell past SPAN_MAX (the softplus gate's
    # strong decays; the bounded gate never comes here). PAIRS is a second compile the wrapper launches
    # only after this one flagged such a fall: the pass's code in the kernel costs the common path (its
    # registers and layouts), even untaken
    if PAIRS and fall > SPAN_MAX:
        for i_k in range(tl.cdiv(K, BK)):
            o_k = i_k * BK + tl.arange(0, BK)
            mask_tk = mask_t[:, None] & (o_k < K)[None, :]
            o_tk = o_tr + o_k[None, :]
            b_k = tl.load(k + s_row * K + o_tk, mask=mask_tk, other=0.).to(tl.float32)
            b_q = tl.load(q + s_row * K + o_tk, mask=mask_tk, other=0.).to(tl.float32)
            b_g = tl.load(g + s_row * K + o_tk, mask=mask_tk, other=0.).to(tl.float32)
            b_gc, _ = _chunk_gamma(b_g, o_t, mask_t, n_valid, BT, GC)
            b_over = _outside_factor_range(b_gc, BT, BC, ANCHOR)
            b_A, b_Aqk = _intra_pairs(b_k, b_q, b_gc, b_over, b_A, b_Aqk, BT)

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
        b_gc, b_gl = _chunk_gamma(b_g, o_t, mask_t, n_valid, BT, GC)
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
    tl.store(flags + 2, 1, mask=fall > SPAN_MAX)


@triton.jit
def _gate(x, a, lower_bound, GATE: tl.constexpr):
    """g from the gate's input x = f + dt_bias (oracle.kda.gate): -a·softplus(x) (GATE 1) or
    lower_bound·sigmoid(a·x) (GATE 2), a = e^A_log; GATE 0 passes x through as g."""
    if GATE == 1:
        # softplus with torch's threshold 20 (x itself above it). log(1 + u) loses u's low bits to the rounding
        # of 1 + u (all of them below x = -17, where it gives 0); log(w)·u/(w - 1) with w = 1 + u rounded is
        # log1p to a few ulps (the rounding of w cancels in the ratio), and u itself once w rounds to 1
        u = tl.exp(x)
        w = 1. + u
        sp = tl.where(x > 20., x, tl.where(w == 1., u, tl.log(w) * (u / (w - 1.))))
        return -a * sp
    elif GATE == 2:
        return lower_bound * tl.sigmoid(a * x)
    else:
        return x


@triton.jit
def kda_chunk_cumsum_fwd_kernel(
    g, gc, A_log, dt_bias, lower_bound, cu_seqlens, chunk_indices, chunk_offsets, T,
    H: tl.constexpr, K: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr, IS_VARLEN: tl.constexpr,
    OFFSET64: tl.constexpr, GATE: tl.constexpr = 0, HAS_BIAS: tl.constexpr = False,
):
    """Γ = the chunk-local cumulative sum of g along the tokens, float32 (the intra kernel's GC input).
    GATE 1 / 2 (issue 14 step 24): `g` holds the gate's input f and g = gate(f + dt_bias) is made here,
    so the log decays never exist in memory (_gate)."""
    i_h, i_t, i_c, bos, eos = _intra_chunk(cu_seqlens, chunk_indices, chunk_offsets, T, BT, IS_VARLEN, OFFSET64)
    t0 = bos + i_t * BT
    o_t = tl.arange(0, BT)
    mask_t = o_t < eos - t0
    s_row = t0 * H + i_h
    if GATE:
        a = tl.exp(tl.load(A_log + i_h).to(tl.float32))
    else:
        a = 0.
    for i_k in range(tl.cdiv(K, BK)):
        o_k = i_k * BK + tl.arange(0, BK)
        mask_tk = mask_t[:, None] & (o_k < K)[None, :]
        o_tk = o_t[:, None] * (H * K) + o_k[None, :]
        b_g = tl.load(g + s_row * K + o_tk, mask=mask_tk, other=0.).to(tl.float32)
        if GATE:
            if HAS_BIAS:
                b_g += tl.load(dt_bias + i_h * K + o_k, mask=o_k < K, other=0.).to(tl.float32)[None, :]
            # rows past the last token must add 0 to the scan, whatever gate(0) is
            b_g = tl.where(mask_tk, _gate(b_g, a, lower_bound, GATE), 0.)
        tl.store(gc + s_row * K + o_tk, tl.cumsum(b_g, axis=0), mask=mask_tk)


@triton.jit
def _rows(p, i_s: tl.constexpr, o_r, o_c, mask_c, n_valid, RS: tl.constexpr, BC: tl.constexpr):
    """Rows [i_s BC, i_s BC + BC) of a chunk's tile (p at the chunk's first row, RS the row stride) in float32."""
    mask = ((i_s * BC + o_r) < n_valid)[:, None] & mask_c[None, :]
    return tl.load(p + (i_s * BC + o_r)[:, None] * RS + o_c[None, :], mask=mask, other=0.).to(tl.float32)


@triton.jit
def _store_rows(p, i_s: tl.constexpr, x, o_r, o_c, mask_c, n_valid, RS: tl.constexpr, BC: tl.constexpr):
    mask = ((i_s * BC + o_r) < n_valid)[:, None] & mask_c[None, :]
    tl.store(p + (i_s * BC + o_r)[:, None] * RS + o_c[None, :], x.to(p.dtype.element_ty), mask=mask)


@triton.jit
def _beta_rows(p, i_s: tl.constexpr, o_r, n_valid, H: tl.constexpr, BC: tl.constexpr):
    return tl.load(p + (i_s * BC + o_r) * H, mask=(i_s * BC + o_r) < n_valid, other=0.).to(tl.float32)


@triton.jit
def _kk_qk_block(k_i, q_i, G_i, ref_j, kc_j, a, aq, PRECISION: tl.constexpr):
    """Adds sub-chunk i's rows against sub-chunk j's columns (j <= i) of the kk and qk products over one K tile.

    The reference is sub-chunk j's FIRST row (as _intra_column_block's ANCHOR 0): row factors e^(Γ_i - ref) <= 1,
    column factors e^(ref - Γ_j) <= e^(15 |g|), and every row depends on gates at rows <= it only (kda.causal).
    """
    er = tl.exp(G_i - ref_j[None, :])
    kc_t = tl.trans(kc_j)
    a = tl.dot(k_i * er, kc_t, a, input_precision=PRECISION)
    aq = tl.dot(q_i * er, kc_t, aq, input_precision=PRECISION)
    return a, aq


@triton.jit
def _sub_inverse(a, o_r, BC: tl.constexpr, PRECISION: tl.constexpr):
    """(I + a)^-1 of a strictly lower [BC, BC] block by doubling, as kda_intra_chunked_fwd_kernel's INV_MERGE
    inside its 16-row blocks (X <- X - X L_S X, two dots a level); forward substitution row by row would
    take two cross-row reductions per row."""
    b_X = tl.where(o_r[:, None] == o_r[None, :], 1., 0.)
    for i_l in tl.static_range(BC.bit_length() - 1):
        # L_S: row r and column c in one 2S-block, r in its lower half and c in its upper half, i.e.
        # r >> i_l == (c >> i_l) + 1 with c >> i_l even (fewer operations than comparing the three bits apart:
        # the interpreter's time is its operation count)
        v = o_r >> i_l
        mask_l = (v[:, None] == v[None, :] + 1) & ((v & 1) == 0)[None, :]
        b_X = b_X - tl.dot(b_X, tl.dot(tl.where(mask_l, a, 0.), b_X, input_precision=PRECISION),
                           input_precision=PRECISION)
    return b_X


@triton.jit
def _sub_chunk(p_k, p_g, j: tl.constexpr, c, o_r, o_k, mask_k, n_valid, HK: tl.constexpr, BC: tl.constexpr):
    """Sub-chunk j's k, Γ, column factor k e^(ref - Γ) and ref, its FIRST row of Γ (see _kk_qk_block); c: the
    gates summed over the sub-chunks before it, returned summed past it; and how many of its gates are NaN.
    (A caller that needs only k and Γ leaves the rest to the compiler's dead-code elimination.)"""
    b_g = _rows(p_g, j, o_r, o_k, mask_k, n_valid, HK, BC)
    b_k = _rows(p_k, j, o_r, o_k, mask_k, n_valid, HK, BC)
    G = tl.cumsum(b_g, 0) + c[None, :]
    # the first row's Γ is its own gate plus c: a load, where picking it out of G takes a cross-row reduction
    ref = tl.load(p_g + (j * BC) * HK + o_k, mask=mask_k & (j * BC + o_k * 0 < n_valid), other=0.).to(tl.float32) + c
    n_nan = tl.sum(tl.sum((b_g != b_g).to(tl.int32), 1), 0)
    return b_k, G, b_k * tl.exp(ref[None, :] - G), ref, c + tl.sum(b_g, 0), n_nan


@triton.jit
def kda_intra_kk_fwd_kernel(
    q, k, g, beta,
    aqk, x, flags,
    cu_seqlens, chunk_indices, chunk_offsets,
    T,
    H: tl.constexpr, K: tl.constexpr,
    BT: tl.constexpr, BC: tl.constexpr, BK: tl.constexpr,
    IS_VARLEN: tl.constexpr, PRECISION: tl.constexpr, OFFSET64: tl.constexpr,
):
    """The qk matrix and X = (I + A)^-1 of one (chunk, head) from its four 16-row sub-chunks (issue 14 step 18).

    kda_intra_chunked_fwd_kernel multiplies whole-chunk tiles for each of the four column blocks (6.4x the
    kk / qk products the lower triangle needs, 8 exponentials an element) and inverts by doubling (12
    dependent 64x64x64 dots), holding two [BT, BT] accumulators: 255 registers. Here row block i takes its
    own pass over K: the pairs (i, j <= i) as [BC, BK] x [BK, BC] products, then X's row block by block
    forward substitution, X_ii = (I + A_ii)^-1 and X_ij = -X_ii sum_(j <= m < i) A_im X_mj, so at most
    four pairs' accumulators and X's finished blocks are live. X's lower blocks go to `x` (float32) for
    kda_intra_wu_fwd_kernel.
    """
    tl.static_assert(BT == 4 * BC)
    i_h, i_t, i_c, bos, eos = _intra_chunk(cu_seqlens, chunk_indices, chunk_offsets, T, BT, IS_VARLEN, OFFSET64)
    t0 = bos + i_t * BT
    n_valid = eos - bos - i_t * BT
    s_row = t0 * H + i_h
    o_r = tl.arange(0, BC)
    HK: tl.constexpr = H * K
    HT: tl.constexpr = H * BT
    p_k, p_q, p_g = k + s_row * K, q + s_row * K, g + s_row * K
    p_a, p_x = aqk + s_row * BT, x + s_row * BT
    o_c = tl.arange(0, BC)
    all_c = o_c < BC
    incl = o_r[:, None] >= o_r[None, :]
    lower = o_r[:, None] > o_r[None, :]
    zero = tl.zeros([BC, BC], dtype=tl.float32)
    b0 = _beta_rows(beta + s_row, 0, o_r, n_valid, H, BC)
    b1 = _beta_rows(beta + s_row, 1, o_r, n_valid, H, BC)
    b2 = _beta_rows(beta + s_row, 2, o_r, n_valid, H, BC)
    b3 = _beta_rows(beta + s_row, 3, o_r, n_valid, H, BC)
    n_nan_beta = tl.sum((b0 != b0).to(tl.int32) + (b1 != b1).to(tl.int32) + (b2 != b2).to(tl.int32)
                        + (b3 != b3).to(tl.int32), 0)
    n_nan_g = n_nan_beta * 0

    # row block 0
    a00, s00 = zero, zero
    for i_k in range(tl.cdiv(K, BK)):
        o_k = i_k * BK + tl.arange(0, BK)
        mask_k = o_k < K
        c = tl.zeros([BK], dtype=tl.float32)
        k0, G0, kc0, r0, c, nan0 = _sub_chunk(p_k, p_g, 0, c, o_r, o_k, mask_k, n_valid, HK, BC)
        q0 = _rows(p_q, 0, o_r, o_k, mask_k, n_valid, HK, BC)
        a00, s00 = _kk_qk_block(k0, q0, G0, r0, kc0, a00, s00, PRECISION)
        n_nan_g += nan0
    _store_rows(p_a, 0, tl.where(incl, s00, 0.), o_r, o_c, all_c, n_valid, HT, BC)
    _store_rows(p_a, 0, zero, o_r, BC + o_c, all_c, n_valid, HT, BC)
    _store_rows(p_a, 0, zero, o_r, 2 * BC + o_c, all_c, n_valid, HT, BC)
    _store_rows(p_a, 0, zero, o_r, 3 * BC + o_c, all_c, n_valid, HT, BC)
    x00 = _sub_inverse(tl.where(lower, a00 * b0[:, None], 0.), o_r, BC, PRECISION)
    _store_rows(p_x, 0, x00, o_r, o_c, all_c, n_valid, HT, BC)

    # row block 1
    a10, s10, a11, s11 = zero, zero, zero, zero
    for i_k in range(tl.cdiv(K, BK)):
        o_k = i_k * BK + tl.arange(0, BK)
        mask_k = o_k < K
        c = tl.zeros([BK], dtype=tl.float32)
        k0, G0, kc0, r0, c, nan0 = _sub_chunk(p_k, p_g, 0, c, o_r, o_k, mask_k, n_valid, HK, BC)
        k1, G1, kc1, r1, c, nan1 = _sub_chunk(p_k, p_g, 1, c, o_r, o_k, mask_k, n_valid, HK, BC)
        q1 = _rows(p_q, 1, o_r, o_k, mask_k, n_valid, HK, BC)
        a10, s10 = _kk_qk_block(k1, q1, G1, r0, kc0, a10, s10, PRECISION)
        a11, s11 = _kk_qk_block(k1, q1, G1, r1, kc1, a11, s11, PRECISION)
        n_nan_g += nan1
    _store_rows(p_a, 1, s10, o_r, o_c, all_c, n_valid, HT, BC)
    _store_rows(p_a, 1, tl.where(incl, s11, 0.), o_r, BC + o_c, all_c, n_valid, HT, BC)
    _store_rows(p_a, 1, zero, o_r, 2 * BC + o_c, all_c, n_valid, HT, BC)
    _store_rows(p_a, 1, zero, o_r, 3 * BC + o_c, all_c, n_valid, HT, BC)
    x11 = _sub_inverse(tl.where(lower, a11 * b1[:, None], 0.), o_r, BC, PRECISION)
    x10 = -tl.dot(x11, tl.dot(a10 * b1[:, None], x00, input_precision=PRECISION), input_precision=PRECISION)
    _store_rows(p_x, 1, x10, o_r, o_c, all_c, n_valid, HT, BC)
    _store_rows(p_x, 1, x11, o_r, BC + o_c, all_c, n_valid, HT, BC)

    # row block 2
    a20, s20, a21, s21, a22, s22 = zero, zero, zero, zero, zero, zero
    for i_k in range(tl.cdiv(K, BK)):
        o_k = i_k * BK + tl.arange(0, BK)
        mask_k = o_k < K
        c = tl.zeros([BK], dtype=tl.float32)
        k0, G0, kc0, r0, c, nan0 = _sub_chunk(p_k, p_g, 0, c, o_r, o_k, mask_k, n_valid, HK, BC)
        k1, G1, kc1, r1, c, nan1 = _sub_chunk(p_k, p_g, 1, c, o_r, o_k, mask_k, n_valid, HK, BC)
        k2, G2, kc2, r2, c, nan2 = _sub_chunk(p_k, p_g, 2, c, o_r, o_k, mask_k, n_valid, HK, BC)
        q2 = _rows(p_q, 2, o_r, o_k, mask_k, n_valid, HK, BC)
        a20, s20 = _kk_qk_block(k2, q2, G2, r0, kc0, a20, s20, PRECISION)
        a21, s21 = _kk_qk_block(k2, q2, G2, r1, kc1, a21, s21, PRECISION)
        a22, s22 = _kk_qk_block(k2, q2, G2, r2, kc2, a22, s22, PRECISION)
        n_nan_g += nan2
    _store_rows(p_a, 2, s20, o_r, o_c, all_c, n_valid, HT, BC)
    _store_rows(p_a, 2, s21, o_r, BC + o_c, all_c, n_valid, HT, BC)
    _store_rows(p_a, 2, tl.where(incl, s22, 0.), o_r, 2 * BC + o_c, all_c, n_valid, HT, BC)
    _store_rows(p_a, 2, zero, o_r, 3 * BC + o_c, all_c, n_valid, HT, BC)
    x22 = _sub_inverse(tl.where(lower, a22 * b2[:, None], 0.), o_r, BC, PRECISION)
    a20, a21 = a20 * b2[:, None], a21 * b2[:, None]
    x21 = -tl.dot(x22, tl.dot(a21, x11, input_precision=PRECISION), input_precision=PRECISION)
    x20 = -tl.dot(x22, tl.dot(a21, x10, tl.dot(a20, x00, input_precision=PRECISION), input_precision=PRECISION),
                  input_precision=PRECISION)
    _store_rows(p_x, 2, x20, o_r, o_c, all_c, n_valid, HT, BC)
    _store_rows(p_x, 2, x21, o_r, BC + o_c, all_c, n_valid, HT, BC)
    _store_rows(p_x, 2, x22, o_r, 2 * BC + o_c, all_c, n_valid, HT, BC)

    # row block 3
    a30, s30, a31, s31, a32, s32, a33, s33 = zero, zero, zero, zero, zero, zero, zero, zero
    for i_k in range(tl.cdiv(K, BK)):
        o_k = i_k * BK + tl.arange(0, BK)
        mask_k = o_k < K
        c = tl.zeros([BK], dtype=tl.float32)
        k0, G0, kc0, r0, c, nan0 = _sub_chunk(p_k, p_g, 0, c, o_r, o_k, mask_k, n_valid, HK, BC)
        k1, G1, kc1, r1, c, nan1 = _sub_chunk(p_k, p_g, 1, c, o_r, o_k, mask_k, n_valid, HK, BC)
        k2, G2, kc2, r2, c, nan2 = _sub_chunk(p_k, p_g, 2, c, o_r, o_k, mask_k, n_valid, HK, BC)
        k3, G3, kc3, r3, c, nan3 = _sub_chunk(p_k, p_g, 3, c, o_r, o_k, mask_k, n_valid, HK, BC)
        q3 = _rows(p_q, 3, o_r, o_k, mask_k, n_valid, HK, BC)
        a30, s30 = _kk_qk_block(k3, q3, G3, r0, kc0, a30, s30, PRECISION)
        a31, s31 = _kk_qk_block(k3, q3, G3, r1, kc1, a31, s31, PRECISION)
        a32, s32 = _kk_qk_block(k3, q3, G3, r2, kc2, a32, s32, PRECISION)
        a33, s33 = _kk_qk_block(k3, q3, G3, r3, kc3, a33, s33, PRECISION)
        n_nan_g += nan3
    _store_rows(p_a, 3, s30, o_r, o_c, all_c, n_valid, HT, BC)
    _store_rows(p_a, 3, s31, o_r, BC + o_c, all_c, n_valid, HT, BC)
    _store_rows(p_a, 3, s32, o_r, 2 * BC + o_c, all_c, n_valid, HT, BC)
    _store_rows(p_a, 3, tl.where(incl, s33, 0.), o_r, 3 * BC + o_c, all_c, n_valid, HT, BC)
    x33 = _sub_inverse(tl.where(lower, a33 * b3[:, None], 0.), o_r, BC, PRECISION)
    a30, a31, a32 = a30 * b3[:, None], a31 * b3[:, None], a32 * b3[:, None]
    x32 = -tl.dot(x33, tl.dot(a32, x22, input_precision=PRECISION), input_precision=PRECISION)
    x31 = -tl.dot(x33, tl.dot(a32, x21, tl.dot(a31, x11, input_precision=PRECISION), input_precision=PRECISION),
                  input_precision=PRECISION)
    x30 = -tl.dot(x33, tl.dot(a32, x20, tl.dot(a31, x10, tl.dot(a30, x00, input_precision=PRECISION),
                                                 input_precision=PRECISION), input_precision=PRECISION),
                  input_precision=PRECISION)
    _store_rows(p_x, 3, x30, o_r, o_c, all_c, n_valid, HT, BC)
    _store_rows(p_x, 3, x31, o_r, BC + o_c, all_c, n_valid, HT, BC)
    _store_rows(p_x, 3, x32, o_r, 2 * BC + o_c, all_c, n_valid, HT, BC)
    _store_rows(p_x, 3, x33, o_r, 3 * BC + o_c, all_c, n_valid, HT, BC)

    # a NaN gate would poison the whole state silently: flag it, the wrapper raises after the launch
    tl.store(flags, 1, mask=n_nan_g > 0)
    tl.store(flags + 1, 1, mask=n_nan_beta > 0)


@triton.jit
def kda_intra_wu_fwd_kernel(
    q, k, v, g, beta, x,
    qg, kg, w, u, gl,
    cu_seqlens, chunk_indices, chunk_offsets,
    T,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BC: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    IS_VARLEN: tl.constexpr, PRECISION: tl.constexpr, OFFSET64: tl.constexpr,
):
    """W = X (β k e^Γ), U = X (β v), q e^Γ, k e^(Γ_last - Γ) and e^Γ_last from kda_intra_kk_fwd_kernel's X
    blocks."""
    tl.static_assert(BT == 4 * BC)
    i_h, i_t, i_c, bos, eos = _intra_chunk(cu_seqlens, chunk_indices, chunk_offsets, T, BT, IS_VARLEN, OFFSET64)
    t0 = bos + i_t * BT
    n_valid = eos - bos - i_t * BT
    s_row = t0 * H + i_h
    o_r = tl.arange(0, BC)
    HK: tl.constexpr = H * K
    HV: tl.constexpr = H * V
    HT: tl.constexpr = H * BT
    b0 = _beta_rows(beta + s_row, 0, o_r, n_valid, H, BC)
    b1 = _beta_rows(beta + s_row, 1, o_r, n_valid, H, BC)
    b2 = _beta_rows(beta + s_row, 2, o_r, n_valid, H, BC)
    b3 = _beta_rows(beta + s_row, 3, o_r, n_valid, H, BC)
    o_c = tl.arange(0, BC)
    all_c = o_c < BC
    p_x = x + s_row * BT
    x00 = _rows(p_x, 0, o_r, o_c, all_c, n_valid, HT, BC)
    x10 = _rows(p_x, 1, o_r, o_c, all_c, n_valid, HT, BC)
    x11 = _rows(p_x, 1, o_r, BC + o_c, all_c, n_valid, HT, BC)
    x20 = _rows(p_x, 2, o_r, o_c, all_c, n_valid, HT, BC)
    x21 = _rows(p_x, 2, o_r, BC + o_c, all_c, n_valid, HT, BC)
    x22 = _rows(p_x, 2, o_r, 2 * BC + o_c, all_c, n_valid, HT, BC)
    x30 = _rows(p_x, 3, o_r, o_c, all_c, n_valid, HT, BC)
    x31 = _rows(p_x, 3, o_r, BC + o_c, all_c, n_valid, HT, BC)
    x32 = _rows(p_x, 3, o_r, 2 * BC + o_c, all_c, n_valid, HT, BC)
    x33 = _rows(p_x, 3, o_r, 3 * BC + o_c, all_c, n_valid, HT, BC)

    # W = X (β k e^Γ), with q e^Γ, k e^(Γ_last - Γ) and e^Γ_last for the state pass
    for i_k in range(tl.cdiv(K, BK)):
        o_k = i_k * BK + tl.arange(0, BK)
        mask_k = o_k < K
        p_k, p_q, p_g = k + s_row * K, q + s_row * K, g + s_row * K
        # Γ as the kk kernel took it (the same helper: the same bits)
        c = tl.zeros([BK], dtype=tl.float32)
        k0, G0, _, _, c, _ = _sub_chunk(p_k, p_g, 0, c, o_r, o_k, mask_k, n_valid, HK, BC)
        k1, G1, _, _, c, _ = _sub_chunk(p_k, p_g, 1, c, o_r, o_k, mask_k, n_valid, HK, BC)
        k2, G2, _, _, c, _ = _sub_chunk(p_k, p_g, 2, c, o_r, o_k, mask_k, n_valid, HK, BC)
        k3, G3, _, _, b_gl, _ = _sub_chunk(p_k, p_g, 3, c, o_r, o_k, mask_k, n_valid, HK, BC)
        e0, e1, e2, e3 = tl.exp(G0), tl.exp(G1), tl.exp(G2), tl.exp(G3)
        kb0, kb1 = k0 * (b0[:, None] * e0), k1 * (b1[:, None] * e1)
        kb2, kb3 = k2 * (b2[:, None] * e2), k3 * (b3[:, None] * e3)
        w0 = tl.dot(x00, kb0, input_precision=PRECISION)
        w1 = tl.dot(x11, kb1, tl.dot(x10, kb0, input_precision=PRECISION), input_precision=PRECISION)
        w2 = tl.dot(x22, kb2, tl.dot(x21, kb1, tl.dot(x20, kb0, input_precision=PRECISION),
                                     input_precision=PRECISION), input_precision=PRECISION)
        w3 = tl.dot(x33, kb3, tl.dot(x32, kb2, tl.dot(x31, kb1, tl.dot(x30, kb0, input_precision=PRECISION),
                                                      input_precision=PRECISION), input_precision=PRECISION),
                    input_precision=PRECISION)
        p_w = w + s_row * K
        _store_rows(p_w, 0, w0, o_r, o_k, mask_k, n_valid, HK, BC)
        _store_rows(p_w, 1, w1, o_r, o_k, mask_k, n_valid, HK, BC)
        _store_rows(p_w, 2, w2, o_r, o_k, mask_k, n_valid, HK, BC)
        _store_rows(p_w, 3, w3, o_r, o_k, mask_k, n_valid, HK, BC)
        p_kg = kg + s_row * K
        _store_rows(p_kg, 0, k0 * tl.exp(b_gl[None, :] - G0), o_r, o_k, mask_k, n_valid, HK, BC)
        _store_rows(p_kg, 1, k1 * tl.exp(b_gl[None, :] - G1), o_r, o_k, mask_k, n_valid, HK, BC)
        _store_rows(p_kg, 2, k2 * tl.exp(b_gl[None, :] - G2), o_r, o_k, mask_k, n_valid, HK, BC)
        _store_rows(p_kg, 3, k3 * tl.exp(b_gl[None, :] - G3), o_r, o_k, mask_k, n_valid, HK, BC)
        p_qg = qg + s_row * K
        _store_rows(p_qg, 0, _rows(p_q, 0, o_r, o_k, mask_k, n_valid, HK, BC) * e0, o_r, o_k, mask_k, n_valid, HK, BC)
        _store_rows(p_qg, 1, _rows(p_q, 1, o_r, o_k, mask_k, n_valid, HK, BC) * e1, o_r, o_k, mask_k, n_valid, HK, BC)
        _store_rows(p_qg, 2, _rows(p_q, 2, o_r, o_k, mask_k, n_valid, HK, BC) * e2, o_r, o_k, mask_k, n_valid, HK, BC)
        _store_rows(p_qg, 3, _rows(p_q, 3, o_r, o_k, mask_k, n_valid, HK, BC) * e3, o_r, o_k, mask_k, n_valid, HK, BC)
        tl.store(gl + (i_c * H + i_h) * K + o_k, tl.exp(b_gl), mask=mask_k)
    # U = X (β v)
    for i_v in range(tl.cdiv(V, BV)):
        o_v = i_v * BV + tl.arange(0, BV)
        mask_v = o_v < V
        p_v = v + s_row * V
        vb0 = _rows(p_v, 0, o_r, o_v, mask_v, n_valid, HV, BC) * b0[:, None]
        vb1 = _rows(p_v, 1, o_r, o_v, mask_v, n_valid, HV, BC) * b1[:, None]
        vb2 = _rows(p_v, 2, o_r, o_v, mask_v, n_valid, HV, BC) * b2[:, None]
        vb3 = _rows(p_v, 3, o_r, o_v, mask_v, n_valid, HV, BC) * b3[:, None]
        u0 = tl.dot(x00, vb0, input_precision=PRECISION)
        u1 = tl.dot(x11, vb1, tl.dot(x10, vb0, input_precision=PRECISION), input_precision=PRECISION)
        u2 = tl.dot(x22, vb2, tl.dot(x21, vb1, tl.dot(x20, vb0, input_precision=PRECISION),
                                     input_precision=PRECISION), input_precision=PRECISION)
        u3 = tl.dot(x33, vb3, tl.dot(x32, vb2, tl.dot(x31, vb1, tl.dot(x30, vb0, input_precision=PRECISION),
                                                      input_precision=PRECISION), input_precision=PRECISION),
                    input_precision=PRECISION)
        p_u = u + s_row * V
        _store_rows(p_u, 0, u0, o_r, o_v, mask_v, n_valid, HV, BC)
        _store_rows(p_u, 1, u1, o_r, o_v, mask_v, n_valid, HV, BC)
        _store_rows(p_u, 2, u2, o_r, o_v, mask_v, n_valid, HV, BC)
        _store_rows(p_u, 3, u3, o_r, o_v, mask_v, n_valid, HV, BC)


@triton.jit
def _exp(x, FTZ: tl.constexpr):
    """e^x. FTZ (issue 14 step 31; a GPU compile only, the interpreter runs no PTX): ex2.approx.ftz of x log2(e),
    so a result below float32's normal range (e^-87.3) is 0. tl.exp keeps such results as denormals through a
    fix-up around each MUFU.EX2 (a compare, a halving and a squaring): 12 % of the diagonal kernel's
    instructions. Where a factor falls that low its product is below e^(75 - 87) of the terms it joins."""
    if FTZ:
        return tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=r,r", [x * 1.4426950408889634],
                                         dtype=tl.float32, is_pure=True, pack=1)
    else:
        return tl.exp(x)


@triton.jit
def _gated_qk(b_q, b_k, b_g, b_gl, b_beta, rows, FTZ: tl.constexpr):
    """(q e^Γ, k e^(Γ_last - Γ), β k e^Γ) of a tile's rows, float32; `rows` [R, 1] masks the rows past the
    chunk's end out of e^(Γ_last - Γ) (their Γ is not a decay, and the factor could overflow against their zero
    k). The diagonal kernel (MAKE_QK) and the W / U kernel both make them here, with the same FTZ: the same bits
    either way."""
    b_eg = _exp(b_g, FTZ)
    b_kl = b_k * _exp(tl.where(rows, b_gl[None, :] - b_g, float("-inf")), FTZ)
    return b_q * b_eg, b_kl, b_k * (b_beta[:, None] * b_eg)


@triton.jit
def _x_dot(b_X, b, LOW_DOTS: tl.constexpr, PRECISION: tl.constexpr):
    """X b for W / U: on b rounded to X's dtype (bf16 tensor-core dots, float32 sums) with LOW_DOTS, else on
    float32 operands at PRECISION."""
    if LOW_DOTS:
        return tl.dot(b_X, b.to(b_X.dtype))
    else:
        return tl.dot(b_X, b, input_precision=PRECISION)


@triton.jit
def _gated_g(p, o, mask, o_k, mask_k, i_h, a, dt_bias, lower_bound, K: tl.constexpr, GATE: tl.constexpr,
             HAS_BIAS: tl.constexpr):
    """g at p + o (float32, 0 where masked): as loaded, or gate(f + dt_bias) with a fused gate (GATE 1 / 2).
    The gate's value at 0 is not 0: masked rows are zeroed after it, so they add nothing to Γ's sums."""
    b = tl.load(p + o, mask=mask, other=0.).to(tl.float32)
    if GATE:
        if HAS_BIAS:
            b += tl.load(dt_bias + i_h * K + o_k, mask=mask_k, other=0.).to(tl.float32)[None, :]
        b = tl.where(mask, _gate(b, a, lower_bound, GATE), 0.)
    return b


@triton.jit
def kda_intra_diag_fwd_kernel(
    q, k, gc, beta,
    aqk, x, flags,
    cu_seqlens, chunk_indices, chunk_offsets,
    T,
    H: tl.constexpr, K: tl.constexpr,
    BT: tl.constexpr, BC: tl.constexpr, BK: tl.constexpr,
    IS_VARLEN: tl.constexpr, PRECISION: tl.constexpr, OFFSET64: tl.constexpr,
    qg=None, kg=None, kb=None, MAKE_QK: tl.constexpr = False,
    gl=None, A_log=None, dt_bias=None, lower_bound=0., FROM_G: tl.constexpr = False, GATE: tl.constexpr = 0,
    HAS_BIAS: tl.constexpr = False, SUB_FIRST: tl.constexpr = False, FTZ: tl.constexpr = False,
    NAN_LAST: tl.constexpr = False,
):
    """One 16-row diagonal block of a (chunk, head) (issue 14 step 26; grid (chunks, H, rows x NC)): its kk and
    qk products, the qk block to `aqk` and X_ii = (I + β A_ii)^-1 to `x` (float32), from Γ (`gc`).

    The reference is the block's FIRST row, unshifted: the row factor e^(Γ_i - ref) <= 1 and every row
    depends on gates at rows <= it only (kda.causal). The column factor e^(ref - Γ_j) reaches e^(15 |g|):
    inside float32 up to SPAN_MAX (the bounded gate's reach). Entries past it (the softplus gate's strong
    decays) are left out of the dots and added whole by _intra_pairs, in this same small program: a
    16-row block's pairs pass costs a launch nothing where no block falls that far.

    MAKE_QK (issue 14 step 27): also q e^Γ, k e^(Γ_last - Γ) and β k e^Γ (to `kb` in W's operand dtype) of
    the block's rows, which it holds over the whole K already, as kda_intra_wu_split_fwd_kernel would make
    them (the same expressions: the same bits); that kernel then reads `kb` instead of q, k and Γ.

    FTZ (issue 14 step 31): every e^x of the factors and of q e^Γ, k e^(Γ_last - Γ), β k e^Γ without the
    denormal fix-up (_exp).

    NAN_LAST (issue 14 step 32): the NaN report from Γ_last and β with no reduction: Γ is a running sum along
    the chunk, so a NaN in any row's g (or a +inf meeting a -inf) is in Γ_last's row too; a [BK] mask gathers
    it across the K tiles and each lane holding a NaN stores the flag itself after the loop (every writer
    writes 1). Without it, a count over the block's [16, BK] Γ tile each K tile and over β: cross-thread
    sums. (The lane stores inside the K loop measured 25 us slower than the counts at H = 64, T = 16K.)

    SUB_FIRST (issue 14 step 30): the grid is (chunks x NC, H, rows), a chunk's four blocks neighbours in the
    launch order, so a tile all four read comes from DRAM once. FROM_G (step 30, needs MAKE_QK and SUB_FIRST;
    refuted on the H100, impl.candidates.kda_gamma_diag): `gc` holds g (or the gate's input f, GATE 1 / 2 as
    kda_chunk_cumsum_fwd_kernel) and Γ is scanned here through the chunk's four blocks (_gamma_block): the
    block's own rows are kept, Γ_last is the last block's last row. Block 0's program stores e^Γ_last to `gl`
    (the state pass's)."""
    NC: tl.constexpr = BT // BC
    if SUB_FIRST:
        i_h, i_t, i_c, bos, eos = _intra_chunk_at(tl.program_id(0) // NC, tl.program_id(1), tl.program_id(2),
                                                  cu_seqlens, chunk_indices, chunk_offsets, T, BT, IS_VARLEN,
                                                  OFFSET64)
        i_s = tl.program_id(0) % NC
    else:
        i_h, i_t, i_c, bos, eos = _intra_chunk_at(tl.program_id(0), tl.program_id(1), tl.program_id(2) // NC,
                                                  cu_seqlens, chunk_indices, chunk_offsets, T, BT, IS_VARLEN,
                                                  OFFSET64)
        i_s = tl.program_id(2) % NC
    t0 = bos + i_t * BT + i_s * BC
    n_valid = eos - t0
    if n_valid > 0:
        o_r = tl.arange(0, BC)
        mask_r = o_r < n_valid
        s_row = t0 * H + i_h
        o_rk = s_row * K + o_r[:, None] * (H * K)
        # Γ_last: the chunk's last row before its end (MAKE_QK)
        s_last = (tl.minimum(bos + i_t * BT + BT, eos) - 1) * H + i_h
        b_beta = tl.load(beta + s_row + o_r * H, mask=mask_r, other=0.).to(tl.float32)
        if NAN_LAST:
            b_nan = tl.zeros([BK], dtype=tl.int32)
        else:
            n_nan_beta = tl.sum((b_beta != b_beta).to(tl.int32), 0)
            n_nan_g = n_nan_beta * 0
        b_A = tl.zeros([BC, BC], dtype=tl.float32)
        b_Aqk = tl.zeros([BC, BC], dtype=tl.float32)
        if FROM_G:
            # the chunk's rows block by block: o_t one block's rows, o_tk at the chunk's first
            o_t = tl.arange(0, BC)
            n_chunk = eos - (bos + i_t * BT)
            mask_t = o_t < n_chunk
            o_tk = ((bos + i_t * BT) * H + i_h) * K + o_t[:, None] * (H * K)
            if GATE:
                a = tl.exp(tl.load(A_log + i_h).to(tl.float32))
            else:
                a = 0.
        for i_k in range(tl.cdiv(K, BK)):
            o_k = i_k * BK + tl.arange(0, BK)
            mask_k = o_k < K
            mask_rk = mask_r[:, None] & mask_k[None, :]
            o_st = o_rk + o_k[None, :]
            b_k = tl.load(k + o_st, mask=mask_rk, other=0.).to(tl.float32)
            b_q = tl.load(q + o_st, mask=mask_rk, other=0.).to(tl.float32)
            if FROM_G:
                # Γ as the off-diagonal kernel makes it (_gamma_block's chain: each block's cumsum on the
                # previous block's last row), through all four blocks: Γ_last - Γ then cancels as one chain's
                # differences do (a separate sum for Γ_last measured 3-8x the state error on the interpreter)
                G_b = tl.cumsum(_gated_g(gc, o_tk + o_k[None, :], mask_t[:, None] & mask_k[None, :], o_k, mask_k,
                                         i_h, a, dt_bias, lower_bound, K, GATE, HAS_BIAS), axis=0)
                # the block's own rows: block 0's, replaced by a later block's where i_s is that block
                b_g = G_b
                for i_b in tl.static_range(1, NC):
                    G_b = _gamma_block(gc, o_tk + i_b * BC * H * K + o_k[None, :],
                                       (o_t < n_chunk - i_b * BC)[:, None] & mask_k[None, :], G_b, o_k, mask_k,
                                       i_h, a, dt_bias, lower_bound, K, GATE, HAS_BIAS, BC)
                    b_g = tl.where(i_s == i_b, G_b, b_g)
                b_gl = _row_at(G_b, BC - 1, BC)
                # the reference row's Γ with the bits of the block's own row 0 (its factor is then exactly 1)
                b_ref = _row_at(b_g, 0, BC)
                if i_s == 0:
                    tl.store(gl + (i_c * H + i_h) * K + o_k, tl.exp(b_gl), mask=mask_k)
            else:
                b_g = tl.load(gc + o_st, mask=mask_rk, other=0.).to(tl.float32)
                b_ref = tl.load(gc + s_row * K + o_k, mask=mask_k, other=0.).to(tl.float32)
            if not NAN_LAST:
                # a NaN anywhere in a chunk's g reaches Γ at its own row and every row after it
                n_nan_g += tl.sum(tl.sum((b_g != b_g).to(tl.int32), 1), 0)
            # rows past the end sit far below every real Γ (finite: -inf - -inf would be NaN in the pairs),
            # so their factors e^(Γ - ref) are 0 and they never count as a strong decay (their fall is masked)
            b_g = tl.where(mask_r[:, None], b_g, -3.0e38)
            b_d = b_g - b_ref[None, :]
            b_kc = b_k * _exp(tl.where(b_d >= -SPAN_MAX, -b_d, float("-inf")), FTZ)
            b_er = _exp(b_d, FTZ)
            b_A = tl.dot(b_k * b_er, tl.trans(b_kc), b_A, input_precision=PRECISION)
            b_Aqk = tl.dot(b_q * b_er, tl.trans(b_kc), b_Aqk, input_precision=PRECISION)
            b_fall = tl.where(mask_rk, -b_d, 0.)
            if tl.max(tl.max(b_fall, 1), 0) > SPAN_MAX:
                b_A, b_Aqk = _intra_pairs(b_k, b_q, b_g, b_fall > SPAN_MAX, b_A, b_Aqk, BC)
            if MAKE_QK or NAN_LAST:
                if not FROM_G:
                    b_gl = tl.load(gc + s_last * K + o_k, mask=mask_k, other=0.).to(tl.float32)
            if NAN_LAST:
                # Γ is a running sum along the chunk: a NaN in g at any of its rows is in Γ_last's row
                b_nan = tl.maximum(b_nan, (b_gl != b_gl).to(tl.int32))
            if MAKE_QK:
                b_qe, b_kl, b_kb = _gated_qk(b_q, b_k, b_g, b_gl, b_beta, mask_r[:, None], FTZ)
                tl.store(qg + o_st, b_qe.to(qg.dtype.element_ty), mask=mask_rk)
                tl.store(kg + o_st, b_kl.to(kg.dtype.element_ty), mask=mask_rk)
                tl.store(kb + o_st, b_kb.to(kb.dtype.element_ty), mask=mask_rk)
        o_a = s_row * BT + o_r[:, None] * (H * BT) + (i_s * BC + o_r)[None, :]
        tl.store(aqk + o_a, tl.where(o_r[:, None] >= o_r[None, :], b_Aqk, 0.).to(aqk.dtype.element_ty),
                 mask=mask_r[:, None])
        b_L = tl.where((o_r[:, None] > o_r[None, :]) & mask_r[:, None], b_A * b_beta[:, None], 0.)
        tl.store(x + o_a, _sub_inverse(b_L, o_r, BC, PRECISION), mask=mask_r[:, None])
        # a NaN gate would poison the whole state silently: flag it, the wrapper raises after the launches
        if NAN_LAST:
            tl.store(flags + tl.arange(0, BK) * 0, 1, mask=b_nan > 0)
            tl.store(flags + 1 + o_r * 0, 1, mask=b_beta != b_beta)
        else:
            tl.store(flags, 1, mask=n_nan_g > 0)
            tl.store(flags + 1, 1, mask=n_nan_beta > 0)


@triton.jit
def _off_block(k_i, q_i, er_i, k_j, G_j, ref_i, valid_i, a, aq, PRECISION: tl.constexpr, FTZ: tl.constexpr = False):
    """Adds row block i against column block j < i of the kk and qk products over one K tile, through row
    block i's FIRST row: e^(Γ_r - ref_i) <= 1 on its rows and e^(ref_i - Γ_c) <= 1 on the earlier ones, so
    neither factor can overflow for any gate (a product lost to underflow is below e^-87 of |k|^2).
    valid_i [1, BK]: block i has a row before the chunk's end (else ref_i is no row's Γ and the factors are 0).
    FTZ (issue 14 step 33): e^x as _exp's ex2.approx.ftz (both factors <= 1 here, so a flushed one's terms are
    below e^-87 of the products they join)."""
    kc_t = tl.trans(k_j * _exp(tl.where(valid_i, ref_i[None, :] - G_j, float("-inf")), FTZ))
    a = tl.dot(k_i * er_i, kc_t, a, input_precision=PRECISION)
    aq = tl.dot(q_i * er_i, kc_t, aq, input_precision=PRECISION)
    return a, aq


@triton.jit
def _gamma_block(p, o, mask, G_prev, o_k, mask_k, i_h, a, dt_bias, lower_bound, K: tl.constexpr,
                 GATE: tl.constexpr, HAS_BIAS: tl.constexpr, BC: tl.constexpr):
    """Γ of a 16-row block from its g and the block before it (G_prev): the scan carried on from the earlier
    block's last row (added to the block's first g, so a sequential scan gives one 64-row scan's bits). Rows
    past the chunk's end carry Γ on (their g is 0)."""
    b = _gated_g(p, o, mask, o_k, mask_k, i_h, a, dt_bias, lower_bound, K, GATE, HAS_BIAS)
    return tl.cumsum(tl.where((tl.arange(0, BC) == 0)[:, None], b + _row_at(G_prev, BC - 1, BC)[None, :], b), axis=0)


@triton.jit
def _row_block(i_s: tl.constexpr, o_r, n_valid, RS: tl.constexpr, BC: tl.constexpr):
    """Block i_s's row offsets [BC, 1] (stride RS) and row mask [BC, 1] (rows before the chunk's end): made once
    a program, so each load of the block's tiles costs the interpreter (whose time is its operation count)
    two adds and an and, not the whole index arithmetic again; a GPU compile hoists them either way."""
    rows = i_s * BC + o_r
    return (rows * RS)[:, None], (rows < n_valid)[:, None]


@triton.jit
def _tile_at(p, rows, rmask, cols, cmask):
    """A [BC, BK] tile at p + rows + cols (both broadcast), masked by rmask & cmask, in float32."""
    return tl.load(p + rows + cols, mask=rmask & cmask, other=0.).to(tl.float32)


@triton.jit
def kda_intra_offdiag_fwd_kernel(
    q, k, gc, beta,
    aqk, x,
    cu_seqlens, chunk_indices, chunk_offsets,
    T,
    H: tl.constexpr, K: tl.constexpr,
    BT: tl.constexpr, BC: tl.constexpr, BK: tl.constexpr,
    IS_VARLEN: tl.constexpr, PRECISION: tl.constexpr, OFFSET64: tl.constexpr,
    A_log=None, dt_bias=None, lower_bound=0., FROM_G: tl.constexpr = False, GATE: tl.constexpr = 0,
    HAS_BIAS: tl.constexpr = False, FTZ: tl.constexpr = False, xw=None, X_W: tl.constexpr = False,
    LOWER_ONLY: tl.constexpr = False,
):
    """The six off-diagonal 16 x 16 blocks of one (chunk, head)'s kk and qk products (issue 14 step 26), the qk
    ones (and the zero blocks above the diagonal) to `aqk`, then X = (I + A)^-1's lower blocks from the
    diagonal ones kda_intra_diag_fwd_kernel left in `x`, by block forward substitution
    X_ij = -X_ii sum_(j <= m < i) A_im X_mj (float32; the blocks above the diagonal are never written).
    FROM_G (issue 14 step 30, refuted; impl.candidates.kda_gamma_diag): `gc` holds g (or the gate's input f,
    GATE 1 / 2) and Γ is scanned here block by block (_gamma_block), each block carried on from the one before.
    FTZ (issue 14 step 33): the row and column factors' exps without tl.exp's denormal fix-up (_exp), as the
    diagonal kernel's since step 31. X_W (issue 14 step 34): all ten lower blocks of X, the diagonal ones
    included, go to `xw` in its dtype (the W / U dots' operand dtype) instead of the six to `x`: the W / U kernel
    rounded X to that dtype on load, so it reads the same bits in half the bytes on a bf16 run. LOWER_ONLY
    (step 35): the zero blocks right of the diagonal are not stored: the state pass reads aqk's blocks at or
    below the diagonal only (its LOWER_ONLY) and takes the others as the zeros they are."""
    tl.static_assert(BT == 4 * BC)
    i_h, i_t, i_c, bos, eos = _intra_chunk(cu_seqlens, chunk_indices, chunk_offsets, T, BT, IS_VARLEN, OFFSET64)
    t0 = bos + i_t * BT
    n_valid = eos - t0
    s_row = t0 * H + i_h
    o_r = tl.arange(0, BC)
    HK: tl.constexpr = H * K
    HT: tl.constexpr = H * BT
    p_k, p_q, p_g = k + s_row * K, q + s_row * K, gc + s_row * K
    rk0, m0 = _row_block(0, o_r, n_valid, HK, BC)
    rk1, m1 = _row_block(1, o_r, n_valid, HK, BC)
    rk2, m2 = _row_block(2, o_r, n_valid, HK, BC)
    rk3, m3 = _row_block(3, o_r, n_valid, HK, BC)
    # a row block with no row before the end: its reference is no row's Γ, and every factor it enters is 0
    z_k = tl.arange(0, BK) * 0
    f1, f2, f3 = z_k + BC < n_valid, z_k + 2 * BC < n_valid, z_k + 3 * BC < n_valid
    zero = tl.zeros([BC, BC], dtype=tl.float32)
    if GATE:
        a = tl.exp(tl.load(A_log + i_h).to(tl.float32))
    else:
        a = 0.
    a10, s10 = zero, zero
    a20, s20, a21, s21 = zero, zero, zero, zero
    a30, s30, a31, s31, a32, s32 = zero, zero, zero, zero, zero, zero
    for i_k in range(tl.cdiv(K, BK)):
        o_k = i_k * BK + tl.arange(0, BK)
        mask_k = o_k < K
        cols, cmask = o_k[None, :], mask_k[None, :]
        # each row block's tiles are loaded where first used: fewer tiles live at once
        k0 = _tile_at(p_k, rk0, m0, cols, cmask)
        k1 = _tile_at(p_k, rk1, m1, cols, cmask)
        q1 = _tile_at(p_q, rk1, m1, cols, cmask)
        if FROM_G:
            G0 = tl.cumsum(_gated_g(p_g, rk0 + cols, m0 & cmask, o_k, mask_k, i_h, a, dt_bias, lower_bound, K, GATE,
                                    HAS_BIAS), axis=0)
            G1 = _gamma_block(p_g, rk1 + cols, m1 & cmask, G0, o_k, mask_k, i_h, a, dt_bias, lower_bound, K,
                              GATE, HAS_BIAS, BC)
            r1 = _row_at(G1, 0, BC)
        else:
            G0 = _tile_at(p_g, rk0, m0, cols, cmask)
            G1 = _tile_at(p_g, rk1, m1, cols, cmask)
            r1 = tl.load(p_g + BC * HK + o_k, mask=mask_k & f1, other=0.).to(tl.float32)
        e1 = _exp(tl.where(m1, G1 - r1[None, :], float("-inf")), FTZ)
        a10, s10 = _off_block(k1, q1, e1, k0, G0, r1, f1[None, :], a10, s10, PRECISION, FTZ)
        k2 = _tile_at(p_k, rk2, m2, cols, cmask)
        q2 = _tile_at(p_q, rk2, m2, cols, cmask)
        if FROM_G:
            G2 = _gamma_block(p_g, rk2 + cols, m2 & cmask, G1, o_k, mask_k, i_h, a, dt_bias, lower_bound, K,
                              GATE, HAS_BIAS, BC)
            r2 = _row_at(G2, 0, BC)
        else:
            G2 = _tile_at(p_g, rk2, m2, cols, cmask)
            r2 = tl.load(p_g + 2 * BC * HK + o_k, mask=mask_k & f2, other=0.).to(tl.float32)
        e2 = _exp(tl.where(m2, G2 - r2[None, :], float("-inf")), FTZ)
        a20, s20 = _off_block(k2, q2, e2, k0, G0, r2, f2[None, :], a20, s20, PRECISION, FTZ)
        a21, s21 = _off_block(k2, q2, e2, k1, G1, r2, f2[None, :], a21, s21, PRECISION, FTZ)
        k3 = _tile_at(p_k, rk3, m3, cols, cmask)
        q3 = _tile_at(p_q, rk3, m3, cols, cmask)
        if FROM_G:
            G3 = _gamma_block(p_g, rk3 + cols, m3 & cmask, G2, o_k, mask_k, i_h, a, dt_bias, lower_bound, K,
                              GATE, HAS_BIAS, BC)
            r3 = _row_at(G3, 0, BC)
        else:
            G3 = _tile_at(p_g, rk3, m3, cols, cmask)
            r3 = tl.load(p_g + 3 * BC * HK + o_k, mask=mask_k & f3, other=0.).to(tl.float32)
        e3 = _exp(tl.where(m3, G3 - r3[None, :], float("-inf")), FTZ)
        a30, s30 = _off_block(k3, q3, e3, k0, G0, r3, f3[None, :], a30, s30, PRECISION, FTZ)
        a31, s31 = _off_block(k3, q3, e3, k1, G1, r3, f3[None, :], a31, s31, PRECISION, FTZ)
        a32, s32 = _off_block(k3, q3, e3, k2, G2, r3, f3[None, :], a32, s32, PRECISION, FTZ)
    p_a, p_x = aqk + s_row * BT, x + s_row * BT
    o_c = tl.arange(0, BC)[None, :]
    o_t = tl.arange(0, BT)[None, :]
    rt0, _ = _row_block(0, o_r, n_valid, HT, BC)
    rt1, _ = _row_block(1, o_r, n_valid, HT, BC)
    rt2, _ = _row_block(2, o_r, n_valid, HT, BC)
    rt3, _ = _row_block(3, o_r, n_valid, HT, BC)
    # the qk blocks below the diagonal, and zeros right of it where the state pass reads whole [BT, BT] rows
    if not LOWER_ONLY:
        tl.store(p_a + rt0 + o_t, tl.zeros([BC, BT], dtype=tl.float32).to(aqk.dtype.element_ty),
                 mask=m0 & (o_t >= BC))
    tl.store(p_a + rt1 + o_c, s10.to(aqk.dtype.element_ty), mask=m1)
    if not LOWER_ONLY:
        tl.store(p_a + rt1 + o_t, tl.zeros([BC, BT], dtype=tl.float32).to(aqk.dtype.element_ty),
                 mask=m1 & (o_t >= 2 * BC))
    tl.store(p_a + rt2 + o_c, s20.to(aqk.dtype.element_ty), mask=m2)
    tl.store(p_a + rt2 + BC + o_c, s21.to(aqk.dtype.element_ty), mask=m2)
    if not LOWER_ONLY:
        tl.store(p_a + rt2 + o_t, tl.zeros([BC, BT], dtype=tl.float32).to(aqk.dtype.element_ty),
                 mask=m2 & (o_t >= 3 * BC))
    tl.store(p_a + rt3 + o_c, s30.to(aqk.dtype.element_ty), mask=m3)
    tl.store(p_a + rt3 + BC + o_c, s31.to(aqk.dtype.element_ty), mask=m3)
    tl.store(p_a + rt3 + 2 * BC + o_c, s32.to(aqk.dtype.element_ty), mask=m3)

    b1 = _beta_rows(beta + s_row, 1, o_r, n_valid, H, BC)
    b2 = _beta_rows(beta + s_row, 2, o_r, n_valid, H, BC)
    b3 = _beta_rows(beta + s_row, 3, o_r, n_valid, H, BC)
    x00 = tl.load(p_x + rt0 + o_c, mask=m0, other=0.)
    x11 = tl.load(p_x + rt1 + BC + o_c, mask=m1, other=0.)
    x22 = tl.load(p_x + rt2 + 2 * BC + o_c, mask=m2, other=0.)
    x33 = tl.load(p_x + rt3 + 3 * BC + o_c, mask=m3, other=0.)
    a10 = a10 * b1[:, None]
    a20, a21 = a20 * b2[:, None], a21 * b2[:, None]
    a30, a31, a32 = a30 * b3[:, None], a31 * b3[:, None], a32 * b3[:, None]
    x10 = -tl.dot(x11, tl.dot(a10, x00, input_precision=PRECISION), input_precision=PRECISION)
    x21 = -tl.dot(x22, tl.dot(a21, x11, input_precision=PRECISION), input_precision=PRECISION)
    x20 = -tl.dot(x22, tl.dot(a21, x10, tl.dot(a20, x00, input_precision=PRECISION), input_precision=PRECISION),
                  input_precision=PRECISION)
    x32 = -tl.dot(x33, tl.dot(a32, x22, input_precision=PRECISION), input_precision=PRECISION)
    x31 = -tl.dot(x33, tl.dot(a32, x21, tl.dot(a31, x11, input_precision=PRECISION), input_precision=PRECISION),
                  input_precision=PRECISION)
    x30 = -tl.dot(x33, tl.dot(a32, x20, tl.dot(a31, x10, tl.dot(a30, x00, input_precision=PRECISION),
                                                 input_precision=PRECISION), input_precision=PRECISION),
                  input_precision=PRECISION)
    if X_W:
        p_w = xw + s_row * BT
        dt = xw.dtype.element_ty
        tl.store(p_w + rt0 + o_c, x00.to(dt), mask=m0)
        tl.store(p_w + rt1 + o_c, x10.to(dt), mask=m1)
        tl.store(p_w + rt1 + BC + o_c, x11.to(dt), mask=m1)
        tl.store(p_w + rt2 + o_c, x20.to(dt), mask=m2)
        tl.store(p_w + rt2 + BC + o_c, x21.to(dt), mask=m2)
        tl.store(p_w + rt2 + 2 * BC + o_c, x22.to(dt), mask=m2)
        tl.store(p_w + rt3 + o_c, x30.to(dt), mask=m3)
        tl.store(p_w + rt3 + BC + o_c, x31.to(dt), mask=m3)
        tl.store(p_w + rt3 + 2 * BC + o_c, x32.to(dt), mask=m3)
        tl.store(p_w + rt3 + 3 * BC + o_c, x33.to(dt), mask=m3)
    else:
        tl.store(p_x + rt1 + o_c, x10, mask=m1)
        tl.store(p_x + rt2 + o_c, x20, mask=m2)
        tl.store(p_x + rt2 + BC + o_c, x21, mask=m2)
        tl.store(p_x + rt3 + o_c, x30, mask=m3)
        tl.store(p_x + rt3 + BC + o_c, x31, mask=m3)
        tl.store(p_x + rt3 + 2 * BC + o_c, x32, mask=m3)


@triton.jit
def kda_intra_wu_split_fwd_kernel(
    q, k, v, gc, beta, x,
    qg, kg, w, u, gl,
    cu_seqlens, chunk_indices, chunk_offsets,
    T,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BC: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    IS_VARLEN: tl.constexpr, PRECISION: tl.constexpr, OFFSET64: tl.constexpr, LOW_DOTS: tl.constexpr,
    kb=None, FROM_KB: tl.constexpr = False, GL_DONE: tl.constexpr = False, FTZ: tl.constexpr = False,
):
    """W = X (β k e^Γ), U = X (β v), q e^Γ, k e^(Γ_last - Γ) and e^Γ_last of one (chunk, head) (issue 14 step 26)
    from Γ and the whole [BT, BT] X the diagonal and off-diagonal kernels left in `x` (its blocks above the
    diagonal masked on load). LOW_DOTS: both products on operands rounded to the outputs' dtype (bf16
    tensor-core dots, float32 sums); else float32 operands at PRECISION. FROM_KB (issue 14 step 27): W from
    the β k e^Γ the diagonal kernel stored in `kb` (q e^Γ and k e^(Γ_last - Γ) are its too). GL_DONE (step 30,
    with FROM_KB): the diagonal kernel made e^Γ_last too, and this kernel reads no Γ (`gc` is unused). FTZ: as the
    diagonal kernel's, for q e^Γ, k e^(Γ_last - Γ), β k e^Γ made here (the same bits in either kernel)."""
    i_h, i_t, i_c, bos, eos = _intra_chunk(cu_seqlens, chunk_indices, chunk_offsets, T, BT, IS_VARLEN, OFFSET64)
    t0 = bos + i_t * BT
    n_valid = eos - t0
    o_t = tl.arange(0, BT)
    mask_t = o_t < n_valid
    s_row = t0 * H + i_h
    o_tr = o_t[:, None] * (H * K)
    b_beta = tl.load(beta + s_row + o_t * H, mask=mask_t, other=0.).to(tl.float32)
    # the blocks above the diagonal were never written: masked in the load, so they cost no bytes
    b_X = tl.load(x + s_row * BT + o_t[:, None] * (H * BT) + o_t[None, :],
                  mask=mask_t[:, None] & ((o_t[:, None] // BC) >= (o_t[None, :] // BC)), other=0.)
    if LOW_DOTS:
        b_X = b_X.to(w.dtype.element_ty)
    for i_v in range(tl.cdiv(V, BV)):
        o_v = i_v * BV + tl.arange(0, BV)
        mask_tv = mask_t[:, None] & (o_v < V)[None, :]
        o_tv = o_t[:, None] * (H * V) + o_v[None, :]
        b_vb = tl.load(v + s_row * V + o_tv, mask=mask_tv, other=0.).to(tl.float32) * b_beta[:, None]
        b_u = _x_dot(b_X, b_vb, LOW_DOTS, PRECISION)
        tl.store(u + s_row * V + o_tv, b_u.to(u.dtype.element_ty), mask=mask_tv)
    last = tl.minimum(n_valid, BT) - 1
    for i_k in range(tl.cdiv(K, BK)):
        o_k = i_k * BK + tl.arange(0, BK)
        mask_k = o_k < K
        mask_tk = mask_t[:, None] & mask_k[None, :]
        o_tk = o_tr + o_k[None, :]
        if not GL_DONE:
            b_gl = tl.load(gc + (s_row + last * H) * K + o_k, mask=mask_k, other=0.).to(tl.float32)
        if FROM_KB:
            b_kb = tl.load(kb + s_row * K + o_tk, mask=mask_tk, other=0.)
        else:
            b_k = tl.load(k + s_row * K + o_tk, mask=mask_tk, other=0.).to(tl.float32)
            b_q = tl.load(q + s_row * K + o_tk, mask=mask_tk, other=0.).to(tl.float32)
            b_g = tl.load(gc + s_row * K + o_tk, mask=mask_tk, other=0.).to(tl.float32)
            b_qe, b_kl, b_kb = _gated_qk(b_q, b_k, b_g, b_gl, b_beta, mask_t[:, None], FTZ)
            tl.store(qg + s_row * K + o_tk, b_qe.to(qg.dtype.element_ty), mask=mask_tk)
            tl.store(kg + s_row * K + o_tk, b_kl.to(kg.dtype.element_ty), mask=mask_tk)
        b_w = _x_dot(b_X, b_kb, LOW_DOTS, PRECISION)
        tl.store(w + s_row * K + o_tk, b_w.to(w.dtype.element_ty), mask=mask_tk)
        if not GL_DONE:
            tl.store(gl + (i_c * H + i_h) * K + o_k, tl.exp(b_gl), mask=mask_k)


@triton.jit
def kda_state_chunked_fwd_kernel(
    qg, kg, w, u, aqk, gl, o, h0, ht, hb,
    cu_seqlens, chunk_offsets, boundary_offsets,
    T, NSEG, CPS,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, VS: tl.constexpr,
    USE_INITIAL_STATE: tl.constexpr, STORE_BOUNDARY: tl.constexpr, STORE_FINAL: tl.constexpr,
    IS_VARLEN: tl.constexpr, IS_LOCAL: tl.constexpr, PRECISION: tl.constexpr,
    LOWER_ONLY: tl.constexpr = False, BC: tl.constexpr = 16,
):
    """One (V-block, head, sequence segment) walks its chunks: Vn = U - W M, o = (q e^Γ) M + Aqk Vn,
    M <- e^Γ_last M + (k e^(Γ_last-Γ))^T Vn.

    IS_LOCAL (the first pass of the two-level scan): start from zero, or from identity columns for the
    V-blocks past V (they carry the transition P with U = 0), write no outputs, store the segment's end
    state to ht ([N, NSEG, H, K, VS], VS = V + K).

    LOWER_ONLY (issue 14 step 35): Aqk's BC-wide column blocks right of each row's diagonal block are not read
    (the split intra pass leaves them unwritten): the load's 0 is their value, and a masked 32-byte sector costs
    no DRAM bytes.
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
            if LOWER_ONLY:
                mask_a = mask_t[:, None] & ((o_t[None, :] // BC) <= (o_t[:, None] // BC))
            else:
                mask_a = mask_t[:, None]
            b_a = tl.load(aqk + o_row[:, None] * BT + o_t[None, :], mask=mask_a, other=0.)
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
    z, f, b, conv_w, A_log, conv_in, conv_out, h_in, h_out, o, arrivals,
    lower_bound, scale,
    H: tl.constexpr, K: tl.constexpr, W: tl.constexpr,
    BK: tl.constexpr, BV: tl.constexpr, BW: tl.constexpr, NUM_STAGES: tl.constexpr,
    USE_LOWER_BOUND: tl.constexpr, VS: tl.constexpr = 1,
):
    """One token per (head, sequence): conv window step, SiLU, L2 (q scaled), gate, beta, delta step.

    VS programs share a head (grid (H, B, VS)), each updating VS-th of its value column blocks: at small
    B one program per head leaves most SMs idle. Every one of them reads the whole q and k conv windows,
    so the window is written (in place) by the LAST of them to arrive (arrivals [B, H] int32, zero at
    rest: each program counts itself in after its reads, the last one writes and resets it); any earlier
    writer would hand a later program the new window. The state streams through in [K, BV] column
    blocks, so a program keeps small tiles live and several programs share an SM: that is what keeps
    enough bytes in flight. NUM_STAGES = 0 unrolls the blocks; >= 1 is a tl.range loop (1 = no software
    pipelining, which measured fastest: NOTES.md).
    """
    i_h, i_b = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
    i_s = tl.program_id(2)
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
    last = True
    if VS > 1:
        # counted in after this program's window reads (the barrier above); acq_rel orders them before
        p_arr = arrivals + i_b * H + i_h
        last = tl.atomic_add(p_arr, 1, sem="acq_rel") == VS - 1
        if last:
            tl.atomic_xchg(p_arr, 0, sem="relaxed")                            # zero for the next launch
    if last:
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
    # this program's value column blocks: [i_s NBS, i_s NBS + NBS) of the head's NB
    NB: tl.constexpr = (K + BV - 1) // BV
    NBS: tl.constexpr = (NB + VS - 1) // VS
    if NUM_STAGES == 0 and VS == 1:
        # fully unrolled: the compiler can issue every block's state load up front
        for i_v in tl.static_range(0, NB):
            _decode_block(h_in, h_out, o, s_h, i_b * H + i_h, i_v, b_v, b_k, b_ke, b_qe, b_eg, b_kq, b_beta,
                          o_k, mask_k, K, BV)
    elif NUM_STAGES == 0:
        # unrolled over this program's share; the last share may be short
        for j in tl.static_range(0, NBS):
            i_v = i_s * NBS + j
            if i_v < NB:
                _decode_block(h_in, h_out, o, s_h, i_b * H + i_h, i_v, b_v, b_k, b_ke, b_qe, b_eg, b_kq, b_beta,
                              o_k, mask_k, K, BV)
    else:
        for i_v in tl.range(i_s * NBS, tl.minimum(i_s * NBS + NBS, NB), num_stages=NUM_STAGES):
            _decode_block(h_in, h_out, o, s_h, i_b * H + i_h, i_v, b_v, b_k, b_ke, b_qe, b_eg, b_kq, b_beta,
                          o_k, mask_k, K, BV)
