"""The weight declarations (oracle/fields.py, oracle/types.py) and what is derived from them: shape
strings, container validation, the checkpoint name table, the float32 fields of a bf16 model."""
from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
import torch

from oracle import checkpoint as ock
from oracle.checkpoint_names import LEAVES, expected_shapes, geometry_letters
from oracle.config import Geometry
from oracle.fields import dims, letters_in
from oracle.types import (CT, F32_WEIGHTS, MODELOPT, DenseMLPWeights, IndexerWeights, KDAWeights, LayerWeights,
                          MHCWeights, MLAWeights, MoEWeights, Weights, declared)

TINY = Geometry.preset("tiny")
CONTAINERS = (KDAWeights, MLAWeights, IndexerWeights, MHCWeights, DenseMLPWeights, MoEWeights, LayerWeights,
              Weights)


def test_shape_strings_evaluate_in_legend_letters():
    assert dims("[H·(d_n+d_v), r_kv]", {"H": 2, "d_n": 8, "d_v": 4, "r_kv": 16}) == (24, 16)
    assert dims("[N, K/16]", {"N": 3, "K": 64}) == (3, 4) and dims("[]", {}) == ()
    assert letters_in("[(2+N)·N, N·D]") == ("N", "D")
    with pytest.raises(ValueError, match="whole number"):
        dims("[K/16]", {"K": 20})
    with pytest.raises(ValueError, match="not letters"):
        dims("[H**2]", {"H": 2})


def test_every_declaration_uses_only_its_containers_letters():
    """A typo in a shape string would surface only on that container's first checkpoint: evaluate all."""
    for cls in CONTAINERS:
        letters = geometry_letters(cls, TINY)
        for f in declared(cls):
            assert set(letters_in(f.shape)) <= set(letters), f"{cls.__name__}.{f.name}: {f.shape}"
            dims(f.stored_shape, letters)


def test_float32_fields_are_kdas_conv_and_gate_parameters_and_the_routing_bias():
    assert F32_WEIGHTS == ("conv1d", "dt_bias", "A_log", "e_score_correction_bias")


def test_to_torch_keeps_exactly_the_declared_fields_float32(tmp_path):
    from impl.model import to_torch
    w = to_torch(ock.load(ock.write_random(tmp_path, TINY, 1)), "cpu", torch.bfloat16)
    kda = next(lw.kda for lw in w.layers if lw.kda is not None)
    f32 = {f.name for f in declared(KDAWeights) if getattr(kda, f.name).dtype == torch.float32}
    moe = next(lw.mlp for lw in w.layers if isinstance(lw.mlp, MoEWeights))
    f32 |= {f.name for f in declared(MoEWeights) if getattr(moe, f.name, None) is not None
            and getattr(moe, f.name).dtype == torch.float32}
    assert f32 == set(F32_WEIGHTS)
    assert w.layers[0].attn_hc.base.dtype == torch.bfloat16 and w.lm_head.dtype == torch.bfloat16


def test_target_weights_converts_any_container():
    from invariants.target import Target
    mla = MLAWeights(*(np.zeros(s) for s in ((16, 32), (16,), (16, 16), (16, 32), (16,), (32, 16), (32, 16))),
                     num_heads=2, nope_dim=8, v_dim=8)
    moved = Target(None, "cpu", torch.bfloat16).weights(mla)
    assert moved.q_b_proj.dtype == torch.bfloat16 and moved.o_bias is None and moved.num_heads == 2


def test_validate_names_the_field_its_declared_shape_and_letters():
    rng = np.random.default_rng(0)
    w = MHCWeights(rng.standard_normal((24, 128)), rng.standard_normal(24), rng.standard_normal(3))
    w.validate(32)
    with pytest.raises(ValueError, match=re.escape("MHCWeights.base: shape (23,), expected (24,) = [(2+N)·N]")):
        dataclasses.replace(w, base=np.zeros(23)).validate(32)


def test_name_table_renames_follow_the_declarations():
    disk, module = expected_shapes(TINY), expected_shapes(TINY, on_disk=False)
    g = TINY
    assert disk["layers.0.self_attn.A_log"] == module["layers.0.self_attn.forget_gate.A_log"] == (2,)
    assert disk["layers.0.self_attn.q_conv1d.weight"] == (g.kda_dim, 1, g.linear_conv_kernel_dim)
    assert "layers.1.self_attn.q_a_proj.bias" not in disk
    with_bias = expected_shapes(g.replace(attention_bias=True))
    assert with_bias["layers.1.self_attn.q_a_proj.bias"] == (g.q_lora_rank,)
    assert "lm_head.weight" not in expected_shapes(g.replace(tie_word_embeddings=True))


def test_nvfp4_layout_names_follow_the_leaf_declarations():
    assert (LEAVES[CT].packed, LEAVES[CT].global_scale) == ("weight_packed", "weight_global_scale")
    assert (LEAVES[MODELOPT].packed, LEAVES[MODELOPT].input_scale) == ("weight", "input_scale")
    assert "weight" not in LEAVES[MODELOPT].markers and "weight_scale" not in LEAVES[CT].markers
