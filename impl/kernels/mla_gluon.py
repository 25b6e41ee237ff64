"""Sparse MLA attention in absorbed form (SPEC §7) with a producer warp group for the gather (issue 14 step 49);
Gluon (Triton's explicit-layout dialect), Hopper (sm_90) only: cp.async gathers, mbarriers, warp-group MMA.
The host wrapper is impl/mla.py (`_gather_attend`, where `_producer_applies`; impl.mla.PRODUCER switches it on,
impl.candidates.mla_producer is that switch). Written against Triton 3.6's Gluon API (the GPU machine's): Gluon is
experimental and its calls change between releases (3.9 renamed async_copy_global_to_shared and thread_barrier),
so impl.mla imports this file under 3.6 only.

Letters as impl/kernels/mla.py: B batch, S queries, T cached tokens, H heads, R latent rank, W selection width,
NS selection splits; BH heads a program (64), BW entries a block (32), STAGES shared-memory stages.

Why a producer: ours (mla_sparse_absorbed_fwd_kernel) runs each entry block as one dependent chain in the same
warps: the entries, the gather of their rows, the two dots and the online softmax. Measured ~2.2-2.5 us a block of
32 rows on an H200 at B = 32 and 128 (30.7 % and 44.4 % of copy), where the block's 32 KB take ~0.9 us at an SM's
share of HBM bandwidth. Here a worker partition of PRODUCER_WARPS warps only gathers: it fills a ring of STAGES
shared-memory tiles with cp.async as soon as the consumer frees one, so the rows of the next blocks are in flight
while the default partition (the kernel's num_warps warps, two warp groups along R) runs the dots and the softmax.

Candidates' forms of the same kernel (constexpr switches; impl.mla picks them): OVERLAP (step 50, refuted: the next
block's scores during this block's softmax), blocks of 64 (step 51, ours from 16 rows: BW = 64 in 2 stages, copied in
halves of BWP rows), AHEAD (step 52: `_produce_ahead`, the entries a block ahead; ours since stop 55).

The same arithmetic as ours, in the same order: the scores q · c^T scaled, -inf where an entry is invalid, the
running max, p = e^(s - m), the rescale e^(m_old - m), acc·alpha + p·c with p in c's dtype, o = acc / l; the
output contract (SPLIT, -1e30 floor, an empty split 0 with lse -inf) is ours'. Not promised the same bits (the
MMA tile shapes are chosen here, not by Triton's layout pass).
"""
import triton.experimental.gluon.language as gl
from triton.language.extra import cuda
from triton.experimental import gluon
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, warpgroup_mma,
                                                              warpgroup_mma_wait)


@gluon.jit
def _entries(indices, i_bs, W, w_lo, w_hi, i_w, BW: gl.constexpr, layout: gl.constexpr, IDX: gl.constexpr = gl.int64):
    """The selection's entries of block i_w of a split [BW] (-1 past the split's end), in `layout`, as IDX: int64, or
    int32 (positions < 2^31) where they are carried from one block to the next at half the registers."""
    o_w = w_lo + i_w * BW + gl.arange(0, BW, layout=layout)
    return gl.load(indices + i_bs * W + o_w, mask=o_w < w_hi, other=-1).to(IDX)


@gluon.jit
def _stamp(timeline, i_row, K: gl.constexpr):
    """Diagnostics (the TIMELINE form, scripts/mla_timeline_probe.py): the global timer (ns) into timeline[i_row, K]
    of a [programs, 8] int64 buffer, written by every thread of the calling partition (one clock, within ns)."""
    t = gl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [i_row.to(gl.int32)], dtype=gl.int64,
                                  is_pure=False, pack=1)
    gl.store(timeline + i_row * 8 + K, t)


