"""The MoE Triton kernels (impl/moe.py, impl/kernels/moe.py) and their NVFP4 W4A16 path (impl/nvfp4.py)
against the float64 oracle (oracle/moe.py, oracle/nvfp4.py), in the interpreter (float32).

Dims: SPEC §13's tiny ones, D=32, E=8, I=16, k=2, n_group=2, topk_group=1, one shared expert, plus
D=48 (a reduction not a multiple of the 32-wide K tile) and a k=8, E=32, G=4, topk_group=2 router.
Gate/up weights are scaled so that pre-activations pass ±10 and the clamps fire. Router ids are
compared tie-aware: sets equal unless the oracle's biased scores tie within TIE_EPS at the k-th place.
Bounds: the moe.* / nvfp4.*[kernel_unit] contracts of invariants/contracts.d/{moe,nvfp4}.toml.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from impl import moe as imoe
from impl import nvfp4 as inv
from invariants.contracts import assert_contract, lookup
from oracle import moe as omoe
from oracle import nvfp4 as onv
from oracle.types import MoEWeights, Routing
from strategies.tensors import moe_weights

D, E, I, K_E = 32, 8, 16, 2
# the eps of check_route's own tie rule (a rule of this test, not the matrix's judge_decision)
TIE_EPS = lookup("moe", "route", "expert_ids", "kernel_unit").limit("float32")


def t32(a):
    return None if a is None else torch.from_numpy(np.array(a, dtype=np.float64)).float()


def within(mechanism, path, quantity, got, want):
    """float32 kernel against the oracle under <mechanism>.<path>.<quantity>[kernel_unit]."""
    assert_contract(mechanism, path, quantity, "kernel_unit", "float32", got, want)


def routing_of(r: Routing) -> Routing:
    return Routing(torch.from_numpy(r.expert_ids), *(t32(a) for a in r[1:]))


def assert_clamps_fire(w: MoEWeights, x, r: Routing):
    """Some routed gate/up pre-activation is above +10 and some below -10."""
    xs = x.reshape(-1, w.router.shape[-1])
    pre = np.concatenate([xs[np.any(r.expert_ids == e, axis=1)] @ w.gate_up_proj[e].T for e in range(w.num_experts)])
    assert pre.max() > 10 and pre.min() < -10, (pre.min(), pre.max())


def check_route(got: Routing, want: Routing, k: int) -> int:
    """Tie-aware ids, then weights (matched by expert id), scores, biased, group scores; returns tie rows."""
    ids = got.expert_ids.numpy()
    assert got.expert_ids.dtype == torch.int64 and ids.shape == want.expert_ids.shape
    ties = 0
    for n in range(ids.shape[0]):
        c, r = set(ids[n].tolist()), set(want.expert_ids[n].tolist())
        assert len(c) == k, f"row {n}: duplicated ids {ids[n]}"
        if c == r:
            continue
        sc = want.biased[n]
        kth = np.sort(sc)[::-1][k - 1]
        must = {e for e in range(len(sc)) if sc[e] > kth + TIE_EPS}
        free = {e for e in range(len(sc)) if abs(sc[e] - kth) <= TIE_EPS}
        assert must <= c <= must | free, f"moe.route.expert_ids row {n}: {sorted(c)} vs oracle {sorted(r)}"
        ties += 1
    same = np.all(np.sort(ids, 1) == np.sort(want.expert_ids, 1), axis=1)
    if same.any():
        gw = np.take_along_axis(got.weights.numpy(), np.argsort(ids, 1), 1)[same]
        ww = np.take_along_axis(want.weights, np.argsort(want.expert_ids, 1), 1)[same]
        within("moe", "route", "weights", gw, ww)
    within("moe", "route", "scores", got.scores, want.scores)
    within("moe", "route", "group_scores", got.group_scores, want.group_scores)
    b = got.biased.numpy()
    assert np.array_equal(np.isinf(b), np.isinf(want.biased)), "moe.route.biased mask"
    fin = np.isfinite(want.biased)
    within("moe", "route", "biased", b[fin], want.biased[fin])
    return ties


# ----------------------------------------------------------------------------- router


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_router_matches_oracle(seed):
    rng = np.random.default_rng(seed)
    w = moe_weights(rng)
    x = rng.normal(size=(2, 13, D))                       # 26 tokens: two BT = 16 blocks, a masked tail
    want = omoe.route(w, x)
    check_route(imoe.route(w.map(t32), t32(x)), want, K_E)


def test_router_top8_four_groups_two_kept():
    rng = np.random.default_rng(3)
    w = moe_weights(rng, experts=32, top_k=8, n_group=4, topk_group=2)
    x = rng.normal(size=(20, D))
    check_route(imoe.route(w.map(t32), t32(x)), omoe.route(w, x), 8)


def test_router_exact_ties_go_to_the_lowest_id():
    """Equal router rows and biases: every score ties, so group 0 and experts 0, 1 win (the oracle's rule);
    then two near-ties (1e-9 apart) that the tie-aware comparison accepts either way."""
    rng = np.random.default_rng(4)
    w = moe_weights(rng)
    row = rng.normal(size=D) / math.sqrt(D)
    w = dataclasses.replace(w, router=np.tile(row, (E, 1)), e_score_correction_bias=np.zeros(E))
    x = rng.normal(size=(5, D))
    got = imoe.route(w.map(t32), t32(x))
    assert got.expert_ids.tolist() == omoe.route(w, x).expert_ids.tolist() == [[0, 1]] * 5
    near = dataclasses.replace(w, e_score_correction_bias=np.array([0, 1e-9, 2e-9, 0, 0, 0, 0, 0.0]))
    assert check_route(imoe.route(near.map(t32), t32(x)), omoe.route(near, x), K_E) >= 0


# ----------------------------------------------------------------------------- grouped experts


@pytest.mark.parametrize("hidden", [32, 48])
def test_experts_and_forward_match_oracle_with_clamps_firing(hidden):
    rng = np.random.default_rng(10 + hidden)
    w = moe_weights(rng, hidden=hidden, gain=40 * 0.02 * math.sqrt(hidden))
    x = rng.normal(size=(3, 7, hidden))
    r = omoe.route(w, x)
    assert_clamps_fire(w, x, r)
    wt = w.map(t32)
    got = imoe.experts(wt, t32(x), routing_of(r))
    assert got.dtype == torch.float32 and got.shape == x.shape
    within("moe", "experts", "output", got, omoe.experts(w, x, r))
    within("moe", "forward", "output", imoe.forward(wt, t32(x)), omoe.forward(w, x))
    within("moe", "shared_expert", "output", imoe.shared_expert(wt, t32(x)), omoe.shared_expert(w, x))
    again = imoe.experts(wt, t32(x), routing_of(r))
    assert torch.equal(got, again), "non-deterministic rerun"


def test_experts_with_zero_or_one_token():
    """Experts 4..7 get no token, experts 1, 2, 3 exactly one, expert 0 three (hand-made routing)."""
    rng = np.random.default_rng(20)
    w = moe_weights(rng)
    x = rng.normal(size=(3, D))
    r = Routing(np.array([[0, 1], [2, 0], [0, 3]]), rng.uniform(0.1, 2.5, size=(3, 2)), None, None, None)
    want = omoe.experts(w, x, r)
    got = imoe.experts(w.map(t32), t32(x), Routing(torch.from_numpy(r.expert_ids), t32(r.weights), None, None, None))
    within("moe", "experts", "output", got, want)
    one = Routing(r.expert_ids[:1], r.weights[:1], None, None, None)
    got1 = imoe.experts(w.map(t32), t32(x[:1]), Routing(torch.from_numpy(one.expert_ids), t32(one.weights), None, None, None))
    within("moe", "experts", "output", got1, omoe.experts(w, x[:1], one))


def test_align_pads_each_expert_to_whole_blocks():
    ids = torch.tensor([[3, 0], [0, 5], [3, 1]])
    sorted_ids, block_expert = imoe.align(ids, 8, 4)
    P = 6
    real = block_expert >= 0
    assert block_expert[real].tolist() == [0, 1, 3, 5]
    assert (block_expert[~real] == -1).all()
    rows = sorted_ids.view(-1, 4)
    for b, e in enumerate(block_expert.tolist()):
        pairs = [p for p in rows[b].tolist() if p < P]
        assert all(int(ids.view(-1)[p]) == e for p in pairs)
    assert sorted(p for p in sorted_ids.tolist() if p < P) == list(range(P))


# ----------------------------------------------------------------------------- NVFP4 W4A16


def nvfp4_case(rng, w: MoEWeights):
    """Oracle-quantized experts (one global per expert and projection) and the oracle-dequantized weights."""
    gu = [onv.quantize(w.gate_up_proj[e]) for e in range(w.num_experts)]
    dn = [onv.quantize(w.down_proj[e] * (1 + e)) for e in range(w.num_experts)]   # distinct global scales
    deq = dataclasses.replace(w, gate_up_proj=np.stack([onv.dequantize(q) for q in gu]),
                              down_proj=np.stack([onv.dequantize(q) for q in dn]))
    return inv.NVFP4Experts(inv.stack(gu), inv.stack(dn)), deq


@pytest.mark.parametrize("hidden", [32, 48])
def test_nvfp4_experts_match_oracle_on_dequantized_weights(hidden):
    rng = np.random.default_rng(30 + hidden)
    w = moe_weights(rng, hidden=hidden, gain=40 * 0.02 * math.sqrt(hidden))
    nv, deq = nvfp4_case(rng, w)
    x = rng.normal(size=(2, 9, hidden))
    r = omoe.route(deq, x)
    assert_clamps_fire(deq, x, r)
    got = imoe.experts(deq.map(t32), t32(x), routing_of(r), nvfp4=nv)
    within("nvfp4", "experts", "output", got, omoe.experts(deq, x, r))
    within("nvfp4", "forward", "output", imoe.forward(deq.map(t32), t32(x), nvfp4=nv), omoe.forward(deq, x))


def test_nvfp4_dequantize_is_bit_exact_and_quantize_bit_identical():
    rng = np.random.default_rng(40)
    w = moe_weights(rng)
    nv, deq = nvfp4_case(rng, w)
    assert np.array_equal(inv.dequantize(nv.gate_up).numpy(), deq.gate_up_proj.astype(np.float32))
    assert np.array_equal(inv.dequantize(nv.down).numpy(), deq.down_proj.astype(np.float32))
    # quantize_experts: each half of gate_up from its own amax, bit-identical to the oracle's per-half quantize
    mine = inv.quantize_experts(t32(w.gate_up_proj), t32(w.down_proj))
    halves = [onv.quantize(w.gate_up_proj[e, h]) for e in range(E) for h in (slice(0, I), slice(I, 2 * I))]
    assert np.array_equal(mine.gate_up.packed.numpy(), np.stack([q.packed for q in halves]).reshape(E, 2 * I, D // 2))
    assert np.array_equal(mine.gate_up.block_scale.view(torch.uint8).numpy(),
                          np.stack([q.block_scale for q in halves]).reshape(E, 2 * I, D // 16).view(np.uint8))
    assert np.array_equal(mine.gate_up.global_decode.numpy(),
                          np.array([q.global_decode for q in halves], np.float32).reshape(E, 2))
    assert torch.equal(mine.down.global_decode, inv.stack(onv.quantize(w.down_proj[e]) for e in range(E)).global_decode)


def test_nvfp4_scale_scan_is_cached_per_tensor_and_redone_after_an_in_place_write():
    """check_experts scans the block scales once per tensor version: a NaN written in place later is
    still refused (the version counter moves), and an unmodified tensor is not rescanned."""
    rng = np.random.default_rng(7)
    E, D, I = 2, 32, 16
    nv = inv.quantize_experts(torch.from_numpy(rng.standard_normal((E, 2 * I, D)).astype(np.float32)),
                              torch.from_numpy(rng.standard_normal((E, D, I)).astype(np.float32)))
    inv.check_experts(nv, E, D, I)
    assert inv._scanned(nv.gate_up.block_scale, nv.gate_up.global_decode)
    nv.down.block_scale.view(torch.uint8)[1, 3, 0] = 0x7F            # NaN in E4M3, written in place
    with pytest.raises(ValueError, match="nvfp4.down.block_scale: contains NaN"):
        inv.check_experts(nv, E, D, I)
