"""The whole text decoder's composition (SPEC §3, §5, cache protocol §10), written once over an
Implementation and a few array primitives.

    e = Embed[ids];  X = N copies of e
    per layer (SPEC §5):  pre, post, C = attn_hc(X);  a = RMSNorm_in(Σ pre·X)
                          y = KDA(a) or MLA/DSA(a, prev);  X = post ⊗ y + Cᵀ X
                          pre, post, C = ffn_hc(X);  a = RMSNorm_post(Σ pre·X)
                          y = DenseMLP(a) or MoE(a);    X = post ⊗ y + Cᵀ X
    logits = RMSNorm_final(mean_n X) lm_headᵀ

`Decoder` composes an Implementation's mechanism namespaces; what depends on the arrays (the state
class, array construction, rmsnorm, casts, concatenation, the lm_head matmul, a zero KDA state row)
is a primitive a subclass supplies, as impl.state.HybridState does for the state: oracle.model's
NumpyDecoder (float64, the oracle's modules) and impl.model's TorchDecoder. A packed batch (several
documents in one flat stream, each with its own state) runs the same layer: only its attention is
called once per document.

This module holds no mechanism math and imports no torch: impl/ builds on it (tests/test_architecture.py).
"""
from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, Optional

import numpy as np

from oracle.config import DENSE, LINEAR, SHARED, Geometry
from oracle.state import HybridState, StateError
from oracle.types import KDAState, LayerDecisions, LayerTrace, LayerWeights, Weights

__all__ = ["Implementation", "Documents", "Decoder", "Model", "check_cu_seqlens", "check_state"]


@dataclasses.dataclass(frozen=True)
class Implementation:
    """One namespace per mechanism (None: not provided): what the decoder composes and the checks call
    (impl/registry.py names them: "triton", "torch", "mutant:<name>", a candidate; oracle.model.ORACLE).

    model: the whole-decoder namespace (forward, deserialize; None: impl.model's composition);
    serving: a serving engine class over a model (None: impl.serving.Engine);
    not_provided: the outputs it declares it does not compute ("kda.chunked.boundary_states": it returns
    None there; impl.registry.OPTIONAL): their comparisons are not covered, never judged;
    precision: the functions it declares it computes partly in a coarser dtype (invariants/precision.py).
    """

    name: str
    kda: Any
    dsa: Any = None
    mla: Any = None
    mhc: Any = None
    moe: Any = None
    nvfp4: Any = None
    model: Any = None
    serving: Any = None
    not_provided: frozenset = frozenset()
    precision: tuple = ()        # (("mechanism.function", dtype), ...): declared PRECISION islands

    def require(self, mechanism: str) -> Any:
        ns = getattr(self, mechanism, None)
        if ns is None:
            raise ValueError(f"implementation {self.name!r} provides no {mechanism!r} functions")
        return ns

    def _replace(self, **namespaces) -> "Implementation":
        """A copy with some namespaces swapped (the registry's mutants, the model check's recorders)."""
        return dataclasses.replace(self, **namespaces)


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


def check_state(state, g: Geometry, B: int) -> None:
    """SPEC §10: a HybridState (oracle or impl) of the model's layer types holding batch B (or empty)."""
    if not isinstance(state, HybridState):
        raise TypeError(f"state: expected a HybridState or None, got {type(state).__name__}")
    if state.layer_types != g.layer_types:
        raise StateError(f"state: layer types {list(state.layer_types)} do not match the model's "
                         f"{list(g.layer_types)}")
    if state.batch is not None and state.batch != B:
        raise StateError(f"state: holds batch {state.batch}, input_ids has batch {B}")


class Documents(NamedTuple):
    """How a layer's attention meets its tokens. cu None: one batch X [B, S] under `mask`, one cache;
    else a packed stream X [1, T] cut by cu [N+1] into documents, each with its own batch-1 cache
    (a serving step: prefill chunks, 1-token decode rows, zero-length rows; SERVING.md P4)."""

    mask: Any                 # [B, S] bool (cu None); a packed document's tokens are all real
    cu: Optional[list]        # document offsets into the packed stream
    caches: list              # one cache entry per document (KDAState / DSACache / None)
    sels: list                # per document, the Selection the layer directly before handed off


