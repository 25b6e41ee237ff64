"""The whole text decoder in float64 NumPy over a HybridState (SPEC §3, §5, cache protocol §10).

    e = Embed[ids];  X = N copies of e
    per layer (SPEC §5):  pre, post, C = attn_hc(X);  a = RMSNorm_in(Σ pre·X)
                          y = KDA(a) or MLA/DSA(a, prev);  X = post ⊗ y + Cᵀ X
                          pre, post, C = ffn_hc(X);  a = RMSNorm_post(Σ pre·X)
                          y = DenseMLP(a) or MoE(a);    X = post ⊗ y + Cᵀ X
    logits = RMSNorm_final(mean_n X) lm_headᵀ

Stable API: `load(checkpoint_dir) -> Model`, `Model.forward(input_ids, attention_mask=None, state=None)
-> (logits float64 [B, S, V], state)`. The state passed in is never mutated; the returned one covers
past + current tokens, so prefill, single-token decode and multi-token continuation are the same call.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from oracle import kda, mhc, mla, moe
from oracle.checkpoint import LayerWeights, Weights
from oracle.checkpoint import load as load_weights
from oracle.config import DENSE, LINEAR, SHARED, Geometry
from oracle.state import HybridState, StateError
from oracle.types import KDAState, LayerDecisions, LayerTrace, Selection

__all__ = ["Model", "load", "forward", "decoder_layer", "effective_mask", "rmsnorm", "forward_packed",
           "decoder_layer_packed", "check_cu_seqlens"]


def rmsnorm(x, w, eps: float):
    """Weighted RMSNorm: normalize, then multiply by the weight (SPEC §2)."""
    return mla.rmsnorm(x, w, eps)


def effective_mask(attention_mask, B: int, S: int) -> np.ndarray:
    """SPEC §3: the last S columns of the 2-D mask as bool [B, S]; all-ones when the mask is None,
    all ones, or S == 1 (a decode token is never padding; earlier padding lives in the caches)."""
    if attention_mask is None or S == 1:
        return np.ones((B, S), dtype=bool)
    m = np.asarray(attention_mask)
    if m.ndim != 2 or m.shape[0] != B or m.shape[1] < S:
        raise ValueError(f"attention_mask: expected 2-D [B={B}, S_total >= S={S}] (1 = real, 0 = pad), "
                         f"got shape {tuple(m.shape)}")
    if np.all(m == 1):
        return np.ones((B, S), dtype=bool)
    return m[:, -S:].astype(bool)


def decoder_layer(lw: LayerWeights, g: Geometry, X, mask, cache, prev: Optional[Selection],
                  decision: Optional[LayerDecisions] = None, trace: Optional[list] = None):
    """One decoder layer (SPEC §5).

    Args:
        X: [B, S, N, D] streams;  mask: [B, S] bool;  cache: the layer's KDAState / DSACache / None
        prev: the Selection handed off by the layer directly before (used by "shared" DSA layers)
        decision: choices to force instead of the oracle's own (a full DSA layer's selection, an MoE
            layer's experts): the oracle re-run with an implementation's decisions
        trace: a list; the layer appends a LayerTrace of its OWN decisions (what a forced one is judged by)
    Returns:
        X: [B, S, N, D];  cache: the layer's new cache entry;  sel: this layer's Selection (None on KDA)
    """
    decision = decision or LayerDecisions()
    own = []
    pre, post, comb = mhc.coefficients(lw.attn_hc, X)
    a = rmsnorm(mhc.collapse(pre, X), lw.input_layernorm, g.rms_norm_eps)
    sel = None
    if lw.attention == LINEAR:
        y, cache = kda.sublayer(lw.kda, a, cache, None if mask.all() else mask)
    else:
        kind = lw.indexer_type
        if kind == SHARED and prev is None:
            raise ValueError(f"layer {lw.index}: a shared DSA layer needs the selection of the full DSA layer "
                             f"directly before it (SPEC §8.8)")
        y, cache, sel = mla.sublayer(lw.mla, lw.indexer, a, cache, mask, prev if kind == SHARED else None, kind,
                                     forced=decision.selection if kind != SHARED else None, trace=own)
    X = mhc.write_back(post, comb, X, y)
    pre, post, comb = mhc.coefficients(lw.ffn_hc, X)
    a = rmsnorm(mhc.collapse(pre, X), lw.post_attention_layernorm, g.rms_norm_eps)
    routing = None
    if g.mlp_layer_types[lw.index] == DENSE:
        y = moe.dense_mlp(lw.mlp, a)
    else:
        routing = moe.route(lw.mlp, a)
        used = routing if decision.experts is None else moe.route(lw.mlp, a, forced=decision.experts)
        y = moe.experts(lw.mlp, a, used) + moe.shared_expert(lw.mlp, a)
    if trace is not None:
        trace.append(LayerTrace(own[0] if own else None, routing))
    return mhc.write_back(post, comb, X, y), cache, sel


def _check_state(state: HybridState, g: Geometry, B: int) -> None:
    if not isinstance(state, HybridState):
        raise TypeError(f"state: expected a HybridState or None, got {type(state).__name__}")
    if state.layer_types != g.layer_types:
        raise StateError(f"state: layer types {list(state.layer_types)} do not match the model's "
                         f"{list(g.layer_types)}")
    if state.batch is not None and state.batch != B:
        raise StateError(f"state: holds batch {state.batch}, input_ids has batch {B}")


def forward(weights: Weights, input_ids, state: Optional[HybridState] = None, attention_mask=None,
            decisions=None, trace: Optional[list] = None):
    """The full text forward (SPEC §3) from `state` (None = empty); returns (logits [B,S,V], new state).

    decisions: None, or one LayerDecisions (or None) per layer to force on the oracle (decoder_layer);
    trace: a list that receives one LayerTrace per layer (the oracle's own decisions in this run).
    """
    g = weights.geometry
    ids = np.asarray(input_ids)
    if ids.ndim != 2 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"input_ids: expected an int array [B, S], got {ids.dtype} {tuple(ids.shape)}")
    B, S = ids.shape
    if S == 0:
        raise ValueError("input_ids: S = 0 tokens")
    if ids.min() < 0 or ids.max() >= g.vocab_size:
        raise ValueError(f"input_ids: ids must lie in [0, vocab_size={g.vocab_size}), got "
                         f"[{ids.min()}, {ids.max()}]")
    state = HybridState.empty(g) if state is None else state
    _check_state(state, g, B)
    mask = effective_mask(attention_mask, B, S)
    X = mhc.expand(weights.embed_tokens[ids], g.hc_mult)                                 # [B, S, N, D]
    if decisions is not None and len(decisions) != len(weights.layers):
        raise ValueError(f"decisions: expected one entry per layer ({len(weights.layers)}), got {len(decisions)}")
    prev = None
    layers = []
    for i, (lw, cache) in enumerate(zip(weights.layers, state.layers)):
        X, cache, sel = decoder_layer(lw, g, X, mask, cache, prev, None if decisions is None else decisions[i],
                                      trace)
        prev = sel
        layers.append(cache)
    h = rmsnorm(mhc.reduce(X), weights.norm, g.rms_norm_eps)                             # [B, S, D]
    return h @ weights.lm_head.T, HybridState(g.layer_types, layers, state.seq_len + S)


class Model:
    """The float64 oracle of the whole decoder (stable API, ARCHITECTURE.md)."""

    def __init__(self, weights: Weights):
        self.weights = weights
        self.geometry = weights.geometry

    def new_state(self) -> HybridState:
        """An empty cache for this model."""
        return HybridState.empty(self.geometry)

    def forward(self, input_ids, attention_mask=None, state: Optional[HybridState] = None):
        """(logits float64 [B, S, V], state): state None starts empty; the given state is not mutated.

        attention_mask: optional 2-D [B, S_total] (1 = real, 0 = pad), S_total >= S; its last S columns
        mask the current tokens (SPEC §3); earlier padding is remembered by the DSA caches' valid flags.
        """
        return forward(self.weights, input_ids, state, attention_mask)

    __call__ = forward

    def forward_packed(self, input_ids, cu_seqlens, states):
        """(logits float64 [T, V], one new HybridState per document): several requests in one packed
        forward (module-level `forward_packed`); no state given is mutated."""
        return forward_packed(self.weights, input_ids, cu_seqlens, states)


def load(checkpoint_dir) -> Model:
    """Geometry.from_pretrained(checkpoint_dir) + the safetensors weights (oracle.checkpoint) -> Model."""
    return Model(load_weights(checkpoint_dir))


# ---------------------------------------------------------------------------------------- packed batches
# A serving step runs several requests in ONE forward: a flat token stream cut by cu_seqlens into
# documents (prefill chunks, 1-token decode rows, zero-length rows), each with its own batch-1 state.


def check_cu_seqlens(cu_seqlens, T: int) -> list[int]:
    """cu_seqlens [N+1] as ints: from 0 to T, non-decreasing (zero-length documents allowed; SERVING.md P4)."""
    cu = np.asarray(cu_seqlens.tolist() if hasattr(cu_seqlens, "tolist") else cu_seqlens)
    if cu.ndim != 1 or cu.shape[0] < 2 or not (cu.size == 0 or np.issubdtype(cu.dtype, np.integer)):
        raise ValueError(f"cu_seqlens: expected 1-D ints [N+1] with N >= 1, got {cu.dtype} {tuple(cu.shape)}")
    if cu[0] != 0 or cu[-1] != T:
        raise ValueError(f"cu_seqlens: must run from 0 to the {T} packed tokens, got [{cu[0]}, ..., {cu[-1]}]")
    neg = np.flatnonzero(np.diff(cu) < 0)
    if neg.size:
        i = int(neg[0])
        raise ValueError(f"cu_seqlens: document {i} has negative length {cu[i + 1] - cu[i]} "
                         f"(cu_seqlens must be non-decreasing)")
    return [int(c) for c in cu]


def _packed_states(states, g: Geometry, n_docs: int) -> list:
    """One batch-1 HybridState per document (None = empty), checked like forward's state."""
    states = list(states)
    if len(states) != n_docs:
        raise ValueError(f"states: {len(states)} states for {n_docs} documents (one per cu_seqlens row)")
    out = []
    for i, s in enumerate(states):
        s = HybridState.empty(g) if s is None else s
        try:
            _check_state(s, g, 1)
        except (TypeError, StateError) as e:
            raise type(e)(f"states[{i}]: {e}") from None
        out.append(s)
    return out


def _kda_packed(w, a, cu: list, caches: list):
    """KDA over the flat stream through the sublayer's cu_seqlens path: one initial state row per
    document (zeros for an empty one); a zero-length document's state passes through (SPEC §6, §10)."""
    n = len(caches)
    init = None
    if any(c is not None for c in caches):
        zero = kda.zero_state(w, 1)
        rows = [zero if c is None else c for c in caches]
        init = KDAState(np.concatenate([r.recurrent for r in rows]), np.concatenate([r.conv for r in rows]))
    y, new = kda.sublayer(w, a, init, None, cu)
    out = [None if caches[i] is None and cu[i] == cu[i + 1]          # still empty: stays empty
           else KDAState(new.recurrent[i:i + 1].copy(), new.conv[i:i + 1].copy()) for i in range(n)]
    return y, out


def _dsa_packed(lw: LayerWeights, a, cu: list, caches: list, prevs: list):
    """MLA/DSA one document at a time: each attends over its own cache, and the caches differ in
    length (SPEC §7, §8); a zero-length document keeps its cache and hands no selection on."""
    kind = lw.indexer_type
    ys, out, sels = [], [], []
    for i, (s, e) in enumerate(zip(cu, cu[1:])):
        if s == e:
            out.append(caches[i])
            sels.append(None)
            continue
        if kind == SHARED and prevs[i] is None:
            raise ValueError(f"layer {lw.index}: a shared DSA layer needs the selection of the full DSA layer "
                             f"directly before it (SPEC §8.8)")
        y, c, sel = mla.sublayer(lw.mla, lw.indexer, a[:, s:e], caches[i], np.ones((1, e - s), dtype=bool),
                                 prevs[i] if kind == SHARED else None, kind)
        ys.append(y)
        out.append(c)
        sels.append(sel)
    return np.concatenate(ys, axis=1), out, sels


def decoder_layer_packed(lw: LayerWeights, g: Geometry, X, cu: list, caches: list, prevs: list):
    """decoder_layer (SPEC §5) over a packed stream X [1, T, N, D]: token-wise parts on the flat
    stream, attention per document; returns (X, one cache per document, one selection per document)."""
    pre, post, comb = mhc.coefficients(lw.attn_hc, X)
    a = rmsnorm(mhc.collapse(pre, X), lw.input_layernorm, g.rms_norm_eps)
    if lw.attention == LINEAR:
        y, caches = _kda_packed(lw.kda, a, cu, caches)
        sels = [None] * len(caches)
    else:
        y, caches, sels = _dsa_packed(lw, a, cu, caches, prevs)
    X = mhc.write_back(post, comb, X, y)
    pre, post, comb = mhc.coefficients(lw.ffn_hc, X)
    a = rmsnorm(mhc.collapse(pre, X), lw.post_attention_layernorm, g.rms_norm_eps)
    y = moe.dense_mlp(lw.mlp, a) if g.mlp_layer_types[lw.index] == DENSE else moe.forward(lw.mlp, a)
    return mhc.write_back(post, comb, X, y), caches, sels


def forward_packed(weights: Weights, input_ids, cu_seqlens, states):
    """SPEC §3 over a packed batch (SERVING.md P4): input_ids [T] flat, cu_seqlens [N+1], states one
    batch-1 HybridState (or None) per document; returns (logits [T, V], one new HybridState per
    document), each equal to that document run alone through `forward`. No state given is mutated."""
    g = weights.geometry
    ids = np.asarray(input_ids)
    if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"input_ids: expected a flat int array [T], got {ids.dtype} {tuple(ids.shape)}")
    T = ids.shape[0]
    if T == 0:
        raise ValueError("input_ids: T = 0 tokens in the packed batch")
    if ids.min() < 0 or ids.max() >= g.vocab_size:
        raise ValueError(f"input_ids: ids must lie in [0, vocab_size={g.vocab_size}), got "
                         f"[{ids.min()}, {ids.max()}]")
    cu = check_cu_seqlens(cu_seqlens, T)
    states = _packed_states(states, g, len(cu) - 1)
    X = mhc.expand(weights.embed_tokens[ids][None], g.hc_mult)                          # [1, T, N, D]
    prevs = [None] * len(states)
    per_layer = []
    for j, lw in enumerate(weights.layers):
        X, caches, prevs = decoder_layer_packed(lw, g, X, cu, [s.layers[j] for s in states], prevs)
        per_layer.append(caches)
    h = rmsnorm(mhc.reduce(X), weights.norm, g.rms_norm_eps)                             # [1, T, D]
    new = [HybridState(g.layer_types, [layer[i] for layer in per_layer], s.seq_len + cu[i + 1] - cu[i])
           for i, s in enumerate(states)]
    return (h @ weights.lm_head.T)[0], new
