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
