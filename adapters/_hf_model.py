"""model.forward over transformers' whole `Glm5NextForConditionalGeneration` (docs/candidates.md §12;
adapters/transformers_glm5.py is the candidate). The text config is the Weights' own geometry (the
checkpoint's config.json), the parameters are the Weights (names of SPEC §11), the cache is our
HybridState converted layer by layer (adapters/_hf_cache.py). Text-only input ids; the one-layer
vision tower transformers' class insists on is built and never run.

Not covered: model.deserialize (ours restores the HybridState this returns), packed calls.
"""
from __future__ import annotations

import torch

from adapters import _hf
from adapters import _hf_cache as hc
from impl.state import HybridState
from oracle.fields import parts
from oracle.types import KDAState, LayerWeights, Weights

TEXT = "model.language_model."
# the last few models built, by the Weights they hold: a check calls forward many times on one Weights,
# and building the model is most of a short call's cost
_BUILT: list = []
_KEEP = 2


def _named(weights: Weights) -> dict:
    """{transformers state_dict name: tensor} of the text decoder."""
    out = {TEXT + k: v for k, v in _hf.named(weights).items() if k != "lm_head.weight"}
    out["lm_head.weight"] = weights.lm_head
    (layers,) = parts(Weights)
    for lw in weights.layers:
        prefix = TEXT + layers.module.format(i=lw.index)
        out.update(_hf.named(lw, prefix))
        for pt in parts(LayerWeights):
            sub = getattr(lw, pt.name)
            if sub is not None:
                out.update(_hf.named(sub, prefix + pt.module))
    return out


def _build(weights: Weights):
    from invariants.reference import VISION, classes
    config_cls, model_cls = classes()
    g = weights.geometry
    cfg = config_cls(text_config=g.to_dict(), vision_config=VISION)
    dtype = weights.embed_tokens.dtype
    model = model_cls._from_config(cfg, dtype=dtype, attn_implementation="sdpa", experts_implementation="eager")
    tensors = _named(weights)
    expected = {k for k in model.state_dict() if k.startswith(TEXT) or k == "lm_head.weight"}
    missing, unexpected = sorted(expected - set(tensors)), sorted(set(tensors) - expected)
    if missing or unexpected:
        raise ValueError(f"Weights do not map onto Glm5NextForConditionalGeneration: missing {missing[:5]}, "
                         f"unexpected {unexpected[:5]}")
    with torch.no_grad():
        model.load_state_dict({k: v.detach() for k, v in tensors.items()}, strict=False)
    return model.to(weights.embed_tokens.device).eval()


def model_for(weights: Weights):
    for w, m in _BUILT:
        if w is weights:
            return m
    m = _build(weights)
    _BUILT.insert(0, (weights, m))
    del _BUILT[_KEEP:]
    return m


def _seeded(model, state):
    """A DynamicCache holding `state` (None: empty)."""
    cfg = model.config.get_text_config()
    cache = hc.empty(cfg)
    if state is None:
        return cache
    for j, entry in enumerate(state.layers):
        if isinstance(entry, KDAState):
            hc.seed_kda(cache, j, entry)
        else:
            hc.seed_mla(cache, j, entry)
    return cache


def _state(cache, weights, seq_len: int, dtype) -> HybridState:
    g = weights.geometry
    layers = []
    for j, kind in enumerate(g.layer_types):
        if kind == "linear_attention":
            layers.append(hc.kda_state(cache, j, dtype))
        else:
            full = g.indexer_types[j] == "full"
            layers.append(hc.dsa_cache(cache, j, full, weights.layers[j].indexer if full else None))
    return HybridState(g.layer_types, layers, seq_len)


def _reporting(model, backend) -> list:
    """Forward hooks that hand the model's own discrete decisions to the checks, in layer order: each full
    DSA layer's top-k (its indexer's output) and each MoE layer's expert ids (its router's), through the
    backend's record_selection / record_experts where the caller gives them (invariants/model_checks.py;
    docs/candidates.md §12). Without them nothing is hooked."""
    sel = getattr(getattr(backend, "mla", None), "record_selection", None)
    exp = getattr(getattr(backend, "moe", None), "record_experts", None)
    hooks = []
    for layer in model.model.language_model.layers:
        indexer = getattr(layer.self_attn, "indexer", None)
        if sel is not None and indexer is not None:
            hooks.append(indexer.register_forward_hook(lambda m, args, out: sel(out.long())))
        router = getattr(layer.mlp, "gate", None)
        if exp is not None and router is not None:
            hooks.append(router.register_forward_hook(lambda m, args, out: exp(out[2].long())))
    return hooks


class Model:
    """model.forward: (logits float32 [B, S, V], HybridState), as impl.model.forward."""

    # every norm, mHC, the router, the KDA core and the indexer scores run in float32 (SPEC §2)
    PRECISION = {"forward": "float32"}

    @staticmethod
    def forward(weights, input_ids, state=None, attention_mask=None, backend=None):
        model = model_for(weights)
        ids = torch.as_tensor(input_ids, device=weights.embed_tokens.device).long()
        if state is not None and not isinstance(state, HybridState):
            state = HybridState.from_oracle(state, ids.device, weights.embed_tokens.dtype)
        cache = _seeded(model, state)
        kw = {} if attention_mask is None else {
            "attention_mask": torch.as_tensor(attention_mask, device=ids.device).long()}
        hooks = _reporting(model, backend)
        try:
            with torch.no_grad():
                out = model(input_ids=ids, past_key_values=cache, use_cache=True, **kw)
        finally:
            for h in hooks:
                h.remove()
        before = 0 if state is None else state.seq_len
        return out.logits.float(), _state(out.past_key_values, weights, before + ids.shape[1],
                                          weights.embed_tokens.dtype)