@gluon.jit
def _rows(c, block_table, b_idx, i_b, T, M, n_len, o_r, R: gl.constexpr, PAGED: gl.constexpr, PAGE: gl.constexpr):
    """The cache addresses of entries b_idx ([BWP, R] pointers) and their validity (-1, or outside [0, n_len): no
    copy, cp.async zero-fills the row), contiguous or paged (both producers' arithmetic)."""
    mask_w = (b_idx >= 0) & (b_idx < n_len)
    b_t = gl.where(mask_w, b_idx, 0).to(gl.int64)
    if PAGED:
        b_page = gl.load(block_table + i_b * M + b_t // PAGE, mask=mask_w, other=0).to(gl.int64)
        p_c = c + (b_page * PAGE + b_t % PAGE)[:, None] * R + o_r[None, :]
    else:
        p_c = c + (i_b * T + b_t)[:, None] * R + o_r[None, :]
    return p_c, mask_w


@gluon.jit
def _produce(c, indices, block_table, c_smem, ready, empty, i_bs, i_b, T, M, W, w_lo, w_hi, n_len, n_blocks,
             BW: gl.constexpr, R: gl.constexpr, STAGES: gl.constexpr, PRODUCER_WARPS: gl.constexpr,
             VEC: gl.constexpr, TR: gl.constexpr, PAGED: gl.constexpr, PAGE: gl.constexpr, BWP: gl.constexpr):
    """The worker partition: block i's rows into stage i % STAGES once the consumer released it (empty), each
    thread's copies signalling `ready` when they land. Invalid entries (-1, or outside [0, n_len)) copy nothing:
    cp.async zero-fills their rows, so a stale or non-finite cache row never reaches the dots. PAGED (the Triton
    kernel's paged cache): row t of batch row b is slot t % PAGE of page block_table[b, t // PAGE], the table read
    only for valid entries; only these addresses differ, so a paged call's consumer runs on the same rows in the
    same order as a contiguous one: the same bits. A block of BW rows is copied BWP rows at a time (step 51's blocks
    of 64 in halves of 32: the copies' addresses of a half fit the producer's registers)."""
    # VEC elements (16 bytes at 8 bf16: one cp.async) a thread, TR threads along a row (R / VEC, at most 32): no
    # thread copies what another copies while 32 / TR * PRODUCER_WARPS rows fit in BW (the wrapper picks VEC so)
    layout: gl.constexpr = gl.BlockedLayout([1, VEC], [32 // TR, TR], [PRODUCER_WARPS, 1], [1, 0])
    o_r = gl.arange(0, R, layout=gl.SliceLayout(0, layout))
    for i_w in range(n_blocks):
        s = i_w % STAGES
        for h in gl.static_range(BW // BWP):
            # rows h·BWP .. (h + 1)·BWP of block i_w: BWP entries at w_lo + i_w·BW + h·BWP
            b_idx = _entries(indices, i_bs, W, w_lo + h * BWP, w_hi, i_w * (BW // BWP), BWP, gl.SliceLayout(1, layout))
            p_c, mask_w = _rows(c, block_table, b_idx, i_b, T, M, n_len, o_r, R, PAGED, PAGE)
            if h == 0:
                # the stage's previous round consumed (a fresh barrier's parity-1 wait passes: the first round is free)
                mbarrier.wait(empty.index(s), ((i_w // STAGES) & 1) ^ 1)
            async_copy.async_copy_global_to_shared(c_smem.index(s).slice(h * BWP, BWP), p_c, mask=mask_w[:, None])
        # no-increment arrive: `ready` counts one arrival a producer thread, made when its copies have landed
        async_copy.mbarrier_arrive(ready.index(s), increment_count=False)


@gluon.jit
def _produce_ahead(c, indices, block_table, c_smem, ready, empty, i_bs, i_b, T, M, W, w_lo, w_hi, n_len, n_blocks,
                   BW: gl.constexpr, R: gl.constexpr, STAGES: gl.constexpr, PRODUCER_WARPS: gl.constexpr,
                   VEC: gl.constexpr, TR: gl.constexpr, PAGED: gl.constexpr, PAGE: gl.constexpr, BWP: gl.constexpr,
                   i_row=0, timeline=None, TIMELINE: gl.constexpr = False):
    """Issue 14 step 52's worker partition: _produce with each block's entries loaded one block ahead. _produce
    loads a half's entries and then waits for them before it can form that half's addresses (Nsight, stop 53: the
    producer warps' most sampled stall, on the entries' compare); here block i + 1's entries (both halves, int32)
    are in flight while block i's copies are issued, so a block's copies wait only for the stage. The same rows into
    the same stages: the consumer's bits do not change."""
    layout: gl.constexpr = gl.BlockedLayout([1, VEC], [32 // TR, TR], [PRODUCER_WARPS, 1], [1, 0])
    e_l: gl.constexpr = gl.SliceLayout(1, layout)
    o_r = gl.arange(0, R, layout=gl.SliceLayout(0, layout))
    NH: gl.constexpr = BW // BWP
    if TIMELINE:
        _stamp(timeline, i_row, 5)
    e0 = _entries(indices, i_bs, W, w_lo, w_hi, 0, BWP, e_l, gl.int32)
    e1 = e0
    if NH == 2:
        e1 = _entries(indices, i_bs, W, w_lo + BWP, w_hi, 0, BWP, e_l, gl.int32)
    for i_w in range(n_blocks):
        s = i_w % STAGES
        b0 = e0
        b1 = e1
        # block i_w + 1's entries: in flight during this block's wait and copies
        e0 = _entries(indices, i_bs, W, w_lo, w_hi, (i_w + 1) * NH, BWP, e_l, gl.int32)
        if NH == 2:
            e1 = _entries(indices, i_bs, W, w_lo + BWP, w_hi, (i_w + 1) * NH, BWP, e_l, gl.int32)
        p_c, mask_w = _rows(c, block_table, b0, i_b, T, M, n_len, o_r, R, PAGED, PAGE)
        mbarrier.wait(empty.index(s), ((i_w // STAGES) & 1) ^ 1)
        async_copy.async_copy_global_to_shared(c_smem.index(s).slice(0, BWP), p_c, mask=mask_w[:, None])
        if NH == 2:
            p_c, mask_w = _rows(c, block_table, b1, i_b, T, M, n_len, o_r, R, PAGED, PAGE)
            async_copy.async_copy_global_to_shared(c_smem.index(s).slice(BWP, BWP), p_c, mask=mask_w[:, None])
        async_copy.mbarrier_arrive(ready.index(s), increment_count=False)
        if TIMELINE:
            if i_w == 0:
                _stamp(timeline, i_row, 6)
    if TIMELINE:
        _stamp(timeline, i_row, 7)


@gluon.constexpr_function
def _mma(N, num_warps):
    """The warp-group MMA layout of a [64, N] product on two warp groups along N (num_warps 8): the [BH, R]
    accumulator (128 float32 registers a thread at BH 64, R 512) and the [BH, BW] scores share its warp grid, so the
    row statistics map onto the accumulator's rows."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, num_warps // 4],
                                     instr_shape=[16, N // (num_warps // 4), 16])


@gluon.jit
def _load_q(q, q_smem, i_bs, stride_q_bs, stride_q_h, H: gl.constexpr, R: gl.constexpr, BH: gl.constexpr,
            num_warps: gl.constexpr):
    """q[b·S + s] ([H, R] through its row and head strides, rows past H zero) into shared memory, visible to the
    warp-group MMA."""
    ld: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [num_warps, 1], [1, 0])
    o_h = gl.arange(0, BH, layout=gl.SliceLayout(1, ld))
    o_r = gl.arange(0, R, layout=gl.SliceLayout(0, ld))
    mask_h = o_h < H
    # int64 heads: a prefill's head stride B·S·R passes 2^31 elements
    b_q = gl.load(q + i_bs * stride_q_bs + o_h[:, None].to(gl.int64) * stride_q_h + o_r[None, :], mask=mask_h[:, None],
                  other=0.)
    q_smem.store(b_q)
    # q's generic-proxy stores before the warp-group MMA's async-proxy reads
    fence_async_shared()
    gl.thread_barrier()


@gluon.jit
def _scores(q_smem, b_c, BH: gl.constexpr, BW: gl.constexpr, mma_s: gl.constexpr):
    """q · c^T of one stage ([BH, BW] float32), issued to the tensor cores, not waited for."""
    return warpgroup_mma(q_smem, b_c.permute((1, 0)), gl.zeros([BH, BW], gl.float32, layout=mma_s),
                         use_acc=False, is_async=True)


@gluon.jit
def _online_softmax(b_s, mask_w, b_m, b_l, b_acc, b_c, scale, mma_o: gl.constexpr):
    """One block of the online softmax (SPEC §7, as the Triton kernel's): the scaled scores, -inf where an entry is
    invalid, the running max and sum, then acc · alpha + p · c issued (not waited for). (b_m, b_l, acc)."""
    b_s = b_s * scale
    b_s = gl.where(mask_w[None, :], b_s, float("-inf"))
    b_mn = gl.maximum(b_m, gl.max(b_s, 1))
    b_p = gl.exp(b_s - b_mn[:, None])
    b_alpha = gl.exp(b_m - b_mn)
    b_l = b_l * b_alpha + gl.sum(b_p, 1)
    b_alpha_o = gl.convert_layout(b_alpha, gl.SliceLayout(1, mma_o))
    b_pd = gl.convert_layout(b_p.to(b_c.dtype), gl.DotOperandLayout(operand_index=0, parent=mma_o, k_width=2))
    b_acc = warpgroup_mma(b_pd, b_c, b_acc * b_alpha_o[:, None], is_async=True)
    return b_mn, b_l, b_acc


@gluon.jit
def _store_o_staged(out, b_o, o_smem, i_row, H: gl.constexpr, R: gl.constexpr, BH: gl.constexpr,
                    num_warps: gl.constexpr):
    """Issue 14 step 58: o ([BH, R] in the MMA layout) through shared memory (o_smem: q's tile, free once the last
    block's MMAs are done), then out in row-contiguous 16-byte stores. From the MMA layout a warp's store covers 8
    rows x 8 columns: eight full 32-byte sectors in float32 but eight half sectors in bf16, so a bf16 output halves
    the bytes, not the transactions (stop 58); re-read a row at a time, a warp writes 512 contiguous bytes."""
    # rounded to o_smem's dtype (out's: the caller stages only when they match) as torch's cast would (nearest even)
    o_smem.store(b_o.to(o_smem.dtype))
    # every consumer warp's part of the tile written before any warp reads another's rows
    gl.thread_barrier()
    st: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [num_warps, 1], [1, 0])
    b_s = o_smem.load(st)
    oh = gl.arange(0, BH, layout=gl.SliceLayout(1, st))
    orr = gl.arange(0, R, layout=gl.SliceLayout(0, st))
    gl.store(out + (i_row * H + oh[:, None]) * R + orr[None, :], b_s, mask=(oh < H)[:, None])


@gluon.jit
def _store_o(out, lse, b_acc, b_m, b_l, i_row, H: gl.constexpr, R: gl.constexpr, BH: gl.constexpr,
             SPLIT: gl.constexpr, mma_s: gl.constexpr, mma_o: gl.constexpr, o_smem=None,
             STAGE_O: gl.constexpr = False, num_warps: gl.constexpr = 8):
    """o = acc / l (0 for an empty selection) and, SPLIT, the split's log-sum-exp (-inf when empty): the Triton
    kernel's outputs. STAGE_O (step 58): o through shared memory (`_store_o_staged`)."""
    b_lo = gl.convert_layout(b_l, gl.SliceLayout(1, mma_o))
    b_o = b_acc / gl.where(b_lo > 0, b_lo, 1.)[:, None]
    if STAGE_O:
        _store_o_staged(out, b_o, o_smem, i_row, H, R, BH, num_warps)
    else:
        oh = gl.arange(0, BH, layout=gl.SliceLayout(1, mma_o))
        orr = gl.arange(0, R, layout=gl.SliceLayout(0, mma_o))
        # out's dtype: float32, or (issue 14 step 55, unsplit) W_UV's, rounded as torch's cast would (nearest even)
        gl.store(out + (i_row * H + oh[:, None]) * R + orr[None, :], b_o.to(out.dtype.element_ty),
                 mask=(oh < H)[:, None])
    if SPLIT:
        oh_s = gl.arange(0, BH, layout=gl.SliceLayout(1, mma_s))
        b_lse = gl.where(b_l > 0, b_m + gl.log(gl.where(b_l > 0, b_l, 1.)), float("-inf"))
        gl.store(lse + i_row * H + oh_s, b_lse, mask=oh_s < H)


@gluon.jit
def _consume(q, stride_q_bs, stride_q_h, indices, out, lse, q_smem, c_smem, ready, empty, i_bs, i_row, T, W, w_lo,
             w_hi, n_len, n_blocks, scale, H: gl.constexpr, R: gl.constexpr, BH: gl.constexpr, BW: gl.constexpr,
             STAGES: gl.constexpr, SPLIT: gl.constexpr, num_warps: gl.constexpr, timeline=None,
             TIMELINE: gl.constexpr = False, STAGE_O: gl.constexpr = False):
    """The default partition: q into shared memory, then per block the scores, the online softmax and p · c
    (SPEC §7's absorbed attention over the block's rows), then o and (SPLIT) the split's log-sum-exp."""
    mma_s: gl.constexpr = _mma(BW, num_warps)
    mma_o: gl.constexpr = _mma(R, num_warps)
    if TIMELINE:
        _stamp(timeline, i_row, 0)
    _load_q(q, q_smem, i_bs, stride_q_bs, stride_q_h, H, R, BH, num_warps)
    if TIMELINE:
        _stamp(timeline, i_row, 1)

    s_cols: gl.constexpr = gl.SliceLayout(0, mma_s)
    b_m = gl.full([BH], -1e30, gl.float32, layout=gl.SliceLayout(1, mma_s))
    b_l = gl.zeros([BH], gl.float32, layout=gl.SliceLayout(1, mma_s))
    b_acc = gl.zeros([BH, R], gl.float32, layout=mma_o)
    b_idx_next = _entries(indices, i_bs, W, w_lo, w_hi, 0, BW, s_cols)
    for i_w in range(n_blocks):
        s = i_w % STAGES
        # the entries' validity for the score mask, a block ahead (the producer reads the same entries)
        b_idx = b_idx_next
        b_idx_next = _entries(indices, i_bs, W, w_lo, w_hi, i_w + 1, BW, s_cols)
        mask_w = (b_idx >= 0) & (b_idx < n_len)
        mbarrier.wait(ready.index(s), (i_w // STAGES) & 1)
        if TIMELINE:
            if i_w == 0:
                _stamp(timeline, i_row, 2)
        # the producer's cp.async writes (generic proxy) before this block's MMAs read them (async proxy)
        fence_async_shared()
        b_c = c_smem.index(s)
        b_s = warpgroup_mma_wait(num_outstanding=0, deps=(_scores(q_smem, b_c, BH, BW, mma_s), ))
        b_m, b_l, b_acc = _online_softmax(b_s, mask_w, b_m, b_l, b_acc, b_c, scale, mma_o)
        b_acc = warpgroup_mma_wait(num_outstanding=0, deps=(b_acc, ))
        # both warp groups' MMAs on stage s are done before one thread hands it back to the producer
        gl.thread_barrier()
        mbarrier.arrive(empty.index(s))
    if TIMELINE:
        _stamp(timeline, i_row, 3)
    # step 58 (STAGE_O): q's tile is free now, every block's MMAs done (the loop's last wait and barrier)
    _store_o(out, lse, b_acc, b_m, b_l, i_row, H, R, BH, SPLIT, mma_s, mma_o, q_smem, STAGE_O, num_warps)
    if TIMELINE:
        _stamp(timeline, i_row, 4)


@gluon.jit
def _consume_overlap(q, stride_q_bs, stride_q_h, indices, out, lse, q_smem, c_smem, ready, empty, i_bs, i_row, T,
                     W, w_lo, w_hi, n_len, n_blocks, scale, H: gl.constexpr, R: gl.constexpr, BH: gl.constexpr,
                     BW: gl.constexpr, STAGES: gl.constexpr, SPLIT: gl.constexpr, num_warps: gl.constexpr):
    """Issue 14 step 50's default partition (OVERLAP; refuted on the H200, 0.96-1.005x `_consume`: kept for its
    candidate impl.candidates.mla_producer_overlap): `_consume` with block i + 1's scores issued to the tensor
    cores before block i's softmax, so the softmax (CUDA cores) runs while they compute; block i's p · c then queues
    behind them and one wait takes both. The same arithmetic per block as `_consume`, in the same order."""
    mma_s: gl.constexpr = _mma(BW, num_warps)
    mma_o: gl.constexpr = _mma(R, num_warps)
    _load_q(q, q_smem, i_bs, stride_q_bs, stride_q_h, H, R, BH, num_warps)

    s_cols: gl.constexpr = gl.SliceLayout(0, mma_s)
    b_m = gl.full([BH], -1e30, gl.float32, layout=gl.SliceLayout(1, mma_s))
    b_l = gl.zeros([BH], gl.float32, layout=gl.SliceLayout(1, mma_s))
    b_acc = gl.zeros([BH, R], gl.float32, layout=mma_o)
    b_idx_next = _entries(indices, i_bs, W, w_lo, w_hi, 0, BW, s_cols)
    # block 0's scores before the loop
    mbarrier.wait(ready.index(0), 0)
    fence_async_shared()
    b_s = warpgroup_mma_wait(num_outstanding=0, deps=(_scores(q_smem, c_smem.index(0), BH, BW, mma_s), ))
    for i_w in range(n_blocks):
        s = i_w % STAGES
        b_idx = b_idx_next
        b_idx_next = _entries(indices, i_bs, W, w_lo, w_hi, i_w + 1, BW, s_cols)
        mask_w = (b_idx >= 0) & (b_idx < n_len)
        # block i + 1's scores in flight during block i's softmax. The last block waits for no fill and its product
        # reads whatever stage (i + 1) mod STAGES holds (a released block's rows, or never-written shared memory):
        # a result never used, so the loop keeps one shape
        sn = (i_w + 1) % STAGES
        mbarrier.wait(ready.index(sn), ((i_w + 1) // STAGES) & 1, pred=i_w + 1 < n_blocks)
        fence_async_shared()
        b_sn = _scores(q_smem, c_smem.index(sn), BH, BW, mma_s)
        b_m, b_l, b_acc = _online_softmax(b_s, mask_w, b_m, b_l, b_acc, c_smem.index(s), scale, mma_o)
        b_s, b_acc = warpgroup_mma_wait(num_outstanding=0, deps=(b_sn, b_acc))
        gl.thread_barrier()
        mbarrier.arrive(empty.index(s))
    _store_o(out, lse, b_acc, b_m, b_l, i_row, H, R, BH, SPLIT, mma_s, mma_o)


@gluon.jit
def mla_sparse_absorbed_ws_kernel(
    q, c, indices, lengths, out, lse, block_table,
    S, T, W, W_SPLIT, M, scale, stride_q_bs, stride_q_h,
    H: gl.constexpr, R: gl.constexpr, BH: gl.constexpr, BW: gl.constexpr, STAGES: gl.constexpr,
    SPLIT: gl.constexpr, PRODUCER_WARPS: gl.constexpr, PRODUCER_REGS: gl.constexpr, VEC: gl.constexpr,
    TR: gl.constexpr, PAGED: gl.constexpr, PAGE: gl.constexpr,
    num_warps: gl.constexpr, OVERLAP: gl.constexpr = False, BWP: gl.constexpr = 32, AHEAD: gl.constexpr = False,
    timeline=None, TIMELINE: gl.constexpr = False, STAGE_O: gl.constexpr = False, DEPENDENTS: gl.constexpr = False,
):
    """out[b, s, h] = Σ_t softmax_t(scale · q[b, s, h] · c[b, t]) c[b, t] over t in indices[b, s]: ours'
    mla_sparse_absorbed_fwd_kernel (BH = H = 64 heads a program, bf16 operands, R = BR) with the gather in its
    own warps. One program per (query row b·S + s, selection split); out / lse as ours'.
    q: [B, S, H, R] bf16 (row b·S + s, head h at q + (b·S + s)·stride_q_bs + h·stride_q_h), c: [B, T, R] bf16
    (PAGED: the page pool [N, PAGE, R], block_table [B, M] int; else block_table None and M unused),
    indices: [B, S, W] int, lengths: [B] int."""
    if DEPENDENTS:
        # issue 14 step 60: the merge launched after this grid may start its programs (they wait for this grid)
        cuda.gdc_launch_dependents()
    i_bs, i_sp = gl.program_id(0).to(gl.int64), gl.program_id(2).to(gl.int64)
    n_sp = gl.num_programs(2).to(gl.int64)
    i_b = i_bs // S
    n_len = gl.load(lengths + i_b).to(gl.int64)
    w_lo = i_sp * W_SPLIT
    w_hi = gl.minimum(w_lo + W_SPLIT, W)
    n_blocks = gl.cdiv(W_SPLIT, BW)
    i_row = i_bs * n_sp + i_sp if SPLIT else i_bs

    q_smem = gl.allocate_shared_memory(q.dtype.element_ty, [BH, R],
                                       gl.NVMMASharedLayout.get_default_for([BH, R], q.dtype.element_ty))
    c_smem = gl.allocate_shared_memory(c.dtype.element_ty, [STAGES, BW, R],
                                       gl.NVMMASharedLayout.get_default_for([BW, R], c.dtype.element_ty))
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=PRODUCER_WARPS * 32)
        mbarrier.init(empty.index(i), count=1)

    if OVERLAP:
        gl.warp_specialize([
            (_consume_overlap, (q, stride_q_bs, stride_q_h, indices, out, lse, q_smem, c_smem, ready, empty, i_bs,
                                i_row, T, W, w_lo, w_hi, n_len, n_blocks, scale, H, R, BH, BW, STAGES, SPLIT,
                                num_warps)),
            (_produce, (c, indices, block_table, c_smem, ready, empty, i_bs, i_b, T, M, W, w_lo, w_hi, n_len,
                        n_blocks, BW, R, STAGES, PRODUCER_WARPS, VEC, TR, PAGED, PAGE, BWP)),
        ], [PRODUCER_WARPS], [PRODUCER_REGS])
    elif AHEAD:
        gl.warp_specialize([
            (_consume, (q, stride_q_bs, stride_q_h, indices, out, lse, q_smem, c_smem, ready, empty, i_bs, i_row, T,
                        W, w_lo, w_hi, n_len, n_blocks, scale, H, R, BH, BW, STAGES, SPLIT, num_warps, timeline,
                        TIMELINE, STAGE_O)),
            (_produce_ahead, (c, indices, block_table, c_smem, ready, empty, i_bs, i_b, T, M, W, w_lo, w_hi, n_len,
                              n_blocks, BW, R, STAGES, PRODUCER_WARPS, VEC, TR, PAGED, PAGE, BWP, i_row,
                              timeline, TIMELINE)),
        ], [PRODUCER_WARPS], [PRODUCER_REGS])
    else:
        gl.warp_specialize([
            (_consume, (q, stride_q_bs, stride_q_h, indices, out, lse, q_smem, c_smem, ready, empty, i_bs, i_row, T,
                        W, w_lo, w_hi, n_len, n_blocks, scale, H, R, BH, BW, STAGES, SPLIT, num_warps)),
            (_produce, (c, indices, block_table, c_smem, ready, empty, i_bs, i_b, T, M, W, w_lo, w_hi, n_len,
                        n_blocks, BW, R, STAGES, PRODUCER_WARPS, VEC, TR, PAGED, PAGE, BWP)),
        ], [PRODUCER_WARPS], [PRODUCER_REGS])

    for i in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(i))
        mbarrier.invalidate(empty.index(i))
