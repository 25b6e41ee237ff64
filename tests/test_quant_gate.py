"""The quantization gate (invariants/quant_gate.py, contract kind quantization_gate) on known
distributions, on the MoE layer harness (CPU interpreter, float32) and on the whole tiny model.

Metric tests compare against direct float64 formulas written here (softmax by exp / sum, KL by the
definition, p99 by order statistics), never against values copied from the implementation.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from invariants import contracts as ct
from invariants import nvfp4_checks as nc
from invariants import quant_gate as qg
from invariants.matrix import BY_NAME
from invariants.target import cpu_targets
from test_model import _geometry  # the 5-layer cut of tiny every whole-model test uses

# the metric's float64 identities (invariants/contracts.d/defaults.toml [float64])
SAME_MATH, ELEMENTWISE = ct.float64_tolerance("same_math"), ct.float64_tolerance("elementwise")


def _softmax(z):
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


# ----------------------------------------------------------------------------- metrics


def test_kl_of_identical_logits_is_zero_and_shift_invariant():
    z = np.random.default_rng(0).normal(size=(7, 50)) * 4
    assert np.all(qg.kl_per_token(z, z) == 0)
    assert np.abs(qg.kl_per_token(z, z + 3.25)).max() < SAME_MATH          # softmax ignores a constant shift
    m = qg.gate_metrics(z, z)
    assert (m.mean_kl, m.p99_kl, m.max_kl, m.top1, m.tokens) == (0.0, 0.0, 0.0, 1.0, 7)


def test_kl_matches_the_definition_on_a_two_point_distribution():
    # p = (0.8, 0.2), q = (0.5, 0.5): KL = 0.8 ln 1.6 + 0.2 ln 0.4
    ref = np.log([[0.8, 0.2]])
    cand = np.zeros((1, 2))
    want = 0.8 * math.log(1.6) + 0.2 * math.log(0.4)
    assert qg.kl_per_token(ref, cand)[0] == pytest.approx(want, rel=SAME_MATH)


def test_kl_matches_the_definition_on_random_logits():
    rng = np.random.default_rng(1)
    ref, cand = rng.normal(size=(20, 33)) * 3, rng.normal(size=(20, 33)) * 3
    p, q = _softmax(ref), _softmax(cand)
    want = (p * np.log(p / q)).sum(-1)
    assert np.abs(qg.kl_per_token(ref, cand) - want).max() < SAME_MATH
    assert np.all(want > 0)


def test_kl_is_stable_for_large_logits():
    ref = np.array([[1000.0, 0.0, -1000.0]])
    cand = np.array([[1000.0, 1.0, -1000.0]])
    # p ~ (1, e^-1000, 0): KL = Σ p (lp - lq) ~ 0 - ln(softmax_cand[0]) = ln(1 + e^-999) ~ e^-999 -> 0
    kl = qg.kl_per_token(ref, cand)
    assert np.isfinite(kl).all() and kl[0] < 1e-300 + ELEMENTWISE


def test_a_top1_flip_is_detected_and_a_near_tie_is_accepted_within_eps():
    ref = np.array([[3.0, 1.0, 0.0], [2.0, 1.99999, 0.0], [0.0, 5.0, 1.0], [1.0, 0.0, 0.0]])
    cand = ref.copy()
    cand[1] = [1.99999, 2.0, 0.0]                       # swaps a reference near-tie (gap 1e-5)
    cand[3] = [0.0, 1.0, 0.0]                          # a real flip
    assert qg.top1_agreement(ref, cand) == (0.5, 0)
    assert qg.top1_agreement(ref, cand, tie_eps=1e-4) == (0.75, 1)
    assert qg.gate_metrics(ref, cand, 1e-4).top1 == 0.75


def test_p99_is_the_order_statistic_interpolation():
    rng = np.random.default_rng(2)
    n, V = 301, 16
    ref = rng.normal(size=(n, V))
    cand = ref + rng.normal(size=(n, V)) * rng.uniform(0, 1, (n, 1))
    p, q = _softmax(ref), _softmax(cand)
    kl = np.sort((p * np.log(p / q)).sum(-1))
    rank = 0.99 * (n - 1)                                 # 297.0: between kl[297] and kl[298]
    lo = int(math.floor(rank))
    want = kl[lo] + (rank - lo) * (kl[lo + 1] - kl[lo])
    m = qg.gate_metrics(ref, cand)
    assert m.p99_kl == pytest.approx(want, rel=SAME_MATH)
    assert m.max_kl == pytest.approx(kl[-1], rel=SAME_MATH)
    assert m.mean_kl == pytest.approx(kl.mean(), rel=SAME_MATH)


def test_a_non_finite_candidate_fails_every_bound():
    ref = np.zeros((2, 4))
    cand = ref.copy()
    cand[1, 2] = np.nan
    c = ct.lookup("nvfp4", "gate", "kernel_w4a4", "quantization_gate")
    v = ct.judge(c, "float32", cand, ref)
    assert not v.ok and "inf" in v.detail


def test_gate_verdicts_read_their_bounds_per_dtype():
    c = ct.lookup("nvfp4", "gate", "kernel_w4a16", "quantization_gate")
    b = c.gate_bounds("float32")
    assert b["mean_kl"] <= 1e-5 and b["top1"] == 1.0
    ref = np.random.default_rng(3).normal(size=(50, 20)) * 3
    assert ct.judge(c, "float32", ref + 1e-4, ref).ok                  # a constant shift: KL 0
    flip = ref.copy()
    i = ref[0].argmax()
    flip[0, i] -= 50.0                                                  # one token's top-1 moves
    v = ct.judge(c, "float32", flip, ref)
    assert not v.ok and "top-1 98.00%" in v.detail
    with pytest.raises(ct.UndeclaredContract, match="float16"):
        c.gate_bounds("float16")


@pytest.mark.parametrize("text,match", [
    ('kind = "quantization_gate"\nmean_kl = { float32 = 1e-5 }\np99_kl = { float32 = 1e-4 }\n'
     'max_kl = { float32 = 1e-3 }', "missing.*top1"),
    ('kind = "quantization_gate"\nmean_kl = { float32 = 1e-5 }\np99_kl = { float32 = 1e-4 }\n'
     'max_kl = { float32 = 1e-3 }\ntop1 = { float32 = 1.5 }', r"top1\[float32\].*\[0, 1\]"),
    ('kind = "quantization_gate"\nmean_kl = { float32 = 1e-5 }\np99_kl = { bfloat16 = 1e-4 }\n'
     'max_kl = { float32 = 1e-3 }\ntop1 = { float32 = 1.0 }', "p99_kl declares dtypes"),
])
def test_a_malformed_gate_contract_is_refused(tmp_path, text, match):
    f = tmp_path / "c.toml"
    f.write_text(f'[[contract]]\nmechanism = "nvfp4"\npath = "gate"\nquantity = "x"\nreason = "r"\n{text}\n')
    with pytest.raises(ValueError, match=match):
        ct.load(str(f))


# ----------------------------------------------------------------------------- the layer harness


def test_projection_is_fixed_by_its_seed():
    a, b = qg.projection(32, 64, 5), qg.projection(32, 64, 5)
    assert np.array_equal(a, b) and not np.array_equal(a, qg.projection(32, 64, 6))
    y = np.random.default_rng(4).normal(size=(300, 32))
    assert 2.5 < qg.layer_logits(y, a).std() < 3.5                     # logit spread ~ LOGIT_STD




def test_layer_gate_catches_a_wrong_activation_scale_direction():
    """The W4A4 kernel comparison is what sees a broken activation quantizer (mutant-style, by hand)."""
    cand, _ = cpu_targets()
    case = BY_NAME["nvfp4.gate"].examples[0]
    w, x, nv = nc.gate_inputs(case)
    from oracle import moe as omoe
    from oracle import nvfp4 as onv
    r = omoe.route(w, x)
    P = qg.projection(case.hidden, case.vocab, case.seed)
    ref = qg.layer_logits(omoe.experts(w, x, r, nvfp4=nv, w4a4=True), P)
    G = onv.dynamic_input_scale(x)
    bad = onv.with_input_scales(nv, np.full(8, onv.flip_global_scale(G)), None)   # decode where encode belongs
    y = omoe.experts(w, x, r, nvfp4=bad, w4a4=True)
    m = qg.gate_metrics(ref, qg.layer_logits(y, P))
    assert m.mean_kl > 1e-2, m.line()


# ----------------------------------------------------------------------------- the whole tiny model


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    import impl.model as im
    import oracle.model as om
    from oracle.checkpoint import write_random
    g = _geometry()
    plain = write_random(tmp_path_factory.mktemp("plain"), g, seed=3)
    quant = write_random(tmp_path_factory.mktemp("nvfp4"), g, seed=3, nvfp4="compressed-tensors")
    return om.load(plain), om.load(quant), im.load(quant)


def test_whole_model_nvfp4_gates(tiny_models):
    """impl (Triton W4A16 on the checkpoint's codes) vs oracle of the NVFP4 checkpoint: the kernel gate;
    oracle NVFP4 vs oracle of the unquantized checkpoint (same masters): the quantization gate."""
    plain, quant, impl_model = tiny_models
    ids = np.random.default_rng(5).integers(0, plain.geometry.vocab_size, (2, 40))
    exact, _ = plain.forward(ids)
    ref, _ = quant.forward(ids)
    got, _ = impl_model.forward(ids)
    kernel = ct.judge(ct.lookup("nvfp4", "gate", "kernel_w4a16", "quantization_gate"), "float32", got, ref)
    effect = ct.judge(ct.lookup("nvfp4", "gate", "quantization_w4a16", "quantization_gate"), "float32", ref, exact)
    print("model kernel_w4a16:", kernel.detail)
    print("model quantization_w4a16:", effect.detail)
    assert kernel.ok, kernel.detail
    assert effect.ok, effect.detail
    assert qg.gate_metrics(exact, ref).mean_kl > 0                      # the quantization is really there


def test_a_geometry_without_an_nvfp4_form_is_not_run_and_says_why():
    """Stop 37 found nvfp4.gate and nvfp4.batch ending in ERROR (the quantizer's ValueError) on a geometry of
    expert width 40: no NVFP4 checkpoint of it can exist (one FP8 scale per 16 elements along K). Their drawn
    cases of such widths are "not run", naming the width; widths that are multiples of 16 go on."""
    from invariants.batch_ffn_checks import MoEBatchCase, run_nvfp4_batch
    from invariants.check import NotRunnable

    nc.require_nvfp4_form("nvfp4.gate", 48, 32)
    with pytest.raises(NotRunnable, match="nvfp4.gate: this geometry's expert width 40 is not a multiple of 16"):
        nc.run_gate(nc.QuantGateCase(32, 8, 2, 1, 1, 40, 4, "normal", "dynamic", "linear", 256, 0), None, None)
    with pytest.raises(NotRunnable, match="nvfp4.batch: this geometry's hidden size 40 and expert width 24 are not"):
        run_nvfp4_batch(MoEBatchCase(40, 8, 2, 1, 1, 24, (3, 2), 0, "normal", 0), None, None)
