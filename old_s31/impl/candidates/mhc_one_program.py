"""Our mHC coefficients with the one-program-per-token kernel (before issue 14 step 3).

The peer that step 3's split kernels (impl/kernels/mhc.py: the projection split along N·D, then the
coefficients and the collapse) are gated against, and timed beside:

    python3 -m gate.cli gate --device cuda --candidate triton \\
        --baseline impl.candidates.mhc_one_program:Candidate --mechanism mhc --mechanism model

One program per token row makes two passes over the row's N·D inputs: Σx² and the three projections
over K-blocks, then the sigmoids, the row softmax and the Sinkhorn iterations, then the collapse by
D-blocks. At decode (one token) that is one SM reading the whole projection (~200 us a call on the H200
at the full geometry, 1.6 MB of float32 fn).
"""
from __future__ import annotations

import types

import torch
import triton
import triton.language as tl

from impl import mhc as _mhc


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


class MHC:
    """impl.mhc with `fused_coefficients_collapse` (and `coefficients`) on the one-program kernel."""

    collapse = staticmethod(_mhc.collapse)
    write_back = staticmethod(_mhc.write_back)
    expand = staticmethod(_mhc.expand)
    reduce = staticmethod(_mhc.reduce)
    BATCH_INVARIANT = _mhc.BATCH_INVARIANT

    @staticmethod
    def fused_coefficients_collapse(w, X):
        """impl.mhc.fused_coefficients_collapse, one program per token row."""
        N = w.hc_mult
        B, S, D = _mhc._check_streams("X", X, N)
        _mhc._check_weights(w, X)
        x = X.contiguous()
        pre, post, comb, u = _mhc.empty_outputs(X, N)
        if B * S:
            mhc_coeff_fwd_kernel[(B * S,)](
                x, w.fn.contiguous(), w.base.contiguous(), w.scale.contiguous(),
                pre, post, comb, u, w.sinkhorn_iters, float(w.hc_eps), float(w.rms_eps),
                N=N, D=D, BN=triton.next_power_of_2(N), BD=min(triton.next_power_of_2(D), _mhc._BD_MAX),
                BK=min(triton.next_power_of_2(N * D), _mhc._BK_MAX), num_warps=4,
            )
        return pre, post, comb, u

    @classmethod
    def coefficients(cls, w, X):
        """(pre, post, comb) from the one-program kernel."""
        return cls.fused_coefficients_collapse(w, X)[:3]


Candidate = types.SimpleNamespace(mhc=MHC)
