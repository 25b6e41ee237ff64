"""The checkpoint name table (SPEC §11), derived from the containers' field declarations (oracle/types.py).

Every tensor the config implies, relative to the text prefix (`lm_head.weight` is top level), in two
forms: the names transformers' save_pretrained writes (hc_attn_fn, per-expert weights, q/k/v_conv1d,
self_attn.A_log, ...) and the module names (attn_hc.fn, experts.gate_up_proj, conv1d.weight,
forget_gate.A_log, ...). `layer` groups module-named arrays back into the containers; the NVFP4
expert leaves of both layouts (NVFP4.md A5) are named here too.

Letters: those of each container's section in oracle/types.py, bound to the geometry in `_LETTERS`.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Callable, Optional

import numpy as np

from oracle.config import DENSE, FULL, LINEAR, Geometry
from oracle.fields import Field, Parts, declared, dims, legend, letters_in, parts
from oracle.types import (CT, MODELOPT, NVFP4_LEAVES, DenseMLPWeights, IndexerWeights, KDAWeights, LayerWeights,
                          MHCWeights, MLAWeights, MoEWeights, NVFP4ExpertWeights, Weights)

# each container's legend letters from the geometry
_LETTERS: dict[type, Callable[[Geometry], dict]] = {
    KDAWeights: lambda g: {"H": g.linear_num_heads, "K": g.linear_head_dim, "V": g.linear_head_dim,
                           "C": g.conv_dim, "W": g.linear_conv_kernel_dim, "D": g.hidden_size},
    MLAWeights: lambda g: {"H": g.num_attention_heads, "d_n": g.qk_nope_head_dim, "d_v": g.v_head_dim,
                           "r_q": g.q_lora_rank, "r_kv": g.kv_lora_rank, "D": g.hidden_size},
    IndexerWeights: lambda g: {"H_i": g.index_n_heads, "d_i": g.index_head_dim, "P_k": g.index_kpool,
                               "r_q": g.q_lora_rank, "D": g.hidden_size},
    MHCWeights: lambda g: {"N": g.hc_mult, "D": g.hidden_size},
    DenseMLPWeights: lambda g: {"F": g.intermediate_size, "D": g.hidden_size},
    MoEWeights: lambda g: {"E": g.n_routed_experts, "I": g.moe_intermediate_size,
                           "F": g.shared_intermediate_size, "D": g.hidden_size},
    LayerWeights: lambda g: {"D": g.hidden_size},
    Weights: lambda g: {"V": g.vocab_size, "D": g.hidden_size},
}

# each container's non-array fields from the geometry
_SCALARS: dict[type, Callable[[Geometry], dict]] = {
    KDAWeights: lambda g: {"lower_bound": g.linear_lower_bound, "eps": g.rms_norm_eps},
    MLAWeights: lambda g: {"num_heads": g.num_attention_heads, "nope_dim": g.qk_nope_head_dim,
                           "v_dim": g.v_head_dim, "eps": g.rms_norm_eps},
    IndexerWeights: lambda g: {"n_heads": g.index_n_heads, "head_dim": g.index_head_dim, "topk": g.index_topk,
                               "kpool": g.index_kpool, "always_select_tail": g.index_kpool_always_select_tail},
    MHCWeights: lambda g: {"hc_mult": g.hc_mult, "sinkhorn_iters": g.hc_sinkhorn_iters, "hc_eps": g.hc_eps,
                           "rms_eps": g.rms_norm_eps},
    DenseMLPWeights: lambda g: {"swiglu_limit": g.swiglu_limit},
    MoEWeights: lambda g: {"top_k": g.num_experts_per_tok, "n_group": g.n_group, "topk_group": g.topk_group,
                           "norm_topk_prob": g.norm_topk_prob, "routed_scaling_factor": g.routed_scaling_factor,
                           "swiglu_limit": g.swiglu_limit},
}


# ----------------------------------------------------------------------------- the table


@dataclasses.dataclass(frozen=True)
class Stored:
    """One tensor as a checkpoint stores it."""

    rel: str              # name relative to the text prefix ("lm_head.weight" is top level)
    shape: tuple
    formula: str          # the declared shape and its letters' values, for error messages
    init: str             # how write_random draws it (oracle.fields FAN_IN, NORM, INERT, EMBED)


@dataclasses.dataclass(frozen=True)
class Entry:
    """One module tensor: its alternative stored forms (first = as transformers saves it, last = the module
    name), each the tensors it is read from and how they join into the module tensor."""

    name: str
    forms: tuple[tuple[tuple[Stored, ...], Callable[[list], np.ndarray]], ...]


def _one(arrays):
    return arrays[0]


def _joiner(k: int, per_expert: bool) -> Callable[[list], np.ndarray]:
    """Concatenate along axis 0, per expert then stacked when the parts repeat per expert (k each)."""
    if not per_expert:
        return lambda arrays: np.concatenate(arrays, axis=0)
    return lambda arrays: np.stack([np.concatenate(arrays[k * e:k * e + k], axis=0)
                                    for e in range(len(arrays) // k)])


def geometry_letters(cls, g: Geometry) -> dict:
    """Container class `cls`'s legend letters bound to the geometry's sizes."""
    return _LETTERS[cls](g)


def _stored(rel: str, shape: str, letters: dict, init: str) -> Stored:
    return Stored(rel, dims(shape, letters), f"{shape} ({legend(letters, letters_in(shape))})", init)


def _entry(f: Field, letters: dict, module_prefix: str, disk_prefix: str) -> Entry:
    """The table entry of one declared field under its container's prefixes."""
    module = module_prefix + f.module_name
    whole = _stored(module, f.stored_shape, letters, f.init)
    module_form = ((whole,), _one)
    if isinstance(f.disk, Parts):
        experts = range(letters["E"]) if f.disk.per_expert else (None,)
        split = tuple(_stored(disk_prefix + n.format(e=e), f.disk.shape, letters, f.init)
                      for e in experts for n in f.disk.names)
        return Entry(module, ((split, _joiner(len(f.disk.names), f.disk.per_expert)), module_form))
    disk = disk_prefix + f.disk
    if disk == module:
        return Entry(module, (module_form,))
    return Entry(module, (((dataclasses.replace(whole, rel=disk),), _one), module_form))


