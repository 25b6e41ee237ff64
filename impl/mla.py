"""MLA (NoPE) over a DSA selection on torch + Triton, mirroring oracle/mla.py by name and argument order.

Letters: B batch, S queries of this call, T cached tokens (past + current), D hidden size, H heads,
N per-head q·k dim (d_n), V per-head value dim (d_v), R KV latent rank (r_kv), W selection slots.

`absorbed` is the kernel path: W_UK is folded into the query on the host (a torch matmul), the kernel
gathers only the selected latent rows and returns Σ p c per head, and W_UV is applied on the host.
`expanded` is the baseline form in plain torch (kv_b_proj over every cached latent, dense masked
softmax). Under the Triton interpreter the kernel's operands are float32 (its bf16 tl.dot is wrong).

Selections must not repeat a position within a row: the oracle's softmax is over a SET, the kernel
sums over slots, so a duplicate would count twice. `index` never emits one (with pads inside the cache
its tail gives up the tokens of a picked pool: impl.dsa.index_with); other callers are refused.
"""
from __future__ import annotations

import sys
from typing import Optional

import torch
import triton

import impl  # noqa: F401  (selects the interpreter on CPU-only machines before triton runs a kernel)
from impl import dsa, interpreted, kernel_operand, norm, num_sms, operand_dtype, paged
from impl.graph import capturing
from impl.kernels.mla import mla_merge_kernel, mla_merge_uv_kernel, mla_sparse_absorbed_fwd_kernel

# issue 14 step 49: the Gluon kernel with a producer warp group (impl/kernels/mla_gluon.py), written against Triton
# 3.6's Gluon API, which later releases changed; under any other Triton it is None and the Triton kernel runs
mla_sparse_absorbed_ws_kernel = None
if triton.__version__.startswith("3.6."):
    from impl.kernels.mla_gluon import mla_sparse_absorbed_ws_kernel
from oracle.types import DSACache, IndexerWeights, MLAWeights, Selection


def rmsnorm(x, weight, eps: float):
    """SPEC §2: statistics in float32, cast back to x's dtype, THEN times the weight. One launch of
    impl/kernels/norm.py wherever kernels run (issue 14 step 14), else `rmsnorm_torch`."""
    # a weight of another dtype promotes the product in torch (a float32 result from bf16 x): the torch form then
    if norm.runs_kernel(x) and weight.dtype == x.dtype:
        return norm.launch(x, weight, eps, norm.MLA)
    return rmsnorm_torch(x, weight, eps)


