"""Our states and caches <-> transformers' `DynamicCache` layers (adapters/transformers_glm5.py).

KDA: our KDAState(recurrent [B, H, K, V] float32, conv [B, C, W]) is the `LinearAttentionLayer`'s
recurrent_states[0] / conv_states[0] in the same layouts (SPEC §10); MLA: our DSACache(latent [B, T, R],
index_rows [B, T, 2K + 1] or None) is the `DynamicIndexedLayer`'s keys [B, 1, T, R] (the normalised
latent; values hold the empty rope part [B, 1, T, 0]) and indexer_keys. Conversion only: no math.
"""
from __future__ import annotations

from typing import Optional

import torch

from oracle.types import DSACache, KDAState


def empty(cfg):
    """A DynamicCache for `cfg`'s layer schedule, nothing cached yet."""
    from transformers import DynamicCache
    return DynamicCache(config=cfg)


def seed_kda(cache, layer: int, state: Optional[KDAState]) -> None:
    """Put our KDA state into the cache's layer `layer` as if transformers had computed it (a state is
    'previous' to the next call: the conv window is prepended, the recurrence continues from it)."""
    if state is None:
        return
    entry = cache.layers[layer]
    entry.lazy_initialization(conv_states=state.conv, recurrent_states=state.recurrent.float())
    entry.conv_states[0].copy_(state.conv)
    entry.recurrent_states[0].copy_(state.recurrent.float())
    entry.has_previous_state[0] = True


def kda_state(cache, layer: int, dtype: torch.dtype) -> KDAState:
    """Our KDAState out of the cache's layer: recurrent float32, conv window in the working dtype."""
    entry = cache.layers[layer]
    return KDAState(entry.recurrent_states[0].float().clone(), entry.conv_states[0].to(dtype).clone())


def seed_mla(cache, layer: int, dsa: Optional[DSACache]) -> None:
    """Put our latent cache (and, on a full layer, our indexer rows) into the cache's layer `layer`."""
    if dsa is None:
        return
    latent = dsa.latent[:, None]
    cache.update(latent, latent.new_zeros(*latent.shape[:-1], 0), layer)
    if dsa.index_rows is not None:
        cache.update_indexer(dsa.index_rows, layer)


def dsa_cache(cache, layer: int, full: bool, iw=None) -> DSACache:
    """Our DSACache out of the cache's layer: the latent, and the indexer rows on a full layer. transformers
    keeps no pooled-key cache (it re-pools every step): with the layer's IndexerWeights `iw`, the pooled
    rows are derived from its own indexer rows by the torch baseline's pooling, so the state has our layout."""
    entry = cache.layers[layer]
    rows = entry.indexer_keys.clone() if full else None
    pooled = None
    if full and iw is not None:
        from impl.baseline.dsa import TorchDSA
        pooled = TorchDSA().pooled_rows(rows, iw.compress_ape, iw.kpool)
    return DSACache(entry.keys[:, 0].clone(), rows, pooled)
