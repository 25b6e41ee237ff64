"""mHC on torch + Triton, mirroring oracle/mhc.py by name and argument order (torch tensors in/out).

Letters: B batch, S tokens, N streams (hc_mult), D hidden size per stream, M = (2 + N)·N rows.

`fused_coefficients_collapse` is the kernel path of a sublayer's entry: two launches (the projection
split along N·D, then the coefficients and the collapse) give pre, post, comb and the collapse u.
`coefficients` runs the same kernels and drops u. `collapse(pre, X)` with a
caller-given pre is a host-side float32 einsum (there is nothing to fuse it with); `write_back` is
the second kernel; `expand` and `reduce` are plain torch. Coefficients are float32 whatever X's
dtype (SPEC §2), also for float64 X; u and X_new are in X's dtype. The only tl.dot (the GPU's partial
projection) takes float32 operands in tf32x3, so the interpreter's bf16 dot bug does not apply (the
interpreter runs the broadcast-and-sum partial instead). The kernels compute in float32 registers (the
write-back in float64 for float64 X, as the reference does it in the model dtype).
"""
from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

import impl  # selects the interpreter on CPU-only machines before triton runs a kernel
from impl.kernels.mhc import (mhc_coeff_finish_fwd_kernel, mhc_coeff_partial_dot_fwd_kernel,
                              mhc_coeff_partial_fwd_kernel, mhc_write_back_fwd_kernel)
from oracle.types import MHCWeights

_FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
# the fn tile of one K-chunk is [BN, BN, BK] floats in registers; the interpreter's blocks are narrower,
# so the CPU's sizes (N·D <= 192, D <= 48) span two K-chunks and two D-blocks (invariants/kernel_paths.py).
# On the GPU a 256-wide chunk puts 64 programs on one decode token at the full geometry (N·D = 16384).
_BK_MAX = 64 if impl.interpreted() else 256
_BD_MAX = 32 if impl.interpreted() else 256
# token rows per program, every kernel's unless set below: the interpreter's cost is per program and per
# operation, so it takes 32 rows at once (a whole-model test spent ~3/4 of its time in one-row mHC
# programs); the GPU one. Every launch constant is fixed per device, never from the number of tokens
# (batch invariance).
_BR = 32 if impl.interpreted() else 1
# each kernel's rows and warps apart, the sub-block and the partial's form: the knobs scripts/mhc_variants.py
# times on the GPU (each at its landed value here). Measured on the H200 (docs/optimization_log.md steps 5-6,
# full geometry): the partial projection as a tensor-core tl.dot over 16 token rows, each [16, 64] x [64, 32]
# product in tf32x3 (three products of the split operands: float32 accuracy), reads fn once per 16 rows (4096
# tokens: 0.18 ms against 1.72 one row a program); one warp a finish program runs its short serial Sinkhorn
# without cross-warp barriers (80 us against 750 at 4096 tokens; 4.1 against 6.4 at one).
# The interpreter keeps the broadcast-and-sum partial: its tl.dot is numpy's matmul, which sums a row
# differently by its place in the tile (mhc.batch), and it takes 32 rows a program (_BR)
_PARTIAL_DOT = not impl.interpreted()
_DOT_PRECISION = "tf32x3"
_BR_PARTIAL = _BR if impl.interpreted() else 16
_BR_FINISH = _BR_WRITE = _BR
_BKS_MAX = 64
_PARTIAL_WARPS = 2
_FINISH_WARPS = 1
_WRITE_WARPS = 4
# bitwise batch invariance (impl.registry.batch_invariant; the check mhc.batch): chunks, tiles and the
# order the partials are summed in come from N and D only, never from the number of tokens. collapse and
# reduce are torch reductions, whose launch shape follows the number of tokens on a GPU: not claimed
BATCH_INVARIANT = ("coefficients", "write_back")


# ----------------------------------------------------------------------------- validation


def _check_streams(name: str, X, N: int) -> tuple[int, int, int]:
    if not isinstance(X, torch.Tensor) or X.ndim != 4 or X.shape[2] != N:
        raise ValueError(f"{name}: expected a tensor [B, S, N, D] with N={N}, got shape "
                         f"{tuple(getattr(X, 'shape', ()))}")
    if X.dtype not in _FLOAT_DTYPES:
        raise ValueError(f"{name}: expected dtype in {_FLOAT_DTYPES}, got {X.dtype}")
    B, S, _, D = (int(d) for d in X.shape)
    return B, S, D


