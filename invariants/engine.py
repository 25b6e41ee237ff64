"""Run matrix checks under Hypothesis and collect one result per check (the CLI's engine).

A check ends in one of five states: "pass", "fail" (the candidate broke a contract or raised:
ContractBroken / CheckCrashed), "not covered" (every example held, but none of the candidate's functions
ran: invariants/coverage.py; nothing was tested), "error" (the check itself could not run to a verdict:
an undeclared contract, a strategy or Hypothesis error, an import error, the device out of memory in a
case: DeviceOutOfMemory; the message names the exception and where it was raised) or "not run"
(model.reference without a usable transformers; a run function raising NotRunnable: model.sharded's ranks
need more CUDA devices than the host has, an NVFP4 check on a geometry with no NVFP4 form). No exception other than
KeyboardInterrupt leaves run_check / run_reference, so one broken check never loses a run's report.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import sys
import time
import traceback
from typing import Callable, NamedTuple, Optional

import torch
from hypothesis import Phase, example, given, settings, target
from hypothesis.errors import Flaky, FlakyFailure, HypothesisException
from hypothesis.reporting import with_reporter

from invariants import labels
from invariants.contracts import UndeclaredContract
from invariants import integrity
from invariants.coverage import Recorder, recorder_of, recording
from invariants.precision import baseline_dtype
from impl.registry import MECHANISMS
from invariants.check import NotRunnable, case_to_json
from invariants.matrix import Check, evaluate
from invariants.report import ContractBroken, describe, repro_line
from invariants.target import OracleTarget, Target

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NO_MARGIN = {"p50": None, "p99": None, "max": None}
# seconds a check may spend shrinking its first failure (Hypothesis's own limit is 300 s): past it,
# the smallest failing case found by then is the one reported, and the result says so
SHRINK_SECONDS = 60.0


class CheckCrashed(AssertionError):
    """The candidate raised instead of returning: a failure too, shrunk like any other."""

    def __init__(self, check: str, case, exc: BaseException, repro: str):
        self.check, self.case, self.exc, self.repro = check, case, exc, repro
        super().__init__(f"{check}: {type(exc).__name__}: {exc} for case {case!r}\n{repro}")


class CheckResult(NamedTuple):
    check: str
    mechanism: str
    status: str                  # "pass" | "fail" | "error" | "not run"
    examples: int
    worst_ratio: float           # max over examples of error / limit (-1: no example judged)
    worst_line: str              # the worst verdict seen, described
    worst_case: Optional[dict]
    shrunk_case: Optional[dict]
    message: str
    repro: Optional[str]
    events: dict
    seconds: float
    margin: dict = NO_MARGIN     # p50 / p99 / max over examples of (max over its verdicts of error / limit)
    flip_examples: int = 0       # examples with at least one legal decision flip (within the tie tolerance)
    ill_conditioned_examples: int = 0   # examples where the baseline's error exceeded its cap
    covered: tuple = ()          # the candidate's functions the check called ("kda.chunked", ...)
    crashed: bool = False        # a "fail" where the candidate raised (CheckCrashed), not a broken contract
    not_provided: tuple = ()     # quantities not judged: outputs the candidate declares it does not provide
    candidate_seconds: float = 0.0   # wall time inside the candidate's functions, over all examples
    judged_in: tuple = ()        # precision islands that set the judged dtype ("kda.sublayer float32")
    shrink_seconds: float = 0.0  # wall time from the first failure to the end of shrinking
    shrink_stopped: bool = False  # shrinking hit its time budget (SHRINK_SECONDS): the case may shrink further

    def to_json(self) -> dict:
        return self._asdict()


def percentile(values, q: float) -> float:
    """Nearest-rank percentile: always one of the values, so inf (a broken exact contract) stays inf."""
    s = sorted(values)
    return s[max(0, math.ceil(q / 100.0 * len(s)) - 1)]


class Tally:
    """Per-example margins, legal flips and ill-conditioning, and the worst verdict.

    Counting stops after the first failing example: Hypothesis then replays shrunk variants of that one
    case, which would swamp the distribution of the examples it drew."""

    def __init__(self):
        self.ratios: list[float] = []
        self.flips = self.ill = 0
        self.worst, self.line, self.case = -1.0, "", None
        self.closed = False

    def add(self, verdicts, case=None, prefix: str = "") -> None:
        if self.closed or not verdicts:
            return
        worst = max(verdicts, key=lambda v: v.ratio)
        self.ratios.append(worst.ratio)
        self.flips += any(getattr(v, "flips", 0) > 0 for v in verdicts)
        self.ill += any(getattr(v, "ill_conditioned", False) for v in verdicts)
        if worst.ratio > self.worst:
            self.worst, self.line, self.case = worst.ratio, prefix + describe(worst), case

    def margin(self) -> dict:
        if not self.ratios:
            return dict(NO_MARGIN)
        return {"p50": percentile(self.ratios, 50), "p99": percentile(self.ratios, 99), "max": max(self.ratios)}

    def result(self, check: str, mechanism: str, status: str, examples: int, t0: float, shrunk=None,
               message: str = "", repro=None, events=None, covered=(), crashed=False,
               not_provided=(), candidate_seconds=0.0, judged_in=(), shrink=None) -> CheckResult:
        shrink_s, stopped = (0.0, False) if shrink is None else (shrink.seconds(), shrink.stopped)
        return CheckResult(check, mechanism, status, examples, self.worst, self.line, self.case, shrunk, message,
                           repro, dict(events or {}), time.time() - t0, self.margin(), self.flips, self.ill,
                           tuple(sorted(covered)), crashed, tuple(sorted(not_provided)), candidate_seconds,
                           tuple(sorted(judged_in)), shrink_s, stopped)


def _where(frame: traceback.FrameSummary) -> str:
    path = frame.filename
    if path.startswith(ROOT + os.sep):
        path = os.path.relpath(path, ROOT)
    elif "site-packages" + os.sep in path:
        path = path.split("site-packages" + os.sep, 1)[1]
    return f"{path}:{frame.lineno} in {frame.name}"


def describe_exception(exc: BaseException) -> str:
    """`Type: message (raised at file:line in function)`, the frame being the innermost one; for an
    exception group, its first leaf's type, message and frame too."""
    leaf = exc
    while isinstance(leaf, BaseExceptionGroup) and leaf.exceptions:
        leaf = leaf.exceptions[0]
    frames = traceback.extract_tb(leaf.__traceback__)
    where = f" (raised at {_where(frames[-1])})" if frames else ""
    text = f"{type(exc).__name__}: {str(exc).strip()}"
    if leaf is not exc:
        text += f"; first: {type(leaf).__name__}: {str(leaf).strip()}"
    return text + where


