"""Every planted mutant is caught by the check designed for it (`glmgate zoo` in the suite).

A property no mutant breaks is untested; a mutant no property catches is a gap. Both directions are
asserted: each mutant fails its designated check (with a shrunk case, or the pinned example that
the check replays first) in float32 (the CPU's dtype) AND in bfloat16 (inputs rounded to bf16 under the
bf16 contracts, the CPU's stand-in for the GPU run; whole-model and serving mutants in float32 only, see
CPU_FLOAT32_ONLY), or only in the dtype its decorator names (Mutant.dtype: a property of that dtype's
contract); and each check of the matrix is the designated catcher of at least one mutant.
"""
from __future__ import annotations

import dataclasses
import importlib
import inspect

import pytest

from impl import mutants, registry
from invariants.contracts import load
from invariants.engine import run_check
from invariants.matrix import BY_NAME, CHECKS
from invariants.target import DTYPES, Target
from oracle.config import Geometry

TINY = Geometry.preset("tiny")


def _check_of(m):
    assert m.check in BY_NAME, f"mutant {m.name}: check {m.check!r} is no check of the matrix"
    return BY_NAME[m.check]


# whole-model and serving mutants run five decoder layers of interpreted kernels (model.paths: ~30-70 s
# an example set in bf16; a serving program: 15-40 s); their bf16 verdict is the GPU zoo's (`glmgate zoo
# --device cuda`), CI keeps float32
CPU_FLOAT32_ONLY = ("model", "serving")
# examples drawn after the pinned cases: a serving program costs seconds a token, and the pinned
# programs are built to catch every serving mutant
BUDGET = {"serving": 3}


def _implementation(m):
    """The mutant as the zoo runs it; a serving-engine mutant (its bug in an Engine hook, never in a kernel)
    over the torch kernels here: its pinned programs then take ~1 s instead of 6-30 s of interpreted Triton
    (stop 41, CI's 15-minute budget). `glmgate zoo` and the GPU zoo run it over our Triton kernels."""
    impl = registry.get(f"mutant:{m.name}")
    if m.mechanism == "serving":
        return registry.get("torch")._replace(name=impl.name, serving=impl.serving)
    return impl


def _dtypes(m) -> tuple[str, ...]:
    """The dtypes a mutant must be caught in on the CPU: its own, else float32 and bfloat16 (float32
    only for CPU_FLOAT32_ONLY mechanisms)."""
    if m.dtype:
        return (m.dtype,)
    return ("float32",) if m.mechanism in CPU_FLOAT32_ONLY else ("float32", "bfloat16")


# mutants planted in kernels that are not ours (the whole-chunk intra kernel, step 18's pair, step 24's fused gate:
# kept to replay their measurements): marked slow, CI deselects them (`pytest -m slow` runs them; `glmgate zoo`
# always does)
NOT_OURS = ("kda_intra_anchor_middle", "kda_intra_k_tiles_not_accumulated", "kda_intra_strong_decay_pairs_skipped",
            "kda_intra_blocked_x30_drops_a_term", "kda_gate_fused_dt_bias_dropped")


@pytest.mark.parametrize("name,dtype", [pytest.param(n, d, marks=[pytest.mark.slow] if n in NOT_OURS else [])
                                        for n, m in sorted(mutants.MUTANTS.items()) if not m.device
                                        for d in _dtypes(m)])
def test_mutant_is_caught_by_its_check_with_a_shrunk_case(name, dtype):
    m = mutants.MUTANTS[name]
    chk = _check_of(m)
    cand = Target(_implementation(m), "cpu", DTYPES[dtype])
    base = Target(registry.get("torch"), "cpu", DTYPES[dtype])
    r = run_check(chk, TINY, cand, base, "ci", max_examples=BUDGET.get(m.mechanism, 30))
    assert r.status == "fail", f"{name} escaped {chk.name} in {dtype} ({r.examples} examples, worst {r.worst_line})"
    assert r.shrunk_case is not None and r.repro.startswith("glmgate repro '")


GPU_ONLY = sorted(n for n, m in mutants.MUTANTS.items() if m.device == "cuda")


def test_a_gpu_only_mutant_names_a_check_whose_cuda_pins_can_show_it():
    assert "kda_intra_offsets_int32" in GPU_ONLY
    for n in GPU_ONLY:
        chk = _check_of(mutants.MUTANTS[n])
        assert chk.gpu_examples or chk.nightly_examples, n
    m = mutants.get("kda_intra_offsets_int32")
    with pytest.raises(ValueError, match="pins no CUDA case"):
        mutants.validate(CHECKS, {m.name: dataclasses.replace(m, check="kda.recurrent", quantity="output")})


@pytest.mark.gpu
@pytest.mark.parametrize("name", GPU_ONLY)
def test_a_gpu_only_mutant_is_caught_by_its_checks_cuda_pins(name):
    """As `glmgate zoo --device cuda`: the check's CUDA pins, the nightly ones included, then one draw."""
    m = mutants.MUTANTS[name]
    cand = Target(registry.get(f"mutant:{name}"), "cuda", DTYPES["bfloat16"])
    base = Target(registry.get("torch"), "cuda", DTYPES["bfloat16"])
    r = run_check(_check_of(m), TINY, cand, base, "nightly", max_examples=1)
    assert r.status == "fail", f"{name} escaped {m.check} on CUDA ({r.examples} examples, worst {r.worst_line})"


