"""The MoE feed-forward on torch + Triton, mirroring oracle/moe.py by name and argument order (torch in/out).

Letters: N tokens (leading axes of x flattened), D hidden, E experts, k experts per token, G groups,
I expert width, P = N·k (token, slot) pairs, BM pair-rows per block.

  route    a float32 GEMM for the logits + one launch of moe_router_fwd_kernel -> the oracle's Routing
           container (float32 scores,
           biased scores with -inf outside the kept groups, group scores, int64 ids, float32 weights)
  experts  `align` (on the device, no host sync): the P pairs sorted by expert (stable), each expert's
           run padded to a multiple of BM, one expert id per block (-1 for the spare blocks of the upper
           bound cdiv(P, BM) + min(E, P)): one launch of moe_align_fwd_kernel up to ALIGN_KERNEL_PAIRS
           pairs, torch ops above (align_torch); then moe_gate_up_fwd_kernel (x·gate_up[e]^T, clamped
           SwiGLU epilogue -> h [P, I]) and moe_down_fwd_kernel (h·down[e]^T · routing weight -> out
           [P, D] float32, row = pair); `combine` (moe_combine_fwd_kernel) sums out.view(N, k, D) over
           the slots in slot order (deterministic, no atomics) into x's dtype
  forward  experts(route) + shared_expert, the shared expert being the same two kernels with one
           expert of width F and weight 1

Weights: bf16 / f16 / f32 (dots in x's dtype on a GPU; float32 operands under the interpreter, whose
bf16 tl.dot is wrong, and "ieee" precision for float32 inputs), or NVFP4 W4A16 expert weights
(impl/nvfp4.py NVFP4Experts: packed codes + fp8 block scales, LINEAR or 128x4-swizzled as the
tensor's scale_layout says, + per-expert decode scales read inside the kernel: gate_up's gate and up
halves each with its own, [E, 2]; an [E] one is shared), dequantized in registers; `w4a4=True` adds the W4A4 emulation (NVFP4.md A6): the
A-tile of each GEMM (x, then h, kept in float32) is quantize-dequantized in the kernel's prologue with
the expert's static input scale or the dynamic one, bit-identical to oracle.nvfp4.qdq_activation.
float64 inputs run in float32 and return float64.
Validation (shapes, id range, NVFP4 scales) syncs the host once per call, not per expert.

NVFP4 weight tiles come in two forms (issue 14, docs/optimization_log.md step 1): interleaved (one
[BN, BK] tile in K order per step: the prefill tiles and W4A4) and split (even and odd columns as two
[BN, BK/2] tiles, the scale product in fp16, two half-dots per step: the W4A16 decode tiles, and every
tile on the interpreter). `split_tiles` decides; `_grouped(split=...)` forces one. The candidates
`impl.candidates.nvfp4_split` and `impl.candidates.nvfp4_interleaved` run one form everywhere through
`glmgate gate`.
The split tiles dequantize in one of two ways (step 11): the fp16 product above, or, compiled for a CUDA
GPU with bf16 dots, two codes per 32-bit instruction (inline PTX: e2m1 · 2^-126 as bf16 bit patterns,
times the scale · 2^119 by fma.bf16x2, 2^7 left to the epilogue). `pairs_possible` and NVFP4_PAIRS
decide; `_grouped(pairs=...)` forces one; `impl.candidates.nvfp4_fp16_split` runs the fp16 form.
"""
from __future__ import annotations

import sys
from typing import Optional

import torch
import triton
import triton.language as tl

import impl
from impl import canary
from impl.baseline import moe as _base
from impl.graph import capturing
from impl.kernels.moe import (moe_align_fwd_kernel, moe_combine_fwd_kernel, moe_down_fwd_kernel,
                              moe_gate_up_fwd_kernel, moe_router_fwd_kernel)
from impl.nvfp4 import NVFP4Experts, check_experts, dynamic_input_scale
from oracle.types import DenseMLPWeights, MoEWeights, Routing

_FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
_DOT = {torch.float32: tl.float32, torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}
TOP_K_MAX = 8
# the most (token, slot) pairs `align` sorts in one program (moe_align_fwd_kernel): measured on the H200
# at E = 288 (docs/optimization_log.md step 8) the kernel takes 10.7 us at 8 pairs, 38.8 at 64 and 146.5
# at 256, against ~60 us of torch launches: a gain up to 64 pairs (8 tokens at top-8), a loss at 256
ALIGN_KERNEL_PAIRS = 64
# the NVFP4 weight tile's form when a call does not say (kernels' SPLIT): None = split on the decode
# tiles (16-row blocks) of W4A16, interleaved elsewhere; True / False force one form. Measured on the H200
# (docs/optimization_log.md step 1): split is 1.07-1.17x the interleaved form at 1-128 tokens, 1.00x at
# 4096 (the prefill tile is not dequantization-bound); W4A4 split was not measured, so it stays interleaved
NVFP4_SPLIT = None


# the split tiles' dequantization (kernels' PAIRS, issue 14 step 11): None = two e2m1 codes per 32-bit
# instruction (inline PTX) wherever it can run: bf16 dots compiled for a CUDA GPU of compute capability
# >= 8.0 (fma.rn.bf16x2); the fp16 form of step 1 elsewhere (float32 dots, the interpreter, which cannot
# run inline PTX). True / False force one on split NVFP4 tiles (dense and interleaved launches never take
# it); True where it cannot run is refused.
NVFP4_PAIRS = None


def pairs_possible(work: torch.dtype, device) -> bool:
    """Whether the PAIRS dequantization can run: bf16 dots in a compiled kernel on a CUDA GPU (sm >= 80)."""
    device = torch.device(device)
    return (work == torch.bfloat16 and device.type == "cuda" and not impl.interpreted()
            and torch.cuda.get_device_capability(device) >= (8, 0))


def split_tiles(BM: int, BK: int, w4a4: bool) -> bool:
    """The default NVFP4 weight tile form for a launch of BM x BK tiles (NVFP4_SPLIT above; two half-dots
    of K >= 16 need BK a multiple of 32)."""
    if NVFP4_SPLIT is not None:
        return bool(NVFP4_SPLIT)
    return BM <= 16 and BK % 32 == 0 and not w4a4


# ----------------------------------------------------------------------------- validation


def _tokens(x, hidden: int) -> torch.Tensor:
    if not isinstance(x, torch.Tensor) or x.ndim < 1 or x.shape[-1] != hidden:
        raise ValueError(f"x: expected a tensor [..., D] with D={hidden}, got shape "
                         f"{tuple(getattr(x, 'shape', ()))}")
    if x.dtype not in _FLOAT_DTYPES:
        raise ValueError(f"x: expected dtype in {_FLOAT_DTYPES}, got {x.dtype}")
    return x.reshape(-1, hidden)


