"""Decision-conditioned verdicts: discrete choices judged tie-aware, outputs against the oracle re-run with
the implementation's own choices, baseline-relative limits capped (contracts.d/defaults.toml [caps]).

These pin the machinery that keeps a bf16 near-tie from false-alarming (a legal flip) or from inflating a
bound (an ill-conditioned baseline), while a choice outside the tie tolerance still fails.
"""
from __future__ import annotations

import numpy as np
import pytest

from invariants import contracts as ct
from invariants import report
from invariants.compare import RoutingReference, compare_experts, compare_selection
from invariants.dsa_checks import token_pool
from oracle import dsa as odsa
from oracle import mla as omla
from oracle import moe as omoe
from oracle.types import LayerDecisions, Routing
from strategies import tensors as tz
from strategies.geometry import DSAGeometry

SAME_MATH = ct.float64_tolerance("same_math")        # the oracle forced vs its own forms


# ----------------------------------------------------------------------------- selections


def test_the_tail_of_a_pool_complete_only_in_another_row_is_tail_not_a_pick():
    """dsa.index false alarm (CPU, `glmgate run`): row 1 is left-padded by one pool, so its last 3 tokens
    belong to a pool that is complete in row 0 only; they are row 1's tail. Reading them as a picked pool
    made the legal choice between pools 0 and 1 (an exact score tie at the k-th place) look wrong."""
    from invariants.dsa_checks import index_inputs
    from invariants.matrix import case_of as case_from_json

    case = case_from_json({"type": "IndexCase", "geometry": {
        "hidden": 32, "heads": 2, "nope_dim": 8, "v_dim": 8, "q_rank": 16, "kv_rank": 16, "index_heads": 16,
        "index_dim": 8, "topk": 8, "kpool": 4}, "batch": 2, "length": 23, "queries": 1, "left_pad": [0, 4],
        "tie": "exact", "family": "normal", "seed": 1428296364})
    w, a, q_lat, mask = index_inputs(case)
    packed = odsa.index_rows(w, a, mask)
    ref = odsa.index(w, a[:, -1:], q_lat[:, -1:], packed, mask[:, -1:])
    tpool = token_pool(packed, w)
    assert (tpool[1, 20:] == -1).all(), "row 1's tail tokens were mapped to a pool"
    assert ref.scores[1, 0, 0] == ref.scores[1, 0, 1]
    cand = ref.indices.copy()
    assert {4, 5, 6, 7} <= set(cand[1, 0].tolist()), "the oracle (lowest index on ties) picks pool 0"
    cand[1, 0] = np.where(np.isin(cand[1, 0], [4, 5, 6, 7]), cand[1, 0] + 4, cand[1, 0])     # pool 1 instead
    r = compare_selection(cand, ref.indices, ref.scores, ref.candidate, ref.k_sel, tpool, eps=1e-4)
    assert r.ok and r.tie_rows == 1, r.reason


def _one_row(scores, cand_pools, ref_pools, eps):
    """3 pools of 2 tokens, k = 1: candidate / oracle pick one pool each."""
    tpool = np.array([[0, 0, 1, 1, 2, 2]])
    rows = [np.array([[sum(([2 * p, 2 * p + 1] for p in pools), []) + [-1]]]) for pools in (cand_pools, ref_pools)]
    return compare_selection(rows[0], rows[1], np.array([[scores]]), np.ones((1, 1, 3), bool), 1, tpool, eps)


@pytest.mark.parametrize("scale", [1.0, 3.0, 100.0])
def test_the_selection_tie_tolerance_scales_with_the_rows_scores(scale):
    """bf16 moves scores in proportion to their size (a "large" input family): a gap of 1% of the row's
    largest score is a tie under eps 3e-2 at every scale, 5% is not."""
    near = _one_row([scale * 1.0, scale * 0.99, 0.0], [1], [0], eps=3e-2)
    far = _one_row([scale * 1.0, scale * 0.95, 0.0], [1], [0], eps=3e-2)
    assert near.ok and near.tie_rows == 1
    assert not far.ok and "tied within" in far.reason


