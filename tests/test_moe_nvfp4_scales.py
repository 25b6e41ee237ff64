"""Per-half global scales of the fused NVFP4 gate_up and 128x4-swizzled block scales, through the MoE
Triton kernels (impl/moe.py, impl/kernels/moe.py), the plain-torch dequantization (impl/baseline/nvfp4.py)
and the oracle (oracle/nvfp4.py), in the interpreter (float32).

Real checkpoints give gate_proj and up_proj of an expert different global scales (up to 10x apart on a
published GLM-5.3-Flash checkpoint); a fused kernel taking the gate's for both halves misscales up.
Swizzled scales are the same bytes permuted: the kernel must give the linear layout's bits exactly.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from impl import moe as imoe
from impl import nvfp4 as inv
from impl.baseline import nvfp4 as bnv
from invariants.nvfp4_checks import unequal_halves
from oracle import moe as omoe
from oracle import nvfp4 as onv
from oracle.types import NVFP4Experts, NVFP4ExpertWeights, NVFP4Tensor
from strategies.tensors import moe_weights
from tests.test_moe_kernels import routing_of, t32, within


def _layer(seed: int, **dims):
    """(float64 MoE weights with gate/up amax up to 10x apart per expert, x [9, D], oracle routing)."""
    rng = np.random.default_rng(seed)
    w = unequal_halves(moe_weights(rng, **dims), rng)
    x = rng.normal(size=(9, w.router.shape[-1]))
    return w, x, omoe.route(w, x)


def _run(w, x, r, nv, w4a4=False):
    return imoe.experts(w.map(t32), t32(x), routing_of(r), nvfp4=inv.experts_to(nv), w4a4=w4a4)


@pytest.mark.parametrize("w4a4", [False, True])
def test_per_half_global_scales_match_the_oracle(w4a4):
    """global_decode [E, 2]: the kernel against the oracle's exact per-half dequantization (W4A16), and
    with W4A4's per-half alpha g_half / G_x."""
    w, x, r = _layer(11)
    nv = onv.quantize_experts(w.gate_up_proj, w.down_proj)
    g = nv.gate_up.global_decode
    assert g.shape == (8, 2) and np.max(np.maximum(g[:, 0] / g[:, 1], g[:, 1] / g[:, 0])) > 3
    if w4a4:
        nv = onv.with_input_scales(nv, np.full(8, 300.0), np.full(8, 40.0))
    want = omoe.experts(w, x, r, nvfp4=nv, w4a4=w4a4)
    within("nvfp4", "experts", "output", _run(w, x, r, nv, w4a4), want)
    # the oracle's reference is itself per half: the halves dequantized apart, each by its own scale
    gu, _ = onv.dequantize_experts(nv)
    I = w.expert_dim
    for e in (0, 5):
        for h, rows in enumerate((slice(0, I), slice(I, 2 * I))):
            half = onv.quantize(w.gate_up_proj[e, rows])
            assert np.array_equal(gu[e, rows], onv.dequantize(half)) and half.global_decode == g[e, h]


def test_gate_scale_for_both_halves_is_visible():
    """Collapsing [E, 2] to the gate's value (vLLM #54974) moves the output far outside the contract:
    the property the per-half path holds is not vacuous at these ratios."""
    w, x, r = _layer(12)
    nv = onv.quantize_experts(w.gate_up_proj, w.down_proj)
    bad = nv._replace(gate_up=nv.gate_up._replace(global_decode=np.ascontiguousarray(nv.gate_up.global_decode[:, 0])))
    want = omoe.experts(w, x, r, nvfp4=nv)
    with pytest.raises(AssertionError):
        within("nvfp4", "experts", "output", _run(w, x, r, bad), want)


def test_a_shared_scale_given_once_or_twice_gives_the_same_bits():
    """global_decode [E] and the [E, 2] pair of equal columns are the same weights: identical outputs."""
    w, x, r = _layer(13)
    nv = onv.quantize_experts(w.gate_up_proj, w.down_proj)
    one = nv._replace(gate_up=nv.gate_up._replace(global_decode=np.ascontiguousarray(nv.gate_up.global_decode[:, 1])))
    two = one._replace(gate_up=one.gate_up._replace(global_decode=np.repeat(one.gate_up.global_decode[:, None], 2, 1)))
    assert torch.equal(_run(w, x, r, one), _run(w, x, r, two))


