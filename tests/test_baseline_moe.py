"""The "torch" MoE and NVFP4 baselines (impl/baseline/moe.py, nvfp4.py) against the float64 oracle, and
their mutants (impl/mutants/, mechanisms "moe" / "nvfp4").

float64 TorchMoE is the oracle's math (invariants/contracts.d/defaults.toml [float64]), float32 within
moe.*[baseline_unit]; TorchNVFP4 is bit-identical to the oracle (codes, scales, global scales,
dequantized values in float32 and float64). Every MoE / NVFP4
mutant is caught by a probe on which the correct baseline agrees with the oracle.
Dims: SPEC §13's tiny ones, D=32, E=8, I=16, k=2, n_group=2, topk_group=1, one shared expert.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from impl.baseline import moe as bmoe
from impl.baseline import nvfp4 as bnv
from impl.baseline.moe import TorchMoE
from impl.baseline.nvfp4 import TorchNVFP4
from impl.mutants import MUTANTS
from invariants.contracts import assert_contract, float64_tolerance
from oracle import moe as omoe
from oracle import nvfp4 as onv
from oracle.types import DenseMLPWeights, MoEWeights, NVFP4Tensor
from strategies.tensors import moe_weights

D, E, I, K_E = 32, 8, 16, 2
L = 10.0
# float64 TorchMoE against the oracle: the same math reordered (contracts.d/defaults.toml [float64])
SAME_MATH, REORDERED_SUM = float64_tolerance("same_math"), float64_tolerance("reordered_sum")


# ----------------------------------------------------------------------------- data


def _n(rng, *shape, gain=1.0):
    return gain * rng.normal(size=shape) / math.sqrt(shape[-1])


def router_only(logits, bias=None, **scalars) -> MoEWeights:
    """A D=1 layer whose router logits for x = [[1]] are `logits` (zero experts: routing only)."""
    logits = np.asarray(logits, dtype=np.float64)
    n, z = len(logits), np.zeros
    return MoEWeights(router=logits[:, None], e_score_correction_bias=z(n) if bias is None else np.asarray(bias, float),
                      gate_up_proj=z((n, 2, 1)), down_proj=z((n, 1, 1)), shared_gate_proj=None,
                      shared_up_proj=None, shared_down_proj=None, **scalars)


def logit(p):
    p = np.asarray(p, dtype=np.float64)
    return np.log(p / (1 - p))


def tt(a, dtype=torch.float64):
    return None if a is None else torch.from_numpy(np.array(a, dtype=np.float64)).to(dtype)


def as_torch(w: MoEWeights, dtype=torch.float64) -> MoEWeights:
    return w.map(lambda a: tt(a, dtype))


def np_of(a) -> np.ndarray:
    return a.detach().double().numpy() if isinstance(a, torch.Tensor) else np.asarray(a, dtype=np.float64)


def rel(got, want) -> float:
    got, want = np_of(got), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, f"shape {got.shape}, oracle {want.shape}"
    scale = np.abs(want).max()
    return float(np.abs(got - want).max() / (scale if scale > 0 else 1.0))


def case(seed, n_tok=7):
    rng = np.random.default_rng(seed)
    return moe_weights(rng), rng.normal(size=(1, n_tok, D))


# ----------------------------------------------------------------------------- TorchMoE vs the oracle


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_float64_route_matches_oracle(seed):
    w, x = case(seed)
    want = omoe.route(w, x)
    got = bmoe.route(as_torch(w), tt(x))
    np.testing.assert_array_equal(got.expert_ids.numpy(), want.expert_ids)
    for name in ("weights", "scores", "group_scores"):
        assert rel(getattr(got, name), getattr(want, name)) < REORDERED_SUM, name
    np.testing.assert_array_equal(np.isinf(got.biased.numpy()), np.isinf(want.biased))
    fin = np.isfinite(want.biased)
    assert np.abs(got.biased.numpy()[fin] - want.biased[fin]).max() < REORDERED_SUM


@pytest.mark.parametrize("seed", [0, 1])
def test_float64_forward_experts_shared_match_oracle(seed):
    w, x = case(seed)
    wt, xt = as_torch(w), tt(x)
    r = omoe.route(w, x)
    assert rel(bmoe.experts(wt, xt, r.map(torch.from_numpy)), omoe.experts(w, x, r)) < REORDERED_SUM
    assert rel(bmoe.shared_expert(wt, xt), omoe.shared_expert(w, x)) < REORDERED_SUM
    assert rel(bmoe.forward(wt, xt), omoe.forward(w, x)) < REORDERED_SUM


def test_float64_dense_mlp_and_swiglu_match_oracle():
    rng = np.random.default_rng(3)
    w = DenseMLPWeights(_n(rng, 64, D, gain=20), _n(rng, 64, D, gain=20), _n(rng, D, 64))
    x = rng.normal(size=(2, 3, D))
    g, u = x @ w.gate_proj.T, x @ w.up_proj.T
    assert (g > L).any() and (g < -L).any() and (u > L).any() and (u < -L).any()     # the clamps fire
    assert rel(bmoe.dense_mlp(w.map(tt), tt(x)), omoe.dense_mlp(w, x)) < REORDERED_SUM
    assert rel(bmoe.swiglu(tt(g), tt(u), L), omoe.swiglu(g, u, L)) < SAME_MATH
    with pytest.raises(ValueError, match="limit"):
        bmoe.swiglu(tt(g), tt(u), 0.0)


def test_float32_close_to_oracle():
    w, x = case(4, n_tok=16)
    want = omoe.forward(w, x)
    got = bmoe.forward(as_torch(w, torch.float32), tt(x, torch.float32))
    assert got.dtype == torch.float32
    assert_contract("moe", "forward", "output", "baseline_unit", "float32", got, want)
    r = bmoe.route(as_torch(w, torch.float32), tt(x, torch.float32))
    assert r.weights.dtype == torch.float32
    assert_contract("moe", "route", "weights", "baseline_unit", "float32", r.weights, omoe.route(w, x).weights)


def test_bfloat16_router_runs_in_float32():
    w, x = case(5)
    r = bmoe.route(as_torch(w, torch.bfloat16), tt(x, torch.bfloat16))
    assert r.scores.dtype == torch.float32 and r.weights.dtype == torch.float32
    assert bmoe.forward(as_torch(w, torch.bfloat16), tt(x, torch.bfloat16)).dtype == torch.bfloat16


def test_ties_go_to_the_lowest_id():
    """All scores equal: groups 0 wins, experts 0 and 1 win (the oracle's stable order)."""
    w = router_only(np.zeros(8), top_k=2, n_group=2, topk_group=1)
    r = bmoe.route(as_torch(w), tt(np.ones((1, 1))))
    assert r.expert_ids.tolist() == omoe.route(w, np.ones((1, 1))).expert_ids.tolist() == [[0, 1]]


# ----------------------------------------------------------------------------- TorchNVFP4 vs the oracle


BOUNDARY = [0.0, 0.25, 0.3, 0.75, 1.0, 1.25, 1.75, 2.5, 3.5, 5.0, 5.5, 6.0, 7.0, np.inf]


def test_quantize_e2m1_boundary_table_matches_oracle():
    v = np.array(BOUNDARY + [-b for b in BOUNDARY])
    got = bnv.quantize_e2m1(torch.from_numpy(v))
    np.testing.assert_array_equal(got.numpy(), onv.quantize_e2m1(v))
    np.testing.assert_array_equal(bnv.quantize_e2m1(torch.tensor([0.75, 1.75, 3.5, 0.25, 1.25, 2.5, 5.0])).numpy(),
                                  [2, 4, 6, 0, 2, 4, 6])
    with pytest.raises(ValueError, match="v"):
        bnv.quantize_e2m1(torch.tensor([np.nan]))


def _weight(seed, N=8, K=64):
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(N, K)) * np.exp(rng.normal(size=(N, 1)))
    w[0, :16] = 0.0                                           # an all-zero block
    w[1, :16] *= 1e-6                                         # an FP8-subnormal scale
    return w


