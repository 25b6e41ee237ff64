"""A DSA candidate: an indexer-row kernel that returns its three parts apart, packed into our layout.

`indexer_key_gate` stands in for your kernel (plain torch here). It returns the LayerNorm'd index key,
the pool gate vector and the valid flags as three tensors, in float32; the protocol's `index_rows`
(impl/dsa.py) returns ONE packed row per token, [B, S, 2K + 1] = key | gate | valid flag, in a's
dtype, because that packed row is what the DSA cache stores and what `index` reads back.
Only `index_rows` is provided: `index` (pooling, scores, top-k) is our Triton one, fed these rows.

Gate it from this directory:  glmgate gate --candidate dsa_split_rows:Candidate --mechanism dsa
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

LN_EPS = 1e-6


def indexer_key_gate(a, wk, k_norm_weight, k_norm_bias, compress_gate, mask=None):
    """The stand-in kernel. a [B, S, D], wk and compress_gate [K, D], k_norm_* [K], mask [B, S] or None.

    Returns:
        key: [B, S, K] float32, LayerNorm(a wk^T) with eps 1e-6 and the norm's weight and bias;
        gate: [B, S, K] float32, a compress_gate^T;  valid: [B, S] bool
    """
    a32 = a.float()
    key = F.layer_norm(a32 @ wk.float().T, (wk.shape[0],), k_norm_weight.float(), k_norm_bias.float(), LN_EPS)
    valid = torch.ones(a.shape[:2], dtype=torch.bool, device=a.device) if mask is None else mask != 0
    return key, a32 @ compress_gate.float().T, valid


class DSA:
    """The dsa namespace: `index_rows` only; `index` is ours."""

    @staticmethod
    def index_rows(w, a, mask=None):
        """impl.dsa.index_rows: w IndexerWeights, a [B, S, D], mask [B, S] (1 real, 0 pad) or None
        -> packed [B, S, 2K + 1] in a's dtype."""
        if a.ndim != 3:
            raise ValueError(f"a: expected [B, S, D], got shape {tuple(a.shape)}")
        if mask is not None and tuple(mask.shape) != tuple(a.shape[:2]):
            raise ValueError(f"mask: expected shape {tuple(a.shape[:2])}, got {tuple(mask.shape)}")
        key, gate, valid = indexer_key_gate(a, w.wk, w.k_norm_weight, w.k_norm_bias, w.compress_gate, mask)
        return torch.cat([key, gate, valid[..., None].float()], dim=-1).to(a.dtype)


class Candidate:
    """One attribute per mechanism provided: here only dsa."""

    dsa = DSA