def _repro(check: Check, case, cand: Target) -> str:
    return repro_line(check.name, case_to_json(case), cand.impl.name, cand.device, cand.dtype_name)


def run_one(check: Check, case, cand: Target, base: Target, skipped: Optional[set] = None,
            recorder: Optional[Recorder] = None, islands: Optional[set] = None):
    """Evaluate one case; raise ContractBroken / CheckCrashed on failure; return the verdicts (the
    comparisons of outputs the candidate does not provide are added to `skipped`, not judged).

    An undeclared contract or a Hypothesis error is the check's own fault, not the candidate's: it
    propagates unwrapped (run_check reports it as an error)."""
    if recorder is None:
        recorder = recorder_of(cand.impl) if isinstance(cand, Target) else None
    if recorder is None and isinstance(cand, Target) and not isinstance(cand, OracleTarget):
        # a caller that did not wrap the candidate (`glmgate repro`) still gets its inputs guarded
        recorder = Recorder()
        cand = cand._replace(impl=recording(cand.impl, recorder))
    if recorder is not None:
        recorder.take()          # a crashed example's leftovers are not this one's
    try:
        if recorder is not None:
            recorder.example.clear()
        verdicts = evaluate(check, case, cand, base, skipped, None if recorder is None else recorder.example,
                            islands)
        if recorder is not None:
            verdicts = verdicts + integrity.verdicts(recorder, cand.dtype_name)
    except (AssertionError, UndeclaredContract, HypothesisException, NotRunnable):
        raise
    except Exception as exc:  # the candidate (or a shape) blew up: report it as a failure of this case
        if _out_of_memory(exc):
            raise DeviceOutOfMemory(check.name, exc, _repro(check, case, cand)) from exc
        raise CheckCrashed(check.name, case, exc, _repro(check, case, cand)) from exc
    if not all(v.ok for v in verdicts):
        raise ContractBroken(check.name, case, verdicts, _repro(check, case, cand))
    return verdicts