@pytest.mark.parametrize("seed", [0, 1])
def test_quantize_is_bit_identical_and_dequantize_bit_exact(seed):
    w = _weight(seed)
    want = onv.quantize(w)
    got = bnv.quantize(torch.from_numpy(w))
    np.testing.assert_array_equal(got.packed.numpy(), want.packed)
    np.testing.assert_array_equal(got.block_scale.view(torch.uint8).numpy(), want.block_scale.view(np.uint8))
    assert got.global_decode.dtype == torch.float32 and float(got.global_decode) == float(want.global_decode)
    ref = onv.dequantize(want)
    assert np.array_equal(bnv.dequantize(got).numpy(), ref.astype(np.float32))          # bit for bit
    assert np.array_equal(bnv.dequantize(got, torch.float64).numpy(), ref)
    # from the oracle's own tensors (a checkpoint), too
    t = NVFP4Tensor(torch.from_numpy(want.packed), torch.from_numpy(want.block_scale.view(np.uint8)).view(torch.float8_e4m3fn),
                    torch.tensor(want.global_decode, dtype=torch.float32))
    assert np.array_equal(bnv.dequantize(t).numpy(), ref.astype(np.float32))


def test_pack_unpack_swizzle_round_trips_match_oracle():
    rng = np.random.default_rng(7)
    codes = rng.integers(0, 16, size=(3, 32)).astype(np.uint8)
    packed = bnv.pack(torch.from_numpy(codes))
    np.testing.assert_array_equal(packed.numpy(), onv.pack(codes))
    np.testing.assert_array_equal(bnv.unpack(packed).numpy(), codes)
    s = rng.integers(0, 120, size=(130, 5)).astype(np.uint8)
    sw = bnv.swizzle_scales(torch.from_numpy(s))
    np.testing.assert_array_equal(sw.numpy(), onv.swizzle_scales(s))
    np.testing.assert_array_equal(bnv.unswizzle_scales(sw, (130, 5)).numpy(), s)


