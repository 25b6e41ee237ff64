"""Sparse MLA attention in absorbed form (SPEC §7); the host wrappers are in impl/mla.py.

Letters: B batch, S queries, T cached tokens, H heads, R latent rank (r_kv), W selection width
(index_topk + P_k - 1), NS selection splits (flash-decoding).

In absorbed form every head attends over the same cached latent rows c_t (keys and values alike), so
one program takes a block of heads and gathers each selected row once for all of them.
"""
import triton
import triton.language as tl
from triton.language.extra import cuda


@triton.jit
def _selected(indices, i_bs, W, w_lo, w_hi, i_w, BW: tl.constexpr):
    """The selection's entries of block i_w of a split [BW] int64 (-1 past the split's end)."""
    o_w = w_lo + i_w * BW + tl.arange(0, BW)
    return tl.load(indices + i_bs * W + o_w, mask=o_w < w_hi, other=-1).to(tl.int64)


@triton.jit
def _gather(c, block_table, i_b, b_idx, n_len, T, M, o_r, mask_r, R: tl.constexpr, PAGED: tl.constexpr,
            PAGE: tl.constexpr):
    """(the latent rows of entries b_idx [BW, BR], which entries are valid [BW]): -1 and out-of-row entries
    read nothing and give zero rows."""
    mask_w = (b_idx >= 0) & (b_idx < n_len)
    if PAGED:
        # the page id under the same mask as the row: a -1 or out-of-row entry reads no table entry
        b_page = tl.load(block_table + i_b * M + b_idx // PAGE, mask=mask_w, other=0).to(tl.int64)
        p_c = c + (b_page[:, None] * PAGE + b_idx[:, None] % PAGE) * R + o_r[None, :]
    else:
        p_c = c + (i_b * T + b_idx[:, None]) * R + o_r[None, :]
    return tl.load(p_c, mask=mask_w[:, None] & mask_r[None, :], other=0.), mask_w


@triton.jit
def mla_sparse_absorbed_fwd_kernel(
    q, c, indices, lengths, out, lse, block_table,
    S, T, W, W_SPLIT, M, scale, stride_q_bs, stride_q_h,
    H: tl.constexpr, R: tl.constexpr,
    BH: tl.constexpr, BW: tl.constexpr, BR: tl.constexpr, PRECISION: tl.constexpr, SPLIT: tl.constexpr,
    PAGED: tl.constexpr, PAGE: tl.constexpr, PREFETCH: tl.constexpr = False, DEPENDENTS: tl.constexpr = False,
):
    """out[b, s, h] = Σ_t softmax_t(scale · q[b, s, h] · c[b, t]) c[b, t] over t in indices[b, s].

    One program per (query row b·S + s, head block, selection split). A split streams its W_SPLIT
    entries in blocks of BW with an online softmax; -1 entries (and anything outside [0, lengths[b]))
    are skipped, so an empty selection gives 0, not NaN.
    q: [B, S, H, R] (absorbed through W_UK), row b·S + s and head h at q + (b·S + s)·stride_q_bs + h·stride_q_h,
    unit stride along R (issue 14 step 54: the W_UK fold's [H, B·S, R] memory read where it is), c: [B, T, R],
    indices: [B, S, W] int, lengths: [B] int.
    SPLIT False: out [B, S, H, R] float32 (or, issue 14 step 55, W_UV's dtype when its fold follows), lse unused.
    SPLIT True: out [B, S, NS, H, R] holds each split's normalized partial output and lse [B, S, NS, H] its
    log-sum-exp (-inf when empty), for mla_merge_kernel (or mla_merge_uv_kernel).
    PAGED (a paged cache, docs/candidates.md section 13): c is the page pool [N, PAGE, R] and row b's
    position t is read from page block_table[b, t // PAGE] (block_table [B, M] int), slot t % PAGE;
    only entries < lengths[b] are ever looked up, so no block-table entry past the row's pages is read.
    None and unused otherwise (T is then unused when PAGED).
    PREFETCH (issue 14 step 38): the next block's entries are loaded while this block's rows are gathered and
    used, so a block's chain (entries, then rows, then the dots) no longer starts with the entries' round trip.
    The same loads and the same arithmetic: the same bits. (Its rows a block ahead too, a second [BW, BR] tile
    held across the iteration, measured 5-9 % slower on an H100: not kept.)
    """
    if DEPENDENTS:
        # issue 14 step 60: the merge launched after this grid may start its programs (they wait for this grid)
        cuda.gdc_launch_dependents()
    i_bs, i_hb, i_sp = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64), tl.program_id(2).to(tl.int64)
    n_sp = tl.num_programs(2).to(tl.int64)
    i_b = i_bs // S
    o_h = i_hb * BH + tl.arange(0, BH)
    o_r = tl.arange(0, BR)
    mask_h = o_h < H
    mask_r = o_r < R
    mask_hr = mask_h[:, None] & mask_r[None, :]
    # int64 heads: a prefill's head stride B·S·R passes 2^31 elements
    p_q = q + i_bs * stride_q_bs + o_h[:, None].to(tl.int64) * stride_q_h + o_r[None, :]
    b_q = tl.load(p_q, mask=mask_hr, other=0.)                                             # [BH, BR]
    n_len = tl.load(lengths + i_b).to(tl.int64)

    # a finite floor: with -inf, a block with no valid entry would give exp(-inf - -inf) = NaN
    b_m = tl.full([BH], -1e30, dtype=tl.float32)
    b_l = tl.zeros([BH], dtype=tl.float32)
    b_acc = tl.zeros([BH, BR], dtype=tl.float32)
    w_lo = i_sp * W_SPLIT
    w_hi = tl.minimum(w_lo + W_SPLIT, W)
    if PREFETCH:
        b_idx_next = _selected(indices, i_bs, W, w_lo, w_hi, 0, BW)
    for i_w in range(0, tl.cdiv(W_SPLIT, BW)):
        if PREFETCH:
            b_idx = b_idx_next
            b_idx_next = _selected(indices, i_bs, W, w_lo, w_hi, i_w + 1, BW)
            b_c, mask_w = _gather(c, block_table, i_b, b_idx, n_len, T, M, o_r, mask_r, R, PAGED, PAGE)
        else:
            b_idx = _selected(indices, i_bs, W, w_lo, w_hi, i_w, BW)                          # [BW]
            b_c, mask_w = _gather(c, block_table, i_b, b_idx, n_len, T, M, o_r, mask_r, R, PAGED, PAGE)
        b_s = tl.dot(b_q, tl.trans(b_c), input_precision=PRECISION) * scale               # [BH, BW]
        b_s = tl.where(mask_w[None, :], b_s, float("-inf"))
        b_mn = tl.maximum(b_m, tl.max(b_s, 1))
        b_p = tl.exp(b_s - b_mn[:, None])
        b_alpha = tl.exp(b_m - b_mn)
        b_l = b_l * b_alpha + tl.sum(b_p, 1)
        b_acc = b_acc * b_alpha[:, None] + tl.dot(b_p.to(b_c.dtype), b_c, input_precision=PRECISION)
        b_m = b_mn

    b_o = b_acc / tl.where(b_l > 0, b_l, 1.)[:, None]
    if SPLIT:
        i_row = i_bs * n_sp + i_sp
        p_o = out + (i_row * H + o_h[:, None]) * R + o_r[None, :]
        # float32 partials, or (issue 14 step 57) the caller's bf16
        tl.store(p_o, b_o.to(out.dtype.element_ty), mask=mask_hr)
        b_lse = tl.where(b_l > 0, b_m + tl.log(tl.where(b_l > 0, b_l, 1.)), float("-inf"))
        tl.store(lse + i_row * H + o_h, b_lse, mask=mask_h)
    else:
        p_o = out + (i_bs * H + o_h[:, None]) * R + o_r[None, :]
        # float32, or (issue 14 step 55) W_UV's dtype, rounded to nearest even as torch's cast would
        tl.store(p_o, b_o.to(out.dtype.element_ty), mask=mask_hr)


