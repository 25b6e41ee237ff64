"""The tie-aware selection comparison itself: accepts any choice among tied pools, nothing else."""
from __future__ import annotations

import numpy as np
import pytest

from invariants.compare import compare_selection

# one row, 12 cached tokens in 3 pools of 4, the query sees all; tokens 12, 13 are a tail (no pool)
TPOOL = np.array([[0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, -1, -1]])
CANDS = np.ones((1, 1, 3), bool)


def _row(tokens, width=10):
    return np.array([[tokens + [-1] * (width - len(tokens))]])


def _cmp(cand, scores, k=1, ref=None):
    ref = _row([4, 5, 6, 7, 12, 13]) if ref is None else ref
    return compare_selection(_row(cand), ref, np.array([[scores]]), CANDS, k, TPOOL, eps=1e-6)


def test_the_same_selection_passes():
    assert _cmp([4, 5, 6, 7, 12, 13], [0.1, 0.9, 0.2]).ok


def test_a_tie_at_the_kth_place_accepts_either_pool_and_is_counted():
    r = _cmp([8, 9, 10, 11, 12, 13], [0.1, 0.5, 0.5])
    assert r.ok and r.tie_rows == 1


def test_a_near_tie_outside_eps_is_a_failure():
    r = _cmp([8, 9, 10, 11, 12, 13], [0.1, 0.5, 0.5 - 1e-3])
    assert not r.ok and "tied within" in r.reason


@pytest.mark.parametrize("cand, reason", [
    ([4, 5, 6, 7, 12], "tail tokens"),
    ([4, 5, 6, 12, 13], "partial pool"),
    ([4, 5, 6, 7, 7, 12, 13], "duplicated"),
    ([4, 5, 6, 7, 12, 13, 99], "out of range"),
    ([0, 1, 2, 3, 4, 5, 6, 7, 12, 13], "pools"),
], ids=["tail omitted", "partial pool", "duplicate index", "index out of range", "one pool too many"])
def test_wrong_selections_are_refused_with_the_reason(cand, reason):
    r = _cmp(cand, [0.1, 0.9, 0.2])
    assert not r.ok and reason in r.reason and r.first_bad == (0, 0)


def test_a_width_mismatch_is_refused():
    r = compare_selection(_row([4], 9), _row([4]), np.zeros((1, 1, 3)), CANDS, 1, TPOOL, 1e-6)
    assert not r.ok and "width" in r.reason


def test_a_broken_exact_contract_names_how_many_elements_differ_and_the_first_one():
    import torch

    from invariants.compare import first_difference
    from invariants.contracts import judge, lookup
    from invariants.report import describe

    codes = torch.tensor([[0x21, 0x08], [0x43, 0x65]], dtype=torch.uint8)
    want = np.array([[0x21, 0x00], [0x43, 0x65]], dtype=np.uint8)
    assert first_difference(codes, want) == "1 of 4 elements differ; first at (0, 1): candidate 0x08 vs reference 0x00"
    assert first_difference(np.array([1.0, np.nan]), np.array([1.0, np.nan])) == "equal"
    v = judge(lookup("nvfp4", "quantize", "codes", "exact"), "float32", codes, want)
    assert not v.ok and describe(v).endswith("NOT bitwise equal: 1 of 4 elements differ; first at (0, 1): "
                                             "candidate 0x08 vs reference 0x00"), describe(v)


def test_a_broken_exact_comparison_names_the_first_differing_element_in_the_checks_terms():
    from invariants.compare import Comparison
    from invariants.contracts import judge_comparison, lookup
    from invariants.report import describe

    want = np.zeros((2, 5, 3))
    got = want.copy()
    got[1, 3, 1] = 7.0
    got[1, 4, 0] = 2.0
    cmp = Comparison("chunked", "causal", got, want, kind="exact", axes=("batch", "token", "expert"))
    v = judge_comparison(lookup("kda", "chunked", "causal", "exact"), "float32", cmp)
    line = describe(v)
    assert not v.ok and "\n" not in line
    assert line.endswith("NOT bitwise equal: 2 of 30 elements differ; first at token 3, expert 1 (batch 1): "
                         "candidate 7 vs reference 0"), line


def test_a_tolerance_failure_names_its_worst_element_by_axis():
    from invariants.compare import Comparison
    from invariants.contracts import judge_comparison, lookup
    from invariants.report import describe

    ref = np.ones((1, 4, 2))
    got = ref.copy()
    got[0, 2, 1] = 3.0
    cmp = Comparison("chunked_prefill", "output_vs_prefill", got, ref, kind="self_consistency",
                     axes=("batch", "token", "channel"))
    v = judge_comparison(lookup("kda", "chunked_prefill", "output_vs_prefill", "self_consistency"), "float32", cmp)
    assert not v.ok and "worst at token 2, channel 1 (batch 0): candidate 3 vs reference 1" in describe(v)


def test_axes_that_do_not_fit_the_reference_are_the_checks_own_mistake():
    from invariants.compare import Comparison
    from invariants.contracts import judge_comparison, lookup

    cmp = Comparison("chunked", "causal", np.zeros((2, 3)), np.zeros((2, 3)), kind="exact", axes=("token",))
    with pytest.raises(ValueError, match=r"axes \('token',\) name 1 dimensions, the reference has 2"):
        judge_comparison(lookup("kda", "chunked", "causal", "exact"), "float32", cmp)


def test_a_routing_failure_names_its_token():
    from invariants.compare import RoutingReference
    from invariants.contracts import judge_decision, lookup
    from oracle.types import Routing

    scores = np.array([[0.9, 0.1, 0.5, 0.2], [0.1, 0.9, 0.2, 0.5]])
    routing = Routing(np.array([[0], [1]]), np.array([[1.0], [1.0]]), scores, scores, np.zeros((2, 1)))
    ref = RoutingReference(routing, np.zeros(4), 1, 1, 1)
    v = judge_decision(lookup("moe", "route", "expert_ids", "routing"), "float32", np.array([[0], [3]]), ref)
    assert not v.ok and v.detail.startswith("token 1: experts [3] vs oracle [1]"), v.detail