def test_swizzled_scales_give_the_linear_layouts_bits():
    """Several 128x4 tiles per expert (2I = 160 rows, D/16 = I/16 = 5 scale columns, padded to 8): the
    kernel reading swizzled scales returns exactly what it returns from the linear ones (W4A16; W4A4
    loads its weight tiles by the same code), and the baseline and oracle dequantizations agree bit for bit."""
    w, x, r = _layer(14, experts=4, n_group=1, width=80, hidden=80, gain=2.0)
    nv = onv.quantize_experts(w.gate_up_proj, w.down_proj)
    sw = onv.swizzle_experts(nv)
    assert sw.gate_up.block_scale.shape == (4, 256, 8) and sw.down.block_scale.shape == (4, 128, 8)
    assert sw.gate_up.scale_layout == sw.down.scale_layout == "swizzled"
    assert torch.equal(_run(w, x, r, sw), _run(w, x, r, nv))
    gu, dn = onv.dequantize_experts(sw)
    assert np.array_equal(gu, onv.dequantize_experts(nv)[0]) and np.array_equal(dn, onv.dequantize_experts(nv)[1])
    t = inv.experts_to(sw)
    assert np.array_equal(bnv.dequantize(t.gate_up).numpy(), gu.astype(np.float32))
    assert np.array_equal(bnv.dequantize(t.down).numpy(), dn.astype(np.float32))
    # the torch swizzle of stacked experts is the oracle's, byte for byte
    mine = bnv.swizzle_experts(inv.experts_to(nv))
    assert np.array_equal(mine.gate_up.block_scale.view(torch.uint8).numpy(), sw.gate_up.block_scale.view(np.uint8))


def _stacked(ws) -> NVFP4Tensor:
    """One checkpoint module per expert (oracle.nvfp4.quantize), stacked: global_decode [E]."""
    qs = [onv.quantize(a) for a in ws]
    return NVFP4Tensor(np.stack([q.packed for q in qs]), np.stack([q.block_scale for q in qs]),
                       np.array([q.global_decode for q in qs], np.float32))


def test_checkpoint_halves_fuse_with_both_scales():
    """NVFP4ExpertWeights.gate_up(): gate then up rows, global_decode [E, 2] = (gate's, up's); unequal
    INPUT scales are refused because the fused GEMM quantizes x once."""
    rng = np.random.default_rng(15)
    gate, up, down = (_stacked(rng.normal(size=shape) * s) for shape, s in
                      (((3, 16, 32), 1.0), ((3, 16, 32), 7.0), ((3, 32, 16), 1.0)))
    fused = NVFP4ExpertWeights(gate, up, down, "modelopt").gate_up()
    assert np.array_equal(fused.global_decode, np.stack([gate.global_decode, up.global_decode], -1))
    assert (fused.global_decode[:, 1] > 3 * fused.global_decode[:, 0]).all()
    assert np.array_equal(fused.packed[:, 16:], up.packed) and np.array_equal(fused.packed[:, :16], gate.packed)
    gu, _ = onv.dequantize_experts(NVFP4Experts(fused, down))
    assert np.array_equal(gu[2, 16:], onv.dequantize(onv.expert_tensor(up, 2)))
    with_in = NVFP4ExpertWeights(gate._replace(input_global_scale=np.full(3, 2.0, np.float32)),
                                 up._replace(input_global_scale=np.full(3, 4.0, np.float32)), down, "modelopt")
    with pytest.raises(ValueError, match="quantizes x ONCE"):
        with_in.gate_up()


@pytest.mark.parametrize("bad, match", [
    (np.nan, r"nvfp4\.gate_up\.global_decode: .*expert 1 \(up half\)"),
    (0.0, r"nvfp4\.gate_up\.global_decode: .*expert 1 \(up half\)"),
])
def test_a_bad_up_half_scale_is_refused(bad, match):
    w, x, r = _layer(16)
    nv = onv.quantize_experts(w.gate_up_proj, w.down_proj)
    g = nv.gate_up.global_decode.copy()
    g[1, 1] = bad
    with pytest.raises(ValueError, match=match):
        _run(w, x, r, nv._replace(gate_up=nv.gate_up._replace(global_decode=g)))
    with pytest.raises(ValueError, match="up half"):
        onv.dequantize_experts(nv._replace(gate_up=nv.gate_up._replace(global_decode=g)))
