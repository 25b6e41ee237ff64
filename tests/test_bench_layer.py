"""The layer benchmark's staged layer (gate/bench_layer.py) is the layer it claims to time.

Its stage shares are only meaningful if `staged_layer` computes exactly what impl.model.decoder_layer
computes: same outputs and caches for every layer kind, for a prefill and for a decode step after it,
with bf16-free float32 weights on the CPU (Triton interpreter) and NVFP4 routed experts.
"""
from __future__ import annotations

import pytest
import torch

from gate import bench_layer as bl
from impl.model import decoder_layer
from oracle.config import Geometry

G = Geometry.preset("tiny")
KINDS = bl._kinds(G)


def _same(a, b, what):
    if a is None or b is None:
        assert a is None and b is None, what
        return
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor):
            assert torch.equal(x, y), what


@pytest.mark.parametrize("kind", sorted(KINDS), ids=str)
def test_staged_layer_equals_decoder_layer(kind):
    i = KINDS[kind]
    lw = bl.random_layer(G, i, "cpu", torch.float32, nvfp4=True)
    assert lw.mlp.__class__.__name__ == "DenseMLPWeights" or lw.mlp.nvfp4 is not None
    gen = torch.Generator().manual_seed(i)
    X = torch.randn(2, 9, G.hc_mult, G.hidden_size, generator=gen)
    mask = torch.ones(2, 9, dtype=torch.bool)
    full = bl.random_layer(G, i - 1, "cpu", torch.float32) if lw.indexer_type == "shared" else None
    prev, pcache = bl.handoff(full, G, X, mask, None)
    got, cache, sel = bl.staged_layer(lw, G, X, mask, None, prev)
    want, cache_w, _ = decoder_layer(lw, G, X, mask, None, prev)
    assert torch.equal(got, want), f"{kind}: staged prefill output differs from decoder_layer"
    _same(cache, cache_w, f"{kind}: prefill cache")
    x1 = torch.randn(2, 1, G.hc_mult, G.hidden_size, generator=gen)
    m1 = torch.ones(2, 1, dtype=torch.bool)
    prev, _ = bl.handoff(full, G, x1, m1, pcache)
    got, c1, _ = bl.staged_layer(lw, G, x1, m1, cache, prev)
    want, c1w, _ = decoder_layer(lw, G, x1, m1, cache_w, prev)
    assert torch.equal(got, want), f"{kind}: staged decode output differs from decoder_layer"
    _same(c1, c1w, f"{kind}: decode cache")


def test_kinds_cover_every_layer_kind_of_the_schedule():
    g = Geometry.preset("full")
    kinds = bl._kinds(g)
    assert set(kinds) == {"kda+dense", "kda+sparse", "dsa-full+sparse"}
    assert "dsa-shared+sparse" in bl._kinds(G)            # tiny has a shared layer: its test row runs
    for kind, i in kinds.items():
        att = "kda" if g.layer_types[i] == "linear_attention" else f"dsa-{g.indexer_types[i]}"
        assert kind == f"{att}+{g.mlp_layer_types[i]}"
