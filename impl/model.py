"""The whole text decoder on torch + Triton, mirroring oracle/model.py by name and argument order.

    e = Embed[ids];  X = N copies of e
    per layer (SPEC §5):  pre, post, C = attn_hc(X);  a = RMSNorm_in(Σ pre·X)
                          y = KDA(a) or MLA/DSA(a, prev);  X = post ⊗ y + Cᵀ X
                          pre, post, C = ffn_hc(X);  a = RMSNorm_post(Σ pre·X)
                          y = DenseMLP(a) or MoE(a);    X = post ⊗ y + Cᵀ X
    logits = RMSNorm_final(mean_n X) lm_headᵀ

`load(checkpoint_dir, device, dtype, backend)` reads the checkpoint with oracle.checkpoint (float64) and
moves every array to torch in the working dtype (float32 on the CPU, the Triton interpreter's dtype;
bfloat16 on CUDA), keeping KDA's conv1d / dt_bias / A_log in float32 (SPEC §11). backend "triton" runs
the impl kernels, "torch" the plain-torch baselines (impl/baseline), the low-precision reference of
the contracts. An NVFP4 checkpoint's routed experts (NVFP4.md A5) run the W4A16 kernels on their codes
and scales with backend "triton" (MoEWeights.nvfp4 becomes an impl.nvfp4.NVFP4Experts); the torch
backend runs their dequantized values. `Model.forward(input_ids, attention_mask=None, state=None) ->
(logits float32 [B,S,V], state)`: the given state is never mutated (a new impl.state.HybridState is
returned).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

import numpy as np
import torch

import impl  # noqa: F401  (selects the Triton interpreter on CPU-only machines)
from impl.state import HybridState
from impl.weights import F32_WEIGHTS, nvfp4_experts, to_torch  # noqa: F401  (moved to impl/weights.py)
from oracle.checkpoint import LayerWeights, Weights
from oracle.checkpoint import load as load_weights
from oracle.config import DENSE, LINEAR, SHARED, Geometry
from oracle.state import HybridState as OracleHybridState
from oracle.state import StateError
from oracle.types import KDAWeights, MoEWeights, NVFP4ExpertWeights, NVFP4Tensor, Selection

__all__ = ["Model", "load", "forward", "decoder_layer", "effective_mask", "rmsnorm", "to_torch", "nvfp4_experts"]


def rmsnorm(x, w, eps: float):
    """Weighted RMSNorm in float32 (SPEC §2): w · x · (mean(x²) + eps)^-1/2, cast back to x's dtype."""
    u = x.float()
    y = u * torch.rsqrt(torch.mean(u * u, dim=-1, keepdim=True) + eps)
    return (w.float() * y).to(x.dtype)


def effective_mask(attention_mask, B: int, S: int, device="cpu") -> torch.Tensor:
    """SPEC §3: the last S columns of the 2-D mask as bool [B, S]; all-ones when the mask is None,
    all ones, or S == 1 (a decode token is never padding; earlier padding lives in the caches)."""
    if attention_mask is None or S == 1:
        return torch.ones(B, S, dtype=torch.bool, device=device)
    m = attention_mask if isinstance(attention_mask, torch.Tensor) else torch.as_tensor(np.asarray(attention_mask))
    if m.ndim != 2 or m.shape[0] != B or m.shape[1] < S:
        raise ValueError(f"attention_mask: expected 2-D [B={B}, S_total >= S={S}] (1 = real, 0 = pad), "
                         f"got shape {tuple(m.shape)}")
    m = m.to(device)
    if bool(torch.all(m == 1)):
        return torch.ones(B, S, dtype=torch.bool, device=device)
    return m[:, -S:] != 0


@dataclasses.dataclass(frozen=True)
class Backend:
    """The four mechanism namespaces a model runs on (impl modules or baseline instances)."""

    name: str
    kda: Any
    mla: Any
    moe: Any
    mhc: Any


def backend_for(name: str) -> Backend:
    if name == "triton":
        from impl import kda, mhc, mla, moe
        return Backend(name, kda, mla, moe, mhc)
    if name == "torch":
        from impl.baseline import kda, mhc, mla, moe
        return Backend(name, kda.kda, mla.mla, moe.moe, mhc.mhc)
    raise ValueError(f"backend: {name!r}, expected 'triton' or 'torch'")