class Decoder:
    """The decoder over `impl`'s kda, mla, moe and mhc namespaces (SPEC §3, §5).

    A subclass supplies the array primitives below (those raising NotImplementedError) and `State`,
    the HybridState class its forward returns.
    """

    State = HybridState

    def __init__(self, impl: Implementation):
        self.impl = impl

    # ------------------------------------------------------------------ array primitives

    def _rmsnorm(self, x, w, eps: float):
        """Weighted RMSNorm (SPEC §2)."""
        raise NotImplementedError

    def _array(self, x):
        """x (a list, NumPy or backend array) as this backend's array."""
        raise NotImplementedError

    def _is_int(self, a) -> bool:
        raise NotImplementedError

    def _ones(self, B: int, S: int):
        """An all-true bool mask [B, S]."""
        raise NotImplementedError

    def _embed(self, table, ids):
        raise NotImplementedError

    def _cast(self, y, X):
        """A sublayer's output in the streams' dtype."""
        raise NotImplementedError

    def _cat(self, xs, axis: int = 0):
        raise NotImplementedError

    def _logits(self, h, lm_head):
        raise NotImplementedError

    def _kda_row(self, w, cache: Optional[KDAState], a) -> KDAState:
        """One document's initial KDA state for the packed path: `cache`, or zeros when it is empty."""
        raise NotImplementedError

    def _own(self, state):
        """A checked input state in this backend's State class (never mutated)."""
        return state

    def _moe_options(self, lw: LayerWeights) -> dict:
        """Extra arguments of the implementation's moe.forward for this layer."""
        return {}

    # ------------------------------------------------------------------ the model

    def forward(self, weights: Weights, input_ids, state: Optional[HybridState] = None, attention_mask=None,
                decisions=None, trace: Optional[list] = None):
        """The full text forward (SPEC §3) from `state` (None = empty); returns (logits [B,S,V], new state).

        decisions: None, or one LayerDecisions (or None) per layer to force (`layer`); trace: a list
        that receives one LayerTrace per layer (this implementation's own decisions in this run).
        """
        ids = self._tokens(weights.geometry, input_ids, 2, "an int array [B, S]")
        B, S = ids.shape
        state = self._state(weights.geometry, state, B)
        mask = self.effective_mask(attention_mask, B, S)
        if decisions is not None and len(decisions) != len(weights.layers):
            raise ValueError(f"decisions: expected one entry per layer ({len(weights.layers)}), got {len(decisions)}")
        logits, new = self._run(weights, ids, mask, None, [state], decisions, trace)
        return logits, new[0]

    def forward_packed(self, weights: Weights, input_ids, cu_seqlens, states):
        """SPEC §3 over a packed batch (SERVING.md P4): input_ids [T] flat, cu_seqlens [N+1], states one
        batch-1 HybridState (or None) per document; returns (logits [T, V], one new HybridState per
        document), each equal to that document run alone through `forward`. No state given is mutated."""
        g = weights.geometry
        ids = self._tokens(g, input_ids, 1, "a flat int array [T]")
        cu = check_cu_seqlens(cu_seqlens, ids.shape[0])
        states = list(states)
        if len(states) != len(cu) - 1:
            raise ValueError(f"states: {len(states)} states for {len(cu) - 1} documents (one per cu_seqlens row)")
        for i, s in enumerate(states):
            try:
                states[i] = self._state(g, s, 1)
            except (TypeError, StateError) as e:
                raise type(e)(f"states[{i}]: {e}") from None
        logits, new = self._run(weights, ids[None], None, cu, states)
        return logits[0], new

    def _tokens(self, g: Geometry, input_ids, ndim: int, expected: str):
        """input_ids as this backend's int array: `ndim` axes, at least one token, ids in the vocabulary."""
        ids = self._array(input_ids)
        if ids.ndim != ndim or not self._is_int(ids):
            raise ValueError(f"input_ids: expected {expected}, got {ids.dtype} {tuple(ids.shape)}")
        if ids.shape[-1] == 0:
            raise ValueError("input_ids: S = 0 tokens" if ndim == 2 else "input_ids: T = 0 tokens in the packed batch")
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= g.vocab_size:
            raise ValueError(f"input_ids: ids must lie in [0, vocab_size={g.vocab_size}), got [{lo}, {hi}]")
        return ids

    def _state(self, g: Geometry, state, B: int):
        state = self.State.empty(g) if state is None else state
        check_state(state, g, B)
        return self._own(state)

    def effective_mask(self, attention_mask, B: int, S: int):
        """SPEC §3: the last S columns of the 2-D mask as bool [B, S]; all-ones when the mask is None,
        all ones, or S == 1 (a decode token is never padding; earlier padding lives in the caches)."""
        if attention_mask is None or S == 1:
            return self._ones(B, S)
        m = self._array(attention_mask)
        if m.ndim != 2 or m.shape[0] != B or m.shape[1] < S:
            raise ValueError(f"attention_mask: expected 2-D [B={B}, S_total >= S={S}] (1 = real, 0 = pad), "
                             f"got shape {tuple(m.shape)}")
        if bool((m == 1).all()):
            return self._ones(B, S)
        return m[:, -S:] != 0

    def _run(self, weights: Weights, ids, mask, cu: Optional[list], states: list, decisions=None, trace=None):
        """ids [B, S] (packed: [1, T] cut by cu) through every layer, each document from its state;
        returns (logits [B, S, V], one new state per document)."""
        g = weights.geometry
        X = self.impl.mhc.expand(self._embed(weights.embed_tokens, ids), g.hc_mult)        # [B, S, N, D]
        sels, per_layer = [None] * len(states), []
        for j, lw in enumerate(weights.layers):
            docs = Documents(mask, cu, [s.layers[j] for s in states], sels)
            X, caches, sels = self.layer(lw, g, X, docs, None if decisions is None else decisions[j], trace)
            per_layer.append(caches)
        h = self._rmsnorm(self.impl.mhc.reduce(X), weights.norm, g.rms_norm_eps)           # [B, S, D]
        cu = cu or [0, ids.shape[1]]
        new = [self.State(g.layer_types, [caches[i] for caches in per_layer], s.seq_len + cu[i + 1] - cu[i])
               for i, s in enumerate(states)]
        return self._logits(h, weights.lm_head), new

    # ------------------------------------------------------------------ one layer

    def decoder_layer(self, lw: LayerWeights, g: Geometry, X, mask, cache, prev,
                      decision: Optional[LayerDecisions] = None, trace: Optional[list] = None):
        """SPEC §5 on one batch (X [B, S, N, D], mask [B, S]) -> (X, its new cache, its Selection)."""
        X, caches, sels = self.layer(lw, g, X, Documents(mask, None, [cache], [prev]), decision, trace)
        return X, caches[0], sels[0]

    def layer(self, lw: LayerWeights, g: Geometry, X, docs: Documents,
              decision: Optional[LayerDecisions] = None, trace: Optional[list] = None):
        """One decoder layer (SPEC §5): token-wise parts on X, attention per document of `docs`.

        Args:
            X: [B, S, N, D] streams (packed: [1, T, N, D])
            decision: choices to force instead of the implementation's own (a full DSA layer's
                selection, an MoE layer's experts): the oracle re-run with an implementation's decisions
            trace: a list; the layer appends a LayerTrace of its OWN decisions (what a forced one is judged by)
        Returns:
            X: like X;  caches: one new cache entry per document;  sels: one Selection per document (None on KDA)
        """
        decision = decision or LayerDecisions()
        own = None if trace is None else []
        _, post, comb, u = self.hc_entry(lw.attn_hc, X)
        y, caches, sels = self.attention(lw, self._rmsnorm(u, lw.input_layernorm, g.rms_norm_eps), docs,
                                         decision, own)
        X = self.impl.mhc.write_back(post, comb, X, self._cast(y, X))
        _, post, comb, u = self.hc_entry(lw.ffn_hc, X)
        y, routing = self.mlp(lw, g, self._rmsnorm(u, lw.post_attention_layernorm, g.rms_norm_eps), decision,
                              trace is not None)
        if trace is not None:
            trace.append(LayerTrace(own[0] if own else None, routing))
        return self.impl.mhc.write_back(post, comb, X, self._cast(y, X)), caches, sels

    def hc_entry(self, w, X):
        """SPEC §4 (pre, post, comb, u): the fused mHC kernel where the namespace has one, else
        coefficients + collapse."""
        fused = getattr(self.impl.mhc, "fused_coefficients_collapse", None)
        if fused is not None:
            return fused(w, X)
        pre, post, comb = self.impl.mhc.coefficients(w, X)
        return pre, post, comb, self.impl.mhc.collapse(pre, X)

    def attention(self, lw: LayerWeights, a, docs: Documents, decision: LayerDecisions, own: Optional[list]):
        """SPEC §5: KDA or MLA/DSA on a [B, S, D] -> (y [B, S, D], caches, selections: one per document)."""
        if lw.attention == LINEAR:
            y, caches = self._kda(lw.kda, a, docs)
            return y, caches, [None] * len(caches)
        return self._dsa(lw, a, docs, decision, own)

    def _kda(self, w, a, docs: Documents):
        """SPEC §6, §10: a batch through the sublayer's masked path; a packed stream through its
        cu_seqlens path, one initial state row per document (zeros for an empty one), a zero-length
        document's state passing through."""
        if docs.cu is None:
            y, cache = self.impl.kda.sublayer(w, a, docs.caches[0], None if bool(docs.mask.all()) else docs.mask)
            return y, [cache]
        cu, caches, init = docs.cu, docs.caches, None
        if any(c is not None for c in caches):
            rows = [self._kda_row(w, c, a) for c in caches]
            init = KDAState(self._cat([r.recurrent for r in rows]), self._cat([r.conv for r in rows]))
        y, new = self.impl.kda.sublayer(w, a, init, None, self._array(cu))
        return y, [None if caches[i] is None and cu[i] == cu[i + 1]          # still empty: stays empty
                   else new.map(lambda t: self.State._copy(t[i:i + 1])) for i in range(len(caches))]

    def _dsa(self, lw: LayerWeights, a, docs: Documents, decision: LayerDecisions, own: Optional[list]):
        """SPEC §7, §8: MLA/DSA one document at a time over its own cache (caches differ in length); a
        zero-length document keeps its cache and hands no selection on."""
        kind = lw.indexer_type
        cu = docs.cu or [0, a.shape[1]]
        # forcing and tracing arguments only when asked: an implementation's namespace need not take them
        extra = {} if decision.selection is None and own is None else \
            {"forced": None if kind == SHARED else decision.selection, "trace": own}
        ys, caches, sels = [], [], []
        for (s, e), cache, prev in zip(zip(cu, cu[1:]), docs.caches, docs.sels):
            sel = None
            if s < e:
                if kind == SHARED and prev is None:
                    raise ValueError(f"layer {lw.index}: a shared DSA layer needs the selection of the full DSA "
                                     f"layer directly before it (it reuses that layer's top-k pools; check indexer_types)")
                mask = docs.mask if docs.cu is None else self._ones(1, e - s)
                y, cache, sel = self.impl.mla.sublayer(lw.mla, lw.indexer, a[:, s:e], cache, mask,
                                                       prev if kind == SHARED else None, kind, **extra)
                ys.append(y)
            caches.append(cache)
            sels.append(sel)
        return (ys[0] if len(ys) == 1 else self._cat(ys, 1)), caches, sels

    def mlp(self, lw: LayerWeights, g: Geometry, a, decision: LayerDecisions, traced: bool):
        """SPEC §5, §9: dense MLP or MoE on a [B, S, D] (forced experts when the decision has them);
        returns (y [B, S, D], the implementation's own Routing when traced, else None)."""
        if g.mlp_layer_types[lw.index] == DENSE:
            return self.impl.moe.dense_mlp(lw.mlp, a), None
        routing = self.impl.moe.route(lw.mlp, a) if traced else None
        forced = {} if decision.experts is None else {"forced": decision.experts}
        return self.impl.moe.forward(lw.mlp, a, **self._moe_options(lw), **forced), routing


