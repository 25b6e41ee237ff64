"""Every planted mutant is caught by the check designed for it (`glmgate zoo` in the suite).

A property no mutant breaks is untested; a mutant no property catches is a gap. Both directions are
asserted: each mutant fails its designated check (with a shrunk case) in float32 (the CPU's dtype)
AND in bfloat16 (inputs rounded to bf16 under the bf16 contracts, the CPU's stand-in for the GPU run;
whole-model mutants in float32 only, see CPU_FLOAT32_ONLY), or only in the dtype its row names
(Mutant.dtype: a property of that dtype's contract); and each check
of the matrix is the designated catcher of at least one mutant.
"""
from __future__ import annotations

import pytest

from invariants.engine import run_check
from impl import mutants, registry
from invariants.contracts import load
from invariants.matrix import BY_NAME, CHECKS
from invariants.target import DTYPES, Target
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


# whole-model mutants run model.paths through five layers of interpreted kernels (~30-70 s an example
# set in bf16); their bf16 verdict is the GPU zoo's (`glmgate zoo --device cuda`), CI keeps float32
CPU_FLOAT32_ONLY = ("model",)


def _dtypes(m) -> tuple[str, ...]:
    """The dtypes a mutant must be caught in on the CPU: its own, else float32 and bfloat16 (float32
    only for CPU_FLOAT32_ONLY mechanisms)."""
    if m.dtype:
        return (m.dtype,)
    return ("float32",) if m.mechanism in CPU_FLOAT32_ONLY else ("float32", "bfloat16")


@pytest.mark.parametrize("name,dtype", [(n, d) for n, m in sorted(mutants.MUTANTS.items())
                                        if m.mechanism in MATRIX_MECHANISMS for d in _dtypes(m)])
def test_mutant_is_caught_by_its_check_with_a_shrunk_case(name, dtype):
    m = mutants.MUTANTS[name]
    chk = _check_of(m)
    cand = Target(registry.get(f"mutant:{name}"), "cpu", DTYPES[dtype])
    base = Target(registry.get("torch"), "cpu", DTYPES[dtype])
    r = run_check(chk, TINY, cand, base, "ci", max_examples=30)
    assert r.status == "fail", f"{name} escaped {chk.name} in {dtype} ({r.examples} examples, worst {r.worst_line})"
    assert r.shrunk_case is not None and r.repro.startswith("glmgate repro '")


def _contract_dtypes(caught_by: str) -> set:
    """The dtypes the contracts of `caught_by` ("mechanism.path.quantity") declare a bound for."""
    key = tuple(caught_by.split(".", 2))
    found = [c for (mech, path, qty, kind), c in load().items() if (mech, path, qty) == key and kind != "bench_gate"]
    assert found, f"caught_by {caught_by!r} names no declared contract"
    return {d for c in found for d in (*c.floor, *c.bound, *(d for t in c.gate.values() if isinstance(t, dict)
                                                              for d in t))}


def test_a_mutant_pinned_to_a_dtype_names_one_its_contract_declares():
    pinned = {n: m for n, m in mutants.MUTANTS.items() if m.dtype is not None}
    # the bf16 run cannot see a bf16 rounding of a float32 state: that property is float32's
    assert pinned.get("kda_state_bf16_across_chunks") and pinned["kda_state_bf16_across_chunks"].dtype == "float32"
    for n, m in pinned.items():
        assert m.dtype in DTYPES, f"{n}: dtype {m.dtype!r} not one of {sorted(DTYPES)}"
        declared = _contract_dtypes(m.caught_by)
        assert m.dtype in declared, f"{n}: dtype {m.dtype!r}, but {m.caught_by} declares {sorted(declared)}"


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