def _check_weights(w: MHCWeights, X) -> None:
    w.validate(int(X.shape[-1]))
    for name in ("fn", "base", "scale"):
        a = getattr(w, name)
        if a.device != X.device:
            raise ValueError(f"MHCWeights.{name}: expected device {X.device} (that of X), got {a.device}")
        if a.dtype not in _FLOAT_DTYPES:
            raise ValueError(f"MHCWeights.{name}: expected dtype in {_FLOAT_DTYPES}, got {a.dtype}")


# ----------------------------------------------------------------------------- kernels


def empty_outputs(X, N: int):
    """(pre [B,S,N], post [B,S,N], comb [B,S,N,N]) float32 and u [B,S,D] in X's dtype, uninitialized: what
    every coefficient kernel writes (ours, the candidates', the mutants')."""
    B, S, _, D = X.shape
    pre = torch.empty(B, S, N, device=X.device, dtype=torch.float32)
    post = torch.empty(B, S, N, device=X.device, dtype=torch.float32)
    comb = torch.empty(B, S, N, N, device=X.device, dtype=torch.float32)
    return pre, post, comb, torch.empty(B, S, D, device=X.device, dtype=X.dtype)


def partials(w: MHCWeights, x, BK: int, *, br: Optional[int] = None, bks: Optional[int] = None):
    """The first launch of fused_coefficients_collapse: per token row and BK-chunk of its N·D inputs, Σx² and
    the (2 + N)·N projections over the chunk, [R, NS, 1 + (2 + N)·N] float32 (x: contiguous [B, S, N, D]).
    The GPU's form is a tl.dot over 16 rows (_PARTIAL_DOT), the interpreter's a broadcast-and-sum."""
    N, D = w.hc_mult, int(x.shape[-1])
    R, NS = int(x.shape[0]) * int(x.shape[1]), triton.cdiv(N * D, BK)
    BRP, BKS = br or _BR_PARTIAL, min(bks or _BKS_MAX, BK)
    part = torch.empty(R, NS, 1 + 2 * N + N * N, device=x.device, dtype=torch.float32)
    if _PARTIAL_DOT and BK >= 16:
        # tl.dot takes 16 or more along every axis
        BRP, BKS = max(BRP, 16), max(BKS, 16)
        mhc_coeff_partial_dot_fwd_kernel[(triton.cdiv(R, BRP), NS)](
            x, w.fn.contiguous(), part, R, N=N, D=D, BR=BRP, BM=max(triton.next_power_of_2((2 + N) * N), 16),
            BK=BK, BKS=BKS, PRECISION=_DOT_PRECISION, num_warps=_PARTIAL_WARPS)
    else:
        mhc_coeff_partial_fwd_kernel[(triton.cdiv(R, BRP), NS)](
            x, w.fn.contiguous(), part, R, N=N, D=D, BR=BRP, BN=triton.next_power_of_2(N), BK=BK, BKS=BKS,
            num_warps=_PARTIAL_WARPS)
    return part


def fused_coefficients_collapse(w: MHCWeights, X, *, bk: Optional[int] = None, br: Optional[int] = None,
                                bks: Optional[int] = None):
    """oracle.mhc.coefficients and oracle.mhc.collapse in two launches (split along N·D, then per token).

    Args:
        X: [B, S, N, D] streams, N = w.hc_mult;  bk: the K-chunk of the N·D reduction, one program
            each (a launch override; None: N·D rounded up to a power of two, at most 256; 64 on the
            interpreter);  br: token rows per program of both kernels (a launch override, at least 16 for
            the GPU's tl.dot partial; None: 16 a partial and 1 a finish program, 32 on the interpreter);
            bks: the chunk's sub-block (a launch override; None: 64)
    Returns:
        pre: [B, S, N] float32;  post: [B, S, N] float32;  comb: [B, S, N, N] float32;
        u: [B, S, D] in X's dtype
    """
    if not isinstance(w, MHCWeights):
        raise ValueError(f"w: expected MHCWeights, got {type(w).__name__}")
    N = w.hc_mult
    B, S, D = _check_streams("X", X, N)
    _check_weights(w, X)
    x = X.contiguous()
    R = B * S
    pre, post, comb, u = empty_outputs(X, N)
    if R:
        BK = bk or min(triton.next_power_of_2(N * D), _BK_MAX)
        NS = triton.cdiv(N * D, BK)
        BR, BN, BD = br or _BR_FINISH, triton.next_power_of_2(N), min(triton.next_power_of_2(D), _BD_MAX)
        part = partials(w, x, BK, br=br, bks=bks)
        mhc_coeff_finish_fwd_kernel[(triton.cdiv(R, BR), triton.cdiv(D, BD))](
            part, w.base.contiguous(), w.scale.contiguous(), x,
            pre, post, comb, u, R, w.sinkhorn_iters, float(w.hc_eps), float(w.rms_eps),
            N=N, D=D, NS=NS, BR=BR, BN=BN, BS=triton.next_power_of_2(NS), BD=BD, num_warps=_FINISH_WARPS,
        )
    return pre, post, comb, u


