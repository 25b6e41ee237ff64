"""Triton kernel of the model's RMSNorms (SPEC §2) in one launch each. Host wrapper: impl/norm.py (ours since
issue 14 step 14, gated on a GPU).

One program per BM rows of D (a token's hidden vector, or one KDA head's K values; BM = 1 on the GPU, a
block under the interpreter, whose cost is per program), float32 arithmetic,
the three multiplication orders of the torch forms it replaces (the last bits follow the order):
  MODE 0  the decoder's norm (impl.model.rmsnorm):   y = (w · (x · r)) in y's dtype
  MODE 1  MLA's q / kv norm (impl.mla.rmsnorm):      y = (x · r in y's dtype) · w, rounded to y's dtype
  MODE 2  KDA's gated norm (impl.kda.gated_rmsnorm): y = (((w · x) · r) · sigmoid(zg)) in y's dtype
with r = (Σx² / D + eps)^-1/2. The sum's order is the kernel's (not torch's), so the result is the torch
form's within float32 rounding, not bitwise.
"""
import triton
import triton.language as tl


@triton.jit
def norm_fwd_kernel(x, w, zg, y, N, D, eps, MODE: tl.constexpr, BM: tl.constexpr, BD: tl.constexpr):
    """y[rows] = the MODE's weighted RMSNorm of BM of x's N rows (zg: MODE 2's gate, same shape as x, else unused)."""
    i_m = tl.program_id(0).to(tl.int64)
    o_m = i_m * BM + tl.arange(0, BM)
    o_d = tl.arange(0, BD)
    mask = (o_m[:, None] < N) & (o_d[None, :] < D)
    p = o_m[:, None] * D + o_d[None, :]
    b_x = tl.load(x + p, mask=mask, other=0.).to(tl.float32)
    b_w = tl.load(w + o_d, mask=o_d < D, other=0.).to(tl.float32)[None, :]
    b_r = 1. / tl.sqrt(tl.sum(b_x * b_x, 1) / D + eps)[:, None]
    if MODE == 0:
        b_y = b_w * (b_x * b_r)
    elif MODE == 1:
        # the torch form casts the normalized x to x's dtype BEFORE the weight: round there too
        b_y = (b_x * b_r).to(y.dtype.element_ty).to(tl.float32) * b_w
    else:
        b_g = tl.load(zg + p, mask=mask, other=0.).to(tl.float32)
        b_y = b_w * b_x * b_r * tl.sigmoid(b_g)
    tl.store(y + p, b_y.to(y.dtype.element_ty), mask=mask)
