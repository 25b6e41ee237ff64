"""Cross-check of the float64 KDA oracle against the published reference (transformers 5.23.0,
`Glm5NextTextLinearAttention`, CPU, float64 parameters; its KDA core runs in float32 by design, SPEC
§2/§14), on the same random non-trivial weights: one prefill with left padding, and a cached prefill
followed by single-token decode steps and a multi-token continuation (the §10 cache protocol).

Needs the `reference` extra (`pip install -e .[reference]`, which .ci/run installs).
"""
from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from invariants.contracts import assert_reference
from oracle import kda as okda
from oracle.config import Geometry
from oracle.types import KDAState
from strategies import tensors as tz

# transformers prefers fla's Triton chunk_kda when fla is importable, and that crashes on CPU (SPEC §14)
sys.modules.setdefault("fla", None)
transformers = pytest.importorskip("transformers", reason="the reference cross-check needs `pip install -e .[reference]`")
from transformers import DynamicCache  # noqa: E402
from transformers.models.glm5_next import modeling_glm5_next as ref  # noqa: E402
from transformers.models.glm5_next.configuration_glm5_next import Glm5NextTextConfig  # noqa: E402

TINY = Geometry.preset("tiny")


def _layer(seed):
    cfg = Glm5NextTextConfig(**TINY.to_dict())
    layer = ref.Glm5NextTextLinearAttention(cfg, TINY.kda_layers[0]).double()
    w = tz.kda_weights(np.random.default_rng(seed), TINY.linear_num_heads, TINY.linear_head_dim,
                       TINY.hidden_size, TINY.linear_conv_kernel_dim)
    names = {"q_proj.weight": w.q_proj, "k_proj.weight": w.k_proj, "v_proj.weight": w.v_proj,
             "conv1d.weight": w.conv1d[:, None, :], "forget_gate.f_a_proj.weight": w.f_a_proj,
             "forget_gate.f_b_proj.weight": w.f_b_proj, "forget_gate.dt_bias": w.dt_bias,
             "forget_gate.A_log": w.A_log, "b_proj.weight": w.b_proj, "g_a_proj.weight": w.g_a_proj,
             "g_b_proj.weight": w.g_b_proj, "o_norm.weight": w.o_norm, "o_proj.weight": w.o_proj}
    layer.load_state_dict({k: torch.tensor(v) for k, v in names.items()}, strict=True)
    return cfg, layer, w


@pytest.mark.parametrize("length", [1, 5, 63, 64, 65, 70])
def test_prefill_with_left_padding_matches_transformers(length):
    _, layer, w = _layer(length)
    rng = np.random.default_rng(100 + length)
    x = rng.standard_normal((2, length, TINY.hidden_size))
    mask = np.ones((2, length))
    mask[1, :min(3, length - 1)] = 0.0
    with torch.no_grad():
        y_ref = layer(torch.tensor(x), attention_mask=torch.tensor(mask).long()).numpy()
    y, _ = okda.sublayer(w, x, None, mask)
    assert_reference("kda", f"prefill S={length}", y, y_ref)


def test_cached_prefill_decode_and_continuation_match_transformers():
    cfg, layer, w = _layer(7)
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 13 + 4 + 9, TINY.hidden_size))
    cache = DynamicCache(config=cfg)
    outs = []
    with torch.no_grad():
        outs.append(layer(torch.tensor(x[:, :13]), cache_params=cache).numpy())
        for t in range(13, 17):
            outs.append(layer(torch.tensor(x[:, t:t + 1]), cache_params=cache).numpy())
        outs.append(layer(torch.tensor(x[:, 17:]), cache_params=cache).numpy())
    li = TINY.kda_layers[0]
    ref_state = KDAState(cache.layers[li].recurrent_states[0].numpy(), cache.layers[li].conv_states[0].numpy())
    y, state = okda.sublayer(w, x)
    assert_reference("kda", "prefill 13 + 4 decode steps + 9-token continuation", y, np.concatenate(outs, axis=1))
    assert_reference("kda", "recurrent state after the stream", state.recurrent, ref_state.recurrent)
    assert_reference("kda", "conv window after the stream", state.conv, ref_state.conv)