# ----------------------------------------------------------------------------- expert choices


def _routing(biased, k=2, groups=1):
    biased = np.asarray(biased, float)[None]
    N, E = biased.shape
    per = np.sort(biased.reshape(N, groups, E // groups), -1)
    gs = per[..., -1] + per[..., -2]
    ids = np.argsort(-biased, -1, kind="stable")[:, :k]
    return RoutingReference(Routing(ids, np.ones((N, k)), biased, biased, gs), np.zeros(E), k, 1, groups)


def test_an_expert_tied_at_the_kth_score_may_replace_the_oracles_and_is_counted():
    r = compare_experts(np.array([[0, 2]]), _routing([0.9, 0.5, 0.5 - 1e-3, 0.1]), eps=2e-2)
    assert r.ok and r.tie_rows == 1


def test_an_expert_choice_beyond_the_tie_tolerance_fails_with_the_scores():
    r = compare_experts(np.array([[0, 3]]), _routing([0.9, 0.5, 0.4, 0.1]), eps=2e-2)
    assert not r.ok and "experts [0, 3] vs oracle [0, 1]" in r.reason


def test_a_group_choice_within_the_tie_tolerance_is_legal():
    """Two groups of 2, top-1 group: group scores 1.30 vs 1.29 tie within 2e-2, so group 1's experts are fine."""
    ref = _routing([0.7, 0.6, 0.65, 0.64], k=2, groups=2)
    ref = ref._replace(topk_group=1)
    r = compare_experts(np.array([[2, 3]]), ref, eps=2e-2)
    assert r.ok and r.tie_rows == 1


def test_duplicate_or_out_of_range_experts_fail():
    ref = _routing([0.9, 0.5, 0.4, 0.1])
    assert not compare_experts(np.array([[0, 0]]), ref, 2e-2).ok
    assert not compare_experts(np.array([[0, 7]]), ref, 2e-2).ok


# ----------------------------------------------------------------------------- caps and conditioned baselines


def test_a_baseline_above_its_cap_is_ill_conditioned_and_cannot_loosen_the_limit():
    c = ct.lookup("mla", "chunked_prefill", "output")
    cap, floor = c.cap["bfloat16"], c.floor["bfloat16"]
    ref = np.linspace(1, 2, 64)
    base = ref * (1 + 10 * cap)                                  # a baseline far off (it flipped a decision)
    cand = ref * (1 + 2 * c.k * cap)                             # within k x baseline, far beyond k x cap
    v = ct.judge(c, "bfloat16", cand, ref, base)
    assert v.ill_conditioned
    assert v.limit == pytest.approx(c.k * cap + floor)
    assert not v.ok


def test_inputs_whose_exact_arithmetic_errs_above_the_cap_set_the_limit_not_the_cap():
    """A 1-token KDA sublayer in bf16 whose output cancels (H200, kda.sublayer seed 13671): exact
    arithmetic on the bf16-rounded inputs is 0.109 off, baseline and kernel 0.23. The cap (0.03) guards
    against a baseline gone astray; it must not take the limit below what the rounded inputs force."""
    c = ct.lookup("kda", "sublayer", "output")
    cap, floor = c.cap["bfloat16"], c.floor["bfloat16"]
    ref = np.linspace(1, 2, 64)
    held = ref * (1 + 4 * cap)                                   # exact arithmetic, rounded inputs
    base = ref * (1 + 8 * cap)
    v = ct.judge(c, "bfloat16", ref * (1 + 8 * cap), ref, base, held_reference=held)
    assert v.ill_conditioned and v.ok
    assert v.limit == pytest.approx(c.k * 4 * cap + floor)
    # the same candidate without the held reference: the cap holds, and it fails
    assert not ct.judge(c, "bfloat16", ref * (1 + 8 * cap), ref, base).ok
    # ... and with it, a candidate well beyond k x held still fails
    assert not ct.judge(c, "bfloat16", ref * (1 + 2 * c.k * 4 * cap), ref, base, held_reference=held).ok


def test_the_baseline_is_measured_against_its_own_conditioned_reference():
    """The baseline picked other tokens than the candidate: its error counts against the oracle run with
    ITS choice (here exact), so the limit is the floor and a candidate off by 10% fails."""
    c = ct.lookup("mla", "chunked_prefill", "output")
    ref_cand, ref_base = np.linspace(1, 2, 64), np.linspace(-1, 1, 64)
    v = ct.judge(c, "bfloat16", ref_cand * 1.1, ref_cand, ref_base, baseline_reference=ref_base)
    assert v.baseline_err == 0.0 and not v.ill_conditioned and not v.ok
    assert ct.judge(c, "bfloat16", ref_cand, ref_cand, ref_base, baseline_reference=ref_base).ok


def test_every_kernel_replacement_contract_declares_a_cap_for_each_floor_dtype():
    for c in ct.load().values():
        if c.kind == "kernel_replacement":
            assert set(c.floor) <= set(c.cap), f"{c.key}: floors {sorted(c.floor)} but caps {sorted(c.cap)}"


# ----------------------------------------------------------------------------- the oracle re-run with forced decisions


def test_forced_experts_route_with_the_oracles_own_weights_for_them():
    w = tz.moe_weights(np.random.default_rng(1), n_group=1, topk_group=1)
    x = np.random.default_rng(2).standard_normal((5, 32))
    own = omoe.route(w, x)
    forced = np.array([[3, 5]] * 5)
    r = omoe.route(w, x, forced=forced)
    want = own.scores[:, [3, 5]] / (own.scores[:, [3, 5]].sum(-1, keepdims=True) + 1e-20) * w.routed_scaling_factor
    np.testing.assert_array_equal(r.expert_ids, forced)
    np.testing.assert_allclose(r.weights, want, rtol=ct.float64_tolerance("elementwise"))
    np.testing.assert_array_equal(omoe.route(w, x, forced=own.expert_ids).weights, own.weights)
    with pytest.raises(ValueError, match="same expert twice"):
        omoe.route(w, x, forced=np.array([[3, 3]] * 5))


def test_a_forced_selection_is_attended_and_handed_on_with_the_oracles_scores():
    g = DSAGeometry(32, 2, 8, 8, 16, 16, 16, 8, 8, 2)
    rng = np.random.default_rng(3)
    iw, mw = tz.indexer_weights(rng, g), tz.mla_weights(rng, g)
    a = rng.standard_normal((1, 14, g.hidden))
    trace = []
    y, _, own = omla.sublayer(mw, iw, a, trace=trace)
    forced = own.indices.copy()
    forced[0, -1] = np.r_[np.arange(g.topk), -np.ones(g.kpool - 1, int)]    # the first 8 tokens instead
    yf, _, used = omla.sublayer(mw, iw, a, forced=forced)
    np.testing.assert_array_equal(used.indices, forced)
    np.testing.assert_array_equal(used.scores, own.scores)
    np.testing.assert_array_equal(trace[0].indices, own.indices)
    np.testing.assert_array_equal(yf[0, :-1], y[0, :-1])
    q, _, c = omla.project(mw, a)
    o, _ = omla.expanded(mw, q, c, forced)
    np.testing.assert_allclose(yf, o.reshape(1, 14, -1) @ mw.o_proj.T, rtol=SAME_MATH, atol=SAME_MATH)


def test_the_model_forced_with_its_own_decisions_is_the_unforced_model():
    from invariants import model_checks as mdc

    w = mdc.oracle_weights("tiny", 5, 0)
    ids = np.random.default_rng(4).integers(1, w.geometry.vocab_size, (2, 13))
    mask = np.ones_like(ids)
    mask[1, :3] = 0
    whole = mdc.oracle_run(w, ids, mask)
    assert any(t.selection is not None for t in whole.trace) and any(t.routing is not None for t in whole.trace)
    forced = mdc.oracle_run(w, ids, mask, whole.decisions)
    np.testing.assert_array_equal(forced.logits, whole.logits)
    other = [LayerDecisions(d.selection, None if d.experts is None else np.roll(d.experts, 1, axis=-1))
             for d in whole.decisions]                    # the same expert sets, another order
    assert mdc._same_decisions(other, whole.decisions)


def test_experts_from_a_group_tied_at_the_cut_are_judged_within_that_group():
    """moe.route on the H200 (bf16): groups 1 and 2 tie at the topk_group-th place (0.8 vs 0.7999); the
    candidate kept group 2 and took its best expert, 0.05 below the oracle's k-th pick from group 1.
    Within the groups it kept that is the exact top-k: a legal flip, not an expert 0.05 too low."""
    biased = [0.9, 0.2, 0.3, 0.5, 0.45, 0.3499, 0.1, 0.05]          # groups of 2: 1.1, 0.8, 0.7999, 0.15
    ref = _routing(biased, k=2, groups=4)._replace(topk_group=2)
    ok = compare_experts(np.array([[0, 4]]), ref, eps=2e-2)
    assert ok.ok and ok.tie_rows == 1, ok.reason
    assert not compare_experts(np.array([[0, 5]]), ref, eps=2e-2).ok      # not group 2's best
    assert not compare_experts(np.array([[3, 4]]), ref, eps=2e-2).ok      # drops group 0 (beats the cut)


def test_the_held_sublayer_rounds_the_projections_so_a_cancelling_token_is_not_called_a_failure():
    """Stop 42's GPU gate, kda.paths seed 8, shrunk: a "large" input whose token 22 has a core output at 0.0072
    of its head's typical scale, so the gated norm magnifies every rounding before it. Ours and the torch
    baseline in bf16 both err 0.132; the inputs' rounding alone 0.014; with the projections' outputs held in
    bf16 (as every bf16 implementation returns them, and the conv state stores z) 0.132. The torch baseline,
    judged against itself, must pass; the held reference must see the conditioning; a well-conditioned
    input's held error must stay at bf16's scale (the hold cannot loosen ordinary limits)."""
    import torch
    from impl import registry
    from invariants.engine import run_one
    from invariants.kda_checks import SublayerCase, call_sublayer, sublayer_inputs
    from invariants.matrix import BY_NAME
    from invariants.target import ORACLE, Target
    from strategies.geometry import KDAGeometry

    t = Target(registry.get("torch"), "cpu", torch.bfloat16)
    geo = KDAGeometry(heads=2, head_dim=16, hidden=32, conv_width=4, lower_bound=-5.0)
    case = SublayerCase(geo, 1, 63, (6,), (63,), False, "large", 65479)
    assert all(v.ok for v in run_one(BY_NAME["kda.paths"], case, t, t))

    def held_error(c):
        w, x, mask, state = sublayer_inputs(c)
        y = call_sublayer(ORACLE, w, x, state, mask)[0]
        yh = call_sublayer(t.held_oracle(), w, x, state, mask)[0]
        return float(np.linalg.norm(yh - y) / np.linalg.norm(y))

    assert held_error(case) > 0.1
    assert held_error(case._replace(family="normal", seed=3)) < 1e-2


def test_two_paths_are_not_asked_to_agree_closer_than_the_rounded_inputs_allow():
    """Stop 43's GPU matrix, kda.paths with the softplus gate at seed 28, shrunk: a 9-token sublayer (one head,
    left-padded by 8) cut 8 + 1. Ours' pieces and its one call differed by rel_l2 0.0312 at the 9th token's output
    (bound 0.03), while exact arithmetic on the inputs as bf16 holds them errs 0.0714 against the exact inputs
    there: the example's own rounding sensitivity. The self-consistency bound takes that error as its floor (as a
    kernel_replacement limit does); it never drops below the bound, and a discrepancy beyond it still fails."""
    c = ct.lookup("kda", "chunked_prefill", "output_vs_prefill", "self_consistency")
    bound = c.bound["bfloat16"]
    ref = np.linspace(1, 2, 64)
    exact = ref.copy()
    held = ref * (1 + 2.4 * bound)                               # exact arithmetic on the rounded inputs
    v = ct.judge(c, "bfloat16", ref * (1 + 1.04 * bound), ref, conditioning=(held, exact))
    assert v.ok and v.ill_conditioned and v.held_err == pytest.approx(2.4 * bound)
    assert v.limit == pytest.approx(2.4 * bound)
    assert "ILL-CONDITIONED" in report.describe(v)
    # without the conditioning the bound holds, and it fails
    assert not ct.judge(c, "bfloat16", ref * (1 + 1.04 * bound), ref).ok
    # a well-conditioned example keeps the bound ...
    calm = ct.judge(c, "bfloat16", ref * (1 + 1.04 * bound), ref, conditioning=(ref * (1 + 0.1 * bound), exact))
    assert not calm.ok and calm.limit == bound and not calm.ill_conditioned
    # ... and paths further apart than the rounded inputs' error fail even where it is large
    assert not ct.judge(c, "bfloat16", ref * (1 + 3 * bound), ref, conditioning=(held, exact)).ok


def test_the_shrunk_paths_case_is_ill_conditioned_in_bf16_and_kda_paths_gives_its_comparisons_the_conditioning():
    """The case above: the held reference's error on the 9th token is above the self-consistency bound, and the
    kda.paths check hands every self-consistency comparison its (held, exact) pair."""
    import torch
    from impl import registry
    from invariants.kda_checks import SublayerCase, call_sublayer, run_paths, sublayer_inputs
    from invariants.target import ORACLE, Target
    from strategies.geometry import KDAGeometry

    t = Target(registry.get("torch"), "cpu", torch.bfloat16)
    geo = KDAGeometry(heads=1, head_dim=16, hidden=32, conv_width=4, lower_bound=None)
    case = SublayerCase(geo, 1, 9, (8,), (8, 1), False, "normal", 4)
    w, x, mask, state = sublayer_inputs(case)
    y = call_sublayer(ORACLE, w, x, state, mask)[0]
    yh = call_sublayer(t.held_oracle(), w, x, state, mask)[0]
    assert float(np.linalg.norm(yh - y) / np.linalg.norm(y)) > ct.lookup(
        "kda", "chunked_prefill", "output_vs_prefill", "self_consistency").bound["bfloat16"]
    sc = [c for c in run_paths(case, t, t) if c.kind == "self_consistency"]
    assert sc and all(c.conditioning is not None for c in sc)


def test_kda_batch_padded_rows_carry_their_conditioning_and_a_padding_bug_still_fails():
    """The other KDA self-consistency comparison of a sublayer's rows (kda.batch: a row left-padded in a batch vs
    the row alone unpadded) takes the same floor: each comparison carries the row's (held, exact) oracle pair.
    In float32 the held error is float32's, so the bound stands; a candidate whose padded row is 5 % off fails."""
    import dataclasses

    import torch
    from impl import registry
    from invariants.batch_checks import KDABatchCase, _sublayer_padded
    from invariants.target import Target
    from strategies.geometry import KDAGeometry

    t = Target(registry.get("torch"), "cpu", torch.float32)
    geo = KDAGeometry(heads=2, head_dim=16, hidden=32, conv_width=4, lower_bound=-5.0)
    case = KDABatchCase(geo, "sublayer", "padded", (9, 30), 0, False, "normal", 3)
    padded = [c for c in _sublayer_padded(case, t) if c.quantity == "padded"]
    assert len(padded) == 3 and all(c.conditioning is not None for c in padded)
    out = padded[0]
    c = ct.lookup("kda", "sublayer", "padded", "self_consistency")
    v = ct.judge_comparison(c, "float32", out)
    assert v.ok and not v.ill_conditioned and v.limit == c.bound["float32"]
    assert not ct.judge_comparison(c, "float32", dataclasses.replace(out, candidate=out.candidate * 1.05)).ok
