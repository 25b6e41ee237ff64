"""Run matrix checks under Hypothesis and collect one result per check (the CLI's engine)."""
from __future__ import annotations

import json
import time
from typing import Callable, NamedTuple, Optional

from hypothesis import given, settings, target
from hypothesis import strategies as st

from invariants import labels
from invariants.matrix import Check, evaluate
from invariants.report import ContractBroken, describe, repro_line
from invariants.target import Target
from strategies.cases import case_to_json


class CheckCrashed(AssertionError):
    """The candidate raised instead of returning: a failure too, shrunk like any other."""

    def __init__(self, check: str, case, exc: BaseException, repro: str):
        self.check, self.case, self.exc, self.repro = check, case, exc, repro
        super().__init__(f"{check}: {type(exc).__name__}: {exc} for case {case!r}\n{repro}")


class CheckResult(NamedTuple):
    check: str
    mechanism: str
    status: str                  # "pass" | "fail" | "not run" (the reference cross-check without transformers)
    examples: int
    worst_ratio: float           # max over examples of error / limit
    worst_line: str              # the worst verdict seen, described
    worst_case: Optional[dict]
    shrunk_case: Optional[dict]
    message: str
    repro: Optional[str]
    events: dict
    seconds: float

    def to_json(self) -> dict:
        return self._asdict()


def _repro(check: Check, case, cand: Target) -> str:
    return repro_line(check.name, case_to_json(case), cand.impl.name, cand.device, cand.dtype_name)


def run_one(check: Check, case, cand: Target, base: Target):
    """Evaluate one case; raise ContractBroken / CheckCrashed on failure; return the verdicts."""
    try:
        verdicts = evaluate(check, case, cand, base)
    except AssertionError:
        raise
    except Exception as exc:  # the candidate (or a shape) blew up: report it as a failure of this case
        raise CheckCrashed(check.name, case, exc, _repro(check, case, cand)) from exc
    if not all(v.ok for v in verdicts):
        raise ContractBroken(check.name, case, verdicts, _repro(check, case, cand))
    return verdicts


def run_check(check: Check, geometry, cand: Target, base: Target, profile: str,
              max_examples: Optional[int] = None, on_example: Callable[[], None] = lambda: None,
              seed: Optional[int] = None) -> CheckResult:
    stats = {"n": 0, "worst": -1.0, "line": "", "case": None}
    labels.COUNTS.clear()
    t0 = time.time()

    def prop(case):
        stats["n"] += 1
        on_example()
        verdicts = run_one(check, case, cand, base)
        worst = max(verdicts, key=lambda v: v.ratio)
        target(min(worst.ratio, 1e9), label="error / limit")
        if worst.ratio > stats["worst"]:
            stats.update(worst=worst.ratio, line=describe(worst), case=case_to_json(case))

    kw = {} if max_examples is None else {"max_examples": max_examples}
    test = settings(settings.get_profile(profile), **kw)(given(check.cases(geometry))(prop))
    if seed is not None:
        from hypothesis import seed as hseed
        test = hseed(seed)(test)
    status, shrunk, message, repro = "pass", None, "", None
    try:
        try:
            test()
        except BaseExceptionGroup as group:  # Hypothesis found several distinct failures: report the first
            first = next((e for e in group.exceptions if isinstance(e, (ContractBroken, CheckCrashed))), None)
            if first is None:
                raise
            raise first
    except (ContractBroken, CheckCrashed) as e:
        status, shrunk, message, repro = "fail", case_to_json(e.case), str(e).split("\n")[0], e.repro
        if isinstance(e, ContractBroken):
            message = "; ".join(describe(v) for v in e.verdicts if not v.ok)
    return CheckResult(check.name, check.mechanism, status, stats["n"], stats["worst"], stats["line"],
                       stats["case"], shrunk, message, repro, dict(labels.COUNTS), time.time() - t0)


REFERENCE_CHECK = "model.reference"


def run_reference(on_example: Callable[[], None] = lambda: None) -> CheckResult:
    """SPEC §14: the float64 oracle's logits vs transformers 5.23's on fixed paths (invariants/reference.py)
    under the `reference` contract; status "not run", saying why and how to install, without transformers."""
    from invariants import reference
    from invariants.contracts import judge, lookup

    t0 = time.time()
    missing = reference.unavailable()
    if missing:
        return CheckResult(REFERENCE_CHECK, "model", "not run", 0, -1.0, "", None, None,
                           f"the cross-check against the published reference was NOT run: {missing}", None, {},
                           time.time() - t0)
    contract = lookup("model", "reference", "output", "reference")
    n, worst, line, broken = 0, -1.0, "", []
    for what, got, want in reference.scenarios():
        n += 1
        on_example()
        v = judge(contract, "float64", got, want)
        if v.ratio > worst:
            worst, line = v.ratio, f"{what}: {describe(v)}"
        if not v.ok:
            broken.append(f"{what}: {describe(v)}")
    return CheckResult(REFERENCE_CHECK, "model", "fail" if broken else "pass", n, worst, line, None, None,
                       "; ".join(broken), None, {}, time.time() - t0)


def results_json(results, meta: dict) -> str:
    return json.dumps({"meta": meta, "results": [r.to_json() for r in results]}, indent=2, default=str)
