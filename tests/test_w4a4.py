"""The NVFP4 W4A4 emulation path (NVFP4.md A6) of the MoE kernels against the float64 oracle, CPU interpreter.

Exact: the activation quantization itself. impl.nvfp4.qdq_activation runs the GEMMs' prologue
(_nvfp4_qdq_tile) alone and must equal oracle.nvfp4.qdq_activation cast to float32 BIT FOR BIT (codes,
fp8 block scales, ties, zero blocks, fp8-subnormal scales, the 448 clamp, ±6 saturation). Not exact:
the GEMM outputs (float32 accumulation vs float64), and h's quantization, whose input h differs from
the oracle's by float32 rounding (a code can flip at a rounding boundary): bounded by rel error here and
by the KL gate in tests/test_quant_gate.py.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from impl import moe as imoe
from impl import nvfp4 as inv
from invariants.contracts import assert_contract, lookup
from oracle import moe as omoe
from oracle import nvfp4 as onv
from oracle.types import Routing
from strategies.tensors import moe_weights

W4A4 = ("nvfp4", "experts_w4a4", "output", "kernel_unit")
TOL = lookup(*W4A4).limit("float32")


def t32(a):
    return None if a is None else torch.from_numpy(np.array(a, dtype=np.float64)).float()


def qdq_inputs(seed: int):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(37, 64)) * np.exp(rng.uniform(-6, 6, (37, 1)))
    x[3, :16] = 0.0                                       # an all-zero block
    x[5] *= 1e-9                                          # blocks whose scale underflows to 0 or fp8 subnormals
    # exact E2M1 ties: with G = 448 and a block amax of 6 the scale is 448 and v = x exactly
    x[7, :16] = np.array([6.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0] * 2) / 448 * 448
    return x


@pytest.mark.parametrize("G", [1.0, 448.0, 1e-3, 0.37, 2.5e4, "dynamic"])
def test_qdq_activation_is_bit_exact(G):
    x = qdq_inputs(0)
    if G == "dynamic":
        G = onv.dynamic_input_scale(x)
        assert float(inv.dynamic_input_scale(t32(x))) == float(G)
    want = onv.qdq_activation(x, np.float32(G)).astype(np.float32)
    got = inv.qdq_activation(t32(x), torch.tensor(G, dtype=torch.float32))
    assert got.dtype == torch.float32
    bad = np.nonzero(got.numpy() != want)
    assert not bad[0].size, f"{bad[0].size} mismatches, first at {bad[0][0], bad[1][0]}"
    g64 = inv.qdq_activation(torch.from_numpy(x), torch.tensor(G, dtype=torch.float32))
    assert g64.dtype == torch.float64 and np.array_equal(g64.numpy(), onv.qdq_activation(x, np.float32(G)))


def test_qdq_activation_ties_and_saturation():
    G = np.float32(448.0)
    x = np.array([[6.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, -0.75, -2.5]]) / 448
    got = inv.qdq_activation(t32(x), torch.tensor(G)).numpy() * 448
    want = [6, 0, 1, 1, 2, 2, 4, 4, 0.5, 1, 1.5, 2, 3, 4, -1, -2]
    assert_contract("nvfp4", "qdq_activation", "grid_values", "kernel_unit", "float32", got[0],
                    np.array(want, float))
    # G = 1, amax 100: s = fp8(16.67) = 16 (rounded down), v = 6.25 saturates to 6 -> 96
    assert np.all(inv.qdq_activation(t32(np.full((1, 16), 100.0)), torch.tensor(1.0)).numpy() == 96.0)
    # a static scale too large for the data: G·amax/6 = 1667 clamps to 448, v = 22.3 saturates -> 6·448/G
    got = inv.qdq_activation(t32(np.full((1, 16), -100.0)), torch.tensor(100.0)).numpy()
    assert np.all(got == -(np.float32(6 * 448) / np.float32(100)))


def _case(seed, hidden):
    rng = np.random.default_rng(seed)
    w = moe_weights(rng, hidden=hidden, gain=40 * 0.02 * math.sqrt(hidden))
    nv = onv.quantize_experts(w.gate_up_proj, w.down_proj)
    x = rng.normal(size=(2, 9, hidden))
    r = omoe.route(w, x)
    rt = Routing(torch.from_numpy(r.expert_ids), *(t32(a) for a in r[1:]))
    return rng, w, nv, x, r, rt


def _rel(got, want) -> float:
    return float(np.abs(got.double().numpy() - want).max() / np.abs(want).max())


@pytest.mark.parametrize("hidden", [32, 48])
@pytest.mark.parametrize("scales", ["dynamic", "static", "saturating"])
def test_w4a4_experts_match_the_oracle(hidden, scales):
    rng, w, nv, x, r, rt = _case(60 + hidden, hidden)
    if scales != "dynamic":
        f = 0.02 if scales == "saturating" else 1.0        # saturating: x and h far past the static range
        gx = onv.global_scale_encode(np.abs(x).max() * f * rng.uniform(0.8, 1.2, 8))
        gh = onv.global_scale_encode(5.0 * f * rng.uniform(0.8, 1.2, 8))
        nv = onv.with_input_scales(nv, gx, gh)
    want = omoe.experts(w, x, r, nvfp4=nv, w4a4=True)
    got = imoe.experts(w.map(t32), t32(x), rt, nvfp4=inv.experts_to(nv), w4a4=True)
    assert got.dtype == torch.float32 and got.shape == x.shape
    assert_contract(*W4A4, "float32", got, want)
    # W4A4 really quantizes the activations: it differs from W4A16 by far more than the tolerance
    assert _rel(got, omoe.experts(w, x, r, nvfp4=nv)) > 100 * TOL
    again = imoe.experts(w.map(t32), t32(x), rt, nvfp4=inv.experts_to(nv), w4a4=True)
    assert torch.equal(got, again), "non-deterministic rerun"


def test_w4a16_oracle_path_equals_experts_on_dequantized_weights():
    _, w, nv, x, r, _ = _case(70, 32)
    gu, dn = onv.dequantize_experts(nv)
    import dataclasses
    deq = dataclasses.replace(w, gate_up_proj=gu, down_proj=dn)
    assert np.array_equal(omoe.experts(w, x, r, nvfp4=nv), omoe.experts(deq, x, r))
    y = omoe.forward(w, x, nvfp4=nv, w4a4=True)
    want = omoe.experts(w, x, r, nvfp4=nv, w4a4=True) + omoe.shared_expert(w, x)
    assert np.array_equal(y, want)


def test_w4a4_forward_and_refusals():
    _, w, nv, x, r, rt = _case(71, 32)
    nvt = inv.experts_to(nv)
    got = imoe.forward(w.map(t32), t32(x), nvfp4=nvt, w4a4=True)
    assert_contract("nvfp4", "forward_w4a4", "output", "kernel_unit", "float32", got,
                    omoe.forward(w, x, nvfp4=nv, w4a4=True))
    with pytest.raises(ValueError, match="w4a4"):
        imoe.experts(w.map(t32), t32(x), rt, w4a4=True)
    with pytest.raises(ValueError, match="w4a4"):
        omoe.experts(w, x, r, w4a4=True)
    bad = inv.with_input_scales(nvt, torch.zeros(8), None)
    with pytest.raises(ValueError, match=r"nvfp4\.gate_up\.input_global_scale"):
        imoe.experts(w.map(t32), t32(x), rt, nvfp4=bad, w4a4=True)


def test_quant_dequant_of_zero_rows_is_zero_rows():
    # an expert that no token was routed to hands the W4A4 prologue an empty activation block
    from impl import nvfp4 as inv
    from impl.baseline.nvfp4 import nvfp4 as base

    for qdq in (base.qdq_activation, inv.qdq_activation):
        out = qdq(torch.zeros(0, 32), torch.tensor(1.0))
        assert tuple(out.shape) == (0, 32) and out.dtype == torch.float32