@triton.jit
def _lse_max(lse, i_bs, i_h, NS, H: tl.constexpr, BJ: tl.constexpr):
    """L = max_j lse_j over the NS splits of (query row i_bs, head i_h), -1e30 when every split is empty (a
    finite floor: e^(-inf - L) is then 0, not NaN)."""
    o_j = tl.arange(0, BJ)
    b_m = tl.full([BJ], -1e30, dtype=tl.float32)
    for j0 in range(0, NS, BJ):
        b_x = tl.load(lse + (i_bs * NS + j0 + o_j) * H + i_h, mask=j0 + o_j < NS, other=float("-inf"))
        b_m = tl.maximum(b_m, b_x)
    return tl.max(b_m, 0)


@triton.jit
def _merged(part, lse, i_bs, i_h, NS, L, o_r, mask_r, H: tl.constexpr, R: tl.constexpr, BJ: tl.constexpr):
    """(Σ_j e^(lse_j - L) part_j[o_r], Σ_j e^(lse_j - L)) over the NS splits, BJ splits' loads at a time."""
    o_j = tl.arange(0, BJ)
    b_acc = tl.zeros_like(o_r).to(tl.float32)
    b_l = tl.zeros([BJ], dtype=tl.float32)
    for j0 in range(0, NS, BJ):
        mask_j = j0 + o_j < NS
        i_row = i_bs * NS + j0 + o_j
        b_p = tl.exp(tl.load(lse + i_row * H + i_h, mask=mask_j, other=float("-inf")) - L)    # 0: empty, past NS
        # float32, or (issue 14 step 57) the caller's bf16: the weights' products and sums in float32 either way
        b_o = tl.load(part + (i_row[:, None] * H + i_h) * R + o_r[None, :],
                      mask=mask_j[:, None] & mask_r[None, :], other=0.).to(tl.float32)
        b_acc += tl.sum(b_p[:, None] * b_o, 0)
        b_l += b_p
    return b_acc, tl.sum(b_l, 0)