class DeviceOutOfMemory(Exception):
    """The device ran out of memory in an example: no verdict on the candidate either way (another process, or
    checks run side by side, may hold the memory; or the case needs more than the card has). The check's status
    is "error", never "fail": not shrunk, not recorded as the candidate's failure; the message says so and gives
    the case's repro line to run it alone."""

    def __init__(self, check: str, exc: BaseException, repro: str):
        free = ""
        with contextlib.suppress(Exception):
            if torch.cuda.is_available():
                f, t = torch.cuda.mem_get_info()
                free = f" ({f / 2 ** 30:.1f} of {t / 2 ** 30:.1f} GiB free after it)"
        super().__init__(f"{check}: the device ran out of memory in this case{free}: no verdict on the candidate. "
                         f"Other processes on the GPU, or checks run side by side, may hold the memory: run the "
                         f"case alone: {repro}. The error: {describe_exception(exc)}")


def _out_of_memory(exc: BaseException) -> bool:
    """A device allocation that failed: torch's OutOfMemoryError, or CUDA's own error as torch or Triton word it
    ("CUDA error: out of memory", "Triton Error [CUDA]: out of memory")."""
    text = str(exc)
    return isinstance(exc, torch.OutOfMemoryError) or ("CUDA" in text and "out of memory" in text)


class FallbackFailed(Exception):
    """An example in which none of the candidate's functions ran failed: our fallback's failure (a
    composition refusing the working dtype, say), reported as such and never as the candidate's."""

    def __init__(self, exc: BaseException):
        inner = exc.exc if isinstance(exc, CheckCrashed) else exc
        what = (describe_exception(inner) if not isinstance(exc, ContractBroken)
                else "; ".join(describe(v) for v in exc.verdicts if not v.ok))
        super().__init__(what)


class _Abort(BaseException):
    """Carries an error that no example can fix out of Hypothesis at once (it would shrink an
    Exception, for minutes on a slow check); BaseException so Hypothesis does not catch it."""

    def __init__(self, exc: BaseException):
        super().__init__(exc)
        self.exc = exc


class ShrinkBudget:
    """Remembers every case's outcome and bounds the time Hypothesis spends shrinking a failure.

    A case already judged is not run again: it fails again at once with its exception, or passes. The
    shrinker reaches one case through many choice sequences (a draw that no longer matters, such as a
    dropped cut's length), and an example costs seconds on the interpreter. Once `limit` seconds have
    passed since the first failure, a case never seen returns at once too: the shrinker, finding
    nothing new that fails, stops within a few cheap calls, and the smallest failing case found by
    then is the one reported (Hypothesis replays it at the end: it fails again from memory)."""

    def __init__(self, limit: float):
        self.limit, self.first, self.end, self.failed, self.passed = limit, None, None, {}, set()
        self.stopped = False

    def replay(self, key: str) -> bool:
        """True when the case's outcome is known (or the budget is spent): raise its failure, if any."""
        if key in self.failed:
            raise self.failed[key]
        return key in self.passed or self.spent()

    def spent(self) -> bool:
        """True once the budget is used up (and says so from then on)."""
        if self.first is not None and time.time() - self.first > self.limit:
            self.stopped = True
        return self.stopped

    def failing(self, key: str, exc: BaseException) -> None:
        self.first = time.time() if self.first is None else self.first
        self.failed.setdefault(key, exc)

    def close(self) -> None:
        """The run is over: shrinking (if anything failed) ended now."""
        self.end = time.time() if self.end is None else self.end

    def seconds(self) -> float:
        """From the first failure to the end of the run: the shrink phase and the final replay."""
        return 0.0 if self.first is None or self.end is None else self.end - self.first

    def note(self) -> str:
        return (f"; shrinking stopped at its {self.limit:.0f} s budget: the case shown is the smallest found "
                f"by then" if self.stopped else "")