def rmsnorm_torch(x, weight, eps: float):
    """`rmsnorm` in torch ops (ours before issue 14 step 14; the peer of impl.candidates.norms_torch)."""
    u = x.float()
    return (u * torch.rsqrt(u.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight


def _linear(x, weight, bias=None):
    y = x @ weight.T
    return y if bias is None else y + bias


def project(w: MLAWeights, a, *, ops=None):
    """Queries and the latent to cache; oracle.mla.project. ops: the namespace whose `rmsnorm` it calls
    (default this module's; a seam, impl.registry.SEAMS).

    Args:
        a: [B, S, D]
    Returns:
        q: [B, S, H, N];  q_lat: [B, S, r_q];  c: [B, S, R] (normalized, what is cached)
    """
    if a.ndim != 3:
        raise ValueError(f"a: expected [B, S, D], got shape {tuple(a.shape)}")
    B, S, _ = a.shape
    ops = _SELF if ops is None else ops
    q_lat = ops.rmsnorm(_linear(a, w.q_a_proj, w.q_a_bias), w.q_a_layernorm, w.eps)      # [B, S, r_q]
    q = (q_lat @ w.q_b_proj.T).view(B, S, w.num_heads, w.nope_dim)                      # [B, S, H, N]
    c = ops.rmsnorm(_linear(a, w.kv_a_proj_with_mqa, w.kv_a_bias), w.kv_a_layernorm, w.eps)  # [B, S, R]
    return q, q_lat, c


def _split_kv_b(w: MLAWeights):
    """kv_b_proj [H·(N+V), R] -> (W_UK [H, N, R], W_UV [H, V, R]): per head, keys first."""
    Wkv = w.kv_b_proj.view(w.num_heads, w.nope_dim + w.v_dim, -1)
    return Wkv[:, :w.nope_dim], Wkv[:, w.nope_dim:]


# ----------------------------------------------------------------------------- validation


def check_selection(indices, lengths, B: int, S: int, T: int):
    """Validate indices [B, S, W] against per-row cache lengths [B] (<= T); returns both as int64.

    Raises ValueError naming `indices` (not integer, entries outside [-1, lengths[b]), a position twice
    in one row) or `lengths` (shape, negative, longer than the T rows the latent holds). The value
    checks read back to the host: skipped while a CUDA graph is captured (impl.graph.capturing; the
    shape checks stay), run by every eager call.
    """
    if not isinstance(indices, torch.Tensor) or indices.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"indices: expected an int32/int64 tensor, got {getattr(indices, 'dtype', type(indices))}")
    if indices.ndim != 3 or tuple(indices.shape[:2]) != (B, S):
        raise ValueError(f"indices: expected [B={B}, S={S}, W], got shape {tuple(indices.shape)}")
    if lengths is None:
        lengths = torch.full((B,), T, dtype=torch.int64, device=indices.device)
    else:
        if not isinstance(lengths, torch.Tensor) or tuple(lengths.shape) != (B,):
            raise ValueError(f"lengths: expected an int tensor [B={B}], got "
                             f"{tuple(getattr(lengths, 'shape', ())) or type(lengths).__name__}")
        lengths = lengths.to(device=indices.device, dtype=torch.int64)
        lo, hi = (0, T) if capturing() else (int(lengths.min()), int(lengths.max()))
        if lo < 0 or hi > T:
            raise ValueError(f"lengths: cache lengths must lie in [0, T={T}] (the rows latent holds), "
                             f"found [{lo}, {hi}]")
    idx = indices.long()
    if idx.numel() and not capturing():
        bad = (idx < -1) | (idx >= lengths[:, None, None])
        if bool(bad.any()):
            b, s, j = (int(v) for v in bad.nonzero()[0])
            raise ValueError(f"indices: entry [{b}, {s}, {j}] = {int(idx[b, s, j])} outside "
                             f"[-1, {int(lengths[b])}) (row {b}'s cache length)")
        srt = idx.sort(-1).values
        dup = (srt[..., 1:] == srt[..., :-1]) & (srt[..., 1:] >= 0)
        if bool(dup.any()):
            b, s, _ = (int(v) for v in dup.nonzero()[0])
            raise ValueError(f"indices: row [{b}, {s}] repeats a position (a selection is a set; the kernel "
                             f"would count it twice)")
    return idx, lengths


def _check_attention(w: MLAWeights, q, latent, indices, lengths):
    H, N, R = w.num_heads, w.nope_dim, w.kv_rank
    if q.ndim != 4 or tuple(q.shape[2:]) != (H, N):
        raise ValueError(f"q: expected [B, S, H={H}, d_n={N}], got shape {tuple(q.shape)}")
    B, S = q.shape[:2]
    if latent.ndim != 3 or latent.shape[0] != B or latent.shape[2] != R:
        raise ValueError(f"latent: expected [B={B}, T, r_kv={R}], got shape {tuple(latent.shape)}")
    if latent.device != q.device:
        raise ValueError(f"latent: expected device {q.device} (that of q), got {latent.device}")
    return check_selection(indices, lengths, B, S, latent.shape[1])


# ----------------------------------------------------------------------------- attention


def _splits(device, rows: int, programs: int, W: int, BW: int) -> int:
    """Selection splits for flash-decoding (a row's selection split over programs, their partial softmaxes
    merged). On the GPU, from ROWS_64 query rows on (issue 14 steps 40, 41): as many splits as keep the programs
    within one wave of the SMs (H = 64, 132 SMs: B = 8: 16, 16: 8, 32: 4, 64: 2, >= 67: none); below that, the
    H200 sweep's rule (bench_mla --sweep): enough programs for four waves of the SMs (B = 1: 16 splits).
    Each split at least 2 blocks of BW entries (a split of less than one block only adds a merge).

    The interpreter splits as a 1-SM device would below 16 rows, and in 2 from 16 to 127 rows: the split
    kernel and its combine run on the CPU too (invariants/kernel_paths.py; mla.causal's 24-row pin), with
    the fewest programs that still split (its cost is per program, not per element); plain torch on a CPU
    never launches a kernel."""
    if device.type != "cuda" and not interpreted():
        return 1
    if interpreted():
        if rows >= 16:
            return 1 if rows >= 128 else max(1, min(2, triton.cdiv(W, BW)))
        return max(1, min(triton.cdiv(4, programs), W // (2 * BW)))
    sms = num_sms(device)
    if rows >= ROWS_64:
        return max(1, min(sms // programs, W // (2 * BW)))
    return max(1, min(triton.cdiv(4 * sms, programs), W // (2 * BW)))


# query rows (B·S) from which a GPU program takes 64 heads: 16 in step 40, 8 in step 41 (1.7x the 16-head
# launch at B = 8-12 on an H100; from 2 rows on it was 0.81x at B = 2), 7 since step 47 (B = 7 had run 1.43x
# slower than B = 8). Not lower: mla.batch holds a row alone against it among up to 3 rows of 1-2 queries (6 query
# rows) to ours' bits, which a launch change at or below 6 rows breaks
ROWS_64 = 7


def _launch_config(rows: int, BR: int) -> dict:
    """sparse_absorbed's launch for B·S query rows: {bh, bw, num_warps, num_stages}. Heads share every
    gathered row, so a program takes a block of BH heads (tl.dot needs >= 16 rows). On the GPU from ROWS_64
    rows on (issue 14 steps 40, 41): 64 heads, entry blocks of 32, 3 stages: each selected row is gathered
    once for all 64 heads and the [64, 32] x [32, 512] dots take Hopper's warp-group MMA (1.35-1.88x the
    32-head launch at B = 16-256 on an H100, 1.7x the 16-head one at B = 8-12; blocks of 16 or 64 and 2 or 4
    stages were slower). Below it the H200
    sweep's best (bench_mla --sweep): 16 heads, blocks of 64, 2 stages. The interpreter: 16 heads, blocks of
    16 (its cost is per program and per block, not per element)."""
    warps = 4 if BR <= 128 else 8
    if interpreted():
        return dict(bh=16, bw=16, num_warps=warps, num_stages=None)
    if rows < ROWS_64:
        return dict(bh=16, bw=64, num_warps=warps, num_stages=2)
    return dict(bh=64, bw=32, num_warps=warps, num_stages=3)


def _launch(device, rows: int, H: int, W: int, R: int, splits: Optional[int] = None,
            config: Optional[dict] = None) -> dict:
    """sparse_absorbed's whole launch for `rows` (B·S) query rows of H heads over W-wide selections of rank R:
    {bh, bw, num_warps, num_stages, prefetch, br, splits, w_split}: `_launch_config` with `config`'s overrides,
    then the selection splits (`_splits`, or `splits`) as the kernel runs them (W_SPLIT entries each; a count
    that leaves a split empty is reduced). The benchmark reports it."""
    BR = triton.next_power_of_2(max(R, 16))
    cfg = {**_launch_config(rows, BR), **(config or {})}
    plan = {k: cfg.pop(k) for k in ("bh", "bw", "num_warps", "num_stages")}
    # issue 14 step 38: the next block's entries a block ahead (the same bits; 4-6 % faster on an H100)
    prefetch = cfg.pop("prefetch", True)
    if cfg:
        raise ValueError(f"config: unknown keys {sorted(cfg)} (known: bh, bw, num_warps, num_stages, prefetch)")
    if not isinstance(prefetch, bool):
        raise ValueError(f"config: prefetch {prefetch!r}, expected a bool (the next block's entries a block "
                         f"ahead)")
    NS = _splits(device, rows, rows * triton.cdiv(H, plan["bh"]), W, plan["bw"]) if splits is None else int(splits)
    if NS < 1:
        raise ValueError(f"splits: {splits}, expected >= 1")
    W_SPLIT = triton.cdiv(max(W, 1), NS)
    return dict(plan, prefetch=prefetch, br=BR, splits=triton.cdiv(max(W, 1), W_SPLIT), w_split=W_SPLIT)


# at most this many query rows (B·S), the split merge also applies W_UV (issue 14 step 43, mla_merge_uv_kernel:
# the merge, the cast and W_UV's GEMM in one launch; refuted on an H100, 0.80x at B = 1: its GEMV is latency-bound
# at 21.5 us where the merge and cuBLAS take 8.5), kept for its candidate impl.candidates.mla_merge_uv; 0: never
ROWS_UV = 0
MERGE_UV_CONFIG = dict(BK=64, BV=64, num_warps=4)   # 167 registers, no spill (sm_90); BK 128 spilled


# the split merge's rank chunk a program (issue 14 step 44's candidate, impl.candidates.mla_merge_chunks: 128,
# R = 512 over 4 programs a head; refuted on an H100: 1.005x at B = 1, 0.82x at B = 32); 0: the whole rank a program
MERGE_BR = 0


# the split merge in one round of loads when every split fits one tile (issue 14 step 46's candidate,
# impl.candidates.mla_merge_one_round; the same bits); False: L first, then the partials (step 42's two rounds)
MERGE_ONE_ROUND = False


def _merge_chunk(BR: int) -> int:
    """The merge's rank chunk: MERGE_BR on the GPU (0: the whole rank tile BR); under the interpreter half the
    rank tile (at least 8), so the CPU checks run two chunks a head at the tiny geometry's rank (16) too."""
    if not MERGE_BR:
        return BR
    if interpreted():
        return max(8, BR // 2)
    return min(BR, MERGE_BR)


def _merge_plan(NS: int, BR: int) -> tuple:
    """The split merge's tiles for NS splits of rank tile BR: (BJ, the splits loaded at once; BRM, the rank a
    program). Ours: up to 16 splits a load (step 42), the rank chunk of `_merge_chunk` (the whole tile)."""
    return min(16, triton.next_power_of_2(NS)), _merge_chunk(BR)


# issue 14 step 49 (stop 52, H200: the kernel 1.09-1.28x the Triton kernel at B = 8-256 on a 32K cache, the decode
# 1.07-1.25x; gated at two seeds; landed after the paged cache joined it): where `_producer_applies`, the sparse
# kernel is the Gluon one, whose worker warps only gather (cp.async into a ring of PRODUCER_STAGES shared-memory
# tiles) while its 8 warps run the dots; False: the Triton kernel always (impl.candidates.mla_gather_chain)
PRODUCER = True
PRODUCER_STAGES = 3         # 3 x 32 KB of rows + q's 64 KB: 168 KB of shared memory
PRODUCER_WARPS = 4
PRODUCER_REGS = 56          # 16 cp.async a thread a block: their addresses and the entries; no spill (sm_90, 3.6)
# issue 14 step 50's candidate (impl.candidates.mla_producer_overlap; refuted, 0.96-1.005x): block i + 1's scores
# issued before block i's softmax, so they overlap; False: step 49's loop, one block at a time
PRODUCER_OVERLAP = False
# the producer kernel's entry block: 32 (step 49), 64 in step 51's candidate (impl.candidates.mla_producer_bw64: half
# the blocks, so half the barriers, reductions and waits a row; 2 stages of 64 KB, its producer at 64 registers)
PRODUCER_BW = 32
# issue 14 step 51's landing form: from this many query rows (B·S) on, the producer kernel takes PRODUCER_64's blocks
# of 64 entries (stop 53, H100: 1.02 / 1.05 / 1.13 / 1.21 / 1.22x the blocks of 32 at B = 16 / 32 / 64 / 128 / 256;
# 0.975x at B = 8, whose 16 splits of 129 entries leave a last block of 64 nearly empty); 0: never. Not below 7
# rows (mla.batch's range: ROWS_64's comment), where the producer kernel does not run anyway. 16 since it landed
# (gated: impl.candidates.mla_producer_bw64_16; blocks of 32 everywhere: impl.candidates.mla_producer)
PRODUCER_BW64_ROWS = 16
PRODUCER_64 = dict(BW=64, STAGES=2, REGS=64)   # 2 x 64 KB of rows + q's 64 KB: 196 KB (3 stages: 266 KB, no fit)


# issue 14 step 52's candidate (impl.candidates.mla_producer_ahead): the producer warps load each block's entries one
# block ahead (impl/kernels/mla_gluon.py `_produce_ahead`), carried as int32 at PRODUCER_AHEAD_REGS a block size
# (sm_90, Triton 3.6: 56 / 64 spilled inside the loop; at 72 the blocks of 64 spill 8 B once, at the partition's
# entry, and the consumer keeps 216 registers); False: `_produce`, each half's entries loaded before its copies.
# True since it landed (gated at seeds 97 and 98; 1.02-1.035x the kernel at B = 16-256 on an H100)
PRODUCER_AHEAD = True
PRODUCER_AHEAD_REGS = {32: 64, 64: 72}


# issue 14 step 54's candidate (impl.candidates.mla_q_strides): the sparse kernels read q_abs through its row and head
# strides where its rows b·S + s are equally spaced with a unit stride along R (the W_UK fold's einsum returns
# [H, B·S, R] memory seen as [B, S, H, R]); False: q_abs copied contiguous first, an elementwise launch of 3.7-13 us at
# B = 16-128 (stop 55b, H100: `scripts/mla_fixed_probe.py`). True since it landed (gated at seeds 103 and 104)
Q_STRIDES = True


# issue 14 step 55's candidate (impl.candidates.mla_out_uv, with step 54's Q_STRIDES): where the selection is not split
# (from 67 query rows at 64 heads on 132 SMs) and W_UV's fold follows, the sparse kernel writes its output in W_UV's
# dtype, rounded to nearest even in the kernel as torch's cast would: the same bits without the float32 output's cast
# launch (5.8 us at B = 128 on an H100, stop 55b). False: float32, cast before the fold. Not under the interpreter.
# True since it landed (gated at seeds 103 and 104)
OUT_UV = True


# issue 14 step 57's candidate (impl.candidates.mla_part_bf16; refuted in stop 58: 0.79-0.89x at B = 8-64, the
# bf16 merge converting layouts through shared memory and the epilogue's bf16 stores half-sector writes): where the
# selection is split, each split's partial output stored in q's dtype when that is bf16 or fp16 (the merge sums in
# float32). False: float32 partials. The interpreter runs float32 operands, so there they stay float32. True since
# step 59 landed (with the staged store of step 58 and MERGE_BF16_WARPS)
PART_BF16 = True


# issue 14 step 59's candidate (impl.candidates.mla_part_bf16_staged, with PART_BF16 and EPILOGUE_STAGED): the merge
# of bf16 partials on as many warps as lay one 16-byte vector a thread along its rank tile (2 at R = 512), so every
# warp lies along the rank and the sum over splits stays inside each thread. At 4 warps the compiled bf16 merge puts
# two warps along the splits and reduces across them through shared memory (35 accesses and 5 barriers a program,
# Triton 3.6: step 57's 4.5 -> 12.4 us at B = 32); float32 partials lie along the rank at 4 warps already. False: 4.
# True since it landed
MERGE_BF16_WARPS = True


def _merge_warps(part, BRM: int) -> int:
    """The split merge's warps for partials `part` and rank tile BRM: 4 (ours); MERGE_BF16_WARPS, for 16-bit
    partials, one 16-byte vector a thread along the tile (at least 1, at most 4)."""
    if not MERGE_BF16_WARPS or part.element_size() != 2:
        return 4
    return max(1, min(4, BRM * part.element_size() // (16 * 32)))


def _part_dtype(q_abs) -> torch.dtype:
    """The split partials' dtype: float32, or (step 57, PART_BF16) q's when that is bf16 or fp16."""
    return q_abs.dtype if PART_BF16 and q_abs.dtype in (torch.bfloat16, torch.float16) else torch.float32


def _q_operand(q_abs):
    """q_abs [B, S, H, R] as the sparse kernels read it: (q, the stride between query rows b·S + s, the stride between
    heads), unit stride along R. Step 54 (Q_STRIDES): a tensor of the kernels' dtype whose rows are equally spaced is
    read where it is; anything else is made contiguous (kernel_operand: float32 under the interpreter)."""
    B, S, H, R = q_abs.shape
    if Q_STRIDES and operand_dtype(q_abs.dtype) == q_abs.dtype and q_abs.stride(3) == 1:
        # rows b·S + s at one stride: S = 1 (the row is b), B = 1 (the row is s), or the batch stride S rows
        if S == 1 or B == 1 or q_abs.stride(0) == S * q_abs.stride(1):
            return q_abs, q_abs.stride(0) if S == 1 else q_abs.stride(1), q_abs.stride(2)
    q = kernel_operand(q_abs)
    return q, H * R, R


# issue 14 step 58's candidate (impl.candidates.mla_stage_o): where the producer kernel's output is in q's dtype
# (bf16: the unsplit launch before W_UV's fold, step 55), its epilogue goes through q's shared-memory tile and stores
# whole rows 16 bytes a thread (impl/kernels/mla_gluon.py `_store_o_staged`); False: stored from the MMA layout,
# half-sector writes in bf16 (stop 58: ~2.5 us of device time at B = 128 against the float32 output). True since it
# landed
EPILOGUE_STAGED = True


# issue 14 step 60's candidate (impl.candidates.mla_merge_pdl): the split merge launched as a programmatic dependent
# of the sparse kernel (PDL, sm_90): the kernel's programs let the merge's grid launch as they start and the merge's
# programs wait (griddepcontrol.wait) for the kernel's completion, so the merge's launch no longer follows the
# kernel's last program; the same loads and arithmetic. GPU only (inline PTX); False: launched after it
MERGE_PDL = False


def _pdl(q_abs) -> bool:
    """Step 60 (MERGE_PDL) applies: a CUDA device of compute capability 9 or more, not the interpreter."""
    return (MERGE_PDL and q_abs.is_cuda and not interpreted()
            and torch.cuda.get_device_capability(q_abs.device)[0] >= 9)


# diagnostics (scripts/mla_timeline_probe.py, issue 14 step 56): a [programs, 8] int64 buffer the producer kernel's
# entries-ahead form fills with %globaltimer stamps per program (impl/kernels/mla_gluon.py `_stamp`); None: off
_TIMELINE = None


def _producer_block(rows: int) -> dict:
    """The producer kernel's entry block for `rows` query rows: {BW, STAGES, REGS} (the producer warps' registers)."""
    if PRODUCER_BW64_ROWS and rows >= PRODUCER_BW64_ROWS:
        blk = dict(PRODUCER_64)
    else:
        blk = dict(BW=PRODUCER_BW, STAGES=PRODUCER_STAGES, REGS=PRODUCER_REGS)
    if PRODUCER_AHEAD:
        blk["REGS"] = PRODUCER_AHEAD_REGS[blk["BW"]]
    return blk


def _producer_applies(q_abs, latent, H: int, R: int, plan: dict) -> bool:
    """Whether the launch `plan` runs the producer kernel: 64 heads a program (from ROWS_64 query rows on, on a
    GPU) in entry blocks of 32, bf16 operands, a rank that is a power of two from 16 to 512, a Hopper GPU (sm_90)
    and Triton 3.6; a contiguous or a paged cache alike (stop 52: the paged one had run the Triton kernel, which
    broke the paged-gives-the-contiguous-bits property). Everything else (the 16-head launch, float32, the
    interpreter, which cannot run Gluon, another Triton) runs the Triton kernel."""
    return (PRODUCER and mla_sparse_absorbed_ws_kernel is not None and q_abs.is_cuda and not interpreted()
            and plan["bh"] == 64 and H <= 64 and plan["bw"] == 32 and R == plan["br"]
            and 16 <= R <= 512 and q_abs.dtype == torch.bfloat16 and latent.dtype == torch.bfloat16
            and torch.cuda.get_device_capability(q_abs.device)[0] == 9)


def _copy_tile(R: int) -> dict:
    """The producer's copy tile: VEC elements a thread (8 bf16: one 16-byte cp.async), TR threads along a row, so
    that a warp's 32 / TR rows times PRODUCER_WARPS fit in a block of 32 entries (no element copied twice)."""
    vec = 8 if R >= 32 else 4
    return dict(VEC=vec, TR=min(32, R // vec))


def _gather_attend(ws: bool, grid, q_abs, q_strides, latent, idx, lengths, out, lse, bt, S, T, W, W_SPLIT, M, scale,
                   split: bool, meta: dict, dependents: bool = False):
    """One launch of the sparse kernel over `grid` (query rows, head blocks, splits): the producer kernel when `ws`,
    else the Triton kernel with `meta`; the same arguments and outputs (out, and lse when `split`); q_strides: q_abs's
    (row, head) strides (`_q_operand`); dependents (step 60): its programs let the next launch's start."""
    if ws:
        blk = _producer_block(grid[0])
        mla_sparse_absorbed_ws_kernel[(grid[0], 1, grid[2])](
            q_abs, latent, idx, lengths, out, lse, bt, S, T, W, W_SPLIT, M, scale, *q_strides, H=meta["H"], R=meta["R"],
            BH=meta["BH"], BW=blk["BW"], STAGES=blk["STAGES"], SPLIT=split, PRODUCER_WARPS=PRODUCER_WARPS,
            PRODUCER_REGS=blk["REGS"], **_copy_tile(meta["R"]), PAGED=meta["PAGED"], PAGE=meta["PAGE"],
            num_warps=8, OVERLAP=PRODUCER_OVERLAP, BWP=32, AHEAD=PRODUCER_AHEAD, timeline=_TIMELINE,
            TIMELINE=_TIMELINE is not None and PRODUCER_AHEAD and not PRODUCER_OVERLAP,
            STAGE_O=EPILOGUE_STAGED and PRODUCER_AHEAD and not PRODUCER_OVERLAP and out.dtype == q_abs.dtype,
            DEPENDENTS=dependents)
    else:
        mla_sparse_absorbed_fwd_kernel[grid](q_abs, latent, idx, lengths, out, lse, bt, S, T, W, W_SPLIT, M, scale,
                                             *q_strides, SPLIT=split, DEPENDENTS=dependents, **meta)


def sparse_absorbed(q_abs, latent, indices, lengths, scale: float, splits: Optional[int] = None,
                    config: Optional[dict] = None, block_table=None, page_size: int = 1, w_uv=None):
    """Launch the sparse kernel (mla_sparse_absorbed_fwd_kernel, or where `_producer_applies` the producer kernel
    mla_sparse_absorbed_ws_kernel) and the split merge (arguments already validated).

    Args:
        q_abs: [B, S, H, R] queries folded through W_UK;  latent: [B, T, R];  indices: [B, S, W] int64;
        lengths: [B] int64;  scale: the softmax scale (d_n^-1/2);  splits: selection splits
            (flash-decoding: few query rows, e.g. decode at small batch, fill the SMs by splitting the
            selection and merging the partial softmaxes); None picks from the SM count;
        config: launch overrides {bh, bw, num_warps, num_stages, prefetch} (the benchmark sweeps them;
            prefetch, issue 14 step 38: the next block's entries a block ahead, ours; False before it);
        block_table: [B, M] int64 (validated), or None: latent is then the page pool [N, page_size, R]
            and the kernel reads row b's position t from page block_table[b, t // page_size];
        w_uv: W_UV [H, V, R] (kv_b_proj's view, its rows contiguous), or None
    Returns:
        out: [B, S, H, R] float32, Σ_t p_h(s, t) c_t (0 for an empty selection); with w_uv, that folded back
        through W_UV: [B, S, H, V] in w_uv's dtype
    """
    B, S, H, R = q_abs.shape
    T, W = latent.shape[1], indices.shape[-1]
    paged = block_table is not None
    M = block_table.shape[1] if paged else 1
    if R > 1024:
        raise ValueError(f"latent: rank {R}, expected <= 1024 (the kernel holds a [BH, R] tile)")
    if w_uv is not None and (w_uv.shape[0] != H or w_uv.shape[2] != R or w_uv.stride(2) != 1):
        raise ValueError(f"w_uv: expected [H={H}, V, R={R}] with unit stride along R, got shape {tuple(w_uv.shape)} "
                         f"strides {w_uv.stride()}")
    if B * S * H * R == 0:
        out = torch.empty(B, S, H, R, device=q_abs.device, dtype=torch.float32)
        return out if w_uv is None else _fold_uv(out, w_uv)
    q_abs, *q_strides = _q_operand(q_abs)
    latent = kernel_operand(latent.to(q_abs.dtype))
    plan = _launch(q_abs.device, B * S, H, W, R, splits, config)
    BR, NS, W_SPLIT, stages = plan["br"], plan["splits"], plan["w_split"], plan["num_stages"]
    n_hb = triton.cdiv(H, plan["bh"])
    meta = dict(H=H, R=R, BH=plan["bh"], BW=plan["bw"], BR=BR,
                PRECISION="ieee" if q_abs.dtype == torch.float32 else "tf32", PAGED=paged,
                PAGE=int(page_size) if paged else 1, PREFETCH=plan["prefetch"], num_warps=plan["num_warps"],
                **({} if stages is None else {"num_stages": stages}))
    bt = block_table.contiguous() if paged else None
    idx, lengths = indices.contiguous(), lengths.contiguous()
    ws = _producer_applies(q_abs, latent, H, R, plan)
    if NS == 1:
        uv_dtype = OUT_UV and w_uv is not None and not interpreted()
        out = torch.empty(B, S, H, R, device=q_abs.device, dtype=w_uv.dtype if uv_dtype else torch.float32)
        _gather_attend(ws, (B * S, n_hb, 1), q_abs, q_strides, latent, idx, lengths, out, out, bt, S, T, W, W_SPLIT, M,
                       scale, False, meta)
    else:
        part = torch.empty(B * S, NS, H, R, device=q_abs.device, dtype=_part_dtype(q_abs))
        lse = torch.empty(B * S, NS, H, device=q_abs.device, dtype=torch.float32)
        use_uv = w_uv is not None and B * S <= ROWS_UV
        pdl = _pdl(q_abs) and not use_uv
        # the merge's output allocated before the sparse launch: under the checks' poisoned memory (torch.empty
        # NaN-filled by a fill kernel) an allocation between the two launches puts its fill between them, and the
        # merge, a programmatic dependent of that fill instead of the sparse kernel, can no longer start early
        # (stop 64: step 60's no-wait race mutant escaped every check for that reason)
        out = None if use_uv else torch.empty(B, S, H, R, device=q_abs.device,
                                              dtype=torch.float32 if w_uv is None else w_uv.dtype)
        _gather_attend(ws, (B * S, n_hb, NS), q_abs, q_strides, latent, idx, lengths, part, lse, bt, S, T, W, W_SPLIT,
                       M, scale, True, meta, dependents=pdl)
        BJ, BRM = _merge_plan(NS, BR)
        if use_uv:
            V, cfg = w_uv.shape[1], dict(MERGE_UV_CONFIG)
            o = torch.empty(B, S, H, V, device=q_abs.device, dtype=w_uv.dtype)
            BK, BV = min(cfg.pop("BK"), BR), min(cfg.pop("BV"), triton.next_power_of_2(V))
            mla_merge_uv_kernel[(B * S, H, triton.cdiv(V, BV))](
                part, lse, w_uv, o, NS, w_uv.stride(0), w_uv.stride(1), H=H, R=R, V=V, BK=BK, BV=BV, BJ=BJ, **cfg)
            return o
        # the merge (issue 14 step 42): the splits' loads in tiles of up to 16 at once, written in the caller's
        # dtype (no cast launch before W_UV); the rank in chunks of MERGE_BR over programs (step 44)
        mla_merge_kernel[(B * S, H, triton.cdiv(R, BRM))](part, lse, out, NS, H=H, R=R, BR=BRM, BJ=BJ,
                                                          ONE_ROUND=MERGE_ONE_ROUND and NS <= BJ,
                                                          num_warps=_merge_warps(part, BRM), PDL=pdl,
                                                          **({"launch_pdl": True} if pdl else {}))
    return out if w_uv is None else _fold_uv(out, w_uv)


def _fold_uv(lat, w_uv):
    """lat [B, S, H, R] through W_UV [H, V, R] in w_uv's dtype: [B, S, H, V] (SPEC §7, the absorbed output)."""
    return torch.einsum("bshr,hvr->bshv", lat.to(w_uv.dtype), w_uv)


def _dense_scores(q_abs, latent, allowed, scale):
    """[B, S, H, T] float32 scores, -inf outside the selection (the oracle's `scores` output)."""
    s = torch.einsum("bshr,btr->bsht", q_abs.float(), latent.float()) * scale
    return s.masked_fill(~allowed[:, :, None, :], float("-inf"))


def _allowed(idx, T: int):
    """[B, S, W] positions (-1 = none) -> [B, S, T] bool."""
    B, S, _ = idx.shape
    out = torch.zeros(B, S, T + 1, dtype=torch.bool, device=idx.device)
    out.scatter_(2, torch.where(idx < 0, T, idx), True)
    return out[..., :T]


def absorbed(w: MLAWeights, q, latent, indices, lengths=None, return_scores: bool = False,
             splits: Optional[int] = None):
    """Sparse attention in absorbed form through the Triton kernel; oracle.mla.absorbed.

    Args:
        q: [B, S, H, N];  latent: [B, T, R] the normalized cache;  indices: [B, S, W] int (-1 = none;
        no position twice in a row);  lengths: [B] per-row cache lengths (decode with ragged caches:
        row b's cache is latent[b, :lengths[b]]), None = T for every row;
        return_scores: also compute the [B, S, H, T] scores (a dense torch pass, for tests only);
        splits: flash-decoding selection splits (None: chosen from the SM count; the interpreter counts 4)
    Returns:
        o: [B, S, H, V] in q's dtype;  scores: [B, S, H, T] float32 (-inf outside the selection) when
        return_scores, else None: the kernel never materialises them
    """
    idx, lengths = _check_attention(w, q, latent, indices, lengths)
    o, q_abs = attend(w, q, latent, idx, lengths, splits)
    scale = w.nope_dim ** -0.5
    scores = _dense_scores(q_abs, latent, _allowed(idx, latent.shape[1]), scale) if return_scores else None
    return o, scores


def absorbed_paged(w: MLAWeights, q, latent_pages, block_table, page_size: int, lengths, indices,
                   return_scores: bool = False, splits: Optional[int] = None):
    """`absorbed` over a paged latent cache, the kernel reading through the block table;
    oracle.mla.absorbed_paged (docs/candidates.md section 13).

    Args:
        q: [B, S, H, N];  latent_pages: [N_pages, page_size, R] the page pool;  block_table: [B, M] int
        page ids (row b's position t on page block_table[b, t // page_size], slot t % page_size; entries
        past its ceil(lengths[b] / page_size) pages are never read);  page_size: tokens per page;
        lengths: [B] int cache lengths;  indices: [B, S, W] positions in each row, [-1, lengths[b]);
        return_scores, splits: as `absorbed`
    Returns:
        o: [B, S, H, V] in q's dtype;  scores: [B, S, H, max(lengths)] float32 when return_scores
        (a dense torch pass over the gathered rows, for tests), else None
    """
    if q.ndim != 4:
        raise ValueError(f"q: expected [B, S, H={w.num_heads}, d_n={w.nope_dim}], got shape {tuple(q.shape)}")
    bt, lengths = paged.check_paged(latent_pages, block_table, page_size, lengths, q.shape[0], "latent_pages")
    if latent_pages.ndim != 3 or latent_pages.shape[2] != w.kv_rank:
        raise ValueError(f"latent_pages: expected [N, page_size, r_kv={w.kv_rank}], got shape "
                         f"{tuple(latent_pages.shape)}")
    if tuple(q.shape[2:]) != (w.num_heads, w.nope_dim):
        raise ValueError(f"q: expected [B, S, H={w.num_heads}, d_n={w.nope_dim}], got shape {tuple(q.shape)}")
    if latent_pages.device != q.device:
        raise ValueError(f"latent_pages: expected device {q.device} (that of q), got {latent_pages.device}")
    T = int(lengths.max()) if lengths.numel() else 0
    idx, lengths = check_selection(indices, lengths, q.shape[0], q.shape[1], T)
    W_UK, W_UV = _split_kv_b(w)
    q_abs = torch.einsum("bshn,hnr->bshr", q, W_UK.to(q.dtype))                          # [B, S, H, R]
    # W_UV in q's dtype: a float32 [H, V, R] copy per call would cost more bytes than the selected rows
    o = sparse_absorbed(q_abs, latent_pages, idx, lengths, w.nope_dim ** -0.5, splits, block_table=bt,
                        page_size=page_size, w_uv=W_UV.to(q.dtype))                        # [B, S, H, V]
    if not return_scores:
        return o, None
    latent = paged.gather(latent_pages, bt, page_size, lengths, left=False)[0]
    return o, _dense_scores(q_abs, latent, _allowed(idx, T), w.nope_dim ** -0.5)


def attend(w: MLAWeights, q, latent, idx, lengths, splits: Optional[int] = None):
    """`absorbed` without the validation pass (no host sync: what a CUDA-graph decode step calls once
    the caller has validated idx [B, S, W] int64 and lengths [B] int64). Returns (o, q_abs)."""
    W_UK, W_UV = _split_kv_b(w)
    q_abs = torch.einsum("bshn,hnr->bshr", q, W_UK.to(q.dtype))                          # [B, S, H, R]
    # W_UV in q's dtype: a float32 [H, V, R] copy per call would cost more bytes than the selected rows
    o = sparse_absorbed(q_abs, latent, idx, lengths, w.nope_dim ** -0.5, splits, w_uv=W_UV.to(q.dtype))
    return o, q_abs


def absorbed_graph(w: MLAWeights, latent, max_batch: int, width: int):
    """A CUDA-graph sparse decode step over a latent cache of slots: the new token's latent written, then
    `attend` (no validation pass, no host sync), captured once at max_batch rows and replayed with each
    step's q, latent, slots, lengths and selection copied into its persistent buffers (impl/graph.py).

    Args:
        latent: [P, T, R] the cache of P slots (the step keeps its own copy);  max_batch: the captured
            batch M;  width: the selection width W (topk + P_k - 1)
    Returns:
        an MLAAbsorbedStep: eager / capture / replay(q [B, H, N], c [B, R], slots [B], lengths [B],
        indices [B, W]) -> o [B, H, V]; its `latent` after the steps
    """
    from impl.graph import MLAAbsorbedStep
    return MLAAbsorbedStep(_attend_output, w, latent, max_batch, width)


def _attend_output(w: MLAWeights, q, latent, idx, lengths):
    """`attend`'s output alone: o [B, S, H, V]."""
    return attend(w, q, latent, idx, lengths)[0]


def expanded(w: MLAWeights, q, latent, indices, lengths=None):
    """The baseline form: kv_b_proj over every cached latent, dense masked softmax; oracle.mla.expanded.

    Same arguments as `absorbed` (no return_scores: the scores are a by-product here).
    Returns:
        o: [B, S, H, V] in q's dtype;  scores: [B, S, H, T] float32 (-inf outside the selection)
    """
    idx, lengths = _check_attention(w, q, latent, indices, lengths)
    W_UK, W_UV = _split_kv_b(w)
    k = torch.einsum("btr,hnr->bthn", latent, W_UK)                                      # [B, T, H, N]
    v = torch.einsum("btr,hvr->bthv", latent, W_UV)                                      # [B, T, H, V]
    s = torch.einsum("bshn,bthn->bsht", q.float(), k.float()) * w.nope_dim ** -0.5       # [B, S, H, T]
    s = s.masked_fill(~_allowed(idx, latent.shape[1])[:, :, None, :], float("-inf"))
    # an empty row is all -inf: softmax gives NaN there, SDPA (and the oracle) give 0
    p = torch.nan_to_num(torch.softmax(s, -1), nan=0.0)
    return torch.einsum("bsht,bthv->bshv", p, v.float()).to(q.dtype), s


# ----------------------------------------------------------------------------- sublayer


def check_append(old, new, name: str) -> None:
    """A cache array `old` [B, T, D] that the rows `new` [B, S, D] can extend; ValueError naming cache.<name>."""
    if old.ndim != 3 or old.shape[0] != new.shape[0] or old.shape[-1] != new.shape[-1]:
        raise ValueError(f"cache.{name}: expected [B={new.shape[0]}, T, {new.shape[-1]}], "
                         f"got shape {tuple(old.shape)}")


def append_rows(old, new, name: str):
    """The cache array `old` [B, T, D] (None: empty) with this call's rows `new` [B, S, D] after it, in new's
    dtype: a new tensor (the state stays a value; a seam, impl.registry.SEAMS: an engine that keeps its
    caches in buffers with room to grow appends in place, impl.candidates.cache_in_place)."""
    if old is None:
        return new
    check_append(old, new, name)
    return torch.cat([old.to(new.dtype), new], dim=1)


def sublayer(w: MLAWeights, iw: Optional[IndexerWeights], a, cache: Optional[DSACache] = None,
             mask=None, prev: Optional[Selection] = None, kind: str = "full", *, ops=None):
    """MLA + DSA from the post-norm input to o_proj with the §10 cache protocol; oracle.mla.sublayer.

    Projections are torch matmuls, the selection is impl.dsa.index (score kernel), attention the
    absorbed kernel. ops: the namespace whose `project` and `absorbed` it calls, and whose `dsa` is the
    indexer namespace whose `index_rows` and `index` it calls (default this module's and impl.dsa;
    impl/compose.py: a candidate's indexer is reached through here).
    On a full layer the cache's pooled-key cache is appended to (`ops.dsa.pooled_rows`: only the pools
    this call's tokens complete are pooled) and the selection reads its pooled keys from it
    (`ops.dsa.index_pooled`; a namespace without one selects with its `index`, which re-pools).
    Returns:
        y: [B, S, D] in a's dtype;  cache: DSACache with T rows;  selection: the Selection used
    """
    if kind not in ("full", "shared"):
        raise ValueError(f'kind: {kind!r}, expected "full" or "shared"')
    if cache is not None and not isinstance(cache, DSACache):
        raise ValueError(f"cache: expected a DSACache or None, got {type(cache).__name__}")
    ops = _SELF if ops is None else ops
    q, q_lat, c = ops.project(w, a)
    B, S, _ = a.shape
    old_latent, old_rows, old_pooled = (None, None, None) if cache is None else cache
    latent = ops.append_rows(old_latent, c, "latent")                                   # [B, T, R]
    if kind == "full":
        if iw is None:
            raise ValueError('iw: a "full" layer needs its IndexerWeights')
        if old_latent is not None and (old_rows is None or old_rows.shape[:2] != old_latent.shape[:2]):
            raise ValueError("cache: a full layer's index_rows must cover the same [B, T] as its latent")
        if old_pooled is not None:
            cache.check_pooled()
        rows = ops.append_rows(old_rows, ops.dsa.index_rows(iw, a, mask), "index_rows")  # [B, T, 2K+1]
        # the pooled-key cache: a cache without one (another implementation's) is pooled whole once
        # both optional (impl.registry.OPTIONAL_FUNCTIONS): a dsa namespace without its own append has
        # ours keep the cache, one without its own index_pooled selects with its `index` (re-pooling)
        append = getattr(ops.dsa, "pooled_rows", dsa.pooled_rows)
        pooled = append(rows, iw.compress_ape, iw.kpool, old_pooled)                     # [B, T, K+1]
        index_pooled = getattr(ops.dsa, "index_pooled", None)
        sel = (ops.dsa.index(iw, a, q_lat, rows, mask) if index_pooled is None
               else index_pooled(iw, a, q_lat, rows, pooled, mask))
    else:
        if not isinstance(prev, Selection):
            raise ValueError('prev: a "shared" layer needs the Selection of the layer directly before')
        if iw is not None and prev.indices.shape[-1] != iw.slots:
            raise ValueError(f"prev: selection width {prev.indices.shape[-1]}, expected topk + P_k - 1 = {iw.slots}")
        rows, pooled, sel = old_rows, None, prev
    o, _ = ops.absorbed(w, q, latent, sel.indices)                                       # [B, S, H, V]
    y = _linear(o.reshape(B, S, w.num_heads * w.v_dim), w.o_proj, w.o_bias)             # [B, S, D]
    return y, DSACache(latent, rows, pooled), sel


# the compositions of this module and the functions they call through `ops` (impl/compose.py)
COMPOSITIONS = {"sublayer": ("project", "absorbed", "append_rows"), "project": ("rmsnorm",)}
# the other mechanisms' namespaces its compositions call, as `ops.<mechanism>` (impl/compose.py)
SIBLINGS = ("dsa",)
_SELF = sys.modules[__name__]
# bitwise batch invariance claimed for nothing (impl.registry.batch_invariant; the check mla.batch): on a
# GPU `_splits` picks the flash-decoding split count from the B·S query rows (a row's softmax is merged
# from another number of partials when its batch grows), and W_UK / W_UV are applied by torch einsums
# whose GEMM follows the row count (on the CPU too: float32 rows differ in their last bits). Held to
# contracts.d/mla.toml's bounds (NOTES: issue 13 item 2)
BATCH_INVARIANT = ()
