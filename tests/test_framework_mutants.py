"""Every planted mutant is caught by the check designed for it (`glmgate zoo` in the suite).

A property no mutant breaks is untested; a mutant no property catches is a gap. Both directions are
asserted: each mutant fails its designated check (with a shrunk case), and each KDA check of the
matrix is the designated catcher of at least one mutant.
"""
from __future__ import annotations

import pytest
import torch

from gate.runner import run_check
from impl import mutants, registry
from invariants.matrix import BY_NAME, CHECKS
from invariants.target import Target
from oracle.config import Geometry

TINY = Geometry.preset("tiny")


def _check_of(m):
    names = [c for c in BY_NAME if m.caught_by.startswith(c + ".") or m.caught_by == c]
    assert names, f"mutant {m.name}: caught_by {m.caught_by!r} names no check of the matrix"
    return BY_NAME[max(names, key=len)]


MATRIX_MECHANISMS = {c.mechanism for c in CHECKS}
# serving-state mutants break an engine, not a mechanism: the serving state machine catches them
STATE_MACHINE = sorted(n for n, m in {**mutants.MUTANTS, **getattr(mutants, "SERVING_MUTANTS", {})}.items()
                       if m.mechanism == "serving")


@pytest.mark.parametrize("name", sorted(n for n, m in mutants.MUTANTS.items() if m.mechanism in MATRIX_MECHANISMS))
def test_mutant_is_caught_by_its_check_with_a_shrunk_case(name):
    m = mutants.MUTANTS[name]
    chk = _check_of(m)
    cand = Target(registry.get(f"mutant:{name}"), "cpu", torch.float32)
    base = Target(registry.get("torch"), "cpu", torch.float32)
    r = run_check(chk, TINY, cand, base, "ci", max_examples=30)
    assert r.status == "fail", f"{name} escaped {chk.name} ({r.examples} examples, worst {r.worst_line})"
    assert r.shrunk_case is not None and r.repro.startswith("glmgate repro '")


def test_every_check_of_the_matrix_is_some_mutants_designated_catcher():
    covered = {_check_of(m).name for m in mutants.MUTANTS.values()}
    missing = [c.name for c in CHECKS if c.name not in covered]
    assert not missing, f"checks no planted mutant is designed to break: {missing}"


def test_every_mutant_belongs_to_the_matrix_or_the_serving_state_machine():
    other = sorted(n for n, m in mutants.MUTANTS.items()
                   if m.mechanism not in MATRIX_MECHANISMS and m.mechanism != "serving")
    assert not other, f"mutants no check and no state machine runs: {other}"
    if STATE_MACHINE:
        import pathlib
        text = (pathlib.Path(__file__).with_name("test_serving_state.py")).read_text()
        missing = [n for n in STATE_MACHINE if n not in text]
        assert not missing, f"serving mutants tests/test_serving_state.py never runs: {missing}"
