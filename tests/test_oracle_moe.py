"""The MoE row of the correctness matrix (TESTING.md), on the float64 oracle (SPEC §9, §12 pitfalls 17-18).

Dims are SPEC §13's tiny ones: D=32, E=8, I=16, k=2, n_group=2, topk_group=1, one shared expert.
Routing cases are hand-built with D=1, so the router logits are the router weights themselves.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import scipy.special
from hypothesis import given, settings
from hypothesis import strategies as st

from invariants.contracts import float64_tolerance
from oracle import moe
from oracle.types import DenseMLPWeights, MoEWeights, Routing
from strategies.tensors import moe_weights

D, E, I, K_E = 32, 8, 16, 2
L = 10.0
ELEMENTWISE, SHORT_FORMULA = float64_tolerance("elementwise"), float64_tolerance("short_formula")
SHORT_REDUCTION, SAME_MATH = float64_tolerance("short_reduction"), float64_tolerance("same_math")


def _n(rng, *shape, gain=1.0):
    return gain * rng.normal(size=shape) / math.sqrt(shape[-1])


def router_only(logits, bias=None, **scalars) -> MoEWeights:
    """A D=1 layer whose router logits for x = [1] are `logits` (experts are zero; routing only)."""
    logits = np.asarray(logits, dtype=np.float64)
    n = len(logits)
    z = np.zeros
    return MoEWeights(router=logits[:, None], e_score_correction_bias=z(n) if bias is None else np.asarray(bias),
                      gate_up_proj=z((n, 2, 1)), down_proj=z((n, 1, 1)), shared_gate_proj=None,
                      shared_up_proj=None, shared_down_proj=None, **scalars)


def logit(p):
    return np.log(np.asarray(p) / (1 - np.asarray(p)))


ONE = np.ones((1, 1))


# ----------------------------------------------------------------------------- swiglu


@pytest.mark.parametrize("gate,up,want_gate,want_up", [
    (-20.0, 1.0, -20.0, 1.0),      # gate NOT clamped from below
    (20.0, 1.0, 10.0, 1.0),        # gate clamped from above
    (10.0, 1.0, 10.0, 1.0),        # boundary
    (9.5, 1.0, 9.5, 1.0),
    (1.0, 20.0, 1.0, 10.0),        # up clamped from above
    (1.0, -20.0, 1.0, -10.0),      # up clamped from below
    (1.0, 10.0, 1.0, 10.0),
    (1.0, -10.0, 1.0, -10.0),
    (-10.0, -10.5, -10.0, -10.0),
], ids=lambda v: f"{v:+g}")
def test_swiglu_clamps(gate, up, want_gate, want_up):
    want = want_gate * scipy.special.expit(want_gate) * want_up
    assert moe.swiglu(np.array(gate), np.array(up), L) == pytest.approx(want, rel=ELEMENTWISE, abs=0)


def test_swiglu_gate_not_clamped_below_is_visible():
    """silu(-20) differs from silu(-10) by ~4.5e-4 relative to the output scale: observable."""
    assert abs(moe.swiglu(-20.0, 10.0, L) - moe.swiglu(-10.0, 10.0, L)) > 1e-4


def test_swiglu_refuses_bad_limit():
    with pytest.raises(ValueError, match="limit"):
        moe.swiglu(1.0, 1.0, 0.0)


def test_dense_mlp_matches_hand_formula():
    rng = np.random.default_rng(0)
    w = DenseMLPWeights(_n(rng, 64, D, gain=20), _n(rng, 64, D, gain=20), _n(rng, D, 64))
    x = rng.normal(size=(2, 3, D))
    g, u = x @ w.gate_proj.T, x @ w.up_proj.T
    assert (g > L).any() and (u < -L).any() and (g < -L).any()           # the clamps fire
    want = (g.clip(max=L) * scipy.special.expit(g.clip(max=L)) * u.clip(-L, L)) @ w.down_proj.T
    np.testing.assert_allclose(moe.dense_mlp(w, x), want, rtol=SHORT_REDUCTION, atol=SHORT_REDUCTION)


# ----------------------------------------------------------------------------- routing


def test_route_bias_changes_selection_not_weights():
    l = np.array([2.0, 1.0, 0.0, -1.0])
    plain = moe.route(router_only(l, top_k=2, norm_topk_prob=False, routed_scaling_factor=1.0), ONE)
    biased = moe.route(router_only(l, [0, 0, 0, 1.0], top_k=2, norm_topk_prob=False,
                                   routed_scaling_factor=1.0), ONE)
    s = scipy.special.expit(l)
    assert plain.expert_ids.tolist() == [[0, 1]] and biased.expert_ids.tolist() == [[3, 0]]
    np.testing.assert_array_equal(biased.weights, [[s[3], s[0]]])       # un-biased sigmoid
    np.testing.assert_array_equal(biased.scores, [s])
    np.testing.assert_array_equal(biased.biased, [s + [0, 0, 0, 1.0]])


def test_route_normalizes_then_scales():
    """s = (0.8, 0.2, small, small): w = (0.8, 0.2) / (1 + 1e-20) · 2.5 = (2.0, 0.5)."""
    w = router_only(logit([0.8, 0.2, 0.01, 0.05]), top_k=2, routed_scaling_factor=2.5)
    r = moe.route(w, ONE)
    assert r.expert_ids.tolist() == [[0, 1]]
    np.testing.assert_allclose(r.weights, [[2.0, 0.5]], rtol=SHORT_FORMULA)
    # scaling before the normalization would give (0.8, 0.2); without it, (0.8, 0.2) as well
    unnorm = moe.route(dataclasses.replace(w, norm_topk_prob=False), ONE)
    np.testing.assert_allclose(unnorm.weights, [[2.0, 0.5]], rtol=SHORT_FORMULA)
    np.testing.assert_allclose(moe.route(dataclasses.replace(w, routed_scaling_factor=1.0), ONE).weights,
                               [[0.8, 0.2]], rtol=SHORT_FORMULA)


def test_route_renormalization_epsilon():
    """With scores ~1e-22 the +1e-20 dominates: w = s / (Σ s + 1e-20) · 2.5, far from 1/k · 2.5."""
    l = np.array([-50.0, -50.5, -60.0, -70.0])
    r = moe.route(router_only(l, top_k=2), ONE)
    s = scipy.special.expit(l[:2])
    want = s / (s.sum() + 1e-20) * 2.5
    np.testing.assert_allclose(r.weights, [want], rtol=SHORT_FORMULA)
    assert r.weights.sum() < 0.2
    zero = moe.route(router_only(np.full(4, -1000.0), top_k=2), ONE)
    assert np.array_equal(zero.weights, np.zeros((1, 2)))                # 0 / 1e-20, not NaN


def test_route_group_limit_uses_top2_sum():
    """Group 0 = (0.95, .1, .1, .1): top-1 0.95, top-2 sum 1.05; group 1 = (.9, .9, .1, .1): 0.9 / 1.8.
    The top-2 sum keeps group 1 (experts 4, 5); a top-1 group score would keep group 0."""
    p = [0.95, 0.1, 0.1, 0.1, 0.9, 0.9, 0.1, 0.1]
    r = moe.route(router_only(logit(p), top_k=2, n_group=2, topk_group=1), ONE)
    np.testing.assert_allclose(r.group_scores, [[1.05, 1.8]], rtol=SHORT_FORMULA)
    assert r.expert_ids.tolist() == [[4, 5]]
    assert np.isneginf(r.biased[0, :4]).all() and np.isfinite(r.biased[0, 4:]).all()
    np.testing.assert_allclose(r.weights, [[1.25, 1.25]], rtol=SHORT_FORMULA)


def test_route_group_score_includes_bias():
    p = [0.95, 0.1, 0.1, 0.1, 0.9, 0.9, 0.1, 0.1]
    r = moe.route(router_only(logit(p), [0, 1.0, 0, 0, 0, 0, 0, 0], top_k=2, n_group=2, topk_group=1), ONE)
    assert r.expert_ids.tolist() == [[1, 0]]
    s = np.asarray(p)
    np.testing.assert_allclose(r.weights, [[s[1], s[0]] / (s[0] + s[1]) * 2.5], rtol=SHORT_FORMULA)


def test_route_ties_go_to_the_lowest_id():
    r = moe.route(router_only([0.5, 1.0, 0.5, 1.0, 1.0, 0.5], top_k=2), ONE)
    assert r.expert_ids.tolist() == [[1, 3]]
    g = moe.route(router_only([1.0, 1.0, 2.0, 0.0, 1.0, 1.0, 2.0, 0.0], top_k=1, n_group=2,
                              topk_group=1), ONE)
    assert g.expert_ids.tolist() == [[2]] and np.isneginf(g.biased[0, 4:]).all()


@given(seed=st.integers(0, 2**32 - 1), tokens=st.integers(1, 9),
       layout=st.sampled_from([(8, 2, 2, 1), (8, 2, 1, 1), (12, 3, 3, 2), (16, 4, 4, 2)]))
@settings(deadline=None, max_examples=30)
def test_route_properties(seed, tokens, layout):
    """Ids unique and inside kept groups; the chosen biased scores are the top-k among the kept
    ones; weights are the un-biased sigmoid renormalized to routed_scaling_factor."""
    experts, top_k, n_group, topk_group = layout
    rng = np.random.default_rng(seed)
    w = moe_weights(rng, experts=experts, top_k=top_k, n_group=n_group, topk_group=topk_group)
    x = rng.normal(size=(tokens, D))
    r = moe.route(w, x)
    s = scipy.special.expit(x @ w.router.T)
    np.testing.assert_allclose(r.scores, s, rtol=SHORT_FORMULA)
    assert r.expert_ids.shape == (tokens, top_k) and r.expert_ids.dtype == np.int64
    for n in range(tokens):
        ids = r.expert_ids[n]
        assert len(set(ids.tolist())) == top_k
        kept = np.isfinite(r.biased[n])
        assert kept.sum() == topk_group * experts // n_group and kept[ids].all()
        chosen = r.biased[n, ids]
        others = np.delete(r.biased[n], ids)
        assert chosen.min() >= others.max()
        assert (np.diff(chosen) <= 0).all()
    np.testing.assert_allclose(r.weights.sum(-1), 2.5, rtol=SHORT_REDUCTION)
    np.testing.assert_allclose(r.weights, np.take_along_axis(s, r.expert_ids, -1)
                               / np.take_along_axis(s, r.expert_ids, -1).sum(-1, keepdims=True) * 2.5,
                               rtol=SHORT_REDUCTION)


# ----------------------------------------------------------------------------- experts and forward


def _dense_arbiter(w: MoEWeights, x, routing: Routing):
    """Every expert on every token, weighted by a dense [N, E] combine matrix (zero if unselected)."""
    xs = x.reshape(-1, D)
    c = np.zeros((xs.shape[0], w.num_experts))
    np.put_along_axis(c, routing.expert_ids, routing.weights, axis=-1)
    y = np.zeros_like(xs)
    for e in range(w.num_experts):
        gu = xs @ w.gate_up_proj[e].T
        g, u = np.minimum(gu[:, :I], L), np.clip(gu[:, I:], -L, L)
        y += c[:, e:e + 1] * ((g * scipy.special.expit(g) * u) @ w.down_proj[e].T)
    return y.reshape(x.shape)


@pytest.mark.parametrize("seed", range(4))
def test_forward_is_routed_plus_shared(seed):
    rng = np.random.default_rng(seed)
    w = moe_weights(rng)
    x = rng.normal(size=(2, 5, D))
    r = moe.route(w, x)
    routed = moe.experts(w, x, r)
    np.testing.assert_allclose(routed, _dense_arbiter(w, x, r), rtol=SAME_MATH, atol=SAME_MATH)
    shared = moe.dense_mlp(w.shared, x)
    np.testing.assert_allclose(moe.forward(w, x), routed + shared, rtol=SHORT_FORMULA, atol=SHORT_FORMULA)
    assert np.abs(shared).max() > 0.1 and np.abs(routed).max() > 0.1
    assert moe.forward(w, x).shape == x.shape


def test_forward_without_shared_expert():
    rng = np.random.default_rng(7)
    w = moe_weights(rng, shared=0)
    x = rng.normal(size=(3, D))
    np.testing.assert_array_equal(moe.forward(w, x), moe.experts(w, x, moe.route(w, x)))


def test_clamps_fire_in_the_tiny_config():
    rng = np.random.default_rng(3)
    w = moe_weights(rng)
    gu = rng.normal(size=(16, D)) @ w.gate_up_proj[0].T
    assert (gu[:, :I] > L).any() and (np.abs(gu[:, I:]) > L).any()


def test_experts_refuses_bad_routing():
    rng = np.random.default_rng(8)
    w = moe_weights(rng)
    x = rng.normal(size=(3, D))
    r = moe.route(w, x)
    with pytest.raises(ValueError, match="routing.expert_ids"):
        moe.experts(w, x, r._replace(expert_ids=r.expert_ids + E))
    with pytest.raises(ValueError, match="routing: expected"):
        moe.experts(w, x[:2], r)
    with pytest.raises(ValueError, match=r"x: expected \[..., D\]"):
        moe.forward(w, x[:, :-1])


# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize("change,match", [
    (dict(n_group=3), "MoEWeights.n_group: 3 does not divide E=8"),
    (dict(n_group=8, topk_group=1, top_k=1), "expected >= 2"),
    (dict(topk_group=3), "MoEWeights.topk_group: 3, expected <= n_group=2"),
    (dict(top_k=5), "MoEWeights.top_k: 5, expected <= topk_group"),
    (dict(top_k=0), "MoEWeights.top_k: 0, expected a positive int"),
    (dict(routed_scaling_factor=0.0), "routed_scaling_factor"),
    (dict(e_score_correction_bias=np.zeros(7)), "MoEWeights.e_score_correction_bias: shape"),
    (dict(down_proj=np.zeros((E, D, I + 1))), "MoEWeights.down_proj: shape"),
    (dict(shared_up_proj=None), "MoEWeights.shared_up_proj: None"),
    (dict(shared_down_proj=np.zeros((D, 3))), "MoEWeights.shared_down_proj: shape"),
], ids=lambda v: str(v) if isinstance(v, dict) else "")
def test_validate_refuses(change, match):
    w = dataclasses.replace(moe_weights(np.random.default_rng(0)), **change)
    with pytest.raises(ValueError, match=match):
        moe.forward(w, np.zeros((1, D)))


def test_map_converts_every_array():
    w = moe_weights(np.random.default_rng(0))
    f32 = w.map(lambda a: np.asarray(a, np.float32))
    assert all(getattr(f32, n).dtype == np.float32 for n in
               ("router", "e_score_correction_bias", "gate_up_proj", "down_proj", "shared_gate_proj"))
    assert moe_weights(np.random.default_rng(0), shared=0).map(np.asarray).shared is None