def _contract_dtypes(m) -> set:
    """The dtypes the contracts of mutant m's quantity, in its check's mechanism, declare a bound for."""
    mechanism = _check_of(m).mechanism
    found = [c for (mech, _path, qty, kind), c in load().items()
             if (mech, qty) == (mechanism, m.quantity) and kind != "bench_gate"]
    assert found, f"{m.name}: quantity {m.quantity!r} names no declared contract of {mechanism}"
    # an exact contract holds in every dtype
    return {d for c in found for d in ((*DTYPES,) if c.kind == "exact" else
                                       (*c.floor, *c.bound, *(d for t in c.gate.values() if isinstance(t, dict)
                                                              for d in t)))}


def test_a_mutant_pinned_to_a_dtype_names_one_its_contract_declares():
    pinned = {n: m for n, m in mutants.MUTANTS.items() if m.dtype is not None}
    # the bf16 run cannot see a bf16 rounding of a float32 state: that property is float32's
    assert pinned.get("kda_state_bf16_across_chunks") and pinned["kda_state_bf16_across_chunks"].dtype == "float32"
    for n, m in pinned.items():
        assert m.dtype in DTYPES, f"{n}: dtype {m.dtype!r} not one of {sorted(DTYPES)}"
        declared = _contract_dtypes(m)
        assert m.dtype in declared, f"{n}: dtype {m.dtype!r}, but {m.check} {m.quantity} declares {sorted(declared)}"


@pytest.mark.parametrize("field,value,why", [
    ("check", "kda.chunk", "is not a check of the matrix"),             # a prefix of kda.chunked
    ("check", "kda.chunked.output", "is not a check of the matrix"),    # the old caught_by, prefixed by a check
    ("check", "moe.route", "quantity 'final_state' has no contract of mechanism 'moe'"),
    ("quantity", "states", "quantity 'states' has no contract of mechanism 'kda'"),    # the plural of state
])
def test_a_mutant_naming_no_exact_check_and_contract_is_refused_when_the_table_is_built(field, value, why):
    m = mutants.get("kda_padded_steps_update_state")
    mutants.validate(CHECKS, {m.name: m})
    with pytest.raises(ValueError, match=why) as e:
        mutants.validate(CHECKS, {m.name: dataclasses.replace(m, **{field: value})})
    assert "mutant kda_padded_steps_update_state (impl.mutants.kda.PaddedStepsUpdateState)" in str(e.value)


def test_a_mutant_is_registered_with_a_one_line_description_under_a_new_name():
    two_lines = type("TwoLines", (), {"__doc__": "what is wrong,\n    continued"})
    with pytest.raises(ValueError, match="ONE line"):
        mutants.mutant("kda.chunked", "output", table={})(two_lines)
    with pytest.raises(ValueError, match="already registered"):
        mutants.mutant("kda.chunked", "output", name="kda_tail_chunk_dropped", table={})(mutants.get(
            "kda_tail_chunk_dropped").cls)


def test_every_check_of_the_matrix_is_some_mutants_designated_catcher():
    covered = {_check_of(m).name for m in mutants.MUTANTS.values()}
    missing = [c.name for c in CHECKS if c.name not in covered]
    assert not missing, f"checks no planted mutant is designed to break: {missing}"


@pytest.mark.parametrize("name", sorted(mutants.MUTANTS))
def test_a_mutant_implementation_is_its_base_with_one_namespace_replaced(name):
    """registry.get("mutant:<name>"): the namespace (or serving engine) of the mutant's mechanism is its
    class's, every other one its base's (torch, or triton for a serving engine)."""
    m = mutants.MUTANTS[name]
    got, base = registry.get(f"mutant:{name}"), registry.get(m.base)
    assert got.name == f"mutant:{name}"
    impl = getattr(got, m.target)
    assert impl is m.cls if isinstance(impl, type) else isinstance(impl, m.cls)
    differ = [f for f in [f.name for f in dataclasses.fields(got)][1:] if getattr(got, f) is not getattr(base, f)]
    assert differ == [m.target], differ


MECHANISM_MUTANTS = sorted(n for n, m in mutants.MUTANTS.items() if m.mechanism in registry.MECHANISMS)


@pytest.mark.parametrize("name", MECHANISM_MUTANTS)
def test_a_mechanism_mutant_is_its_baseline_class_with_one_method_overridden(name):
    """A planted bug is ONE small change: a fresh instance each time, of a subclass of its mechanism's
    baseline class that defines exactly one method the baseline has."""
    m = mutants.MUTANTS[name]
    # a kernel mutant (base "triton") subclasses our Triton namespace as a class (impl/mutants/<mech>.py)
    base = (getattr(importlib.import_module(f"impl.mutants.{m.target}"), f"Triton{m.target.upper()}")
            if m.base == "triton" else type(getattr(registry.get("torch"), m.target)))
    assert m.name == name and m.description and "\n" not in m.description
    assert m.check.startswith(m.mechanism + ".") and m.quantity
    a, b = m.factory(), m.factory()
    assert a is not b and isinstance(a, base)
    own = [n for n, v in vars(type(a)).items() if inspect.isfunction(v)]
    assert len(own) == 1 and hasattr(base, own[0]), f"{name} overrides {own}"
