"""impl.moe.gate_up: a dense MLP (and a shared expert) whose gate and up are the two halves of one buffer
is read by the grouped kernel without a copy, and computes the same bits as with gate and up apart;
impl.weights.to_torch lays every dense MLP and shared expert out that way."""
from __future__ import annotations

import dataclasses

import torch

from impl import moe
from impl.weights import fuse_gate_up, to_torch
from oracle.types import DenseMLPWeights, MoEWeights


def _mlp(F=48, D=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return DenseMLPWeights(*(0.1 * torch.randn(*s, generator=g) for s in ((F, D), (F, D), (D, F))), 7.0)


def test_fused_halves_are_read_in_place_and_give_the_same_bits():
    w = _mlp()
    fused = fuse_gate_up(w)
    assert torch.equal(fused.gate_proj, w.gate_proj) and torch.equal(fused.up_proj, w.up_proj)
    gu = moe.gate_up(fused)
    assert gu.data_ptr() == fused.gate_proj.data_ptr() and gu.shape == (96, 32)
    assert torch.equal(gu, torch.cat([w.gate_proj, w.up_proj]))
    x = torch.randn(2, 5, 32, generator=torch.Generator().manual_seed(1))
    assert torch.equal(moe.dense_mlp(fused, x), moe.dense_mlp(w, x))


def test_halves_of_other_buffers_are_concatenated():
    w = _mlp()
    both = torch.cat([w.up_proj, w.gate_proj])                    # adjacent, but up first: not gate then up
    swapped = dataclasses.replace(w, gate_proj=both[48:], up_proj=both[:48])
    gapped = torch.cat([w.gate_proj, torch.zeros(1, 32), w.up_proj])
    apart = dataclasses.replace(w, gate_proj=gapped[:48], up_proj=gapped[49:])
    for v in (w, swapped, apart):
        gu = moe.gate_up(v)
        assert gu.data_ptr() != v.gate_proj.data_ptr()
        assert torch.equal(gu, torch.cat([v.gate_proj, v.up_proj]))


def test_to_torch_fuses_every_dense_mlp_and_shared_expert(tmp_path):
    from oracle import checkpoint as ock
    from oracle.config import Geometry
    weights = to_torch(ock.load(ock.write_random(tmp_path, Geometry.preset("tiny"), 0)))
    seen = 0
    for lw in weights.layers:
        mlp = lw.mlp.shared if isinstance(lw.mlp, MoEWeights) else lw.mlp
        if mlp is None:
            continue
        assert moe.gate_up(mlp).data_ptr() == mlp.gate_proj.data_ptr(), f"layer {lw}: gate and up not fused"
        seen += 1
    assert seen == len(weights.layers)


def test_the_copying_peer_computes_our_bits():
    """impl.candidates.gate_up_copy (step 4's timed peer: the per-call concatenation) is bitwise ours, so
    the replay comparison times the copy and nothing else."""
    from impl.candidates.gate_up_copy import MOE
    fused = fuse_gate_up(_mlp())
    x = torch.randn(2, 5, 32, generator=torch.Generator().manual_seed(2))
    assert torch.equal(MOE.dense_mlp(fused, x), moe.dense_mlp(fused, x))
    assert MOE.forward.__module__ == "impl.candidates.gate_up_copy" and MOE.route is moe.route
