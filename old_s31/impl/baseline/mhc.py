"""mHC in plain torch, in the working dtype of its inputs: the "torch" baseline (mirrors oracle/mhc.py).

Letters: B batch, S tokens, N streams (hc_mult), D hidden size per stream, M = (2 + N)·N projection rows.

Same names, argument order and return values as `oracle.mhc`; the precision is the reference's
(SPEC §2, §4): the whole coefficient computation (input norm, projection, sigmoids, softmax, Sinkhorn)
in float32, pre/post/comb returned in float32; collapse as a float32 product cast to X's dtype;
write_back with the coefficients cast to X's dtype first, then in that dtype. "float32" means "at
least float32": float64 inputs run in float64, which is how this file is checked against the oracle
to 1e-10.

`TorchMHC` is split into small overridable pieces (`_sinkhorn_step_order`, `_pre`,
`_comb_for_write_back`) because the planted bugs of impl/mutants/ override exactly one of them.
`mhc = TorchMHC()` and the module-level aliases let this module be used like `oracle.mhc`.
"""
from __future__ import annotations

import torch

from oracle.types import MHCWeights

ROWS, COLS = -1, -2          # the axis each Sinkhorn step sums over: a row (over n), a column (over m)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for every working dtype except float64, which stays float64 (SPEC §2 "f32")."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def check_streams(name: str, X, N: int) -> None:
    if X.ndim != 4 or X.shape[2] != N:
        raise ValueError(f"{name}: expected [B, S, N, D] with N={N}, got shape {tuple(X.shape)}")


class TorchMHC:
    """Plain-torch mHC; every public method matches the oracle.mhc function of the same name."""

    def rmsnorm_unweighted(self, x, eps: float):
        """x · (mean(x²) + eps)^-1/2 over the last axis, in float32 (oracle.mhc.rmsnorm_unweighted)."""
        x = x.to(compute_dtype(x.dtype))
        return x * torch.rsqrt(torch.mean(x * x, dim=-1, keepdim=True) + eps)

    def _sinkhorn_step_order(self, iters: int) -> tuple[int, ...]:
        """The axes of the normalization steps, in order: one column, then (iters - 1) x (row, column)."""
        return (COLS,) + (ROWS, COLS) * (iters - 1)

    def sinkhorn(self, C, iters: int, eps: float):
        """oracle.mhc.sinkhorn on C [..., N, N] in C's compute dtype."""
        if not isinstance(iters, int) or isinstance(iters, bool) or iters < 1:
            raise ValueError(f"iters: expected a positive int, got {iters!r}")
        C = C.to(compute_dtype(C.dtype))
        for axis in self._sinkhorn_step_order(iters):
            C = C / (C.sum(dim=axis, keepdim=True) + eps)
        return C

    def _pre(self, logits, eps: float):
        """pre = sigmoid(logits) + hc_eps, NOT normalized to sum 1 (SPEC §12.15)."""
        return torch.sigmoid(logits) + eps

    def coefficients(self, w: MHCWeights, X):
        """oracle.mhc.coefficients: pre [B,S,N], post [B,S,N], comb [B,S,N,N], all float32."""
        N = w.hc_mult
        check_streams("X", X, N)
        w.validate(X.shape[-1])
        B, S, _, D = X.shape
        acc = compute_dtype(X.dtype)
        z = self.rmsnorm_unweighted(X.reshape(B, S, N * D), w.rms_eps)     # [B, S, N·D]
        y = z @ w.fn.to(acc).T                                              # [B, S, M]
        base, scale = w.base.to(acc), w.scale.to(acc)
        pre = self._pre(y[..., :N] * scale[0] + base[:N], w.hc_eps)
        post = 2.0 * torch.sigmoid(y[..., N:2 * N] * scale[1] + base[N:2 * N])
        logits = (y[..., 2 * N:] * scale[2] + base[2 * N:]).reshape(B, S, N, N)
        C = torch.softmax(logits, dim=-1) + w.hc_eps
        return pre, post, self.sinkhorn(C, w.sinkhorn_iters, w.hc_eps)

    def collapse(self, pre, X):
        """oracle.mhc.collapse: u [B,S,D] = Σ_n pre[n] X[n], a float32 product cast to X's dtype."""
        check_streams("X", X, pre.shape[-1])
        acc = compute_dtype(X.dtype)
        return torch.einsum("bsn,bsnd->bsd", pre.to(acc), X.to(acc)).to(X.dtype)

    def _comb_for_write_back(self, comb):
        """The matrix the streams are multiplied by: Cᵀ (output stream n takes column n of C)."""
        return comb.transpose(-1, -2)

    def write_back(self, post, comb, X, y):
        """oracle.mhc.write_back: X_new [B,S,N,D] = post ⊗ y + Cᵀ X in X's dtype."""
        check_streams("X", X, post.shape[-1])
        post, comb = post.to(X.dtype), comb.to(X.dtype)                     # SPEC §4: cast first
        return post[..., None] * y.to(X.dtype)[..., None, :] + self._comb_for_write_back(comb) @ X

    def expand(self, e, N: int):
        """oracle.mhc.expand: N contiguous copies of e [B,S,D] -> [B,S,N,D]."""
        return e[..., None, :].expand(*e.shape[:-1], N, e.shape[-1]).contiguous()

    def reduce(self, X):
        """oracle.mhc.reduce: the plain mean over the streams, [B,S,N,D] -> [B,S,D]."""
        if X.ndim != 4:
            raise ValueError(f"X: expected [B, S, N, D], got shape {tuple(X.shape)}")
        return X.mean(dim=-2)


mhc = TorchMHC()


def __getattr__(name: str):
    # the module's functions are the namespace's methods (PEP 562): `from impl.baseline.mhc import x`
    return getattr(mhc, name)
