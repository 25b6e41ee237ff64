"""The correctness matrix: every mechanism's check records (invariants/<mechanism>_checks.py) in one table,
and every call its namespace must refuse (BAD_CALLS, run by tests/test_bad_calls.py on every target).

The table drives everything: tests/test_matrix.py parametrizes over it (CPU float32, CUDA bf16), the
engine (invariants/engine.py) runs it for `glmgate run`, a mutant names the record that must catch it
(impl/mutants/), and `evaluate` judges a record's comparisons under invariants/contracts.d/, so the CLI and
pytest assert the same thing.
"""
from __future__ import annotations

from typing import Optional

from invariants import dsa_checks, kda_checks, mhc_checks, mla_checks, model_checks, moe_checks, nvfp4_checks
from invariants import model_causal_checks, paged_checks, scale_checks, serving_checks
from invariants import batch_checks, batch_ffn_checks, rerun_checks
from invariants import graph_checks
from invariants import sharded_checks
from invariants import kda_checkpoint_checks
from invariants.check import BadCall, Check, case_from_json, case_to_json  # noqa: F401  (the table's record types)
from invariants.contracts import Verdict, judge_comparison, lookup
from invariants.precision import judged
from invariants.target import Target

MODULES = (kda_checks, kda_checkpoint_checks, scale_checks, dsa_checks, mla_checks, paged_checks, mhc_checks,
           moe_checks, nvfp4_checks, model_checks, model_causal_checks, serving_checks, batch_checks,
           batch_ffn_checks, rerun_checks)
# CUDA-graph replay of the decode steps (kda.graph_replay, mla.graph_replay)
MODULES += (graph_checks,)
# the decoder sharded over torch.distributed ranks (model.sharded)
MODULES += (sharded_checks,)
CHECKS: tuple[Check, ...] = tuple(c for m in MODULES for c in m.CHECKS)
# (mechanism, row): every call a mechanism namespace must refuse, the mechanism named by its module
BAD_CALLS: tuple[tuple[str, BadCall], ...] = tuple(
    (m.__name__.rsplit(".", 1)[1].removesuffix("_checks"), row) for m in MODULES for row in getattr(m, "BAD_CALLS", ())) + \
    tuple((mech, row) for m in MODULES for mech, rows in getattr(m, "BAD_CALLS_BY_MECHANISM", {}).items() for row in rows)
BY_NAME = {c.name: c for c in CHECKS}
CASE_TYPES = {c.case.__name__: c.case for c in CHECKS}


def _validate(checks) -> None:
    """Fail at import on a malformed table: a duplicate name, a name outside its mechanism, a pinned
    example of another case type."""
    seen = set()
    for c in checks:
        if c.name in seen:
            raise ValueError(f"check table: {c.name!r} is declared twice")
        seen.add(c.name)
        if not c.name.startswith(c.mechanism + "."):
            raise ValueError(f"check table: {c.name!r} must be named '<mechanism>.<what>' with mechanism {c.mechanism!r}")
        bad = [e for e in c.examples + c.gpu_examples + c.nightly_examples if not isinstance(e, c.case)]
        if bad:
            raise ValueError(f"check table: {c.name!r} pins an example of type {type(bad[0]).__name__}, "
                             f"its cases are {c.case.__name__}")


_validate(CHECKS)


def checks_for(mechanisms) -> list[Check]:
    known = sorted({c.mechanism for c in CHECKS})
    bad = [m for m in mechanisms if m not in known]
    if bad:
        raise ValueError(f"unknown mechanism(s) {bad}: this build checks {known}")
    return [c for c in CHECKS if c.mechanism in mechanisms]


def case_of(d: dict):
    """A case back from its repro JSON (`glmgate repro`), any check's case type."""
    return case_from_json(d, CASE_TYPES)


def evaluate(check: Check, case, cand: Target, base: Target, skipped: Optional[set] = None,
             called: Optional[set] = None, islands: Optional[set] = None) -> list[Verdict]:
    """Run one case and judge every comparison under its declared contract; a comparison of an output
    the candidate declares it does not provide (Implementation.not_provided) is not judged but added
    to `skipped` ("kda.chunked.boundary_states").

    called: the candidate's functions that ran in this case (the engine's recorder fills it while the
    check runs); with it, the comparisons are judged in the dtype of the precision islands that ran
    (invariants/precision.py), which are added to `islands`."""
    out = []
    omitted = getattr(cand.impl, "not_provided", frozenset())
    comparisons = list(check.run(case, cand, base))      # every call made before the dtype is known
    dtype, used = judged(cand.impl, cand.dtype_name, called)
    if islands is not None:
        islands.update(used)
    for cmp in comparisons:
        key = f"{check.mechanism}.{cmp.path}.{cmp.quantity}"
        if key in omitted:
            if skipped is not None:
                skipped.add(key)
            continue
        contract = lookup(check.mechanism, cmp.path, cmp.quantity, cmp.kind)
        out.append(_missing(contract, cand, key) if cmp.candidate is None else
                   judge_comparison(contract, dtype, cmp))
    return out


def _missing(contract, cand: Target, key: str) -> Verdict:
    """A broken contract for an output the candidate returned as None without declaring it optional."""
    from impl.registry import OPTIONAL

    mechanism, rest = key.split(".", 1)
    hint = (f"; if it does not compute it, declare NOT_PROVIDED = ({rest!r},) on its {mechanism} namespace "
            f"(reported as not covered)" if rest in OPTIONAL.get(mechanism, {}) else
            " (this output is not optional)")
    return Verdict(contract, cand.dtype_name, float("inf"), 0.0, None, None,
                   f"{cand.impl.name} returned None for {key}{hint}")


from impl.mutants import validate as _validate_mutants  # noqa: E402  (after CHECKS: each mutant names one)
_validate_mutants(CHECKS)
