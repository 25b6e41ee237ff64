"""Issue 14 step 7 (a candidate, NOT landed; docs/optimization_log.md): the experts' gate_up GEMM split
along D on the decode tiles.

At decode (B = 1: 8 (token, expert) pairs, one per expert) our gate_up grid is (9 blocks, I / BN = 64
column blocks): 512 live programs of 4 warps, each walking D = 4096 in 32 dependent K steps, ~15 warps
an SM. The NVFP4 tile is ALU-bound (docs/optimization_log.md step 1), and so few warps leave the issue
slots idle while each one waits on its loads. Here the K steps are cut into `SPLIT_K` ranges, one program
each (SPLIT_K x the programs, 1 / SPLIT_K of the chain), and the raw float32 gate and up accumulators
of every range go to a partial buffer; a second kernel sums the ranges in a fixed order (no atomics:
moe.rerun), then runs our epilogue (the halves' global decode scales, the clamped SwiGLU) into h. The
down GEMM is ours. Prefill tiles (more than 16 pairs an expert) and W4A4 run our path unchanged.

    python3 -m gate.cli gate --device cuda --candidate impl.candidates.moe_split_k:Candidate --baseline triton \\
        --check moe.forward --check moe.rerun --check nvfp4.gate --check model.paths

Batch invariance: claimed for nothing, as ours (impl.moe.BATCH_INVARIANT): the split count is fixed per
device, but the tiles (and so the reduction order) follow the pair count, as ours do.
"""
from __future__ import annotations

import types

import torch
import triton
import triton.language as tl

import impl
from impl import moe as _moe
from impl.kernels.moe import _a_halves, _nvfp4_halves, _nvfp4_tile, moe_down_fwd_kernel

# K ranges of the decode gate_up: 4 on the GPU (2048 programs at B = 1); 2 on the interpreter, whose
# tiny D spans few K steps, so that more than one range is live in the CPU tests
SPLIT_K = 2 if impl.interpreted() else 4
BATCH_INVARIANT = ()


