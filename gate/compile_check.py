"""Compile every Triton kernel for a GPU target without a GPU (`glmgate kernels`).

The CPU interpreter runs the kernels' arithmetic but never compiles them: dtype mismatches in tl.dot,
shared-memory overflows and register spills only show up on the device. This compiles each kernel at
full-size shapes for sm_90 (Hopper, the H200) with the ptxas that ships inside the triton wheel, and
reports registers, spill (stack) bytes and shared memory per kernel. Exit 1 if any kernel fails.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
from typing import NamedTuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class KernelRecord(NamedTuple):
    module: str          # file under impl/kernels
    name: str
    pointers: dict       # argument -> pointer type ("*bf16", ...)
    scalars: dict        # argument -> "i32" | "fp32"
    constexprs: dict
    options: dict


BF, F32 = "*bf16", "*fp32"
KDA = dict(H=64, K=128, V=128)
KDA_INTRA = KernelRecord(
    "kda", "kda_intra_chunked_fwd_kernel",
    dict(q=BF, k=BF, v=BF, g=F32, beta=BF, qg=BF, kg=BF, w=BF, u=BF, aqk=BF, gl=F32, flags="*i32"), dict(T="i32"),
    dict(**KDA, BT=64, BC=16, BK=32, BV=64, IS_VARLEN=False, PRECISION="tf32", INV_MERGE=True, ANCHOR=0,
         OFFSET64=True, STACK=False, GC=False, PAIRS=False, cu_seqlens=None, chunk_indices=None, chunk_offsets=None),
    dict(num_warps=4))
# issue 14 step 49's producer kernel (Gluon; Triton 3.6's API only: other releases print it as not compiled),
# contiguous (below), paged, step 50's consumer form (OVERLAP), step 51's blocks of 64 and step 52's entries a block
# ahead (AHEAD) (in RECORDS). Its registers are the launch's allotment a thread (168 x 384 threads); setmaxnreg then
# gives the 8 consumer warps 224 and the 4 producer warps 56
MLA_WS = KernelRecord(
    "mla_gluon", "mla_sparse_absorbed_ws_kernel",
    dict(q=BF, c=BF, indices="*i64", lengths="*i64", out=F32, lse=F32),
    dict(S="i32", T="i32", W="i32", W_SPLIT="i32", M="i32", scale="fp32", stride_q_bs="i32", stride_q_h="i32"),
    dict(H=64, R=512, BH=64, BW=32, STAGES=3, SPLIT=True, PRODUCER_WARPS=4, PRODUCER_REGS=56, VEC=8, TR=32,
         block_table=None, PAGED=False, PAGE=1, num_warps=8, OVERLAP=False, BWP=32, AHEAD=False, timeline=None,
         TIMELINE=False, STAGE_O=False, DEPENDENTS=False),
    dict(num_warps=8))


def _no_table(constexprs: dict) -> dict:
    """constexprs without block_table (a paged record passes it as a pointer)."""
    return {k: v for k, v in constexprs.items() if k != "block_table"}


RECORDS = (
    KDA_INTRA,
    # the same kernel's second compile for strong decays (the softplus gate): the exact pairs pass
    KDA_INTRA._replace(constexprs={**KDA_INTRA.constexprs, "PAIRS": True}),
    # issue 14 step 23: Γ (the chunk-local cumsum of g) before the intra kernel
    KernelRecord("kda", "kda_chunk_cumsum_fwd_kernel", dict(g=F32, gc=F32), dict(T="i32", lower_bound="fp32"),
                 dict(H=64, K=128, BT=64, BK=128, IS_VARLEN=False, OFFSET64=True, cu_seqlens=None, chunk_indices=None,
                      chunk_offsets=None, A_log=None, dt_bias=None, GATE=0, HAS_BIAS=False), dict(num_warps=4)),
    # issue 14 step 24: the same pass making g from the gate's input f (bf16, as its projection gives it)
    KernelRecord("kda", "kda_chunk_cumsum_fwd_kernel", dict(g=BF, gc=F32, A_log=F32, dt_bias=F32),
                 dict(T="i32", lower_bound="fp32"),
                 dict(H=64, K=128, BT=64, BK=128, IS_VARLEN=False, OFFSET64=True, GATE=1, HAS_BIAS=True,
                      cu_seqlens=None, chunk_indices=None, chunk_offsets=None), dict(num_warps=4)),
    # issue 14 step 18's candidate: the intra-chunk outputs from the 16-row sub-chunk pairs, at the tiles
    # impl.candidates.kda_intra_blocked launches (BK 16, 2 warps)
    KernelRecord("kda", "kda_intra_kk_fwd_kernel",
                 dict(q=BF, k=BF, g=F32, beta=BF, aqk=BF, x=F32, flags="*i32"), dict(T="i32"),
                 dict(H=64, K=128, BT=64, BC=16, BK=16, IS_VARLEN=False, PRECISION="tf32", OFFSET64=True,
                      cu_seqlens=None, chunk_indices=None, chunk_offsets=None), dict(num_warps=2)),
    KernelRecord("kda", "kda_intra_wu_fwd_kernel",
                 dict(q=BF, k=BF, v=BF, g=F32, beta=BF, x=F32, qg=BF, kg=BF, w=BF, u=BF, gl=F32), dict(T="i32"),
                 dict(**KDA, BT=64, BC=16, BK=16, BV=64, IS_VARLEN=False, PRECISION="tf32", OFFSET64=True,
                      cu_seqlens=None, chunk_indices=None, chunk_offsets=None), dict(num_warps=2)),
    # ours' split intra pass (issue 14 steps 26-27) at impl.kda.SplitTiles' tiles; the diagonal and W / U kernels
    # first as step 26 had them (W / U making q e^Γ, k e^(Γ_last - Γ)), then as ours runs them (step 27)
    KernelRecord("kda", "kda_intra_diag_fwd_kernel",
                 dict(q=BF, k=BF, gc=F32, beta=BF, aqk=BF, x=F32, flags="*i32"), dict(T="i32", lower_bound="fp32"),
                 dict(H=64, K=128, BT=64, BC=16, BK=32, IS_VARLEN=False, PRECISION="tf32", OFFSET64=True,
                      cu_seqlens=None, chunk_indices=None, chunk_offsets=None, qg=None, kg=None, kb=None,
                      MAKE_QK=False, gl=None, A_log=None, dt_bias=None, FROM_G=False, GATE=0, HAS_BIAS=False, SUB_FIRST=False, FTZ=False, NAN_LAST=False), dict(num_warps=2)),
    KernelRecord("kda", "kda_intra_offdiag_fwd_kernel",
                 dict(q=BF, k=BF, gc=F32, beta=BF, aqk=BF, x=F32), dict(T="i32", lower_bound="fp32"),
                 dict(H=64, K=128, BT=64, BC=16, BK=32, IS_VARLEN=False, PRECISION="tf32", OFFSET64=True,
                      cu_seqlens=None, chunk_indices=None, chunk_offsets=None, A_log=None, dt_bias=None,
                      FROM_G=False, GATE=0, HAS_BIAS=False, FTZ=False, xw=None, X_W=False, LOWER_ONLY=False), dict(num_warps=2)),
    KernelRecord("kda", "kda_intra_wu_split_fwd_kernel",
                 dict(q=BF, k=BF, v=BF, gc=F32, beta=BF, x=F32, qg=BF, kg=BF, w=BF, u=BF, gl=F32), dict(T="i32"),
                 dict(**KDA, BT=64, BC=16, BK=64, BV=64, IS_VARLEN=False, PRECISION="tf32", OFFSET64=True,
                      LOW_DOTS=True, cu_seqlens=None, chunk_indices=None, chunk_offsets=None, kb=None, FROM_KB=False,
                      GL_DONE=False, FTZ=False),
                 dict(num_warps=4)),
    KernelRecord("kda", "kda_intra_diag_fwd_kernel",
                 dict(q=BF, k=BF, gc=F32, beta=BF, aqk=BF, x=F32, flags="*i32", qg=BF, kg=BF, kb=BF),
                 dict(T="i32", lower_bound="fp32"),
                 dict(H=64, K=128, BT=64, BC=16, BK=64, IS_VARLEN=False, PRECISION="tf32", OFFSET64=True,
                      MAKE_QK=True, cu_seqlens=None, chunk_indices=None, chunk_offsets=None, gl=None, A_log=None, dt_bias=None, FROM_G=False, GATE=0, HAS_BIAS=False, SUB_FIRST=False, FTZ=False, NAN_LAST=False),
                 dict(num_warps=2)),
    # issue 14 step 31: the diagonal kernel's exps as ex2.approx.ftz (inline PTX, SplitTiles.diag_ftz), and the W / U
    # kernel making q e^Γ, k e^(Γ_last - Γ), β k e^Γ the same way
    KernelRecord("kda", "kda_intra_diag_fwd_kernel",
                 dict(q=BF, k=BF, gc=F32, beta=BF, aqk=BF, x=F32, flags="*i32", qg=BF, kg=BF, kb=BF),
                 dict(T="i32", lower_bound="fp32"),
                 dict(H=64, K=128, BT=64, BC=16, BK=64, IS_VARLEN=False, PRECISION="tf32", OFFSET64=True,
                      MAKE_QK=True, cu_seqlens=None, chunk_indices=None, chunk_offsets=None, gl=None, A_log=None,
                      dt_bias=None, FROM_G=False, GATE=0, HAS_BIAS=False, SUB_FIRST=False, FTZ=True, NAN_LAST=False),
                 dict(num_warps=2)),
    KernelRecord("kda", "kda_intra_wu_split_fwd_kernel",
                 dict(q=BF, k=BF, v=BF, gc=F32, beta=BF, x=F32, qg=BF, kg=BF, w=BF, u=BF, gl=F32), dict(T="i32"),
                 dict(**KDA, BT=64, BC=16, BK=64, BV=64, IS_VARLEN=False, PRECISION="tf32", OFFSET64=True,
                      LOW_DOTS=True, cu_seqlens=None, chunk_indices=None, chunk_offsets=None, kb=None, FROM_KB=False,
                      GL_DONE=False, FTZ=True),
                 dict(num_warps=4)),
    # issue 14 step 33: the off-diagonal kernel's exps as ex2.approx.ftz (SplitTiles.off_ftz)
    KernelRecord("kda", "kda_intra_offdiag_fwd_kernel",
                 dict(q=BF, k=BF, gc=F32, beta=BF, aqk=BF, x=F32), dict(T="i32", lower_bound="fp32"),
                 dict(H=64, K=128, BT=64, BC=16, BK=32, IS_VARLEN=False, PRECISION="tf32", OFFSET64=True,
                      cu_seqlens=None, chunk_indices=None, chunk_offsets=None, A_log=None, dt_bias=None,
                      FROM_G=False, GATE=0, HAS_BIAS=False, FTZ=True, xw=None, X_W=False, LOWER_ONLY=False), dict(num_warps=2)),
    # issue 14 step 34: X to the W / U kernel in bf16, all ten lower blocks stored by the off-diagonal kernel
    KernelRecord("kda", "kda_intra_offdiag_fwd_kernel",
                 dict(q=BF, k=BF, gc=F32, beta=BF, aqk=BF, x=F32, xw=BF), dict(T="i32", lower_bound="fp32"),
                 dict(H=64, K=128, BT=64, BC=16, BK=32, IS_VARLEN=False, PRECISION="tf32", OFFSET64=True,
                      cu_seqlens=None, chunk_indices=None, chunk_offsets=None, A_log=None, dt_bias=None,
                      FROM_G=False, GATE=0, HAS_BIAS=False, FTZ=True, X_W=True, LOWER_ONLY=False), dict(num_warps=2)),
    KernelRecord("kda", "kda_intra_wu_split_fwd_kernel",
                 dict(q=BF, k=BF, v=BF, gc=F32, beta=BF, x=BF, qg=BF, kg=BF, w=BF, u=BF, gl=F32, kb=BF),
                 dict(T="i32"),
                 dict(**KDA, BT=64, BC=16, BK=64, BV=64, IS_VARLEN=False, PRECISION="tf32", OFFSET64=True,
                      LOW_DOTS=True, FROM_KB=True, cu_seqlens=None, chunk_indices=None, chunk_offsets=None,
                      GL_DONE=False, FTZ=True),
                 dict(num_warps=4)),
    # issue 14 step 32: the diagonal kernel's NaN report from Γ_last and β, stored lane by lane (SplitTiles.diag_nan_last)
    KernelRecord("kda", "kda_intra_diag_fwd_kernel",
                 dict(q=BF, k=BF, gc=F32, beta=BF, aqk=BF, x=F32, flags="*i32", qg=BF, kg=BF, kb=BF),
                 dict(T="i32", lower_bound="fp32"),
                 dict(H=64, K=128, BT=64, BC=16, BK=64, IS_VARLEN=False, PRECISION="tf32", OFFSET64=True,
                      MAKE_QK=True, cu_seqlens=None, chunk_indices=None, chunk_offsets=None, gl=None, A_log=None,
                      dt_bias=None, FROM_G=False, GATE=0, HAS_BIAS=False, SUB_FIRST=False, FTZ=True, NAN_LAST=True),
                 dict(num_warps=2)),
    KernelRecord("kda", "kda_intra_wu_split_fwd_kernel",
                 dict(q=BF, k=BF, v=BF, gc=F32, beta=BF, x=F32, qg=BF, kg=BF, w=BF, u=BF, gl=F32, kb=BF),
                 dict(T="i32"),
                 dict(**KDA, BT=64, BC=16, BK=64, BV=64, IS_VARLEN=False, PRECISION="tf32", OFFSET64=True,
                      LOW_DOTS=True, FROM_KB=True, cu_seqlens=None, chunk_indices=None, chunk_offsets=None,
                      GL_DONE=False, FTZ=False),
                 dict(num_warps=4)),
    # step 30 (ours since): Γ scanned from g in the diagonal (K tile 64, step 29) and off-diagonal kernels, e^Γ_last
    # by the diagonal one, the W / U kernel reading no Γ; then the diagonal kernel from the gate's input f (GATE 1)
    KernelRecord("kda", "kda_intra_diag_fwd_kernel",
                 dict(q=BF, k=BF, gc=F32, beta=BF, aqk=BF, x=F32, flags="*i32", qg=BF, kg=BF, kb=BF, gl=F32),
                 dict(T="i32", lower_bound="fp32"),
                 dict(H=64, K=128, BT=64, BC=16, BK=64, IS_VARLEN=False, PRECISION="tf32", OFFSET64=True,
                      MAKE_QK=True, cu_seqlens=None, chunk_indices=None, chunk_offsets=None, A_log=None,
                      dt_bias=None, FROM_G=True, GATE=0, HAS_BIAS=False, SUB_FIRST=True, FTZ=False, NAN_LAST=False), dict(num_warps=2)),
    KernelRecord("kda", "kda_intra_offdiag_fwd_kernel",
                 dict(q=BF, k=BF, gc=F32, beta=BF, aqk=BF, x=F32), dict(T="i32", lower_bound="fp32"),
                 dict(H=64, K=128, BT=64, BC=16, BK=32, IS_VARLEN=False, PRECISION="tf32", OFFSET64=True,
                      cu_seqlens=None, chunk_indices=None, chunk_offsets=None, A_log=None, dt_bias=None,
                      FROM_G=True, GATE=0, HAS_BIAS=False, FTZ=False, xw=None, X_W=False, LOWER_ONLY=False), dict(num_warps=2)),
    KernelRecord("kda", "kda_intra_wu_split_fwd_kernel",
                 dict(q=BF, k=BF, v=BF, beta=BF, x=F32, qg=BF, kg=BF, w=BF, u=BF, gl=F32, kb=BF),
                 dict(T="i32"),
                 dict(**KDA, BT=64, BC=16, BK=64, BV=64, IS_VARLEN=False, PRECISION="tf32", OFFSET64=True,
                      LOW_DOTS=True, FROM_KB=True, cu_seqlens=None, chunk_indices=None, chunk_offsets=None,
                      gc=None, GL_DONE=True, FTZ=False),
                 dict(num_warps=4)),
    KernelRecord("kda", "kda_intra_diag_fwd_kernel",
                 dict(q=BF, k=BF, gc=BF, beta=BF, aqk=BF, x=F32, flags="*i32", qg=BF, kg=BF, kb=BF, gl=F32,
                      A_log=F32, dt_bias=F32),
                 dict(T="i32", lower_bound="fp32"),
                 dict(H=64, K=128, BT=64, BC=16, BK=64, IS_VARLEN=False, PRECISION="tf32", OFFSET64=True,
                      MAKE_QK=True, cu_seqlens=None, chunk_indices=None, chunk_offsets=None, FROM_G=True, GATE=1,
                      HAS_BIAS=True, SUB_FIRST=True, FTZ=False, NAN_LAST=False), dict(num_warps=2)),
    KernelRecord("kda", "kda_state_chunked_fwd_kernel",
                 dict(qg=BF, kg=BF, w=BF, u=BF, aqk=BF, gl=F32, o=BF, h0=F32, ht=F32),
                 dict(T="i32", NSEG="i32", CPS="i32"),
                 dict(**KDA, BT=64, BK=128, BV=64, VS=128, USE_INITIAL_STATE=True, STORE_BOUNDARY=False,
                      STORE_FINAL=True, IS_VARLEN=False, IS_LOCAL=False, PRECISION="tf32", cu_seqlens=None,
                      chunk_offsets=None, boundary_offsets=None, hb=None, LOWER_ONLY=False, BC=16), dict(num_warps=4)),
    # issue 14 step 35: aqk's blocks right of the diagonal neither stored nor read
    KernelRecord("kda", "kda_state_chunked_fwd_kernel",
                 dict(qg=BF, kg=BF, w=BF, u=BF, aqk=BF, gl=F32, o=BF, h0=F32, ht=F32),
                 dict(T="i32", NSEG="i32", CPS="i32"),
                 dict(**KDA, BT=64, BK=128, BV=64, VS=128, USE_INITIAL_STATE=False, STORE_BOUNDARY=False,
                      STORE_FINAL=True, IS_VARLEN=False, IS_LOCAL=False, PRECISION="tf32", cu_seqlens=None,
                      chunk_offsets=None, boundary_offsets=None, hb=None, LOWER_ONLY=True, BC=16), dict(num_warps=4)),
    KernelRecord("kda", "kda_combine_chunked_fwd_kernel", dict(h0=F32, hl=F32, hs=F32), dict(NSEG="i32"),
                 dict(**KDA, BK=128, BV=32, USE_INITIAL_STATE=True), dict(num_warps=4)),
    KernelRecord("kda", "kda_recurrent_fused_fwd_kernel",
                 dict(q=BF, k=BF, v=BF, g=F32, beta=BF, o=BF, h0=F32, ht=F32), dict(T="i32"),
                 dict(**KDA, BK=128, BV=32, USE_INITIAL_STATE=True, IS_VARLEN=False, cu_seqlens=None),
                 dict(num_warps=4)),
    KernelRecord("kda", "kda_decode_fused_fwd_kernel",
                 dict(z=BF, f=F32, b=BF, conv_w=F32, A_log=F32, conv_in=BF, conv_out=BF, h_in=F32, h_out=F32, o=BF,
                      arrivals="*i32"),
                 dict(lower_bound="fp32", scale="fp32"),
                 dict(H=64, K=128, W=4, BK=128, BV=64, BW=4, NUM_STAGES=0, USE_LOWER_BOUND=True, VS=1),
                 dict(num_warps=4)),
    KernelRecord("dsa", "dsa_pool_fwd_kernel",
                 dict(packed=BF, ape=F32, first="*i64", kbar=F32, member_idx="*i64", pool_valid="*i8"),
                 dict(T="i32", NP="i32"), dict(K=128, M=4, BPL=8, BM=4, BK=128), dict(num_warps=4)),
    # the pooled-key cache: the append (the pool kernel's tile, bf16 cache rows) and the read
    KernelRecord("dsa", "dsa_pool_append_kernel", dict(packed=BF, ape=F32, first="*i64", pooled=BF),
                 dict(T0="i32", T="i32"), dict(K=128, M=4, BR=8, BM=4, BK=128), dict(num_warps=4)),
    KernelRecord("dsa", "dsa_pool_read_kernel",
                 dict(pooled=BF, first="*i64", kbar=F32, member_idx="*i64", pool_valid="*i8"),
                 dict(T="i32", NP="i32"), dict(K=128, M=4, BPL=8, BM=4, BK=128), dict(num_warps=4)),
    KernelRecord("dsa", "dsa_score_fwd_kernel", dict(q=BF, w=F32, kbar=BF, pool_last="*i64", out=F32),
                 dict(S="i32", P="i32", offset="i32", scale="fp32"),
                 dict(H=32, K=128, BT=64, BP=64, BK=128, PRECISION="tf32"), dict(num_warps=4)),
    # the GPU's selection (packed digit counts): up to 2048 pools held in registers (8192 cached tokens),
    # and over several tiles
    KernelRecord("dsa", "dsa_select_fwd_kernel",
                 dict(I=F32, pool_last="*i64", member_idx="*i64", val="*i8", n_vis="*i64", first="*i64",
                      indices="*i64", scores=F32, candidate="*i8"),
                 dict(S="i32", P="i32", T="i32", k_sel="i32", W="i32"),
                 dict(M=4, TAIL=True, ONE=True, RB=2, BS=1, BP=2048, BM=4, BW=1024, PACKED=True), dict(num_warps=8)),
    KernelRecord("dsa", "dsa_select_fwd_kernel",
                 dict(I=F32, pool_last="*i64", member_idx="*i64", val="*i8", n_vis="*i64", first="*i64",
                      indices="*i64", scores=F32, candidate="*i8"),
                 dict(S="i32", P="i32", T="i32", k_sel="i32", W="i32"),
                 dict(M=4, TAIL=True, ONE=False, RB=2, BS=1, BP=2048, BM=4, BW=1024, PACKED=True), dict(num_warps=8)),
    KernelRecord("mla", "mla_sparse_absorbed_fwd_kernel",
                 dict(q=BF, c=BF, indices="*i64", lengths="*i64", out=F32, lse=F32),
                 dict(S="i32", T="i32", W="i32", W_SPLIT="i32", M="i32", scale="fp32",
                      stride_q_bs="i32", stride_q_h="i32"),
                 dict(H=64, R=512, BH=16, BW=64, BR=512, PRECISION="tf32", SPLIT=True, block_table=None,
                      PAGED=False, PAGE=1, PREFETCH=True, DEPENDENTS=False), dict(num_warps=8, num_stages=2)),
    # ours from 7 query rows on (issue 14 steps 40, 41, 47; impl.candidates.mla_heads64*): 64 heads a program
    KernelRecord("mla", "mla_sparse_absorbed_fwd_kernel",
                 dict(q=BF, c=BF, indices="*i64", lengths="*i64", out=F32, lse=F32),
                 dict(S="i32", T="i32", W="i32", W_SPLIT="i32", M="i32", scale="fp32",
                      stride_q_bs="i32", stride_q_h="i32"),
                 dict(H=64, R=512, BH=64, BW=32, BR=512, PRECISION="tf32", SPLIT=True, block_table=None,
                      PAGED=False, PAGE=1, PREFETCH=True, DEPENDENTS=False), dict(num_warps=8, num_stages=3)),
    # the paged cache (64-token pages, vLLM's FlashMLA block size) read through the block table
    KernelRecord("mla", "mla_sparse_absorbed_fwd_kernel",
                 dict(q=BF, c=BF, indices="*i64", lengths="*i64", out=F32, lse=F32, block_table="*i64"),
                 dict(S="i32", T="i32", W="i32", W_SPLIT="i32", M="i32", scale="fp32",
                      stride_q_bs="i32", stride_q_h="i32"),
                 dict(H=64, R=512, BH=16, BW=64, BR=512, PRECISION="tf32", SPLIT=True, PAGED=True, PAGE=64,
                      PREFETCH=True, DEPENDENTS=False), dict(num_warps=8, num_stages=2)),
    # below 8 query rows with one-block splits and one pipeline stage (issue 14 step 45's second form,
    # impl.candidates.mla_splits_w1)
    KernelRecord("mla", "mla_sparse_absorbed_fwd_kernel",
                 dict(q=BF, c=BF, indices="*i64", lengths="*i64", out=F32, lse=F32),
                 dict(S="i32", T="i32", W="i32", W_SPLIT="i32", M="i32", scale="fp32",
                      stride_q_bs="i32", stride_q_h="i32"),
                 dict(H=64, R=512, BH=16, BW=64, BR=512, PRECISION="tf32", SPLIT=True, block_table=None,
                      PAGED=False, PAGE=1, PREFETCH=True, DEPENDENTS=False), dict(num_warps=8, num_stages=1)),
    # issue 14 steps 49-51 (MLA_WS above)
    MLA_WS,
    MLA_WS._replace(pointers={**MLA_WS.pointers, "block_table": "*i64"},
                    constexprs={**_no_table(MLA_WS.constexprs), "PAGED": True, "PAGE": 64}),
    MLA_WS._replace(constexprs={**MLA_WS.constexprs, "OVERLAP": True}),
    # step 51's blocks of 64 entries, 2 stages, the producer at 64 registers (impl.mla.PRODUCER_64), contiguous and
    # paged
    MLA_WS._replace(constexprs={**MLA_WS.constexprs, "BW": 64, "STAGES": 2, "PRODUCER_REGS": 64}),
    MLA_WS._replace(pointers={**MLA_WS.pointers, "block_table": "*i64"},
                    constexprs={**_no_table(MLA_WS.constexprs), "BW": 64, "STAGES": 2, "PRODUCER_REGS": 64,
                                "PAGED": True, "PAGE": 64}),
    # step 52's candidate: the producer's entries a block ahead (impl.mla.PRODUCER_AHEAD_REGS), blocks of 32 and 64
    MLA_WS._replace(constexprs={**MLA_WS.constexprs, "AHEAD": True, "PRODUCER_REGS": 64}),
    MLA_WS._replace(constexprs={**MLA_WS.constexprs, "BW": 64, "STAGES": 2, "PRODUCER_REGS": 72, "AHEAD": True}),
    # step 57's candidate: the split partials in bf16 (the merge below reads them)
    MLA_WS._replace(pointers={**MLA_WS.pointers, "out": BF},
                    constexprs={**MLA_WS.constexprs, "BW": 64, "STAGES": 2, "PRODUCER_REGS": 72, "AHEAD": True}),
    # step 59 (ours since stop 64): bf16 split partials staged the same way (the lse stored as before)
    MLA_WS._replace(pointers={**MLA_WS.pointers, "out": BF},
                    constexprs={**MLA_WS.constexprs, "BW": 64, "STAGES": 2, "PRODUCER_REGS": 72, "AHEAD": True,
                                "STAGE_O": True}),
    # step 58's candidate: the unsplit bf16 output staged through q's shared-memory tile, whole-row stores
    MLA_WS._replace(pointers={**MLA_WS.pointers, "out": BF},
                    constexprs={**MLA_WS.constexprs, "BW": 64, "STAGES": 2, "PRODUCER_REGS": 72, "AHEAD": True,
                                "SPLIT": False, "STAGE_O": True}),
    # step 60's candidate: the split launch's programs let the merge's grid start (programmatic dependent launch)
    MLA_WS._replace(constexprs={**MLA_WS.constexprs, "BW": 64, "STAGES": 2, "PRODUCER_REGS": 72, "AHEAD": True,
                                "DEPENDENTS": True}),
    # the timeline probe's form (issue 14 step 56: %globaltimer stamps per program; diagnostics only)
    MLA_WS._replace(pointers={**MLA_WS.pointers, "timeline": "*i64"},
                    constexprs={**{k: v for k, v in MLA_WS.constexprs.items() if k != "timeline"}, "BW": 64, "STAGES": 2, "PRODUCER_REGS": 72, "AHEAD": True,
                                "TIMELINE": True}),
    # step 55's candidate: unsplit (from 67 rows), the output in W_UV's dtype (bf16) cast in the epilogue
    MLA_WS._replace(pointers={**MLA_WS.pointers, "out": BF},
                    constexprs={**MLA_WS.constexprs, "BW": 64, "STAGES": 2, "PRODUCER_REGS": 72, "AHEAD": True,
                                "SPLIT": False}),
    # the split merge written in bf16, (BR ranks, BJ splits) a program, in one round of loads or two: ours' tiles of
    # 16 splits over the whole rank (issue 14 step 42); the rank in chunks of 128 (step 44's candidate); up to 64
    # splits a load in [64, 128] tiles (step 45's merge plan at 33 splits); step 46's one round at ours' and step 45's
    *(KernelRecord("mla", "mla_merge_kernel", dict(part=F32, lse=F32, out=BF), dict(NS="i32"),
                   dict(H=64, R=512, BR=br, BJ=bj, ONE_ROUND=one, PDL=False), dict(num_warps=4))
      for br, bj, one in ((512, 16, False), (128, 16, False), (128, 64, False), (128, 64, True), (512, 16, True))),
    # step 57's candidate: bf16 partials, ours' tile; step 59 (ours since stop 64): the same on 2 warps (no shared memory)
    KernelRecord("mla", "mla_merge_kernel", dict(part=BF, lse=F32, out=BF), dict(NS="i32"),
                 dict(H=64, R=512, BR=512, BJ=16, ONE_ROUND=False, PDL=False), dict(num_warps=4)),
    KernelRecord("mla", "mla_merge_kernel", dict(part=BF, lse=F32, out=BF), dict(NS="i32"),
                 dict(H=64, R=512, BR=512, BJ=16, ONE_ROUND=False, PDL=False), dict(num_warps=2)),
    # step 60's candidate: ours' merge as a programmatic dependent (it waits for the sparse grid); the Triton sparse
    # kernel's form that lets it start (below 8 query rows)
    KernelRecord("mla", "mla_merge_kernel", dict(part=F32, lse=F32, out=BF), dict(NS="i32"),
                 dict(H=64, R=512, BR=512, BJ=16, ONE_ROUND=False, PDL=True), dict(num_warps=4)),
    KernelRecord("mla", "mla_sparse_absorbed_fwd_kernel",
                 dict(q=BF, c=BF, indices="*i64", lengths="*i64", out=F32, lse=F32),
                 dict(S="i32", T="i32", W="i32", W_SPLIT="i32", M="i32", scale="fp32",
                      stride_q_bs="i32", stride_q_h="i32"),
                 dict(H=64, R=512, BH=16, BW=64, BR=512, PRECISION="tf32", SPLIT=True, block_table=None,
                      PAGED=False, PAGE=1, PREFETCH=True, DEPENDENTS=True), dict(num_warps=8, num_stages=2)),
    # with W_UV applied (step 43's refuted candidate)
    KernelRecord("mla", "mla_merge_uv_kernel", dict(part=F32, lse=F32, w_uv=BF, out=BF),
                 dict(NS="i32", stride_h="i32", stride_v="i32"),
                 dict(H=64, R=512, V=256, BK=64, BV=64, BJ=16), dict(num_warps=4)),
    # the GPU's partial (impl.mhc: a tf32x3 tl.dot over 16 rows, 64-wide sub-blocks, 2 warps) and finish
    # (1 row, 1 warp); the broadcast-and-sum partial is the interpreter's, kept compiling at step 3's form
    KernelRecord("mhc", "mhc_coeff_partial_dot_fwd_kernel", dict(x=BF, fn=F32, part=F32), dict(R="i32"),
                 dict(N=4, D=4096, BR=16, BM=32, BK=256, BKS=64, PRECISION="tf32x3"), dict(num_warps=2)),
    KernelRecord("mhc", "mhc_coeff_partial_fwd_kernel", dict(x=BF, fn=F32, part=F32), dict(R="i32"),
                 dict(N=4, D=4096, BR=1, BN=4, BK=256, BKS=256), dict(num_warps=4)),
    KernelRecord("mhc", "mhc_coeff_finish_fwd_kernel",
                 dict(part=F32, base=F32, scale=F32, x=BF, pre=F32, post=F32, comb=F32, u=BF),
                 dict(R="i32", iters="i32", hc_eps="fp32", rms_eps="fp32"),
                 dict(N=4, D=4096, NS=64, BR=1, BN=4, BS=64, BD=256), dict(num_warps=1)),
    # the 16-token router tile: the interpreter's past N = 1 and step 12's (impl.candidates.moe_decode_step12)
    KernelRecord("moe", "moe_router_fwd_kernel",
                 dict(logits=F32, bias=F32, scores=F32, biased=F32, groups=F32, ids="*i64", weights=F32),
                 dict(N="i32", scaling="fp32"),
                 dict(E=288, G=1, TOPK_GROUP=1, TOP_K=8, NORM=True, BT=16, BE=512, BG=1, BKE=8),
                 dict(num_warps=16)),
    # the GPU's router: one token a program, one warp (impl.moe._router_tile, issue 14 step 13)
    KernelRecord("moe", "moe_router_fwd_kernel",
                 dict(logits=F32, bias=F32, scores=F32, biased=F32, groups=F32, ids="*i64", weights=F32),
                 dict(N="i32", scaling="fp32"),
                 dict(E=288, G=1, TOPK_GROUP=1, TOP_K=8, NORM=True, BT=1, BE=512, BG=1, BKE=8),
                 dict(num_warps=1)),
    KernelRecord("moe", "moe_gate_up_fwd_kernel",
                 dict(x=BF, w=BF, sorted_ids="*i64", block_expert="*i64", h=BF), dict(P="i32", limit="fp32"),
                 dict(D=4096, I=2048, TOP_K=8, NVFP4=False, W4A4=False, DOT="bf16", PRECISION="tf32", SWIZZLED=False, packed=None,
                      scale=None, gscale=None, gin=None, BM=16, BN=64, BK=128), dict(num_warps=4)),
    KernelRecord("moe", "moe_down_fwd_kernel",
                 dict(h=BF, w=BF, sorted_ids="*i64", block_expert="*i64", weights=F32, out=F32), dict(P="i32"),
                 dict(D=4096, I=2048, NVFP4=False, W4A4=False, DOT="bf16", PRECISION="tf32", SWIZZLED=False, packed=None, scale=None,
                      gscale=None, gin=None, BM=16, BN=64, BK=128), dict(num_warps=4)),
    KernelRecord("moe", "moe_gate_up_fwd_kernel",
                 dict(x=BF, packed="*u8", scale="*fp8e4nv", gscale=F32, sorted_ids="*i64", block_expert="*i64", h=BF),
                 dict(P="i32", limit="fp32"),
                 dict(D=4096, I=2048, TOP_K=8, NVFP4=True, W4A4=False, DOT="bf16", PRECISION="tf32", SWIZZLED=False, w=None,
                      gin=None, BM=16, BN=64, BK=128), dict(num_warps=4)),
    KernelRecord("moe", "moe_down_fwd_kernel",
                 dict(h=BF, packed="*u8", scale="*fp8e4nv", gscale=F32, sorted_ids="*i64", block_expert="*i64",
                      weights=F32, out=F32), dict(P="i32"),
                 dict(D=4096, I=2048, NVFP4=True, W4A4=False, DOT="bf16", PRECISION="tf32", SWIZZLED=False, w=None, gin=None,
                      BM=16, BN=64, BK=128), dict(num_warps=4)),
    # W4A4 emulation: the activation tile quantize-dequantized in the prologue (h in float32)
    KernelRecord("moe", "moe_gate_up_fwd_kernel",
                 dict(x=BF, packed="*u8", scale="*fp8e4nv", gscale=F32, gin=F32, sorted_ids="*i64",
                      block_expert="*i64", h=F32), dict(P="i32", limit="fp32"),
                 dict(D=4096, I=2048, TOP_K=8, NVFP4=True, W4A4=True, DOT="bf16", PRECISION="tf32", SWIZZLED=False, w=None,
                      BM=64, BN=64, BK=64), dict(num_warps=8)),
    KernelRecord("moe", "moe_down_fwd_kernel",
                 dict(h=F32, packed="*u8", scale="*fp8e4nv", gscale=F32, gin=F32, sorted_ids="*i64",
                      block_expert="*i64", weights=F32, out=F32), dict(P="i32"),
                 dict(D=4096, I=2048, NVFP4=True, W4A4=True, DOT="bf16", PRECISION="tf32", SWIZZLED=False, w=None,
                      BM=64, BN=64, BK=64), dict(num_warps=8)),
    KernelRecord("moe", "moe_align_fwd_kernel", dict(ids="*i64", sorted_ids="*i64", block_expert="*i64"),
                 dict(P="i32", NB="i32"), dict(E=288, BM=16, BE=512, BP=32, BS=64, IDX="int32", FILL=True),
                 dict(num_warps=4)),
    # the norms (impl/norm.py, ours since issue 14 step 14): hidden 4096, MLA's kv latent 512, a KDA head's 128
    KernelRecord("norm", "norm_fwd_kernel", dict(x=BF, w=BF, zg=BF, y=BF), dict(N="i32", D="i32", eps="fp32"),
                 dict(MODE=0, BM=1, BD=4096), dict(num_warps=4)),
    KernelRecord("norm", "norm_fwd_kernel", dict(x=BF, w=BF, zg=BF, y=BF), dict(N="i32", D="i32", eps="fp32"),
                 dict(MODE=1, BM=1, BD=512), dict(num_warps=1)),
    KernelRecord("norm", "norm_fwd_kernel", dict(x=BF, w=F32, zg=BF, y=BF), dict(N="i32", D="i32", eps="fp32"),
                 dict(MODE=2, BM=1, BD=128), dict(num_warps=1)),
    KernelRecord("moe", "moe_combine_fwd_kernel", dict(out=F32, y=BF), dict(N="i32", D="i32"),
                 dict(TOP_K=8, BT=1, BD=1024), dict(num_warps=4)),
    KernelRecord("moe", "nvfp4_qdq_fwd_kernel", dict(x=BF, out=F32), dict(M="i32", G="fp32"),
                 dict(K=4096, BM=16, BK=64), dict(num_warps=4)),
    KernelRecord("mhc", "mhc_write_back_fwd_kernel", dict(x=BF, y=BF, post=F32, comb=F32, x_new=BF),
                 dict(R="i32"), dict(N=4, D=4096, BR=1, BN=4, BD=256, ACC="fp32"), dict(num_warps=4)),
)

# the NVFP4 GEMMs also read 128x4-swizzled block scales (scale_layout "swizzled": a gathered tile)
RECORDS = RECORDS + tuple(r._replace(constexprs={**r.constexprs, "SWIZZLED": True}) for r in RECORDS
                          if r.module == "moe" and r.constexprs.get("NVFP4") and not r.constexprs.get("W4A4"))

# the grouped GEMMs' NVFP4 weight tile form (SPLIT, issue 14): interleaved above, and split for W4A16
# (linear and swizzled scales) and W4A4
# the KDA decode with a head's value blocks over 2 programs (B = 1: 64 heads on 132 SMs; issue 14 step 16's
# candidate), the last to arrive writing the window
RECORDS = RECORDS + tuple(r._replace(constexprs={**r.constexprs, "VS": 2}) for r in RECORDS
                          if r.name == "kda_decode_fused_fwd_kernel")

_GEMMS = ("moe_gate_up_fwd_kernel", "moe_down_fwd_kernel")
RECORDS = tuple(r._replace(constexprs={**r.constexprs, "SPLIT": False, "PAIRS": False}) if r.name in _GEMMS else r
                for r in RECORDS)
RECORDS = RECORDS + tuple(r._replace(constexprs={**r.constexprs, "SPLIT": True}) for r in RECORDS
                          if r.name in _GEMMS and r.constexprs.get("NVFP4"))

# the split W4A16 decode tiles dequantize two codes per 32-bit instruction on a GPU (PAIRS, issue 14 step 11)
RECORDS = RECORDS + tuple(r._replace(constexprs={**r.constexprs, "PAIRS": True}) for r in RECORDS
                          if r.name in _GEMMS and r.constexprs.get("SPLIT") and not r.constexprs.get("W4A4"))

# the MoE GEMMs also run with prefill tiles (impl.moe._tiles: > 16 pairs per expert)
RECORDS = RECORDS + tuple(
    r._replace(constexprs={**r.constexprs, "BM": 128, "BN": 128, "BK": 64}, options=dict(num_warps=8))
    for r in RECORDS if r.module == "moe" and r.constexprs.get("W4A4") is False)


def _load(module: str):
    path = os.path.join(ROOT, "impl", "kernels", f"{module}.py")
    spec = importlib.util.spec_from_file_location(f"_compile_check_{module}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def compile_one(rec: KernelRecord, arch: int):
    """(registers, stack bytes, shared bytes) of one kernel compiled for sm_<arch>."""
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = getattr(_load(rec.module), rec.name)
    sig = {}
    for n in fn.arg_names:
        if n in rec.constexprs:
            sig[n] = "constexpr"
        elif n in rec.pointers:
            sig[n] = rec.pointers[n]
        elif n in rec.scalars:
            sig[n] = rec.scalars[n]
        else:
            raise ValueError(f"{rec.name}: no type given for argument {n!r} in gate/compile_check.py")
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(fn.arg_names) if sig[n].startswith("*")}
    # dtype-valued constexprs are written as strings in the table ("fp32" -> tl.float32)
    consts = {k: (getattr(tl, {"fp32": "float32", "fp64": "float64", "bf16": "bfloat16", "int32": "int32"}[v])
                  if k in ("ACC", "DOT", "IDX") else v) for k, v in rec.constexprs.items()}
    if getattr(fn, "is_gluon", lambda: False)():
        from triton.experimental.gluon._runtime import GluonASTSource
        src = GluonASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs)
    else:
        src = ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs)
    c = triton.compile(src, target=GPUTarget("cuda", arch, 32), options=rec.options)
    cuobjdump = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    regs = stack = -1
    if os.path.exists(cuobjdump):
        with tempfile.NamedTemporaryFile(suffix=".cubin") as fh:
            fh.write(c.asm["cubin"])
            fh.flush()
            out = subprocess.run([cuobjdump, "-res-usage", fh.name], capture_output=True, text=True).stdout
        m = re.search(r"REG:(\d+).*?STACK:(\d+)", out)
        if m:
            regs, stack = int(m.group(1)), int(m.group(2))
    return regs, stack, int(c.metadata.shared)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="glmgate kernels", description=__doc__.split("\n")[0])
    p.add_argument("--arch", type=int, default=90, help="compute capability x 10 (default 90: H100/H200)")
    p.add_argument("--kernel", action="append", help="only this kernel (repeatable)")
    args = p.parse_args(argv)
    # the interpreter replaces @triton.jit functions at import: compile the real ones
    os.environ.pop("TRITON_INTERPRET", None)
    if "triton" in sys.modules and os.environ.get("_GLMGATE_COMPILE_CHILD") != "1":
        env = dict(os.environ, _GLMGATE_COMPILE_CHILD="1")
        return subprocess.call([sys.executable, "-m", "gate.compile_check", *(argv or sys.argv[1:])],
                               env=env, cwd=ROOT)
    import triton
    failed = 0
    # register allocation and spills differ between Triton releases (3.9 spills where 3.6 does not): the counts
    # stand for the device only when this Triton is the device's
    print(f"{'kernel':48s} {'regs':>5s} {'spill B':>8s} {'smem B':>8s}  (sm_{args.arch}, full-size shapes, "
          f"Triton {triton.__version__})")
    for rec in RECORDS:
        if args.kernel and rec.name not in args.kernel:
            continue
        label = rec.name + (" split" if rec.module == "moe" and rec.constexprs.get("SPLIT") else "") + (
                            " pairs" if rec.constexprs.get("PAIRS") else "") + (
                            " (w4a4)" if rec.constexprs.get("W4A4") else
                            " (nvfp4 swizzled)" if rec.constexprs.get("SWIZZLED") else
                            " (nvfp4)" if rec.constexprs.get("NVFP4") else
                            " (paged)" if rec.constexprs.get("PAGED") else "")
        if rec.module == "moe" and rec.constexprs.get("BM") == 128:
            label += " prefill"
        if rec.constexprs.get("OVERLAP"):
            label += " (overlap)"
        if rec.module == "mla_gluon" and rec.constexprs.get("BW") == 64:
            label += " (blocks of 64)"
        if rec.module == "mla_gluon" and rec.constexprs.get("AHEAD"):
            label += " (entries ahead)"
        if rec.module == "mla_gluon" and rec.constexprs.get("STAGE_O"):
            label += " (staged epilogue)"
        if rec.constexprs.get("DEPENDENTS"):
            label += " (dependents)"
        if rec.constexprs.get("PDL"):
            label += " (pdl)"
        if rec.module == "mla_gluon" and rec.constexprs.get("TIMELINE"):
            label += " (timeline stamps)"
        if rec.module == "mla_gluon" and rec.constexprs.get("SPLIT") and rec.pointers.get("out") == BF:
            label += " (bf16 partials)"
        if rec.module == "mla_gluon" and not rec.constexprs.get("SPLIT"):
            label += " (unsplit, bf16 out)" if rec.pointers.get("out") == BF else " (unsplit)"
        if rec.module == "mla_gluon" and not triton.__version__.startswith("3.6."):
            # Gluon's calls changed after 3.6 (impl/kernels/mla_gluon.py): not a compile failure of this kernel
            print(f"{label:48s} not compiled: written for Triton 3.6's Gluon API (this is {triton.__version__})")
            continue
        try:
            regs, stack, smem = compile_one(rec, args.arch)
            print(f"{label:48s} {regs:>5d} {stack:>8d} {smem:>8d}")
        except Exception as e:  # a kernel that does not compile is the finding: report and go on
            failed += 1
            print(f"{label:48s} FAILED: {type(e).__name__}: {str(e).strip().splitlines()[-1][:300]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