def coefficients(w: MHCWeights, X):
    """oracle.mhc.coefficients: (pre [B,S,N], post [B,S,N], comb [B,S,N,N]) float32, via the fused kernel."""
    pre, post, comb, _ = fused_coefficients_collapse(w, X)
    return pre, post, comb


def collapse(pre, X):
    """oracle.mhc.collapse: u [B,S,D] = Σ_n pre[n] X[n], a float32 product cast to X's dtype.

    Host-side torch: the kernel path computes u inside `fused_coefficients_collapse`.
    """
    if not isinstance(pre, torch.Tensor) or pre.ndim != 3:
        raise ValueError(f"pre: expected a tensor [B, S, N], got shape {tuple(getattr(pre, 'shape', ()))}")
    B, S, _ = _check_streams("X", X, int(pre.shape[-1]))
    if tuple(pre.shape[:2]) != (B, S):
        raise ValueError(f"pre: expected shape {(B, S, X.shape[2])} (from X), got {tuple(pre.shape)}")
    return torch.einsum("bsn,bsnd->bsd", pre.float(), X.float()).to(X.dtype)


def write_back(post, comb, X, y):
    """oracle.mhc.write_back: X_new [B,S,N,D] = post ⊗ y + Cᵀ X in X's dtype (float32 arithmetic;
    float64 for float64 X). post and comb are rounded to X's dtype first (SPEC §4).

    Args:
        post: [B, S, N];  comb: [B, S, N, N];  X: [B, S, N, D];  y: [B, S, D]
    Token rows per program: `_BR_WRITE` (1, 32 on the interpreter).
    """
    if not isinstance(post, torch.Tensor) or post.ndim != 3:
        raise ValueError(f"post: expected a tensor [B, S, N], got shape {tuple(getattr(post, 'shape', ()))}")
    N = int(post.shape[-1])
    B, S, D = _check_streams("X", X, N)
    for name, a, want in (("post", post, (B, S, N)), ("comb", comb, (B, S, N, N)), ("y", y, (B, S, D))):
        if not isinstance(a, torch.Tensor) or tuple(a.shape) != want:
            raise ValueError(f"{name}: expected shape {want} (from X {tuple(X.shape)}), got "
                             f"{tuple(getattr(a, 'shape', ()))}")
        if a.device != X.device:
            raise ValueError(f"{name}: expected device {X.device} (that of X), got {a.device}")
        if a.dtype not in _FLOAT_DTYPES:
            raise ValueError(f"{name}: expected dtype in {_FLOAT_DTYPES}, got {a.dtype}")
    x = X.contiguous()
    x_new = torch.empty_like(x)
    BD = min(triton.next_power_of_2(D), _BD_MAX)
    acc = tl.float64 if X.dtype == torch.float64 else tl.float32
    BR = _BR_WRITE
    if B * S:
        mhc_write_back_fwd_kernel[(triton.cdiv(B * S, BR), triton.cdiv(D, BD))](
            x, y.contiguous(), post.contiguous(), comb.contiguous(), x_new, B * S,
            N=N, D=D, BR=BR, BN=triton.next_power_of_2(N), BD=BD, ACC=acc, num_warps=_WRITE_WARPS,
        )
    return x_new


# ----------------------------------------------------------------------------- model ends (torch)


def expand(e, N: int):
    """oracle.mhc.expand: N contiguous copies of e [B,S,D] -> [B,S,N,D]."""
    if not isinstance(N, int) or isinstance(N, bool) or N < 1:
        raise ValueError(f"N: expected a positive int, got {N!r}")
    if e.ndim != 3:
        raise ValueError(f"e: expected [B, S, D], got shape {tuple(e.shape)}")
    return e[..., None, :].expand(*e.shape[:-1], N, e.shape[-1]).contiguous()


def reduce(X):
    """oracle.mhc.reduce: the plain mean over the streams, [B,S,N,D] -> [B,S,D] in X's dtype."""
    if X.ndim != 4:
        raise ValueError(f"X: expected [B, S, N, D], got shape {tuple(X.shape)}")
    return X.mean(dim=-2)