def test_qdq_activation_and_global_scales_match_oracle():
    x = _weight(9, N=4, K=48)
    G = onv.global_scale_encode(np.abs(x).max())
    got = bnv.qdq_activation(torch.from_numpy(x), torch.tensor(G))
    assert np.array_equal(got.numpy(), onv.qdq_activation(x, G))
    amax = np.abs(np.random.default_rng(1).normal(size=4000)).astype(np.float32) + 1e-3   # 2688 / a, not a^-1 · 2688
    assert np.array_equal(bnv.global_scale_encode(torch.from_numpy(amax)).numpy(), onv.global_scale_encode(amax))
    assert float(bnv.global_scale_decode(torch.tensor(3.0))) == float(onv.global_scale_decode(3.0))
    assert float(bnv.flip_global_scale(torch.tensor(0.3))) == float(onv.flip_global_scale(0.3))


def test_check_tensor_refuses_bad_tensors():
    t = bnv.quantize(torch.from_numpy(_weight(2)))
    with pytest.raises(ValueError, match="global_decode"):
        bnv.dequantize(t._replace(global_decode=torch.tensor(0.0)))
    with pytest.raises(ValueError, match="block_scale"):
        bnv.dequantize(t._replace(block_scale=t.block_scale[:, :2]))
    with pytest.raises(ValueError, match="packed"):
        bnv.dequantize(t._replace(packed=t.packed[:, :12], block_scale=t.block_scale[:, :1]))


# ----------------------------------------------------------------------------- mutants

# float64 probes judge outputs against the oracle; the exact properties (bitwise causality, inputs left
# unwritten, in-place margins) are caught by their checks (tests/test_framework_mutants.py) and probed in
# tests/test_kda_causal.py and tests/test_integrity.py; batch invariance and run-twice determinism compare
# the same implementation with itself (a row alone, a second run), which no call against the oracle sees
# the kernel-edit mutants (base triton: the bug is in our kernel, not in this torch baseline) are caught by
# their checks (tests/test_framework_mutants.py runs each through the matrix)
EXACT_PROPERTIES = ("causal", "inputs_unchanged", "in_bounds", "batch", "rerun")
MOE_NVFP4_MUTANTS = sorted(n for n, m in MUTANTS.items() if m.mechanism in ("moe", "nvfp4")
                           and m.quantity not in EXACT_PROPERTIES and m.base != "triton")


def _route_probe(impl, seed=0):
    w, x = case(seed, n_tok=16)
    if isinstance(impl, TorchMoE):
        r = impl.route(as_torch(w), tt(x))
        return {"weights": np_of(r.weights), "expert_ids": r.expert_ids.numpy().astype(float)}
    r = impl.route(w, x)
    return {"weights": r.weights, "expert_ids": r.expert_ids.astype(float)}


def _forward_probe(impl):
    """Gate pre-activations far below -10 (gain x3): silu(-30) = -3e-12 vs silu(-10) = -4.5e-4."""
    rng = np.random.default_rng(11)
    w = moe_weights(rng, gain=3 * 40 * 0.02 * math.sqrt(D))
    x = rng.normal(size=(1, 16, D))
    if isinstance(impl, TorchMoE):
        return {"output": np_of(impl.forward(as_torch(w), tt(x)))}
    return {"output": impl.forward(w, x)}


