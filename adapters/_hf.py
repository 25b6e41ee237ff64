"""Shared plumbing of the transformers adapter (adapters/transformers_glm5.py): importing transformers
the way SPEC §14 says it must be on a CPU machine, building a `Glm5NextTextConfig` whose every
dimension comes from our containers, and loading our containers into transformers' modules.

Nothing here computes the decoder's math: it converts names, shapes and dtypes only.
"""
from __future__ import annotations

import functools
from typing import Optional

import torch

from oracle.config import Geometry
from oracle.fields import declared
from oracle.types import IndexerWeights, KDAWeights, MLAWeights, MoEWeights

# The layer schedule of the configs built here (which index is a KDA layer, a full DSA layer followed by
# a shared one): the tiny preset's. Only the schedule is taken from it; every size is overridden from
# the containers handed to the adapter, so a module never runs with a size the caller did not give.
SCHEDULE = Geometry.preset("tiny")
KDA_LAYER = SCHEDULE.kda_layers[0]
SHARED_LAYER = SCHEDULE.shared_indexer_layers[0]
FULL_LAYER = SHARED_LAYER - 1      # a full layer whose next layer is shared: it hands its top-k on


def modeling():
    """transformers' glm5_next modeling module, with fla hidden first (SPEC §14: fla's Triton kernels
    crash on a CPU-only machine; transformers then runs its own torch KDA)."""
    from invariants.reference import classes
    classes()
    from transformers.models.glm5_next import modeling_glm5_next
    return modeling_glm5_next


def _config_class():
    from transformers.models.glm5_next.configuration_glm5_next import Glm5NextTextConfig
    modeling()
    return Glm5NextTextConfig


@functools.lru_cache(maxsize=64)
def _config(items: tuple):
    # the cache key holds tuples (hashable); the config's strict fields want lists
    cfg = _config_class()(**{k: list(v) if isinstance(v, tuple) else v for k, v in items})
    # SDPA: eager attention in float64 with padding gives NaN (SPEC §12 pitfall 20, §14); eager experts:
    # the grouped matmul rejects float64 on CPU (SPEC §14)
    cfg._attn_implementation = "sdpa"
    cfg._experts_implementation = "eager"
    return cfg


def config(**sizes):
    """A Glm5NextTextConfig: the schedule above, then `sizes` (taken from the containers) on top."""
    base = SCHEDULE.to_dict()
    base.update(sizes)
    return _config(tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in base.items())))


def kda_sizes(w: KDAWeights) -> dict:
    return dict(hidden_size=int(w.q_proj.shape[1]), linear_num_heads=w.num_heads, linear_head_dim=w.head_dim,
                linear_conv_kernel_dim=w.conv_width, linear_lower_bound=w.lower_bound, rms_norm_eps=w.eps)


def mla_sizes(w: MLAWeights, iw: Optional[IndexerWeights]) -> dict:
    """The attention sizes of `w` and, on a full layer, the indexer's (a shared layer has none: the
    indexer sizes then stay the schedule's, which a shared layer never reads)."""
    s = dict(hidden_size=int(w.q_a_proj.shape[1]), num_attention_heads=w.num_heads, num_key_value_heads=w.num_heads,
             q_lora_rank=w.q_rank, kv_lora_rank=w.kv_rank, qk_nope_head_dim=w.nope_dim, qk_rope_head_dim=0,
             v_head_dim=w.v_dim, attention_bias=w.q_a_bias is not None, rms_norm_eps=w.eps)
    if iw is not None:
        s.update(index_sizes(iw))
    return s


def index_sizes(iw: IndexerWeights) -> dict:
    return dict(index_n_heads=iw.n_heads, index_head_dim=iw.head_dim, index_topk=iw.topk, index_kpool=iw.kpool,
                index_kpool_always_select_tail=iw.always_select_tail)


def moe_sizes(w: MoEWeights) -> dict:
    F = 0 if w.shared_gate_proj is None else int(w.shared_gate_proj.shape[0])
    I = w.expert_dim
    if F % I:
        raise ValueError(f"MoEWeights: shared width {F} is not a multiple of the expert width {I}: "
                         f"transformers' Glm5NextTextMoE sizes its shared expert as n_shared_experts x I")
    return dict(hidden_size=int(w.router.shape[1]), n_routed_experts=w.num_experts, num_experts_per_tok=w.top_k,
                moe_intermediate_size=I, n_shared_experts=F // I, n_group=w.n_group, topk_group=w.topk_group,
                norm_topk_prob=w.norm_topk_prob, routed_scaling_factor=w.routed_scaling_factor,
                swiglu_limit=w.swiglu_limit)


def named(container, prefix: str = "") -> dict:
    """{transformers module parameter name: tensor} of one of our containers (the names of SPEC §11, as
    declared on the container's fields in oracle/types.py); absent optional fields are left out."""
    out = {}
    for f in declared(type(container)):
        a = getattr(container, f.name)
        if a is None:
            continue
        # conv1d: the module keeps the depthwise conv's unit axis the container drops
        out[prefix + f.module_name] = a if f.squeeze is None else a.unsqueeze(f.squeeze)
    return out


def loaded(module: torch.nn.Module, tensors: dict, dtype: torch.dtype, device) -> torch.nn.Module:
    """`module` in `dtype` on `device` holding exactly `tensors` (strict: a parameter we did not set, or
    a tensor it has no place for, is an error, never a silently initialised weight)."""
    module = module.to(device=device, dtype=dtype)
    with torch.no_grad():
        module.load_state_dict({k: v.detach() for k, v in tensors.items()}, strict=True)
    return module.eval()


def build(cls_name: str, cfg, *args) -> torch.nn.Module:
    """A fresh instance of transformers' glm5_next class `cls_name` (its parameters are then replaced)."""
    return getattr(modeling(), cls_name)(cfg, *args)


