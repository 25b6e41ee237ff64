"""mHC (manifold-constrained hyper-connections) in float64 NumPy: the truth the kernels are checked against
(SPEC §3, §4, §12 pitfalls 15-16).

Letters: B batch, S tokens, N streams (hc_mult), D hidden size per stream, M = (2 + N)·N projection rows.

A decoder layer carries N residual streams X [B,S,N,D]. Each sublayer reads them through one mHC
instance: `coefficients` gives pre [B,S,N], post [B,S,N] and comb [B,S,N,N]; `collapse` mixes the
streams into the sublayer input u = Σ_n pre[n] X[n]; `write_back` folds the sublayer output y back,
X_new = post ⊗ y + Cᵀ X (the Cᵀ X term IS the residual path). The model starts with `expand` (N
copies of the embedding) and ends with `reduce` (plain mean over the streams).
"""
from __future__ import annotations

import numpy as np
import scipy.special

from oracle.types import MHCWeights


def _streams(name: str, X, N: int) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 4 or X.shape[2] != N:
        raise ValueError(f"{name}: expected [B, S, N, D] with N={N}, got shape {X.shape}")
    return X


def rmsnorm_unweighted(x, eps: float):
    """x · (mean(x²) + eps)^-1/2 over the last axis, no weight (SPEC §2; eps = rms_norm_eps, not hc_eps)."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)


def sinkhorn(C, iters: int, eps: float):
    """Column-first Sinkhorn on a positive C [..., N, N] (rows m, columns n), SPEC §4.

    One column normalization C / (Σ_m C + eps), then (iters - 1) x (row C / (Σ_n C + eps), column).
    It ends on a column step: columns sum to 1 - O(eps); rows only as far as `iters` converged.
    """
    if not isinstance(iters, (int, np.integer)) or isinstance(iters, bool) or iters < 1:
        raise ValueError(f"iters: expected a positive int, got {iters!r}")
    C = np.asarray(C, dtype=np.float64)
    C = C / (C.sum(axis=-2, keepdims=True) + eps)
    for _ in range(iters - 1):
        C = C / (C.sum(axis=-1, keepdims=True) + eps)
        C = C / (C.sum(axis=-2, keepdims=True) + eps)
    return C


def coefficients(w: MHCWeights, X):
    """pre, post, comb of streams X [B,S,N,D] (SPEC §4).

    z = RMSNorm_unweighted(flatten(X) ∈ R^{N·D}; rms_eps);  y = z fnᵀ = [y_pre | y_post | y_comb]
    pre  = sigmoid(y_pre·scale[0] + base_pre) + hc_eps         (NOT normalized to sum 1)
    post = 2·sigmoid(y_post·scale[1] + base_post)
    comb = sinkhorn(softmax_n(y_comb·scale[2] + base_comb) + hc_eps, sinkhorn_iters, hc_eps)

    Returns:
        pre: [B, S, N];  post: [B, S, N];  comb: [B, S, N, N] (comb[m, n]: stream m into stream n)
    """
    N = w.hc_mult
    X = _streams("X", X, N)
    w.validate(X.shape[-1])
    B, S = X.shape[:2]
    z = rmsnorm_unweighted(X.reshape(B, S, N * X.shape[-1]), w.rms_eps)   # [B, S, N·D]
    y = z @ np.asarray(w.fn, dtype=np.float64).T                            # [B, S, M]
    base, scale = np.asarray(w.base, dtype=np.float64), np.asarray(w.scale, dtype=np.float64)
    pre = scipy.special.expit(y[..., :N] * scale[0] + base[:N]) + w.hc_eps
    post = 2.0 * scipy.special.expit(y[..., N:2 * N] * scale[1] + base[N:2 * N])
    logits = (y[..., 2 * N:] * scale[2] + base[2 * N:]).reshape(B, S, N, N)
    C = scipy.special.softmax(logits, axis=-1) + w.hc_eps
    return pre, post, sinkhorn(C, w.sinkhorn_iters, w.hc_eps)


def collapse(pre, X):
    """Sublayer input u [B,S,D] = Σ_n pre[n] X[n] from pre [B,S,N], X [B,S,N,D] (SPEC §4)."""
    pre = np.asarray(pre, dtype=np.float64)
    X = _streams("X", X, pre.shape[-1])
    return np.einsum("bsn,bsnd->bsd", pre, X)


def write_back(post, comb, X, y):
    """X_new [B,S,N,D] = post ⊗ y + Cᵀ X: X_new[n] = post[n]·y + Σ_m C[m, n]·X[m] (SPEC §4).

    Args:
        post: [B, S, N];  comb: [B, S, N, N];  X: [B, S, N, D] the streams before the sublayer;
        y: [B, S, D] the sublayer output
    """
    post, comb, y = (np.asarray(a, dtype=np.float64) for a in (post, comb, y))
    X = _streams("X", X, post.shape[-1])
    return post[..., None] * y[..., None, :] + np.einsum("bsmn,bsmd->bsnd", comb, X)


def expand(e, N: int):
    """The initial streams [B,S,N,D]: N identical copies of the embedding e [B,S,D] (SPEC §3)."""
    e = np.asarray(e, dtype=np.float64)
    return np.repeat(e[..., None, :], N, axis=-2)


def reduce(X):
    """The final collapse [B,S,D]: the plain mean over the N streams (no learned head, SPEC §3)."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 4:
        raise ValueError(f"X: expected [B, S, N, D], got shape {X.shape}")
    return X.mean(axis=-2)