def _container(cls, g: Geometry, module_prefix: str, disk_prefix: str) -> list[Entry]:
    letters = geometry_letters(cls, g)
    return [_entry(f, letters, module_prefix, disk_prefix) for f in declared(cls)
            if f.when is None or getattr(g, f.when)]


def layer_parts(g: Geometry, i: int) -> dict[str, Optional[type]]:
    """LayerWeights' sub-container classes at layer i, by field (None: absent), from the schedules (SPEC §1)."""
    linear = g.layer_types[i] == LINEAR
    return {"attn_hc": MHCWeights, "ffn_hc": MHCWeights, "kda": KDAWeights if linear else None,
            "mla": None if linear else MLAWeights,
            "indexer": IndexerWeights if not linear and g.indexer_types[i] == FULL else None,
            "mlp": DenseMLPWeights if g.mlp_layer_types[i] == DENSE else MoEWeights}


def _layer_prefix(i: int) -> str:
    (layers,) = parts(Weights)
    return layers.module.format(i=i)


def entries(g: Geometry) -> list[Entry]:
    """Every module tensor the config implies, in checkpoint order (a tied lm_head is embed_tokens)."""
    top = _container(Weights, g, "", "")
    out = [e for e in top if not (g.tie_word_embeddings and e.name == "lm_head.weight")]
    for i in range(g.num_hidden_layers):
        p = _layer_prefix(i)
        out += _container(LayerWeights, g, p, p)
        kinds = layer_parts(g, i)
        for pt in parts(LayerWeights):
            if kinds[pt.name] is not None:
                out += _container(kinds[pt.name], g, p + pt.module, p + pt.disk)
    return out


def stored_tensors(geometry: Geometry, on_disk: bool = True) -> list[Stored]:
    """The tensors of `entries` in one form: on_disk as transformers writes them, else the module names."""
    return [s for e in entries(geometry) for s in (e.forms[0] if on_disk else e.forms[-1])[0]]


def expected_shapes(geometry: Geometry, on_disk: bool = True) -> dict[str, tuple]:
    """Every tensor the config implies, relative to the text prefix (`lm_head.weight` is top level).

    on_disk=True: the names transformers' save_pretrained writes (hc_attn_fn, per-expert weights,
    q/k/v_conv1d, self_attn.A_log, ...); False: the module names (attn_hc.fn, gate_up_proj, ...).
    """
    return {s.rel: s.shape for s in stored_tensors(geometry, on_disk)}


