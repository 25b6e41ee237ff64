"""Host wrapper of impl/kernels/norm.py: the model's three RMSNorms (SPEC §2) in one launch each.

impl.model.rmsnorm, impl.mla.rmsnorm and impl.kda.gated_rmsnorm call `launch` wherever kernels run (a CUDA
tensor, or the interpreter); a CPU tensor on a machine with a GPU takes their torch forms (`*_torch`), which
stay as the peer the layer replays time ours against (impl.candidates.norms_torch). At a decode step each
torch form was ~7 small launches (conversions, square, mean, + eps, rsqrt, products, the cast back); issue 14
step 14 made it one (docs/optimization_log.md: 1.14-1.18x the decode step of each layer kind on an H100).
"""
from __future__ import annotations

import torch
import triton

from impl import interpreted
from impl.kernels.norm import norm_fwd_kernel

D_MAX = 16384          # one [BD] row tile a program
DECODER, MLA, GATED = 0, 1, 2        # norm_fwd_kernel's MODEs: the three multiplication orders


def runs_kernel(x: torch.Tensor) -> bool:
    """Whether `launch` runs for x: a CUDA tensor, or any tensor under the interpreter."""
    return x.device.type == "cuda" or interpreted()


def launch(x, w, eps: float, mode: int, zg=None):
    """norm_fwd_kernel over x's rows of D = x.shape[-1] in MODE `mode`; y in x's dtype (float64 computed in
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
    if (mode == GATED) != (zg is not None):
        raise ValueError(f"zg: the gate is MODE {GATED}'s alone (mode {mode}, zg {'given' if zg is not None else None})")
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