@triton.jit
def _merged_one_round(part, lse, i_bs, i_h, NS, o_r, mask_r, H: tl.constexpr, R: tl.constexpr, BJ: tl.constexpr):
    """(Σ_j e^(lse_j - L) part_j[o_r], Σ_j e^(lse_j - L)) over NS <= BJ splits, L = max_j lse_j (-1e30 floor): the
    log-sum-exps and the partials loaded together (the partials' loads do not wait for L), then `_lse_max` and
    `_merged`'s arithmetic on the one tile: the same bits as them."""
    o_j = tl.arange(0, BJ)
    mask_j = o_j < NS
    i_row = i_bs * NS + o_j
    b_x = tl.load(lse + i_row * H + i_h, mask=mask_j, other=float("-inf"))
    b_o = tl.load(part + (i_row[:, None] * H + i_h) * R + o_r[None, :], mask=mask_j[:, None] & mask_r[None, :],
                  other=0.).to(tl.float32)
    L = tl.max(tl.maximum(tl.full([BJ], -1e30, dtype=tl.float32), b_x), 0)
    b_p = tl.exp(b_x - L)
    b_acc = tl.zeros_like(o_r).to(tl.float32) + tl.sum(b_p[:, None] * b_o, 0)
    return b_acc, tl.sum(tl.zeros([BJ], dtype=tl.float32) + b_p, 0)