def _hc_entry(be: Backend, w, X):
    """(pre, post, comb, u): the fused kernel where the backend has one, else coefficients + collapse."""
    fused = getattr(be.mhc, "fused_coefficients_collapse", None)
    if fused is not None:
        return fused(w, X)
    pre, post, comb = be.mhc.coefficients(w, X)
    return pre, post, comb, be.mhc.collapse(pre, X)


def decoder_layer(lw: LayerWeights, g: Geometry, X, mask, cache, prev: Optional[Selection],
                  backend: Optional[Backend] = None):
    """One decoder layer (SPEC §5); oracle.model.decoder_layer on torch tensors.

    Args:
        X: [B, S, N, D] streams;  mask: [B, S] bool tensor;  cache: the layer's KDAState / DSACache / None
        prev: the Selection handed off by the layer directly before (used by "shared" DSA layers)
    Returns:
        X: [B, S, N, D];  cache: the layer's new cache entry;  sel: this layer's Selection (None on KDA)
    """
    be = backend if backend is not None else backend_for("triton")
    _, post, comb, u = _hc_entry(be, lw.attn_hc, X)
    a = rmsnorm(u, lw.input_layernorm, g.rms_norm_eps)
    sel = None
    if lw.attention == LINEAR:
        y, cache = be.kda.sublayer(lw.kda, a, cache, None if bool(mask.all()) else mask)
    else:
        kind = lw.indexer_type
        if kind == SHARED and prev is None:
            raise ValueError(f"layer {lw.index}: a shared DSA layer needs the selection of the full DSA layer "
                             f"directly before it (SPEC §8.8)")
        y, cache, sel = be.mla.sublayer(lw.mla, lw.indexer, a, cache, mask, prev if kind == SHARED else None, kind)
    X = be.mhc.write_back(post, comb, X, y.to(X.dtype))
    _, post, comb, u = _hc_entry(be, lw.ffn_hc, X)
    a = rmsnorm(u, lw.post_attention_layernorm, g.rms_norm_eps)
    y = _mlp(be, lw, g, a)
    return be.mhc.write_back(post, comb, X, y.to(X.dtype)), cache, sel


def _mlp(be: Backend, lw: LayerWeights, g: Geometry, a):
    """The layer's feed-forward: dense MLP, or MoE with NVFP4 W4A16 experts on the triton backend when
    the checkpoint has them (the torch backend runs their exact dequantization)."""
    if g.mlp_layer_types[lw.index] == DENSE:
        return be.moe.dense_mlp(lw.mlp, a)
    if be.name == "triton" and lw.mlp.nvfp4 is not None:
        return be.moe.forward(lw.mlp, a, nvfp4=lw.mlp.nvfp4)          # W4A16 on the checkpoint's codes
    return be.moe.forward(lw.mlp, a)                                  # dense (dequantized) experts


def _check_state(state, g: Geometry, B: int) -> None:
    if not isinstance(state, OracleHybridState):
        raise TypeError(f"state: expected a HybridState or None, got {type(state).__name__}")
    if state.layer_types != g.layer_types:
        raise StateError(f"state: layer types {list(state.layer_types)} do not match the model's "
                         f"{list(g.layer_types)}")
    if state.batch is not None and state.batch != B:
        raise StateError(f"state: holds batch {state.batch}, input_ids has batch {B}")


def forward(weights: Weights, input_ids, state: Optional[HybridState] = None, attention_mask=None,
            backend: Optional[Backend] = None):
    """The full text forward (SPEC §3) from `state` (None = empty); returns (logits float32 [B,S,V], state).

    weights: torch Weights (see `to_torch`); a float64 NumPy oracle state is converted first.
    """
    be = backend if backend is not None else backend_for("triton")
    g = weights.geometry
    device, dtype = weights.embed_tokens.device, weights.embed_tokens.dtype
    ids = input_ids if isinstance(input_ids, torch.Tensor) else torch.as_tensor(np.asarray(input_ids))
    if ids.ndim != 2 or ids.dtype.is_floating_point or ids.dtype == torch.bool or ids.is_complex():
        raise ValueError(f"input_ids: expected an int array [B, S], got {ids.dtype} {tuple(ids.shape)}")
    B, S = ids.shape
    if S == 0:
        raise ValueError("input_ids: S = 0 tokens")
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or hi >= g.vocab_size:
        raise ValueError(f"input_ids: ids must lie in [0, vocab_size={g.vocab_size}), got [{lo}, {hi}]")
    if state is None:
        state = HybridState.empty(g)
    _check_state(state, g, B)
    if not isinstance(state, HybridState):
        state = HybridState.from_oracle(state, device, dtype)
    mask = effective_mask(attention_mask, B, S, device)
    X = be.mhc.expand(weights.embed_tokens[ids.to(device=device, dtype=torch.long)], g.hc_mult)   # [B,S,N,D]
    prev = None
    layers = []
    for lw, cache in zip(weights.layers, state.layers):
        X, cache, sel = decoder_layer(lw, g, X, mask, cache, prev, be)
        prev = sel
        layers.append(cache)
    h = rmsnorm(be.mhc.reduce(X), weights.norm, g.rms_norm_eps)                          # [B, S, D]
    logits = (h @ weights.lm_head.T).float()
    return logits, HybridState(g.layer_types, layers, state.seq_len + S)


