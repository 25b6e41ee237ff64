"""The three RMSNorms as one Triton launch each (impl/kernels/norm.py), brought through the norm seams
(impl.registry.SEAMS): issue 14 step 14's candidate, NOT yet gated on a GPU (docs/optimization_log.md).

At a decode step each torch norm is ~7 small launches (conversions, square, mean, + eps, rsqrt,
products, the cast back); here one. The same float32 arithmetic in the same multiplication order as
ours, the sum in the kernel's order:

    python3 -m gate.cli gate --device cuda --candidate impl.candidates.norms_fused:Candidate \\
        --baseline triton --check kda.sublayer --check mla.paths --check model.paths
    PYTHONPATH=. python3 scripts/profile_replay.py --peer impl.candidates.norms_fused:Candidate
"""
from __future__ import annotations

import types

import torch
import triton

from impl import interpreted  # (importing impl selects the interpreter on CPU-only machines first)
from impl.kernels.norm import norm_fwd_kernel

D_MAX = 16384          # one [BD] row tile a program


def _norm(x, w, eps: float, mode: int, zg=None):
    """Launch norm_fwd_kernel over x's rows of D = x.shape[-1]; y in x's dtype (float64 computed in
    float32 and returned float64, as the torch forms compute it)."""
    D = int(x.shape[-1])
    if tuple(w.shape) != (D,):
        raise ValueError(f"weight: expected [{D}] (x's last axis), got shape {tuple(w.shape)}")
    if zg is not None and tuple(zg.shape) != tuple(x.shape):
        raise ValueError(f"zg: expected x's shape {tuple(x.shape)}, got {tuple(zg.shape)}")
    if not 1 <= D <= D_MAX:
        raise ValueError(f"x: last axis {D}, expected 1..{D_MAX} (one row tile a program)")
    if not x.dtype.is_floating_point:
        raise ValueError(f"x: expected a float dtype, got {x.dtype}")
    out_dtype = x.dtype
    # the kernel reads and writes float32 for float64 (the torch forms compute float64 in float32 too)
    work = torch.float32 if x.dtype == torch.float64 else x.dtype
    xs = x.to(work).contiguous()
    y = torch.empty_like(xs)
    rows = xs.numel() // D
    if rows:
        g = zg.to(work).contiguous() if zg is not None else xs
        BD = triton.next_power_of_2(D)
        # a row a program on the GPU (the form gated in issue 14 step 14); the interpreter's cost is per program,
        # so there a block of rows (at most 2^16 elements) a program
        BM = min(triton.next_power_of_2(rows), max(1, 65536 // BD)) if interpreted() else 1
        norm_fwd_kernel[(triton.cdiv(rows, BM),)](xs, w.contiguous(), g, y, rows, D, float(eps), MODE=mode, BM=BM,
                                                  BD=BD, num_warps=4 if D >= 1024 else 1)
    return y.to(out_dtype)


def rmsnorm(x, w, eps: float):
    """impl.model.rmsnorm in one launch: w · x · (mean(x²) + eps)^-1/2, float32, cast to x's dtype."""
    return _norm(x, w, eps, 0)


def mla_rmsnorm(x, weight, eps: float):
    """impl.mla.rmsnorm in one launch: statistics in float32, cast to x's dtype, then times the weight."""
    return _norm(x, weight, eps, 1)


def gated_rmsnorm(o, zg, weight, eps):
    """impl.kda.gated_rmsnorm in one launch: w · o · (mean(o²) + eps)^-1/2 · sigmoid(zg), cast to o's dtype."""
    return _norm(o, weight, eps, 2, zg)


Candidate = types.SimpleNamespace(kda=types.SimpleNamespace(gated_rmsnorm=gated_rmsnorm),
                                  mla=types.SimpleNamespace(rmsnorm=mla_rmsnorm),
                                  model=types.SimpleNamespace(rmsnorm=rmsnorm))