def _work_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype the kernels load and dot in: float32 under the interpreter and for float64."""
    if impl.interpreted() or dtype == torch.float64:
        return torch.float32
    return dtype


def _f32(a: torch.Tensor) -> torch.Tensor:
    """a in float32, converted once per tensor version (the router of a bf16 model is read every step;
    converting it per call would cost more bytes than the GEMM)."""
    if a.dtype == torch.float32:
        return a
    cached = getattr(a, "_glmgate_f32", None)
    if cached is None or cached[0] != a._version:
        cached = (a._version, a.float())
        a._glmgate_f32 = cached
    return cached[1]


def _check_field(name: str, a, x) -> None:
    if not isinstance(a, torch.Tensor):
        raise ValueError(f"{name}: expected a torch tensor, got {type(a).__name__}")
    if a.device != x.device:
        raise ValueError(f"{name}: on {a.device}, expected {x.device} (that of x)")


# ----------------------------------------------------------------------------- routing


def _router_tile(N: int, BE: int) -> tuple:
    """(BT tokens a program, num_warps) of moe_router_fwd_kernel. A program runs its k top-k passes one
    after another, so on a GPU one token a program at every N, one warp per 512 expert lanes: a 16-token
    tile at N = 1 computed 15 pad rows and took 14.6 us of the H200 decode step, one token on one warp
    3.9 us; at N = 4096 one token a program is also faster (docs/optimization_log.md step 13). The
    interpreter pays per program, so there only N = 1 takes the one-token tile (the GPU's kernel)."""
    if not impl.interpreted() or N == 1:
        return 1, max(1, BE // 512)
    return 16, 16 if BE >= 512 else (8 if BE >= 256 else 4)    # [16, BE] f32 tiles: no spills at E = 288


def route(w: MoEWeights, x) -> Routing:
    """oracle.moe.route in float32 in one launch; ties to the lowest group / expert id.

    Args:
        x: [..., D]
    Returns:
        Routing(expert_ids [N, k] int64, weights [N, k] f32, scores [N, E] f32, biased [N, E] f32
        (-inf outside the kept groups), group_scores [N, G] f32)
    """
    return route_with(w, x)


def route_with(w: MoEWeights, x, *, tile=None) -> Routing:
    """`route` with the kernel's token tile chosen (tile: `_router_tile`'s signature, (N, BE) -> (BT,
    num_warps); None: ours): the seam of impl/candidates/moe_decode_step12."""
    w.validate()
    D = int(w.router.shape[-1])
    xs = _tokens(x, D).contiguous()
    for name in ("router", "e_score_correction_bias"):
        _check_field(f"MoEWeights.{name}", getattr(w, name), x)
    if w.top_k > TOP_K_MAX:
        raise ValueError(f"MoEWeights.top_k: {w.top_k}, expected <= {TOP_K_MAX} (one argmax pass per pick)")
    N, E, G, k = xs.shape[0], w.num_experts, w.n_group, w.top_k
    dev = x.device
    f32 = dict(device=dev, dtype=torch.float32)
    # GLMGATE_CANARY=1: the outputs inside sentinel margins, verified after the launch (impl/canary.py)
    scores, biased = canary.empty(N, E, **f32), canary.empty(N, E, **f32)
    groups, weights = canary.empty(N, G, **f32), canary.empty(N, k, **f32)
    ids = canary.empty(N, k, device=dev, dtype=torch.int64)
    if N:
        # logits in float32 (SPEC §2) by one GEMM; the kernel does sigmoid, groups and top-k per token
        logits = torch.matmul(xs.float(), _f32(w.router).T).contiguous()
        BE = triton.next_power_of_2(max(E, 16))
        BT, warps = (tile or _router_tile)(N, BE)
        moe_router_fwd_kernel[(triton.cdiv(N, BT),)](
            logits, w.e_score_correction_bias.float().contiguous(),
            scores, biased, groups, ids, weights, N, float(w.routed_scaling_factor),
            E=E, G=G, TOPK_GROUP=w.topk_group, TOP_K=k, NORM=bool(w.norm_topk_prob),
            BT=BT, BE=BE, BG=triton.next_power_of_2(G), BKE=triton.next_power_of_2(k), num_warps=warps,
        )
        canary.verify("moe_router_fwd_kernel", scores=scores, biased=biased, groups=groups, ids=ids,
                      weights=weights)
    return Routing(ids, weights, scores, biased, groups)


# ----------------------------------------------------------------------------- grouped GEMM


def align(ids, num_experts: int, block_m: int, fill: bool = True):
    """Sort the (token, slot) pairs by expert (stable) and pad each expert's run to a multiple of block_m.

    Up to ALIGN_KERNEL_PAIRS pairs (decode): one launch of moe_align_fwd_kernel; above, align_torch (the
    one program walks every slot against every expert, slower than torch's ~25 launches past 64 pairs).
    Both give the same tensors, bit for bit (tests/test_moe_align.py). fill: the kernel's pad slots written
    first (ours), or found by a last pass (before step 13: impl/candidates/moe_decode_step12).

    Args:
        ids: [N, k] expert ids
    Returns:
        sorted_ids [NB·block_m] int64 pair ids (P = N·k marks a pad row), block_expert [NB] int64
        (-1 for a spare block), with NB = cdiv(P, block_m) + min(E, P) (an upper bound: no host sync)
    """
    flat = ids.reshape(-1)
    P, E = flat.numel(), num_experts
    if P > ALIGN_KERNEL_PAIRS:
        return align_torch(ids, num_experts, block_m)
    NB = triton.cdiv(P, block_m) + min(E, P)
    sorted_ids = torch.empty(NB * block_m, device=ids.device, dtype=torch.int64)
    block_expert = torch.empty(NB, device=ids.device, dtype=torch.int64)
    if P:
        moe_align_fwd_kernel[(1,)](flat.contiguous(), sorted_ids, block_expert, P, NB, E=E, BM=block_m,
                                   BE=triton.next_power_of_2(max(E, 16)), BP=32, BS=64,
                                   IDX=tl.int64 if impl.interpreted() else tl.int32, FILL=bool(fill), num_warps=4)
    return sorted_ids, block_expert


def align_torch(ids, num_experts: int, block_m: int):
    """`align` in ~25 torch launches (counts, a stable argsort, cumulative sums, a scatter): the prefill path."""
    flat = ids.reshape(-1)
    P, E, dev = flat.numel(), num_experts, ids.device
    counts = torch.zeros(E, device=dev, dtype=torch.int64).scatter_add_(0, flat, torch.ones_like(flat))
    padded = (counts + block_m - 1) // block_m * block_m
    pend = torch.cumsum(padded, 0)
    order = torch.argsort(flat, stable=True)
    e_sorted = flat[order]
    rank = torch.arange(P, device=dev) - (torch.cumsum(counts, 0) - counts)[e_sorted]
    NB = triton.cdiv(P, block_m) + min(E, P)
    sorted_ids = torch.full((NB * block_m,), P, device=dev, dtype=torch.int64)
    sorted_ids[(pend - padded)[e_sorted] + rank] = order
    blocks = torch.arange(NB, device=dev, dtype=torch.int64)
    block_expert = torch.searchsorted(pend // block_m, blocks, right=True)
    block_expert = torch.where(block_expert < E, block_expert, -1)
    return sorted_ids, block_expert


def combine(out, dtype: torch.dtype):
    """y [N, D] in dtype = Σ_slots out [N, k, D] (float32) in slot order, in one launch."""
    N, k, D = out.shape
    # on a GPU the kernel rounds to bf16 / fp16 itself (to nearest even, as torch); the interpreter's
    # conversion truncates, so there (and for float64) it writes float32 and torch converts
    narrow = dtype in (torch.bfloat16, torch.float16) and not impl.interpreted()
    y = torch.empty(N, D, device=out.device, dtype=dtype if narrow else torch.float32)
    if N:
        BD = min(1024, triton.next_power_of_2(max(D, 16)))
        # one token a program on a GPU (as measured); the interpreter pays ~2 ms a program, so there
        # a program takes up to 64 tokens
        BT = min(64, triton.next_power_of_2(N)) if impl.interpreted() else 1
        moe_combine_fwd_kernel[(triton.cdiv(N, BT), triton.cdiv(D, BD))](out, y, N, D, TOP_K=k, BT=BT, BD=BD,
                                                                         num_warps=4)
    return y.to(dtype)


def _tiles(D: int, I: int, w4a4: bool = False, pairs: int = 0, pairs_per_expert: float = 64.0):
    """(BM, BN, BK, num_warps): small tiles under the interpreter; on a GPU the H200 sweep's best
    (bench_moe --sweep, NOTES.md): decode (<= 16 pairs per expert) 16-row blocks, so a block is not
    mostly padding, with BK 128 (BN 32 and BK 256 for <= 16 pairs in all); prefill 128 x 128 with 8
    warps. W4A4 keeps 64 x 64 at 8 warps (its prologue spilled 112 B at 4 warps in the sm_90 compile
    check)."""
    if impl.interpreted():
        return 16, 16, 32, 4
    if w4a4:
        return 64, 64, 64, 8
    if pairs_per_expert <= 16:
        # <= 16 pairs: BK 256, twice the bytes a K step keeps in flight (the sweep: 79.9 against 104.5 us
        # at N = 1 with BK 128, docs/optimization_log.md step 13)
        return (16, 32, 256, 4) if pairs <= 16 else (16, 64, 128, 4)
    return 128, 128, 64, 8


def default_tiles(D: int, I: int, E: int, pairs: int, w4a4: bool = False):
    """The tiles `_grouped` launches for `pairs` (token, slot) pairs over E experts without a tiles override."""
    return _tiles(D, I, w4a4, pairs, pairs / max(1, min(E, pairs)))


def _input_scales(t, acts, E: int) -> torch.Tensor:
    """[E] float32 ENCODE scales of one W4A4 GEMM input: the static input_global_scale, else one dynamic
    value for all experts (impl.nvfp4.dynamic_input_scale, on the device: no host sync)."""
    if t.input_global_scale is not None:
        return t.input_global_scale.float().contiguous()
    return dynamic_input_scale(acts).reshape(1).expand(E).contiguous()


def _grouped(x2, ids, wts, E: int, I: int, dense=None, nv: Optional[NVFP4Experts] = None, limit: float = 10.0,
             w4a4: bool = False, tiles: Optional[tuple] = None, split: Optional[bool] = None,
             out_dtype: torch.dtype = torch.float32, align_fn=None, combine_fn=None, pairs: Optional[bool] = None):
    """Σ_slots wts · expert_{ids}(x2) with dense weights (gate_up [E, 2I, D], down [E, D, I]) or NVFP4
    (W4A16, or W4A4: both GEMM inputs quantize-dequantized in the kernels' prologue).
    tiles: (BM, BN, BK, num_warps[, num_stages]) launch override (the benchmark sweeps them; stages:
        Triton's default when left out).
    split: the NVFP4 weight tile's form (None: split_tiles); ignored for dense weights.
    pairs: the split tiles' dequantization, two codes per 32-bit instruction (None: NVFP4_PAIRS, else
        wherever pairs_possible); True where it cannot run raises ValueError.
    out_dtype: the result's dtype (the slot sum runs in float32 either way).
    align_fn, combine_fn: `align` and `combine` by default; a peer's host glue (impl/candidates/moe_align_torch)."""
    N, D = x2.shape
    k = ids.shape[1]
    P = N * k
    work = _work_dtype(x2.dtype)
    xs = x2.to(work).contiguous()
    BM, BN, BK, nw, *stages = tiles if tiles is not None else default_tiles(D, I, E, P, w4a4)
    if len(stages) > 1 or (stages and stages[0] < 1):
        raise ValueError(f"tiles: {tuple(tiles)}: expected (BM, BN, BK, num_warps[, num_stages >= 1])")
    if BM < 16 or BK % 16 or BN < 16:
        raise ValueError(f"tiles: {(BM, BN, BK, nw)}: BM, BN >= 16 and BK a multiple of 16 (tl.dot, NVFP4 blocks)")
    split = nv is not None and (split_tiles(BM, BK, w4a4) if split is None else bool(split))
    if split and BK % 32:
        raise ValueError(f"tiles: {(BM, BN, BK, nw)}: split NVFP4 tiles need BK a multiple of 32 (two half-dots "
                         f"of K >= 16 per step)")
    can = split and pairs_possible(work, x2.device)
    if pairs is None:
        # the module switch speaks of split NVFP4 tiles only: dense and interleaved launches never take PAIRS
        pairs = split and (can if NVFP4_PAIRS is None else bool(NVFP4_PAIRS))
    if pairs and not can:
        raise ValueError(f"pairs=True: the two-codes-per-instruction dequantization runs only on split NVFP4 tiles "
                         f"(split={split}) with bf16 dots (here {work}) compiled for a CUDA GPU of compute capability "
                         f">= 8.0 (device {x2.device}{', under the Triton interpreter' if impl.interpreted() else ''}): "
                         f"it is inline PTX")
    sorted_ids, block_expert = (align_fn or align)(ids, E, BM)
    NB = block_expert.shape[0]
    # W4A4 keeps h in float32 so its quantization sees the accumulator, not a bf16 rounding of it
    h = torch.empty(P, I, device=x2.device, dtype=torch.float32 if w4a4 else work)
    out = torch.empty(P, D, device=x2.device, dtype=torch.float32)
    precision = "ieee" if work == torch.float32 else "tf32"
    common = dict(BM=BM, BN=BN, BK=BK, NVFP4=nv is not None, W4A4=w4a4, DOT=_DOT[work], PRECISION=precision,
                  SPLIT=split, PAIRS=pairs, num_warps=nw, **({"num_stages": stages[0]} if stages else {}))
    if nv is None:
        gu, dn = (a.to(work).contiguous() for a in dense)
        gu_args, dn_args = (gu, None, None, None), (dn, None, None, None)
    else:
        # the kernel reads (gate, up) at gscale[2e], gscale[2e + 1]: a shared [E] value is both
        g_gu = nv.gate_up.global_decode.reshape(E, -1).expand(E, 2).contiguous()
        gu_args = (None, nv.gate_up.packed.contiguous(), nv.gate_up.block_scale.contiguous(), g_gu)
        dn_args = (None, nv.down.packed.contiguous(), nv.down.block_scale.contiguous(),
                   nv.down.global_decode.contiguous())
    swz = (False, False) if nv is None else tuple(t.scale_layout == "swizzled" for t in (nv.gate_up, nv.down))
    gin_x = _input_scales(nv.gate_up, xs, E) if w4a4 else None
    moe_gate_up_fwd_kernel[(NB, triton.cdiv(I, BN))](
        xs, *gu_args, gin_x, sorted_ids, block_expert, h, P, float(limit), D=D, I=I, TOP_K=k,
        SWIZZLED=swz[0], **common)
    gin_h = _input_scales(nv.down, h, E) if w4a4 else None       # after gate_up: a dynamic scale needs all of h
    moe_down_fwd_kernel[(NB, triton.cdiv(D, BN))](
        h, *dn_args, gin_h, sorted_ids, block_expert, wts.float().contiguous(), out, P, D=D, I=I,
        SWIZZLED=swz[1], **common)
    return (combine_fn or combine)(out.view(N, k, D), out_dtype)


def experts(w: MoEWeights, x, routing: Routing, nvfp4: Optional[NVFP4Experts] = None, w4a4: bool = False):
    """oracle.moe.experts: y [..., D] = Σ_{e∈sel} w_e · expert_e(x), in x's dtype.

    Args:
        x: [..., D];  routing: from `route` (or the oracle's, as tensors) on the same x
        nvfp4: NVFP4 W4A16 expert weights (impl/nvfp4.py: gate_up global_decode [E, 2] per half or
            [E] shared, block scales linear or swizzled per scale_layout); None runs w.gate_up_proj /
            w.down_proj, which may then be None
        w4a4: W4A4 emulation: x and h quantize-dequantized to NVFP4 in the GEMM prologues with the
            experts' input_global_scale (or the dynamic scale when None; see oracle.nvfp4)
    """
    return experts_with(w, x, routing, nvfp4, w4a4, split=None)


def experts_with(w: MoEWeights, x, routing: Routing, nvfp4: Optional[NVFP4Experts] = None, w4a4: bool = False,
                 *, split: Optional[bool] = None, grouped=None, pairs: Optional[bool] = None):
    """`experts` with the NVFP4 weight tile's form chosen (split: True / False, None: split_tiles; pairs: the
    split tiles' dequantization, `_grouped`'s), and the grouped GEMMs (grouped: `_grouped`'s signature;
    None: ours; a candidate's, impl/candidates/)."""
    if w4a4 and nvfp4 is None:
        raise ValueError("w4a4: needs the NVFP4 experts (nvfp4=...): W4A4 has no bf16-weight form")
    if nvfp4 is None:
        w.validate()
        E, I = w.num_experts, w.expert_dim
        for name in ("gate_up_proj", "down_proj"):
            _check_field(f"MoEWeights.{name}", getattr(w, name), x)
    else:
        E, I = w.num_experts, 2 * int(nvfp4.down.packed.shape[-1]) if nvfp4.down.packed.ndim == 3 else -1
        check_experts(nvfp4, E, int(w.router.shape[-1]), I, x.device)
    D = int(w.router.shape[-1])
    xs = _tokens(x, D)
    ids, wts = routing.expert_ids, routing.weights
    N = xs.shape[0]
    if tuple(ids.shape) != (N, w.top_k) or tuple(wts.shape) != (N, w.top_k):
        raise ValueError(f"routing: expected expert_ids and weights [N, k] = {(N, w.top_k)}, "
                         f"got {tuple(ids.shape)} and {tuple(wts.shape)}")
    # the id range is read back to the host: an eager-time check (a CUDA-graph capture reads no value
    # back, impl/graph.py; the eager warm-up of a captured step validates the same routing path)
    if ids.numel() and not capturing() and (int(ids.min()) < 0 or int(ids.max()) >= E):
        raise ValueError(f"routing.expert_ids: expected ids in [0, E={E}), found [{int(ids.min())}, {int(ids.max())}]")
    if N == 0:
        return torch.zeros_like(x)
    ids = ids.to(device=x.device, dtype=torch.int64)
    args = (xs, ids, wts.to(x.device), E, I, (w.gate_up_proj, w.down_proj) if nvfp4 is None else None, nvfp4,
            w.swiglu_limit, w4a4)
    # ours writes the slot sum in x's dtype; a candidate's grouped GEMM returns float32
    y = (_grouped(*args, split=split, out_dtype=x.dtype, pairs=pairs) if grouped is None
         else grouped(*args, split=split))
    return y.to(x.dtype).reshape(x.shape)


def gate_up(w: DenseMLPWeights):
    """The [2F, D] gate-then-up matrix the grouped kernel reads: a view, without a copy, when gate_proj and
    up_proj are adjacent halves of one buffer (impl.weights.fuse_gate_up, as to_torch lays them out);
    else their concatenation (a copy of both on every call: 97 us and 192 MiB a decode step at the full
    geometry's dense MLP, docs/optimization_log.md step 3)."""
    g, u = w.gate_proj, w.up_proj
    if (g.shape == u.shape and g.dtype == u.dtype and g.device == u.device and g.is_contiguous()
            and u.is_contiguous() and g.untyped_storage().data_ptr() == u.untyped_storage().data_ptr()
            and u.storage_offset() == g.storage_offset() + g.numel()):
        return g.as_strided((2 * g.shape[0], g.shape[1]), (g.shape[1], 1), g.storage_offset())
    return torch.cat([g, u])


def dense_mlp(w: DenseMLPWeights, x):
    """oracle.moe.dense_mlp through the grouped kernels: one expert of width F, weight 1."""
    return dense_mlp_with(w, x)


def dense_mlp_with(w: DenseMLPWeights, x, *, grouped=None, gate_up_fn=None):
    """`dense_mlp` with the grouped-GEMM function (grouped: `_grouped`'s signature, returning float32; None:
    ours) and the [2F, D] gate-then-up matrix (gate_up_fn: `gate_up`'s signature; None: ours) chosen: the
    seams of the peers in impl/candidates/."""
    w.validate()
    D = int(w.gate_proj.shape[-1])
    xs = _tokens(x, D)
    for name in ("gate_proj", "up_proj", "down_proj"):
        _check_field(f"DenseMLPWeights.{name}", getattr(w, name), x)
    N = xs.shape[0]
    if N == 0:
        return torch.zeros_like(x)
    ids = torch.zeros(N, 1, device=x.device, dtype=torch.int64)
    ones = torch.ones(N, 1, device=x.device, dtype=torch.float32)
    args = (xs, ids, ones, 1, w.width, ((gate_up_fn or gate_up)(w)[None], w.down_proj[None]), None, w.swiglu_limit)
    # ours writes x's dtype; a candidate's grouped GEMM returns float32
    y = _grouped(*args, out_dtype=x.dtype) if grouped is None else grouped(*args)
    return y.to(x.dtype).reshape(x.shape)


def shared_expert(w: MoEWeights, x):
    """oracle.moe.shared_expert: the dense shared MLP, zeros without one."""
    if w.shared is None:
        return torch.zeros_like(x)
    return dense_mlp(w.shared, x)


def forward(w: MoEWeights, x, nvfp4: Optional[NVFP4Experts] = None, w4a4: bool = False, *, ops=None):
    """oracle.moe.forward: routed mixture (bf16/f32, NVFP4 W4A16 or W4A4 experts) + shared expert (dense).
    ops: the namespace whose route / experts / shared_expert it calls (default this module's)."""
    ops = _SELF if ops is None else ops
    routing = ops.route(w, x)
    # keywords, and only for NVFP4 experts: a candidate's bf16-only experts(w, x, routing) takes no more
    y = ops.experts(w, x, routing) if nvfp4 is None and not w4a4 else ops.experts(w, x, routing, nvfp4=nvfp4,
                                                                                  w4a4=w4a4)
    return y + ops.shared_expert(w, x)


# the compositions of this module and the functions they call through `ops` (impl/compose.py)
COMPOSITIONS = {"forward": ("route", "experts", "shared_expert")}
_SELF = sys.modules[__name__]
# bitwise batch invariance claimed for nothing (impl.registry.batch_invariant; the check moe.batch): the
# router logits are a torch GEMM over all N tokens, `_tiles` picks BK (the reduction order) from the pair
# count on a GPU, and under the interpreter a token's row position inside a BM-row tile (which its
# companions decide) changes the tile product's last bits. Held to contracts.d/moe.toml's bounds
BATCH_INVARIANT = ()


swiglu = _base.swiglu