def derandomized_seed(check_name: str) -> int:
    """The seed of a derandomized profile's draws for one check: a function of its name alone.

    Hypothesis would derive it from the source text of the property below, so any edit of that
    function (a comment) would silently redraw every check's examples, and every check would share one
    seed; a verdict under `ci` or `gpu` must change only when the code under test or its strategy does."""
    return int.from_bytes(hashlib.sha256(f"glmgate derandomized {check_name}".encode()).digest()[:16], "big")


def _hypothesis_report(value) -> None:
    # stdout may belong to `--json -`; the CLI prints the shrunk case and its repro line itself
    print(value, file=sys.stderr)


def _run_test(test) -> None:
    """Run the Hypothesis test; of several distinct failures raise the candidate's first one."""
    try:
        with with_reporter(_hypothesis_report):
            test()
    except BaseExceptionGroup as group:
        if isinstance(group, Flaky):          # a failure that did not replay: no verdict to trust
            raise
        first = next((e for e in group.exceptions if isinstance(e, (ContractBroken, CheckCrashed))), None)
        if first is None:
            raise
        raise first from group


def _rerun_only(e: ContractBroken) -> bool:
    """Every broken verdict of `e` is a run-twice comparison (quantity "rerun")."""
    broken = [v for v in e.verdicts if not v.ok]
    return bool(broken) and all(v.contract.quantity == "rerun" for v in broken)


def examples_for(check: Check, profile: str, device: str, max_examples: Optional[int] = None) -> int:
    """Drawn examples of one run: `max_examples` when given, else the profile's, capped on the CPU
    interpreter by the record's `cpu_examples` (its cost per example; the GPU runs the profile's)."""
    if max_examples is not None:
        return max_examples
    n = settings.get_profile(profile).max_examples
    return min(n, check.cpu_examples) if device == "cpu" and check.cpu_examples else n