class Model:
    """The whole decoder on torch (+ Triton kernels with backend "triton")."""

    def __init__(self, weights: Weights, backend: str = "triton"):
        self.weights = weights
        self.geometry = weights.geometry
        self.backend = backend_for(backend)

    @property
    def device(self) -> torch.device:
        return self.weights.embed_tokens.device

    @property
    def dtype(self) -> torch.dtype:
        return self.weights.embed_tokens.dtype

    def new_state(self) -> HybridState:
        """An empty cache for this model."""
        return HybridState.empty(self.geometry)

    def forward(self, input_ids, attention_mask=None, state: Optional[HybridState] = None):
        """(logits float32 [B, S, V], state): state None starts empty; the given state is not mutated.

        attention_mask: optional 2-D [B, S_total] (1 = real, 0 = pad), S_total >= S; its last S columns
        mask the current tokens (SPEC §3); earlier padding is remembered by the DSA caches' valid flags.
        """
        with torch.no_grad():
            return forward(self.weights, input_ids, state, attention_mask, self.backend)

    __call__ = forward

    def forward_packed(self, input_ids, cu_seqlens, states):
        """(logits float32 [T, V], one new HybridState per document): several requests in one packed
        forward (module-level `forward_packed`); no state given is mutated."""
        with torch.no_grad():
            return forward_packed(self.weights, input_ids, cu_seqlens, states, self.backend)


def load(checkpoint_dir, device="cpu", dtype: Optional[torch.dtype] = None, backend: str = "triton") -> Model:
    """oracle.checkpoint.load + every array to torch on `device` in the working dtype -> Model.

    dtype: default float32 on the CPU (the Triton interpreter), bfloat16 on CUDA. An NVFP4 checkpoint
    (either layout) runs its experts' codes and scales on "triton", their dequantization on "torch".
    """
    device = torch.device(device)
    if dtype is None:
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    backend_for(backend)
    return Model(to_torch(load_weights(checkpoint_dir), device, dtype, nvfp4=backend == "triton"), backend)


# ---------------------------------------------------------------------------------------- packed batches
# oracle.model.forward_packed on torch: token-wise parts on the flat stream, KDA through the
# sublayer's cu_seqlens path (one initial state row per document), MLA/DSA one document at a time.

from oracle.model import check_cu_seqlens  # noqa: E402
from oracle.types import KDAState  # noqa: E402


def _packed_states(states, g: Geometry, n_docs: int, device, dtype) -> list:
    """One batch-1 impl HybridState per document (None = empty; oracle states converted)."""
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
        out.append(s if isinstance(s, HybridState) else HybridState.from_oracle(s, device, dtype))
    return out


def _kda_packed(be: Backend, w: KDAWeights, a, cu: list, caches: list):
    """KDA over the flat stream with cu_seqlens: one initial state row per document (zeros for an
    empty one); a zero-length document's state passes through the kernels (SPEC §6, §10)."""
    n = len(caches)
    init = None
    if any(c is not None for c in caches):
        H, K, C = w.num_heads, w.head_dim, 3 * w.num_heads * w.head_dim
        rec = [torch.zeros(1, H, K, K, device=a.device) if c is None else c.recurrent.float() for c in caches]
        conv = [torch.zeros(1, C, w.conv_width, device=a.device, dtype=a.dtype) if c is None
                else c.conv.to(a.dtype) for c in caches]
        init = KDAState(torch.cat(rec), torch.cat(conv))
    cu_t = torch.tensor(cu, dtype=torch.int64, device=a.device)
    y, new = be.kda.sublayer(w, a, init, None, cu_t)
    out = [None if caches[i] is None and cu[i] == cu[i + 1]          # still empty: stays empty
           else KDAState(new.recurrent[i:i + 1].clone(), new.conv[i:i + 1].clone()) for i in range(n)]
    return y, out


