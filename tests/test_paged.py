"""Paged caches (docs/candidates.md section 13): the float64 reference means what the document says,
our implementations never read a slot no row owns, and the optional functions are never filled in from
the fallback (a candidate without them is not run on their checks, said before any example).

The matrix checks (invariants/paged_checks.py) compare candidates with the oracle's CONTIGUOUS functions;
here the oracle's own paged functions are held to those, on rows built without oracle/paged.py.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from impl import registry
from invariants.paged_checks import G0, PAGE_SIZES, page_out, paged_selection
from oracle import dsa as odsa
from oracle import mla as omla
from strategies import tensors as tz

F32 = torch.float32


def _t(x):
    return torch.as_tensor(np.asarray(x), dtype=F32)


def _i(x):
    return torch.as_tensor(np.asarray(x), dtype=torch.int64)


@st.composite
def _layouts(draw):
    """(page size, lengths, queries, seed): rows of different lengths, exact multiples half the time."""
    G = draw(st.sampled_from(PAGE_SIZES))
    lengths = tuple(draw(st.one_of(st.integers(1, 30 // G).map(lambda n: n * G), st.integers(1, 30)))
                    for _ in range(draw(st.integers(1, 3))))
    return G, lengths, draw(st.integers(1, min(lengths))), draw(st.integers(0, 2 ** 16))


def _indexer_case(G, lengths, S, seed, poison="large"):
    rng = np.random.default_rng(seed)
    w = tz.indexer_weights(rng, G0)
    B, T = len(lengths), max(lengths)
    a, q_lat = rng.standard_normal((B, T, G0.hidden)), rng.standard_normal((B, T, G0.q_rank))
    rows = [odsa.index_rows(w, a[b:b + 1, T - n:])[0] for b, n in enumerate(lengths)]
    pages, table = page_out(rows, G, 1, poison, np.random.default_rng(seed + 1), flag=True)
    return w, a[:, -S:], q_lat[:, -S:], rows, pages, table


@settings(max_examples=15, deadline=None, database=None)
@given(_layouts())
def test_the_oracle_paged_indexer_is_the_contiguous_one_on_left_padded_rows_in_row_frames(layout):
    G, lengths, S, seed = layout
    w, a, q_lat, rows, pages, table = _indexer_case(G, lengths, S, seed)
    T = max(lengths)
    # the contiguous cache built by hand: zero rows (valid flag 0) before each row's own
    packed = np.zeros((len(lengths), T, rows[0].shape[-1]))
    for b, r in enumerate(rows):
        packed[b, T - len(r):] = r
    want = odsa.index(w, a, q_lat, packed)
    got = odsa.index_paged(w, a, q_lat, pages, table, G, np.array(lengths))
    pad = T - np.array(lengths)
    assert np.array_equal(np.where(got.indices >= 0, got.indices + pad[:, None, None], -1), want.indices)
    assert np.array_equal(got.scores, want.scores) and np.array_equal(got.candidate, want.candidate)
    assert np.array_equal(got.pool_first + pad, want.pool_first)
    for b, n in enumerate(lengths):
        assert got.indices[b].max(initial=-1) < n


@settings(max_examples=15, deadline=None, database=None)
@given(_layouts())
def test_the_oracle_paged_attention_is_the_contiguous_one_on_rows_at_the_start(layout):
    G, lengths, S, seed = layout
    rng = np.random.default_rng(seed)
    mw = tz.mla_weights(rng, G0)
    T = max(lengths)
    q, _, c = omla.project(mw, rng.standard_normal((len(lengths), T, G0.hidden)))
    idx = paged_selection(rng, lengths, S, G0.slots)
    latent = np.where(np.arange(T)[None, :, None] < np.array(lengths)[:, None, None], c, 7.0)
    pages, table = page_out([c[b, :n] for b, n in enumerate(lengths)], G, 2, "nan", rng)
    o, s = omla.absorbed_paged(mw, q[:, -S:], pages, table, G, np.array(lengths), idx)
    o_ref, s_ref = omla.absorbed(mw, q[:, -S:], latent, idx)
    assert np.array_equal(o, o_ref) and np.array_equal(s, s_ref)


@pytest.mark.parametrize("G, lengths", [(4, (12, 8)), (3, (7, 9, 2)), (1, (5,))])
def test_our_paged_functions_never_read_a_slot_no_row_owns(G, lengths):
    """Metamorphic: the same rows under NaN and under |1e4| poison give bit-identical results, for the
    Triton implementation and the torch baseline (a read outside a row's pages would differ)."""
    S = 2 if min(lengths) >= 2 else 1
    for name in ("triton", "torch"):
        impl = registry.get(name)
        sels = []
        for poison in ("nan", "large"):
            w, a, q_lat, _, pages, table = _indexer_case(G, lengths, S, 5, poison)
            sels.append(impl.dsa.index_paged(w.map(_t), _t(a), _t(q_lat), _t(pages), _i(table), G, _i(lengths)))
        assert torch.equal(sels[0].indices, sels[1].indices), name
        assert torch.equal(sels[0].scores, sels[1].scores), name
        rng = np.random.default_rng(3)
        mw = tz.mla_weights(rng, G0)
        q, _, c = omla.project(mw, rng.standard_normal((len(lengths), max(lengths), G0.hidden)))
        idx = paged_selection(rng, lengths, S, G0.slots)
        outs = []
        for poison in ("nan", "large"):
            pages, table = page_out([c[b, :n] for b, n in enumerate(lengths)], G, 1, poison, np.random.default_rng(4))
            o, _ = impl.mla.absorbed_paged(mw.map(_t), _t(q[:, -S:]), _t(pages), _i(table), G, _i(lengths), _i(idx))
            outs.append(o)
        assert torch.equal(outs[0], outs[1]) and bool(torch.isfinite(outs[0]).all()), name


class RowsOnly:
    """A dsa namespace with the contiguous index_rows only."""

    class dsa:
        @staticmethod
        def index_rows(w, a, mask=None):
            from impl import dsa
            return dsa.index_rows(w, a, mask)


class PagedOnly:
    """A dsa namespace with the optional index_paged only."""

    class dsa:
        @staticmethod
        def index_paged(*args, **kwargs):
            from impl import dsa
            return dsa.index_paged(*args, **kwargs)


class _Lines:
    def __init__(self):
        self.lines = []

    def print(self, text, **_):
        self.lines.append(text)


def test_an_optional_function_a_candidate_lacks_is_not_ours_and_its_check_is_not_run_saying_why():
    from gate.merge_gate import provided_checks
    from invariants.matrix import BY_NAME

    impl = registry.get("test_paged:RowsOnly")
    assert getattr(impl.dsa, "index_paged", None) is None          # the fallback's is hidden
    console = _Lines()
    runnable, rows = provided_checks([BY_NAME["dsa.index"], BY_NAME["dsa.index_paged"]], impl, console)
    assert [c.name for c in runnable] == ["dsa.index"]
    assert [(r.check, r.status) for r in rows] == [("dsa.index_paged", "not run")]
    assert rows[0].message.startswith("not covered (not provided)") and "dsa.index_paged" in rows[0].message
    assert any("dsa.index_paged: not covered (not provided)" in line for line in console.lines)


def test_a_candidate_providing_only_an_optional_function_composes_and_runs_on_its_check():
    from gate.merge_gate import provided_checks
    from invariants.matrix import BY_NAME

    impl = registry.get("test_paged:PagedOnly")
    assert sorted(impl.dsa.provided) == ["index_paged"]
    runnable, rows = provided_checks([BY_NAME["dsa.index_paged"]], impl, _Lines())
    assert [c.name for c in runnable] == ["dsa.index_paged"] and not rows
