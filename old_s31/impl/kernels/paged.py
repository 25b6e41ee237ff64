"""Reading a paged cache through its block table (docs/candidates.md section 13); the host wrapper is
impl/paged.py.

Letters: B batch, N pages, G page size, M block-table width, T = max cache length, F row width.
"""
import triton
import triton.language as tl


@triton.jit
def paged_gather_fwd_kernel(
    pages, block_table, lengths, offsets, out,
    T, M, F,
    PAGE: tl.constexpr, BT: tl.constexpr, BF: tl.constexpr,
):
    """out[b, j] = pages[block_table[b, t // PAGE], t % PAGE] with t = j - offsets[b] in [0, lengths[b]),
    0 for every other j. One program per (block of BT output rows, b).

    pages: [N, PAGE, F], block_table: [B, M] int, lengths / offsets: [B] int, out: [B, T, F]. The page id
    is loaded under the row's mask: a block-table entry past ceil(lengths[b] / PAGE) is never read, nor
    a slot past lengths[b] of the last page (both hold stale ids and garbage in an engine).
    """
    i_t, i_b = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
    o_j = i_t * BT + tl.arange(0, BT)
    n_len = tl.load(lengths + i_b).to(tl.int64)
    o_t = o_j - tl.load(offsets + i_b).to(tl.int64)
    mask_t = (o_j < T) & (o_t >= 0) & (o_t < n_len)
    b_page = tl.load(block_table + i_b * M + o_t // PAGE, mask=mask_t, other=0).to(tl.int64)
    src = (b_page * PAGE + o_t % PAGE) * F
    dst = (i_b * T + o_j) * F
    for f0 in range(0, F, BF):
        o_f = f0 + tl.arange(0, BF)
        mask_f = o_f < F
        b_x = tl.load(pages + src[:, None] + o_f[None, :], mask=mask_t[:, None] & mask_f[None, :], other=0.)
        tl.store(out + dst[:, None] + o_f[None, :], b_x, mask=(o_j < T)[:, None] & mask_f[None, :])