class Model:
    """The stable whole-decoder API (ARCHITECTURE.md) over a Decoder: oracle.model.Model and
    impl.model.Model bring theirs."""

    def __init__(self, weights: Weights, decoder: Decoder):
        self.weights = weights
        self.geometry = weights.geometry
        self.decoder = decoder

    def new_state(self) -> HybridState:
        """An empty cache for this model (SPEC §10)."""
        return self.decoder.State.empty(self.geometry)

    def forward(self, input_ids, attention_mask=None, state: Optional[HybridState] = None):
        """SPEC §3 (logits [B, S, V], state): state None starts empty; the given state is not mutated.

        attention_mask: optional 2-D [B, S_total] (1 = real, 0 = pad), S_total >= S; its last S columns
        mask the current tokens; earlier padding is remembered by the DSA caches' valid flags.
        """
        return self.decoder.forward(self.weights, input_ids, state, attention_mask)

    def __call__(self, input_ids, attention_mask=None, state: Optional[HybridState] = None):
        return self.forward(input_ids, attention_mask, state)

    def forward_packed(self, input_ids, cu_seqlens, states):
        """SERVING.md P4 (logits [T, V], one new state per document): several requests in one packed
        forward (Decoder.forward_packed); no state given is mutated."""
        return self.decoder.forward_packed(self.weights, input_ids, cu_seqlens, states)
