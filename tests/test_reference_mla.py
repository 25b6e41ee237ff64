"""Cross-check of the float64 MLA + DSA/KPool oracle against the published reference (transformers
5.23.0 `Glm5NextTextAttention` with its indexer, SDPA, CPU, float64 parameters; indexer scores run in
float32 there by design): outputs, and the selections compared tie-aware, for a left-padded prefill
at pool-boundary and really-sparse lengths, a cached prefill + decode + continuation, and the
shared layer that reuses the full layer's selection.

Needs the `reference` extra (`pip install -e .[reference]`, which .ci/run installs).
"""
from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from invariants.compare import compare_selection
from invariants.contracts import assert_reference, lookup
from invariants.dsa_checks import token_pool
from oracle import mla as omla
from oracle.config import Geometry
from strategies import tensors as tz
from strategies.geometry import DSAGeometry

sys.modules.setdefault("fla", None)
pytest.importorskip("transformers", reason="the reference cross-check needs `pip install -e .[reference]`")
from transformers import DynamicCache  # noqa: E402
from transformers.models.glm5_next import modeling_glm5_next as ref  # noqa: E402
from transformers.models.glm5_next.configuration_glm5_next import Glm5NextTextConfig  # noqa: E402

TINY = Geometry.preset("tiny")
G = DSAGeometry.from_geometry(TINY)
FULL, SHARED = TINY.shared_indexer_layers[0] - 1, TINY.shared_indexer_layers[0]


def _layers(seed):
    cfg = Glm5NextTextConfig(**TINY.to_dict())
    cfg._attn_implementation = "sdpa"
    rng = np.random.default_rng(seed)
    iw, mw, mw2 = tz.indexer_weights(rng, G), tz.mla_weights(rng, G), tz.mla_weights(rng, G)
    full = ref.Glm5NextTextAttention(cfg, FULL).double()
    shared = ref.Glm5NextTextAttention(cfg, SHARED).double()
    for layer, m in ((full, mw), (shared, mw2)):
        sd = {"q_a_proj.weight": m.q_a_proj, "q_a_layernorm.weight": m.q_a_layernorm, "q_b_proj.weight": m.q_b_proj,
              "kv_a_proj_with_mqa.weight": m.kv_a_proj_with_mqa, "kv_a_layernorm.weight": m.kv_a_layernorm,
              "kv_b_proj.weight": m.kv_b_proj, "o_proj.weight": m.o_proj}
        if layer is full:
            sd.update({"indexer.wq_b.weight": iw.wq_b, "indexer.wk.weight": iw.wk,
                       "indexer.k_norm.weight": iw.k_norm_weight, "indexer.k_norm.bias": iw.k_norm_bias,
                       "indexer.weights_proj.weight": iw.weights_proj,
                       "indexer.index_kpool_compress_ape": iw.compress_ape,
                       "indexer.index_kpool_compress_gate": iw.compress_gate})
        layer.load_state_dict({k: torch.tensor(v) for k, v in sd.items()}, strict=True)
    return cfg, full, shared, iw, mw, mw2


def _run_ref(full, shared, cfg, a, mask, cache):
    with torch.no_grad():
        y1, _, idx = full(torch.tensor(a), attention_mask=torch.tensor(mask).bool(), past_key_values=cache)
        y2, _, _ = shared(torch.tensor(a), attention_mask=torch.tensor(mask).bool(), past_key_values=cache,
                          prev_topk_indices=idx)
    return y1.numpy(), y2.numpy(), idx.numpy()


@pytest.mark.parametrize("length", [3, 4, 5, 11, 12, 13, 23, 70])
def test_left_padded_prefill_and_selection_match_transformers(length):
    cfg, full, shared, iw, mw, mw2 = _layers(length)
    rng = np.random.default_rng(200 + length)
    a = rng.standard_normal((2, length, TINY.hidden_size))
    mask = np.ones((2, length))
    mask[1, :min(2, length - 1)] = 0.0
    y1_ref, y2_ref, idx_ref = _run_ref(full, shared, cfg, a, mask, DynamicCache(config=cfg))
    y1, cache, sel = omla.sublayer(mw, iw, a, None, mask)
    y2, _, _ = omla.sublayer(mw2, None, a, None, mask, prev=sel, kind="shared")
    assert_reference("mla", f"full layer S={length}", y1, y1_ref)
    assert_reference("mla", f"shared layer S={length}", y2, y2_ref)
    r = compare_selection(idx_ref, sel.indices, sel.scores, sel.candidate, sel.k_sel,
                          token_pool(cache.index_rows, iw), eps=lookup("dsa", "index", "selection", "selection").limit("float32"))
    assert r.ok, f"transformers' selection differs from the oracle's at query {r.first_bad}: {r.reason}"


def test_cached_prefill_decode_and_continuation_match_transformers():
    cfg, full, shared, iw, mw, mw2 = _layers(5)
    rng = np.random.default_rng(5)
    a = rng.standard_normal((2, 13 + 3 + 7, TINY.hidden_size))
    mask = np.ones(a.shape[:2])
    mask[0, :3] = 0.0
    cache = DynamicCache(config=cfg)
    outs = []
    # decode steps pass an all-ones mask for the new token (SPEC §3, §10): padding is remembered
    # through the cached valid flags
    for sl in [slice(0, 13), slice(13, 14), slice(14, 15), slice(15, 16), slice(16, 23)]:
        outs.append(_run_ref(full, shared, cfg, a[:, sl], mask[:, sl], cache)[:2])
    y1, _, sel = omla.sublayer(mw, iw, a, None, mask)
    y2, _, _ = omla.sublayer(mw2, None, a, None, mask, prev=sel, kind="shared")
    assert_reference("mla", "full layer, prefill 13 + 3 decode steps + 7-token continuation",
                   y1, np.concatenate([o[0] for o in outs], axis=1))
    assert_reference("mla", "shared layer over the same calls", y2, np.concatenate([o[1] for o in outs], axis=1))