def _dsa_packed(be: Backend, lw: LayerWeights, a, cu: list, caches: list, prevs: list):
    """MLA/DSA one document at a time over its own cache (the caches differ in length; SPEC §7, §8);
    a zero-length document keeps its cache and hands no selection on."""
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
        mask = torch.ones(1, e - s, dtype=torch.bool, device=a.device)
        y, c, sel = be.mla.sublayer(lw.mla, lw.indexer, a[:, s:e], caches[i], mask,
                                    prevs[i] if kind == SHARED else None, kind)
        ys.append(y)
        out.append(c)
        sels.append(sel)
    return torch.cat(ys, dim=1), out, sels


def decoder_layer_packed(lw: LayerWeights, g: Geometry, X, cu: list, caches: list, prevs: list,
                         backend: Optional[Backend] = None):
    """oracle.model.decoder_layer_packed on torch (SPEC §5): X [1, T, N, D]; returns (X, one cache per
    document, one selection per document)."""
    be = backend if backend is not None else backend_for("triton")
    _, post, comb, u = _hc_entry(be, lw.attn_hc, X)
    a = rmsnorm(u, lw.input_layernorm, g.rms_norm_eps)
    if lw.attention == LINEAR:
        y, caches = _kda_packed(be, lw.kda, a, cu, caches)
        sels = [None] * len(caches)
    else:
        y, caches, sels = _dsa_packed(be, lw, a, cu, caches, prevs)
    X = be.mhc.write_back(post, comb, X, y.to(X.dtype))
    _, post, comb, u = _hc_entry(be, lw.ffn_hc, X)
    a = rmsnorm(u, lw.post_attention_layernorm, g.rms_norm_eps)
    y = _mlp(be, lw, g, a)
    return be.mhc.write_back(post, comb, X, y.to(X.dtype)), caches, sels


def forward_packed(weights: Weights, input_ids, cu_seqlens, states, backend: Optional[Backend] = None):
    """oracle.model.forward_packed on torch (SPEC §3, SERVING.md P4): input_ids [T] flat, cu_seqlens
    [N+1], states one batch-1 HybridState (or None) per document; returns (logits float32 [T, V], one
    new impl HybridState per document). No state given is mutated."""
    be = backend if backend is not None else backend_for("triton")
    g = weights.geometry
    device, dtype = weights.embed_tokens.device, weights.embed_tokens.dtype
    ids = input_ids if isinstance(input_ids, torch.Tensor) else torch.as_tensor(np.asarray(input_ids))
    if ids.ndim != 1 or ids.dtype.is_floating_point or ids.dtype == torch.bool or ids.is_complex():
        raise ValueError(f"input_ids: expected a flat int array [T], got {ids.dtype} {tuple(ids.shape)}")
    T = ids.shape[0]
    if T == 0:
        raise ValueError("input_ids: T = 0 tokens in the packed batch")
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or hi >= g.vocab_size:
        raise ValueError(f"input_ids: ids must lie in [0, vocab_size={g.vocab_size}), got [{lo}, {hi}]")
    cu = check_cu_seqlens(cu_seqlens, T)
    states = _packed_states(states, g, len(cu) - 1, device, dtype)
    X = be.mhc.expand(weights.embed_tokens[ids.to(device=device, dtype=torch.long)][None], g.hc_mult)
    prevs = [None] * len(states)
    per_layer = []
    for j, lw in enumerate(weights.layers):
        X, caches, prevs = decoder_layer_packed(lw, g, X, cu, [s.layers[j] for s in states], prevs, be)
        per_layer.append(caches)
    h = rmsnorm(be.mhc.reduce(X), weights.norm, g.rms_norm_eps)                          # [1, T, D]
    new = [HybridState(g.layer_types, [layer[i] for layer in per_layer], s.seq_len + cu[i + 1] - cu[i])
           for i, s in enumerate(states)]
    return (h @ weights.lm_head.T).float()[0], new
