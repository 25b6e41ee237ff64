"""impl.serving.Engine's own API: bad calls are refused naming the problem and move nothing.

The serving scenarios themselves (admit, padded batches, chunked prefill, packed steps, speculation and
rollback, fork, cancel, reorder) are the check `serving.state_machine` (invariants/serving_checks.py),
run by tests/test_matrix.py on every target; its mutants are caught in tests/test_framework_mutants.py.
"""
from __future__ import annotations

import numpy as np
import pytest

from impl.serving import Engine
from invariants.serving_checks import _decodes, oracle_model
from oracle.types import KDAState


def _engine():
    """An oracle engine with request 1 (prompt pending) and request 2 (prefilled)."""
    e = Engine(oracle_model())
    e.admit(1, [3, 1, 4])
    e.admit(2, [2, 7])
    e.prefill_chunk(2, 2)
    return e


# a good row first: the bad one after it must still leave every request as it was
BAD_STEPS = [
    ("step([(1, [3]), (9, [1])])", [(1, [3]), (9, [1])], KeyError, "not live"),
    ("step([(2, [1]), (2, [])])", [(2, [1]), (2, [])], ValueError, "two rows"),
    ("step([(2, [5]), (1, [4])])", [(2, [5]), (1, [4])], ValueError, "next of them"),
    ("step([(1, [3]), (2,)])", [(1, [3]), (2,)], ValueError, "pair"),
    ("step([(2, [5]), (1, [3, 1], True)])", [(2, [5]), (1, [3, 1], True)], ValueError, "finished prompt"),
    ("step([(1, [3]), (2, [5], True)])", [(1, [3]), (2, [5], True)], ValueError, "at least one draft"),
]


@pytest.mark.parametrize("rows,exc,match", [b[1:] for b in BAD_STEPS], ids=[b[0] for b in BAD_STEPS])
def test_step_refuses_bad_rows_and_moves_nothing(rows, exc, match):
    e = _engine()
    before = {r: (e.history(r), e.pending(r)) for r in e.live()}
    with pytest.raises(exc, match=match):
        e.step(rows)
    assert {r: (e.history(r), e.pending(r)) for r in e.live()} == before


BAD_ADMITS = [
    ("admit_padded([(5, [1]), (5, [2])])", [(5, [1]), (5, [2])], "distinct"),
    ("admit_padded([(2, [1]), (5, [2])])", [(2, [1]), (5, [2])], "already live"),
    ("admit_padded([(5, []), (6, [2])])", [(5, []), (6, [2])], "empty prompt"),
    ("admit_padded([])", [], "distinct"),
]


@pytest.mark.parametrize("items,match", [b[1:] for b in BAD_ADMITS], ids=[b[0] for b in BAD_ADMITS])
def test_admit_padded_refuses_bad_items(items, match):
    e = _engine()
    with pytest.raises(ValueError, match=match):
        e.admit_padded(items)
    assert e.live() == [1, 2]


def test_a_verify_row_returns_every_position_and_accept_keeps_the_sampled_token_and_a_drafts():
    e = _engine()
    out = e.step([(1, [3]), (2, [5, 1, 4], True)])
    assert out[1].shape[0] == 3
    np.testing.assert_allclose(out[1], _decodes((2, 7), (5, 1, 4)), rtol=0, atol=1e-10)
    with pytest.raises(ValueError, match=r"a=3 not in \[0, 2\]"):
        e.accept(2, 3)
    e.accept(2, 1)
    assert e.history(2) == [2, 7, 5, 1]
    np.testing.assert_array_equal(e.logits(2), out[1][1])


def test_a_recycled_slot_is_handed_out_uncleared_and_the_first_chunk_ignores_it():
    e = _engine()
    old = e.state(2)
    for layer in old.layers:
        if isinstance(layer, KDAState):
            layer.recurrent.fill(np.nan)
    e.cancel(2)
    e.admit(5, [8])
    assert e.requests[5].slot is not None and not e.state(5).layers[0]   # recycled, not yet its state
    e.prefill_chunk(5, 1)
    clean = Engine(oracle_model())
    clean.admit(5, [8])
    clean.prefill_chunk(5, 1)
    assert e.state(5).layers[0] is old.layers[0]                         # the same buffers, now written
    assert e.state(5).equal(clean.state(5)) and np.isfinite(e.logits(5)).all()
