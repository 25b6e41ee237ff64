"""Every call a mechanism namespace must refuse (BAD_CALLS of invariants/<mechanism>_checks.py, gathered by
invariants/matrix.py), on every target it names: the Triton implementation and the torch baseline on the
CPU in float32, and the float64 oracle. Each must raise a ValueError whose message matches the row (the
argument named), as PyTorch's OpInfo error_inputs; a new row is a new test here with no edit to this file.
"""
from __future__ import annotations

import pytest

from invariants.check import TARGETS
from invariants.matrix import BAD_CALLS
from invariants.target import ORACLE, cpu_targets


def _target(name: str):
    """The target a row runs on: triton / torch on the CPU in float32, or the oracle."""
    return {"triton": cpu_targets()[0], "torch": cpu_targets()[1], "oracle": ORACLE}[name]


CASES = [pytest.param(mech, row, name, id=f"{mech}:{row.id}-{name}")
         for mech, row in BAD_CALLS for name in TARGETS if name in row.targets]


@pytest.mark.parametrize("mech, row, target", CASES)
def test_bad_call_is_refused_naming_the_argument(mech, row, target):
    t = _target(target)
    with pytest.raises(ValueError, match=row.match):
        row.call(getattr(t.impl, mech), t)


def test_every_row_names_known_targets_and_a_unique_id():
    """A typo in `targets` would silently drop a row; two rows of one id would hide one in reports."""
    ids = [(m, r.id) for m, r in BAD_CALLS]
    assert len(ids) == len(set(ids)), "duplicate BAD_CALLS ids"
    assert all(r.targets and set(r.targets) <= set(TARGETS) for _, r in BAD_CALLS)
