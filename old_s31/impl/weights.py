"""The oracle's float64 Weights as torch tensors in the working dtype (SPEC §11).

What stays float32 is each field's declaration (oracle.types, `f32`: KDA's conv1d, dt_bias and A_log);
an NVFP4 checkpoint's routed experts (NVFP4.md A5) become impl.nvfp4.NVFP4Experts for the W4A16
kernels, their codes and fp8 scales bit for bit.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch

from oracle.types import F32_WEIGHTS, DenseMLPWeights, MoEWeights, NVFP4ExpertWeights, Weights, cast_arrays

__all__ = ["F32_WEIGHTS", "to_torch", "nvfp4_experts", "fuse_gate_up", "fuse_mlps"]


def fuse_gate_up(w: DenseMLPWeights) -> DenseMLPWeights:
    """w with gate_proj and up_proj as the two halves of one [2F, D] buffer (same values, same dtype): the
    grouped kernel then reads them as one matrix without a copy per call (impl.moe.gate_up)."""
    fused = torch.cat([w.gate_proj, w.up_proj])
    F = int(w.gate_proj.shape[0])
    return dataclasses.replace(w, gate_proj=fused[:F], up_proj=fused[F:])


def fuse_mlps(lw):
    """A layer's dense MLP, or its MoE shared expert, with gate and up fused (fuse_gate_up)."""
    if isinstance(lw.mlp, DenseMLPWeights):
        return dataclasses.replace(lw, mlp=fuse_gate_up(lw.mlp))
    if isinstance(lw.mlp, MoEWeights) and lw.mlp.shared is not None:
        sh = fuse_gate_up(lw.mlp.shared)
        return dataclasses.replace(lw, mlp=dataclasses.replace(lw.mlp, shared_gate_proj=sh.gate_proj,
                                                               shared_up_proj=sh.up_proj))
    return lw


def nvfp4_experts(nv: NVFP4ExpertWeights, device="cpu"):
    """The oracle's NVFP4 experts (NumPy, gate and up apart) -> impl.nvfp4.NVFP4Experts on `device`
    (gate_up fused, global_decode [E, 2]: the gate's and the up's scale per expert, NVFP4.md A5); codes
    and fp8 scales bit for bit."""
    from impl.nvfp4 import experts_to   # the Triton kernels behind impl.nvfp4 load only when needed

    return experts_to(nv, device)


def _moe(w: MoEWeights, device, nvfp4: bool) -> MoEWeights:
    """A torch MoEWeights' NVFP4 experts as NVFP4Experts (nvfp4=True) or dropped (dequantized only)."""
    if w.nvfp4 is None or not nvfp4:
        return dataclasses.replace(w, nvfp4=None)
    return dataclasses.replace(w, nvfp4=nvfp4_experts(w.nvfp4, device))


def to_torch(weights: Weights, device="cpu", dtype: torch.dtype = torch.float32, nvfp4: bool = True) -> Weights:
    """The float64 oracle Weights as torch tensors on `device` in `dtype` (the f32 fields in float32).

    nvfp4: keep an NVFP4 checkpoint's expert codes and scales (MoEWeights.nvfp4, for the triton
    backend's W4A16 kernels); False drops them (the dequantized gate_up_proj / down_proj remain).
    Every dense MLP and shared expert has its gate and up fused in one buffer (fuse_gate_up).
    """
    def cast(a, f32: bool):
        return torch.as_tensor(np.asarray(a), dtype=torch.float32 if f32 else dtype, device=device)

    moved = cast_arrays(weights, cast)
    layers = tuple(dataclasses.replace(lw, mlp=_moe(lw.mlp, device, nvfp4)) if isinstance(lw.mlp, MoEWeights)
                   else lw for lw in moved.layers)
    layers = tuple(fuse_mlps(lw) for lw in layers)
    return dataclasses.replace(moved, layers=layers)