def _group_probe(impl):
    """Group 0 = (.95, .1, .1, .1): top-1 .95, top-2 sum 1.05; group 1 = (.9, .9, .1, .1): .9 / 1.8."""
    w = router_only(logit([0.95, 0.1, 0.1, 0.1, 0.9, 0.9, 0.1, 0.1]), top_k=2, n_group=2, topk_group=1)
    if isinstance(impl, TorchMoE):
        r = impl.route(as_torch(w), tt(np.ones((1, 1))))
        return {"expert_ids": r.expert_ids.numpy().astype(float), "weights": np_of(r.weights)}
    r = impl.route(w, np.ones((1, 1)))
    return {"expert_ids": r.expert_ids.astype(float), "weights": r.weights}


def _bf16_bias_probe(impl):
    """Two experts whose float32 biases 7 +- 0.012 both round to 7.0 in bf16: the oracle picks expert 0 by
    its bias (7.512 vs 7.498), a bias rounded to bf16 hands the pick to expert 1's larger sigmoid.
    x = [[1]] is exact in bf16 and the router stays float32, so only the bias's dtype can move it."""
    w = router_only(logit([0.5, 0.51]), bias=[7.012, 6.988], top_k=1)
    if isinstance(impl, TorchMoE):
        r = impl.route(as_torch(w, torch.float32), tt(np.ones((1, 1)), torch.bfloat16))
        return {"expert_ids": r.expert_ids.numpy().astype(float)}
    return {"expert_ids": impl.route(w, np.ones((1, 1))).expert_ids.astype(float)}


def _negative_kept_probe(impl):
    """Every biased score negative (bias -2): group 0 (sigmoid .9, .8) is kept, group 1 (.1, .1) dropped;
    the top-2 is experts 0 and 1. A 0.0 mask makes group 1's experts (0.0) beat them."""
    w = router_only(logit([0.9, 0.8, 0.1, 0.1]), bias=[-2.0] * 4, top_k=2, n_group=2, topk_group=1)
    if isinstance(impl, TorchMoE):
        return {"expert_ids": impl.route(as_torch(w), tt(np.ones((1, 1)))).expert_ids.numpy().astype(float)}
    return {"expert_ids": impl.route(w, np.ones((1, 1))).expert_ids.astype(float)}


def _tie_at_cut_probe(impl):
    """Experts 1 and 2 score bit for bit alike at the top-2 cut (equal logits, bias 0): the oracle's
    weights are finite (expert 1, the lower id, wins the tie)."""
    w = router_only(logit([0.9, 0.6, 0.6, 0.2]), top_k=2)
    if isinstance(impl, TorchMoE):
        return {"weights": np_of(impl.route(as_torch(w), tt(np.ones((1, 1)))).weights)}
    return {"weights": impl.route(w, np.ones((1, 1))).weights}


def _oracle_tensor(w):
    return onv.quantize(w)


def _to_torch_tensor(t: NVFP4Tensor) -> NVFP4Tensor:
    return NVFP4Tensor(torch.from_numpy(t.packed), torch.from_numpy(t.block_scale.view(np.uint8)).view(torch.float8_e4m3fn),
                       torch.tensor(t.global_decode, dtype=torch.float32))


def _dequant_probe(impl):
    """Random weight quantized by the ORACLE (global_decode far from 1), dequantized by `impl`."""
    t = _oracle_tensor(_weight(5) * 100)
    if isinstance(impl, TorchNVFP4):
        return {"weights": impl.dequantize(_to_torch_tensor(t), torch.float64).numpy()}
    return {"weights": impl.dequantize(t)}


def _swizzled_probe(impl):
    """Scales stored 128x4-swizzled (M = 128, Kb = 4: the padding is a no-op, no shape error can fire)."""
    t = _oracle_tensor(_weight(6, N=128, K=64))
    if isinstance(impl, TorchNVFP4):
        tt_ = _to_torch_tensor(t)
        return {"weights": impl.dequantize_swizzled(tt_.packed, impl.swizzle_scales(tt_.block_scale),
                                                    tt_.global_decode, torch.float64).numpy()}
    return {"weights": impl.dequantize(t)}