def run_check(check: Check, geometry, cand: Target, base: Target, profile: str,
              max_examples: Optional[int] = None, on_example: Callable[[], None] = lambda: None,
              seed: Optional[int] = None, replay=(), shrink_seconds: float = SHRINK_SECONDS) -> CheckResult:
    """Run one record under Hypothesis: the `replay` cases (recorded failures: invariants/failures.py),
    then its pinned examples, then drawn ones (examples_for), the first failure shrunk for at most
    `shrink_seconds` (ShrinkBudget); never raises (a broken check is a result with status "error").

    Replayed cases are explicit examples like the pinned ones, so derandomized profiles run them too
    (they take no example database), and they count like pinned ones; one equal to a pinned example
    runs once."""
    if check.dtype is not None and cand.dtype_name != check.dtype:
        cand, base = cand.in_dtype(check.dtype), base.in_dtype(check.dtype)
    if isinstance(cand, Target):
        # a candidate's declared precision islands: the baseline that scales their limits runs in their dtype
        island = baseline_dtype(cand.impl, check.namespaces(MECHANISMS), cand.dtype_name)
        if island != base.dtype_name:
            base = base.in_dtype(island)
    recorder = Recorder()
    if isinstance(cand, Target):
        cand = cand._replace(impl=recording(cand.impl, recorder))
    tally, n, calls, skipped, islands = Tally(), [0], [0], set(), set()
    budget = ShrinkBudget(shrink_seconds)
    labels.COUNTS.clear()
    t0 = time.time()
    explicit = check.examples

    def prop(case):
        calls[0] += 1
        if tally.closed and calls[0] <= len(explicit):
            # an explicit example already failed, and only the first failure is reported (_run_test):
            # Hypothesis would still replay the other pinned ones (a serving program: 15-40 s on the CPU)
            return
        key = json.dumps(case_to_json(case), sort_keys=True, default=str)
        if budget.replay(key):
            return
        n[0] += 1
        on_example()
        try:
            verdicts = run_one(check, case, cand, base, skipped, recorder if isinstance(cand, Target) else None,
                               islands)
        except ContractBroken as e:
            _fallback_only(e)
            tally.add(e.verdicts, case_to_json(case))
            tally.closed = True
            _failing(case, key, e)
            raise
        except (UndeclaredContract, NotRunnable, DeviceOutOfMemory) as e:   # the check's or the machine's, not the case's
            raise _Abort(e) from e
        except Exception as e:
            _fallback_only(e)
            tally.closed = True
            _failing(case, key, e)
            raise
        tally.add(verdicts, case_to_json(case))
        budget.passed.add(key)
        target(min(max(v.ratio for v in verdicts), 1e9), label="error / limit")

    def _failing(case, key, e):
        # failures are replayed from memory (ShrinkBudget): the first drawn one is run once more here, so
        # a candidate that fails once and then passes is still reported as non-deterministic (Hypothesis
        # never re-runs a failing explicit example: a pinned serving program costs 15-40 s). A run-twice
        # comparison that failed has seen two runs differ already: that is its verdict, whether or not a
        # second look happens to draw two equal runs (a race among two tied pools agrees by chance)
        raced = isinstance(e, ContractBroken) and _rerun_only(e)
        if budget.first is None and calls[0] > len(explicit) and not raced:
            try:
                run_one(check, case, cand, base, None, recorder if isinstance(cand, Target) else None)
            except Exception:
                pass
            else:
                raise _Abort(FlakyFailure(f"{check.name}: the case failed once and passed when run again "
                                          f"(non-deterministic): {describe_exception(e)}", [e]))
        budget.failing(key, e)

    def _fallback_only(e):
        # nothing of the candidate ran in this example: the failure is our fallback's, never the candidate's
        if isinstance(cand, Target) and not recorder.example:
            raise _Abort(FallbackFailed(e)) from e

    def done(status, **kw):
        budget.close()
        return tally.result(check.name, check.mechanism, status, n[0], t0, events=labels.COUNTS,
                            covered=recorder.called, not_provided=skipped, candidate_seconds=recorder.seconds,
                            judged_in=islands, shrink=budget, **kw)

    try:
        n_ex = examples_for(check, profile, str(cand.device), max_examples)
        test = given(check.cases(geometry))(prop)
        _check_types(check, replay)
        explicit = _explicit(check, replay, pins_for(check, str(cand.device), profile))
        for ex in reversed(explicit):
            test = example(ex)(test)
        # no explain phase: it re-runs variants of the shrunk case only to annotate Hypothesis's own
        # report (seconds an example here), which the CLI does not print
        prof = settings.get_profile(profile)
        test = settings(prof, max_examples=n_ex, phases=[p for p in prof.phases if p != Phase.explain])(test)
        if seed is None and settings.get_profile(profile).derandomize:
            seed = derandomized_seed(check.name)
        if seed is not None:
            from hypothesis import seed as hseed
            test = hseed(seed)(test)
        _run_test(test)
    except (ContractBroken, CheckCrashed) as e:
        # a crash says where it was raised: in the candidate's code, or in ours fed the candidate's output
        message = ("; ".join(describe(v) for v in e.verdicts if not v.ok) if isinstance(e, ContractBroken)
                   else f"{e.check}: raised {describe_exception(e.exc)}") + budget.note()
        return done("fail", shrunk=case_to_json(e.case), message=message, repro=e.repro,
                    crashed=isinstance(e, CheckCrashed))
    except _Abort as a:
        if isinstance(a.exc, NotRunnable):
            return done("not run", message=str(a.exc))
        if isinstance(a.exc, FallbackFailed) and not recorder.called:
            return done("not covered", message=f"no function of {cand.impl.name} ran: this check tested nothing "
                                               f"of it (and our fallback alone failed: {a.exc})")
        return done("error", message=describe_exception(a.exc))
    except Exception as e:
        return done("error", message=describe_exception(e))
    if not recorder.called and isinstance(cand, Target):
        return done("not covered", message=f"{n[0]} examples held, but no function of {cand.impl.name} "
                                           f"ran: this check tested nothing of it")
    return done("pass")


