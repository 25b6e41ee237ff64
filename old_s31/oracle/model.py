"""The float64 oracle of the whole text decoder: oracle.decoder's composition (SPEC §3, §5, §10) over
the oracle's own modules with NumPy array primitives.

Stable API: `load(checkpoint_dir) -> Model`, `Model.forward(input_ids, attention_mask=None, state=None)
-> (logits float64 [B, S, V], state)`. The state passed in is never mutated; the returned one covers
past + current tokens, so prefill, single-token decode and multi-token continuation are the same call.
`Model.forward_packed` runs several requests in one flat stream (SERVING.md P4).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from oracle import decoder, dsa, kda, mhc, mla, moe, nvfp4
from oracle.checkpoint import load as load_weights
from oracle.config import Geometry
from oracle.decoder import Implementation, check_cu_seqlens  # noqa: F401  (check_cu_seqlens re-exported)
from oracle.state import HybridState
from oracle.types import KDAState, LayerDecisions, LayerWeights, Selection, Weights

__all__ = ["Model", "load", "forward", "decoder_layer", "effective_mask", "rmsnorm", "forward_packed",
           "check_cu_seqlens", "Implementation", "ORACLE", "NumpyDecoder"]

ORACLE = Implementation("oracle", kda, dsa, mla, mhc, moe, nvfp4)


def rmsnorm(x, w, eps: float):
    """Weighted RMSNorm: normalize, then multiply by the weight (SPEC §2)."""
    return mla.rmsnorm(x, w, eps)


class NumpyDecoder(decoder.Decoder):
    """SPEC §3, §5 in float64 NumPy: oracle.decoder.Decoder over `impl` (the oracle's modules by default)."""

    State = HybridState

    def __init__(self, impl: Optional[Implementation] = None):
        super().__init__(ORACLE if impl is None else impl)

    def _rmsnorm(self, x, w, eps: float):
        return rmsnorm(x, w, eps)

    def _array(self, x):
        return np.asarray(x)

    def _is_int(self, a) -> bool:
        return np.issubdtype(a.dtype, np.integer)

    def _ones(self, B: int, S: int):
        return np.ones((B, S), dtype=bool)

    def _embed(self, table, ids):
        return table[ids]

    def _cast(self, y, X):
        return y                                  # float64 throughout

    def _cat(self, xs, axis: int = 0):
        return np.concatenate(xs, axis=axis)

    def _logits(self, h, lm_head):
        return h @ lm_head.T

    def _kda_row(self, w, cache: Optional[KDAState], a) -> KDAState:
        return kda.zero_state(w, 1) if cache is None else cache


def effective_mask(attention_mask, B: int, S: int) -> np.ndarray:
    """SPEC §3 (Decoder.effective_mask) in NumPy: bool [B, S]."""
    return NumpyDecoder().effective_mask(attention_mask, B, S)


def decoder_layer(lw: LayerWeights, g: Geometry, X, mask, cache, prev: Optional[Selection],
                  decision: Optional[LayerDecisions] = None, trace: Optional[list] = None):
    """SPEC §5 (Decoder.decoder_layer) on one batch: X [B, S, N, D], mask [B, S] -> (X, cache, Selection)."""
    return NumpyDecoder().decoder_layer(lw, g, X, mask, cache, prev, decision, trace)


def forward(weights: Weights, input_ids, state: Optional[HybridState] = None, attention_mask=None,
            decisions=None, trace: Optional[list] = None):
    """SPEC §3 (Decoder.forward) over the oracle's modules: (logits float64 [B, S, V], new state)."""
    return NumpyDecoder().forward(weights, input_ids, state, attention_mask, decisions, trace)


def forward_packed(weights: Weights, input_ids, cu_seqlens, states):
    """SERVING.md P4 (Decoder.forward_packed) over the oracle's modules: (logits float64 [T, V], one
    state per document)."""
    return NumpyDecoder().forward_packed(weights, input_ids, cu_seqlens, states)


class Model(decoder.Model):
    """The float64 oracle of the whole decoder (stable API, ARCHITECTURE.md; SPEC §3)."""

    def __init__(self, weights: Weights):
        super().__init__(weights, NumpyDecoder())


def load(checkpoint_dir) -> Model:
    """Geometry.from_pretrained(checkpoint_dir) + the safetensors weights (oracle.checkpoint) -> Model."""
    return Model(load_weights(checkpoint_dir))