def _ties_probe(impl):
    """A row whose block amax is 6 with G = 448: v = x exactly, so the E2M1 ties 0.75, 1.75, 3.5 are hit."""
    row = np.array([6.0, 0.75, 1.75, 3.5, -0.75, -1.75, -3.5, 0.25, 1.25, 2.5, 5.0, 0.5, 1.0, 2.0, 3.0, 4.0])
    w = np.stack([row, row[::-1]])
    if isinstance(impl, TorchNVFP4):
        t = impl.quantize(torch.from_numpy(w))
        return {"codes": impl.unpack(t.packed).numpy().astype(float)}
    return {"codes": onv.unpack(impl.quantize(w).packed).astype(float)}


def _qdq_probe(impl):
    """W4A4 activation quant-dequant (NVFP4.md A6) of rows whose 16-blocks have very different amax, with
    an ENCODE input scale far from 1: observed as the quantity the gate's kernel_w4a4 comparison sees."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((3, 64)) * np.repeat(np.array([0.01, 1.0, 30.0, 0.3]), 16)
    G = np.float32(2688.0 / 40.0)
    if isinstance(impl, TorchNVFP4):
        return {"kernel_w4a4": impl.qdq_activation(torch.from_numpy(x), G).double().numpy()}
    return {"kernel_w4a4": impl.qdq_activation(x, G)}


def _experts_probe(swizzled: bool):
    """Stacked experts as the gate's NVFP4 mixture dequantizes them: gate_up with gate and up amax 6x
    apart (global_decode [E, 2]), 2I = 160 rows (two 128-row swizzle tiles), optionally swizzled;
    observed as the quantity the gate's kernel_w4a16 comparison sees."""
    def probe(impl):
        rng = np.random.default_rng(9)
        gu = rng.standard_normal((2, 160, 64)) * np.repeat([1.0, 6.0], 80)[None, :, None]
        nv = onv.quantize_experts(gu, rng.standard_normal((2, 64, 80)))
        nv = onv.swizzle_experts(nv) if swizzled else nv
        if isinstance(impl, TorchNVFP4):
            from impl.nvfp4 import experts_to
            return {"kernel_w4a16": impl.dequantize(experts_to(nv).gate_up, torch.float64).numpy()}
        return {"kernel_w4a16": impl.dequantize_experts(nv)[0]}
    return probe


PROBES = {
    "nvfp4_fused_gate_scale_both_halves": _experts_probe(False),
    "nvfp4_expert_swizzled_scales_read_linear": _experts_probe(True),
    "moe_bias_in_weights": _route_probe,
    "moe_scaling_before_norm": _route_probe,
    "moe_two_sided_gate_clamp": _forward_probe,
    "moe_top1_group_score": _group_probe,
    "moe_bias_in_working_dtype": _bf16_bias_probe,
    "moe_dropped_groups_masked_zero": _negative_kept_probe,
    "moe_tie_at_cut_nan": _tie_at_cut_probe,
    "nvfp4_high_nibble_first": _dequant_probe,
    "nvfp4_global_scale_wrong_direction": _dequant_probe,
    "nvfp4_scales_read_linear": _swizzled_probe,
    "nvfp4_argmin_rounding": _ties_probe,
    "nvfp4_w4a4_neighbour_block_scale": _qdq_probe,
    "nvfp4_w4a4_input_scale_decode_direction": _qdq_probe,
}
BASE = {"moe": TorchMoE, "nvfp4": TorchNVFP4}
ORACLE = {"moe": omoe, "nvfp4": onv}


def test_every_moe_nvfp4_mutant_has_a_probe():
    assert sorted(PROBES) == MOE_NVFP4_MUTANTS


@pytest.mark.parametrize("name", MOE_NVFP4_MUTANTS)
def test_mutant_is_caught(name):
    m = MUTANTS[name]
    probe = PROBES[name]
    want = probe(ORACLE[m.mechanism])
    good, bad = probe(BASE[m.mechanism]()), probe(m.factory())
    assert max(rel(good[q], want[q]) for q in want) < REORDERED_SUM, "the probe itself disagrees with the oracle"
    quantity = m.quantity
    assert quantity in want, f"{name}: the probe does not observe {m.check} {quantity}"
    err = rel(bad[quantity], want[quantity])
    # `not <=`: a NaN error (a NaN output) is caught too
    assert not err <= 1e-6, f"mutant {name} escapes its probe: {m.check} {quantity} rel err {err:.3g}"