LONG_PROFILES = ("explore", "nightly")


def pins_for(check: Check, device: str, profile: str) -> tuple:
    """The pinned cases a run replays: `examples` everywhere; on CUDA also `gpu_examples`, and under the
    long random profiles (LONG_PROFILES) `nightly_examples` (too large for the interpreter, or for every run)."""
    pins = tuple(check.examples)
    if device.startswith("cuda"):
        pins += tuple(check.gpu_examples)
        if profile in LONG_PROFILES:
            pins += tuple(check.nightly_examples)
    return pins


def _explicit(check: Check, replay, pins=None) -> tuple:
    """The replayed cases, then the pinned examples (`pins`, default the record's CPU pins), each case
    once (compared as JSON: a case rebuilt from a file equals the pinned one it came from)."""
    out, seen = [], set()
    for case in tuple(replay) + tuple(check.examples if pins is None else pins):
        key = json.dumps(case_to_json(case), sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            out.append(case)
    return tuple(out)


def _check_types(check: Check, cases) -> None:
    """A replayed case of another type would crash the run function, and the crash would be blamed on
    the candidate: refuse it (the check reports an error)."""
    bad = [c for c in cases if not isinstance(c, check.case)]
    if bad:
        raise TypeError(f"{check.name}: a replayed case of type {type(bad[0]).__name__}, the check's cases are "
                        f"{check.case.__name__}")


REFERENCE_CHECK = "model.reference"


def run_reference(on_example: Callable[[], None] = lambda: None) -> CheckResult:
    """The float64 oracle's logits vs the published transformers implementation's on fixed paths
    (invariants/reference.py) under the `reference` contract; status "not run", saying why and how to
    install, without a usable transformers."""
    tally, n, broken = Tally(), 0, []
    t0 = time.time()

    def done(status, message):
        return tally.result(REFERENCE_CHECK, "model", status, n, t0, message=message)

    try:
        from invariants import reference
        from invariants.contracts import judge, lookup

        missing = reference.unavailable()
        if missing:
            return done("not run", f"the cross-check against the published reference was NOT run: {missing}")
        contract = lookup("model", "reference", "output", "reference")
        for what, got, want in reference.scenarios():
            n += 1
            on_example()
            v = judge(contract, "float64", got, want)
            tally.add([v], prefix=f"{what}: ")
            if not v.ok:
                broken.append(f"{what}: {describe(v)}")
    except Exception as e:
        return done("error", describe_exception(e))
    return done("fail" if broken else "pass", "; ".join(broken))


def summarize(results) -> dict:
    """Counts of a run: checks by status, examples with a legal flip, ill-conditioned examples."""
    by = lambda s: sum(r.status == s for r in results)  # noqa: E731
    return {"checks": len(results), "passed": by("pass"), "failed": by("fail"), "errors": by("error"),
            "not_covered": by("not covered"), "not_run": by("not run"), "flip_examples": sum(r.flip_examples for r in results),
            "ill_conditioned_examples": sum(r.ill_conditioned_examples for r in results)}


def summary_line(s: dict) -> str:
    return (f"{s['checks']} checks: {s['passed']} passed, {s['failed']} failed, {s['errors']} errors, "
            f"{s.get('not_covered', 0)} not covered, {s['not_run']} not run; {s['flip_examples']} examples with a legal decision flip, "
            f"{s['ill_conditioned_examples']} ill-conditioned examples")


def results_json(results, meta: dict) -> str:
    return json.dumps({"meta": meta, "summary": summarize(results), "results": [r.to_json() for r in results]},
                      indent=2, default=str)
