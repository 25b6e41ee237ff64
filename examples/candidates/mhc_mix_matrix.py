"""An mHC candidate: a stream-mixing kernel that takes the mixing matrix the other way round.

`mix_streams` stands in for your kernel (plain torch here). It computes X_new[n] = post[n] · y +
Σ_m M[n, m] X[m] with M indexed (output stream, input stream). The protocol's `write_back`
(impl/mhc.py) is handed comb = C indexed (input stream, output stream): X_new = post ⊗ y + Cᵀ X,
output stream n takes COLUMN n of C. So the wrapper passes M = Cᵀ; passing C itself is the classic
mHC bug (oracle/mhc.py write_back; the planted mutant of impl/mutants/mhc.py that mhc.write_back catches).
It also follows the protocol's precision: post and comb are rounded to X's dtype first, the sum
is accumulated in float32 and returned in X's dtype.

Only `write_back` is provided: `coefficients`, `collapse`, `expand` and `reduce` are ours.

Gate it from this directory:  glmgate gate --candidate mhc_mix_matrix:Candidate --mechanism mhc
"""
from __future__ import annotations

import torch


def mix_streams(M, post, X, y):
    """The stand-in kernel. M [B, S, N, N] (out, in), post [B, S, N], X [B, S, N, D], y [B, S, D]
    -> X_new [B, S, N, D] float32."""
    return post.float()[..., None] * y.float()[..., None, :] + torch.einsum("bsnm,bsmd->bsnd", M.float(), X.float())


class MHC:
    """The mhc namespace: `write_back` only."""

    @staticmethod
    def write_back(post, comb, X, y):
        """impl.mhc.write_back: post [B, S, N], comb [B, S, N, N], X [B, S, N, D], y [B, S, D] ->
        X_new [B, S, N, D] in X's dtype."""
        if X.ndim != 4:
            raise ValueError(f"X: expected [B, S, N, D], got shape {tuple(X.shape)}")
        B, S, N, D = X.shape
        for name, a, want in (("post", post, (B, S, N)), ("comb", comb, (B, S, N, N)), ("y", y, (B, S, D))):
            if tuple(a.shape) != want:
                raise ValueError(f"{name}: expected shape {want} (from X {tuple(X.shape)}), got {tuple(a.shape)}")
        post, comb = post.to(X.dtype), comb.to(X.dtype)
        return mix_streams(comb.transpose(-1, -2), post, X, y).to(X.dtype)


class Candidate:
    mhc = MHC