@triton.jit
def moe_gate_up_part_fwd_kernel(
    x, w, packed, scale, sorted_ids, block_expert, part, P,
    D: tl.constexpr, I: tl.constexpr, TOP_K: tl.constexpr, KS: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, NVFP4: tl.constexpr,
    DOT: tl.constexpr, PRECISION: tl.constexpr, SWIZZLED: tl.constexpr, SPLIT: tl.constexpr,
):
    """part[s, pair, :I] / [I:] = the raw gate / up accumulators of K steps [s·KS, (s+1)·KS) (float32,
    before the global decode scale; SPLIT: e2m1 · 2^-14 as impl/kernels/moe.py's split tiles)."""
    i_b, i_n, i_s = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64), tl.program_id(2)
    i_e = tl.load(block_expert + i_b).to(tl.int64)
    if i_e >= 0:
        o_m = i_b * BM + tl.arange(0, BM)
        b_pair = tl.load(sorted_ids + o_m).to(tl.int64)
        mask_m = b_pair < P
        b_tok = tl.where(mask_m, b_pair // TOP_K, 0)
        o_n = i_n * BN + tl.arange(0, BN)
        mask_n = o_n < I
        b_g = tl.zeros([BM, BN], dtype=tl.float32)
        b_u = tl.zeros([BM, BN], dtype=tl.float32)
        # the last range may run past D: every load below is masked to K < D, so those steps add zeros
        for i_k in range(i_s * KS, i_s * KS + KS):
            if SPLIT:
                b_xe, b_xo = _a_halves(x + b_tok[:, None] * D, mask_m, i_k * BK, D, BM, BK, False, 1.0, DOT)
                b_we, b_wo = _nvfp4_halves(packed, scale, i_e, 0, o_n, mask_n, i_k * BK, 2 * I, D, BK, DOT, SWIZZLED)
                b_g = tl.dot(b_xe, tl.trans(b_we), b_g, input_precision=PRECISION)
                b_g = tl.dot(b_xo, tl.trans(b_wo), b_g, input_precision=PRECISION)
                b_we, b_wo = _nvfp4_halves(packed, scale, i_e, I, o_n, mask_n, i_k * BK, 2 * I, D, BK, DOT, SWIZZLED)
                b_u = tl.dot(b_xe, tl.trans(b_we), b_u, input_precision=PRECISION)
                b_u = tl.dot(b_xo, tl.trans(b_wo), b_u, input_precision=PRECISION)
            else:
                o_k = i_k * BK + tl.arange(0, BK)
                mask_k = o_k < D
                b_x = tl.load(x + b_tok[:, None] * D + o_k[None, :], mask=mask_m[:, None] & mask_k[None, :],
                              other=0.).to(DOT)
                if NVFP4:
                    b_wg = _nvfp4_tile(packed, scale, i_e, 0, o_n, mask_n, i_k * BK, 2 * I, D, BK, DOT, SWIZZLED)
                    b_wu = _nvfp4_tile(packed, scale, i_e, I, o_n, mask_n, i_k * BK, 2 * I, D, BK, DOT, SWIZZLED)
                else:
                    m = mask_n[:, None] & mask_k[None, :]
                    p_w = w + (i_e * (2 * I) + o_n)[:, None] * D + o_k[None, :]
                    b_wg = tl.load(p_w, mask=m, other=0.).to(DOT)
                    b_wu = tl.load(p_w + I * D, mask=m, other=0.).to(DOT)
                b_g = tl.dot(b_x, tl.trans(b_wg), b_g, input_precision=PRECISION)
                b_u = tl.dot(b_x, tl.trans(b_wu), b_u, input_precision=PRECISION)
        p_p = part + (i_s * P + b_pair[:, None]) * (2 * I) + o_n[None, :]
        mask = mask_m[:, None] & mask_n[None, :]
        tl.store(p_p, b_g, mask=mask)
        tl.store(p_p + I, b_u, mask=mask)


@triton.jit
def moe_swiglu_finish_fwd_kernel(
    part, gscale, sorted_ids, block_expert, h, P, limit,
    I: tl.constexpr, NSPLIT: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
    NVFP4: tl.constexpr, SPLIT: tl.constexpr,
):
    """h[pair, n]: the NSPLIT ranges' accumulators summed in range order, then our gate_up epilogue."""
    i_b, i_n = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
    i_e = tl.load(block_expert + i_b).to(tl.int64)
    if i_e >= 0:
        o_m = i_b * BM + tl.arange(0, BM)
        b_pair = tl.load(sorted_ids + o_m).to(tl.int64)
        mask_m = b_pair < P
        o_n = i_n * BN + tl.arange(0, BN)
        mask = mask_m[:, None] & (o_n < I)[None, :]
        b_g = tl.zeros([BM, BN], dtype=tl.float32)
        b_u = tl.zeros([BM, BN], dtype=tl.float32)
        for i_s in range(NSPLIT):
            p_p = part + (i_s * P + b_pair[:, None]) * (2 * I) + o_n[None, :]
            b_g += tl.load(p_p, mask=mask, other=0.)
            b_u += tl.load(p_p + I, mask=mask, other=0.)
        if NVFP4:
            # the halves' own decode scales, as ours (gate and up differ in real checkpoints)
            b_gd_g = tl.load(gscale + 2 * i_e).to(tl.float32)
            b_gd_u = tl.load(gscale + 2 * i_e + 1).to(tl.float32)
            if SPLIT:
                b_gd_g = b_gd_g * 16384.0                                        # the halves' 2^-14, exact
                b_gd_u = b_gd_u * 16384.0
            b_g = b_g * b_gd_g
            b_u = b_u * b_gd_u
        b_g = tl.minimum(b_g, limit)
        b_u = tl.minimum(tl.maximum(b_u, -limit), limit)
        b_h = b_g * tl.sigmoid(b_g) * b_u
        tl.store(h + b_pair[:, None] * I + o_n[None, :], b_h.to(h.dtype.element_ty), mask=mask)


def _grouped_split_k(x2, ids, wts, E: int, I: int, dense, nv, limit: float, split_k: int):
    """impl.moe._grouped on the decode tiles, gate_up in split_k K ranges and a finish (see the module)."""
    N, D = x2.shape
    k = ids.shape[1]
    P = N * k
    work = _moe._work_dtype(x2.dtype)
    xs = x2.to(work).contiguous()
    BM, BN, BK, nw = _moe._tiles(D, I, False, P, P / max(1, min(E, P)))
    split = nv is not None and _moe.split_tiles(BM, BK, False)
    sorted_ids, block_expert = _moe.align(ids, E, BM)
    NB = block_expert.shape[0]
    h = torch.empty(P, I, device=x2.device, dtype=work)
    out = torch.empty(P, D, device=x2.device, dtype=torch.float32)
    part = torch.empty(split_k, P, 2 * I, device=x2.device, dtype=torch.float32)
    precision = "ieee" if work == torch.float32 else "tf32"
    common = dict(BM=BM, BN=BN, NVFP4=nv is not None, SPLIT=split)
    if nv is None:
        gu, dn = (a.to(work).contiguous() for a in dense)
        gu_args, dn_args = (gu, None, None), (dn, None, None, None)
        g_gu = None
    else:
        g_gu = nv.gate_up.global_decode.reshape(E, -1).expand(E, 2).contiguous()
        gu_args = (None, nv.gate_up.packed.contiguous(), nv.gate_up.block_scale.contiguous())
        dn_args = (None, nv.down.packed.contiguous(), nv.down.block_scale.contiguous(),
                   nv.down.global_decode.contiguous())
    swz = (False, False) if nv is None else tuple(t.scale_layout == "swizzled" for t in (nv.gate_up, nv.down))
    ks = triton.cdiv(triton.cdiv(D, BK), split_k)
    moe_gate_up_part_fwd_kernel[(NB, triton.cdiv(I, BN), split_k)](
        xs, *gu_args, sorted_ids, block_expert, part, P, D=D, I=I, TOP_K=k, KS=ks, BK=BK, DOT=_moe._DOT[work],
        PRECISION=precision, SWIZZLED=swz[0], num_warps=nw, **common)
    moe_swiglu_finish_fwd_kernel[(NB, triton.cdiv(I, BN))](
        part, g_gu, sorted_ids, block_expert, h, P, float(limit), I=I, NSPLIT=split_k, num_warps=4, **common)
    moe_down_fwd_kernel[(NB, triton.cdiv(D, BN))](
        h, *dn_args, None, sorted_ids, block_expert, wts.float().contiguous(), out, P, D=D, I=I, BK=BK,
        W4A4=False, DOT=_moe._DOT[work], PRECISION=precision, SWIZZLED=swz[1], num_warps=nw, **common)
    out = out.view(N, k, D)
    y = out[:, 0]
    for s in range(1, k):                                   # slot order, as ours
        y = y + out[:, s]
    return y


def grouped(x2, ids, wts, E: int, I: int, dense=None, nv=None, limit: float = 10.0, w4a4: bool = False,
            split=None):
    """impl.moe._grouped's signature, as this candidate runs it: split along D on the decode tiles (at most 16
    pairs an expert, not W4A4), else ours unchanged (experts_with, gate/bench_moe.py's *_split_k paths)."""
    P = int(ids.numel())
    if w4a4 or P / max(1, min(E, P)) > 16:
        return _moe._grouped(x2, ids, wts, E, I, dense, nv, limit, w4a4, split=split)
    return _grouped_split_k(x2, ids, wts, E, I, dense, nv, limit, SPLIT_K)


class MoE:
    """The moe namespace: `experts` only (impl.moe.experts' signature)."""

    BATCH_INVARIANT = BATCH_INVARIANT

    @staticmethod
    def experts(w, x, routing, nvfp4=None, w4a4=False):
        """impl.moe.experts with the decode tiles' gate_up split along D (prefill and W4A4: ours)."""
        return _moe.experts_with(w, x, routing, nvfp4, w4a4, grouped=grouped)

Candidate = types.SimpleNamespace(moe=MoE)