@triton.jit
def mla_merge_kernel(
    part, lse, out,
    NS, H: tl.constexpr, R: tl.constexpr, BR: tl.constexpr, BJ: tl.constexpr, ONE_ROUND: tl.constexpr = False,
    PDL: tl.constexpr = False,
):
    """The split merge in one pass (issue 14 step 42): out[b, s, h] = Σ_j e^(lse_j - L) part_j / Σ_j e^(lse_j - L),
    L = max_j lse_j first (0 where every split is empty). With L known every split's weight is, so BJ splits'
    loads go out at once (the merge before step 42 took a split at a time with a running rescale: a dependent
    round trip each, 16 at B = 1). out in its own dtype (the caller's: no cast launch after it).

    One program per (query row, head, BR ranks): the rank in chunks (issue 14 step 44), so a row's merge is spread
    over R / BR programs (at B = 1, 64 programs each pulling a [16, 512] float32 tile through one SM took 3.3 us).
    part: [B·S, NS, H, R] f32, lse: [B·S, NS, H], out: [B·S, H, R].
    ONE_ROUND (issue 14 step 46; the host sets it only when NS <= BJ): the splits' log-sum-exps and partials in one
    round of loads instead of two (L first, then the partials), the same arithmetic.
    PDL (issue 14 step 60; GPU only: inline PTX): launched as a programmatic dependent of the sparse kernel, whose
    programs let this grid's start before they finish; every program waits here until that grid has completed and
    its partials are visible.
    """
    i_bs, i_h, i_c = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64), tl.program_id(2)
    o_r = i_c * BR + tl.arange(0, BR)
    mask_r = o_r < R
    if PDL:
        cuda.gdc_wait()
    if ONE_ROUND:
        b_acc, b_l = _merged_one_round(part, lse, i_bs, i_h, NS, o_r, mask_r, H, R, BJ)
    else:
        L = _lse_max(lse, i_bs, i_h, NS, H, BJ)
        b_acc, b_l = _merged(part, lse, i_bs, i_h, NS, L, o_r, mask_r, H, R, BJ)
    b_o = b_acc / tl.where(b_l > 0, b_l, 1.)
    tl.store(out + (i_bs * H + i_h) * R + o_r, b_o.to(out.dtype.element_ty), mask=mask_r)


@triton.jit
def mla_merge_uv_kernel(
    part, lse, w_uv, out,
    NS, stride_h, stride_v,
    H: tl.constexpr, R: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, BJ: tl.constexpr,
):
    """The split merge with W_UV applied (issue 14 step 43): out[b, s, h, v] = Σ_r W_UV[h, v, r] lat[r] / l,
    (lat, l) = mla_merge_kernel's sums over the splits, in float32 to the end (the unfused path rounds lat to
    the caller's dtype before W_UV). For few query rows: one launch instead of the merge, a cast and a GEMM,
    reading W_UV once over its programs.

    One program per (query row, head, BV values); the rank in blocks of BK. part: [B·S, NS, H, R] f32,
    lse: [B·S, NS, H], w_uv: [H, V, R] (strides stride_h, stride_v, 1: kv_b_proj's view), out: [B·S, H, V].
    """
    i_bs, i_h, i_v = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64), tl.program_id(2).to(tl.int64)
    o_v = i_v * BV + tl.arange(0, BV)
    mask_v = o_v < V
    L = _lse_max(lse, i_bs, i_h, NS, H, BJ)
    b_o = tl.zeros([BV], dtype=tl.float32)
    b_l = 0.
    for k0 in range(0, R, BK):
        o_k = k0 + tl.arange(0, BK)
        mask_k = o_k < R
        b_lat, b_l = _merged(part, lse, i_bs, i_h, NS, L, o_k, mask_k, H, R, BJ)            # [BK], []
        b_w = tl.load(w_uv + i_h * stride_h + o_v[:, None] * stride_v + o_k[None, :],
                      mask=mask_v[:, None] & mask_k[None, :], other=0.)                     # [BV, BK]
        b_o += tl.sum(b_w.to(tl.float32) * b_lat[None, :], 1)
    b_o = b_o / tl.where(b_l > 0, b_l, 1.)
    tl.store(out + (i_bs * H + i_h) * V + o_v, b_o.to(out.dtype.element_ty), mask=mask_v)