def ignored(rel: str, g: Geometry) -> bool:
    """The MTP layer and shared_head tensors (relative to the text prefix), which the oracle skips."""
    return re.match(rf"^layers\.{g.num_hidden_layers}\.|^layers\.\d+\.shared_head\.", rel) is not None


# ----------------------------------------------------------------------------- module names -> containers


def _unit_axis_dropped(a, axis: int):
    return a[(slice(None),) * axis + (0,)]


def _build(cls, g: Geometry, named: dict, prefix: str, **extra):
    """A container from module-named arrays under `prefix` and the geometry's scalars."""
    arrays = {}
    for f in declared(cls):
        a = named.get(prefix + f.module_name) if f.optional else named[prefix + f.module_name]
        arrays[f.name] = a if a is None or f.squeeze is None else _unit_axis_dropped(a, f.squeeze)
    return cls(**arrays, **_SCALARS.get(cls, lambda g: {})(g), **extra)


def layer(g: Geometry, named: dict, i: int, nvfp4: Optional[NVFP4ExpertWeights] = None) -> LayerWeights:
    """LayerWeights of layer i from module-named arrays (NumPy or torch), attention and MLP validated.

    nvfp4: the layer's NVFP4 routed experts (MoEWeights.nvfp4), if any.
    """
    p = _layer_prefix(i)
    kinds = layer_parts(g, i)
    subs = {}
    for pt in parts(LayerWeights):
        cls = kinds[pt.name]
        extra = {"nvfp4": nvfp4} if cls is MoEWeights else {}
        subs[pt.name] = None if cls is None else _build(cls, g, named, p + pt.module, **extra)
    for name in ("kda", "mla", "indexer", "mlp"):
        if subs[name] is not None:
            subs[name].validate(g.hidden_size, *((g.q_lora_rank,) if name == "indexer" else ()))
    return _build(LayerWeights, g, named, p, index=i, attention=g.layer_types[i],
                  indexer_type=g.indexer_types[i], **subs)


def model(g: Geometry, named: dict, nvfp4: Optional[dict[int, NVFP4ExpertWeights]] = None) -> Weights:
    """Weights from module-named arrays (lm_head.weight included, tied or not); nvfp4: {sparse layer:
    its NVFP4 routed experts}."""
    nvfp4 = nvfp4 or {}
    layers = tuple(layer(g, named, i, nvfp4.get(i)) for i in range(g.num_hidden_layers))
    return _build(Weights, g, named, "", geometry=g, layers=layers)


# ----------------------------------------------------------------------------- NVFP4 experts (NVFP4.md A5)

NVFP4_LAYOUTS = (CT, MODELOPT)
ROUTED = re.compile(r"^layers\.(\d+)\.mlp\.experts\.(\d+)\.(gate|up|down)_proj\.(\w+)$")


@dataclasses.dataclass(frozen=True)
class Leaves:
    """One layout's tensor names under `<module>.` (from oracle.types.NVFP4_LEAVES) and global-scale shape."""

    packed: str
    scale: str
    global_scale: str
    input_scale: str
    global_shape: tuple        # as the tool writes it; both () and (1,) are read
    markers: tuple             # leaves only this layout has (weight_scale and weight are shared / plain)


def _leaves(layout: str, global_shape: tuple) -> Leaves:
    names = [leaf.names[layout] for leaf in NVFP4_LEAVES.values()]
    others = {leaf.names[o] for leaf in NVFP4_LEAVES.values() for o in leaf.names if o != layout}
    # `weight` marks nothing: an unquantized module has it too
    return Leaves(*names, global_shape, tuple(n for n in names if n not in others | {"weight"}))


LEAVES = {CT: _leaves(CT, (1,)), MODELOPT: _leaves(MODELOPT, ())}
# every leaf name of a quantized module but the plain `.weight`
NVFP4_SUFFIXES = tuple(sorted({"." + n for v in LEAVES.values()
                               for n in (v.packed, v.scale, v.global_scale, v.input_scale)} - {".weight"}))


def expert_shapes(g: Geometry) -> dict[str, tuple[int, int]]:
    """(N, K) of each routed expert projection as stored per expert, {"gate": (I, D), "up": (I, D),
    "down": (D, I)}, from the MoEWeights declarations."""
    letters = geometry_letters(MoEWeights, g)
    return {n.split(".")[-2].removesuffix("_proj"): dims(f.disk.shape, letters)
            for f in declared(MoEWeights) if isinstance(f.disk, Parts) for n in f.disk.names}
