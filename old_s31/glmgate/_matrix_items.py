"""The matrix as pytest items: options resolved once, one item per check, results mapped to outcomes.

Imported by glmgate/pytest_plugin.py only once --glmgate-candidate is given (this module imports torch
and the whole matrix). Outcomes: pass -> passed; fail -> failed (the contract line, the shrunk case, the
`glmgate repro` line; Hypothesis' own report in the captured stderr); not covered / not run -> skipped
with a reason starting so; error -> failed, saying the check, not the candidate, is at fault.
"""
from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import sys
from typing import NamedTuple, Optional

import pytest

GEOMETRY = "tiny"      # the matrix's preset: every pinned example is written for it


class Setup(NamedTuple):
    cand: object              # invariants.target.Target
    base: object
    device: str
    profile: str
    examples: Optional[int]
    geometry: object
    checks: tuple             # the checks the candidate can run
    unprovided: tuple         # CheckResult rows ("not run") of the checks it lacks namespaces for
    lines: tuple              # what came from where, said once before any item runs
    store: object             # invariants.failures.FailureStore, or None
    replays: dict             # check name -> its recorded failing cases, replayed before its pinned examples


def _usage(option: str, what: str) -> pytest.UsageError:
    return pytest.UsageError(f"{option}: {what}")


def _targets(config, device: str, dtype: str):
    from impl import registry
    from invariants.target import DTYPES, Target

    if dtype not in DTYPES:
        raise _usage("--glmgate-dtype", f"expected one of {', '.join(sorted(DTYPES))}, got {dtype!r}")
    impls = {}
    for option in ("--glmgate-candidate", "--glmgate-baseline"):
        try:
            impls[option] = registry.get(config.getoption(option.lstrip("-").replace("-", "_")))
        except (ValueError, KeyError) as e:      # str(KeyError) would quote its message
            raise _usage(option, str(e.args[0] if e.args else e)) from None
    cand, base = impls.values()
    return Target(cand, device, DTYPES[dtype]), Target(base, device, DTYPES[dtype])


def _checks(config):
    """The selected checks, in matrix order: --glmgate-mechanism, then --glmgate-check."""
    from invariants.matrix import BY_NAME, CHECKS, checks_for

    mech = config.getoption("glmgate_mechanism")
    try:
        checks = checks_for([m.strip() for m in mech.split(",") if m.strip()]) if mech else list(CHECKS)
    except ValueError as e:
        raise _usage("--glmgate-mechanism", str(e)) from None
    names = config.getoption("glmgate_check")
    if names:
        unknown = [n for n in names if n not in BY_NAME]
        if unknown:
            hint = (" (model.reference holds the oracle to transformers, no candidate: `glmgate run --check "
                    "model.reference`)" if "model.reference" in unknown else "")
            raise _usage("--glmgate-check", f"unknown check(s) {', '.join(unknown)}{hint}; known: "
                         f"{', '.join(BY_NAME)}")
        checks = [c for c in checks if c.name in names]
        if not checks:
            raise _usage("--glmgate-check", f"none of {', '.join(names)} belongs to --glmgate-mechanism {mech}")
    return checks


def _profile(config, device: str) -> str:
    from invariants.profiles import check_name, register

    register()
    name = config.getoption("glmgate_profile") or ("ci" if device == "cpu" else "gpu")
    try:
        return check_name(name, "--glmgate-profile")
    except ValueError as e:
        raise pytest.UsageError(str(e)) from None


def _store(config, lines: list):
    """The shared failure store (invariants/failures.py) where this glmgate has one, else None."""
    import inspect

    from invariants import engine

    directory = config.getoption("glmgate_failures")
    if config.getoption("glmgate_no_failures"):
        return None
    # both halves or neither: a store module beside an engine that cannot replay (a partial install)
    if importlib.util.find_spec("invariants.failures") is None or \
            "replay" not in inspect.signature(engine.run_check).parameters:
        if directory:
            lines.append(f"glmgate: --glmgate-failures {directory} ignored: this glmgate has no failure store")
        return None
    failures = importlib.import_module("invariants.failures")
    return failures.FailureStore(directory or failures.default_directory())


def _replays(store, checks, lines: list) -> dict:
    """{check name: its recorded cases}, read before any example runs: a record that cannot be replayed
    stops the run (UsageError naming the file) rather than silently dropping a known failure."""
    if store is None:
        return {}
    replays, problems = {}, []
    for c in checks:
        try:
            replays[c.name] = tuple(store.cases(c))
        except Exception as e:
            problems.append(f"{type(e).__name__}: {e}")
    if problems:
        raise pytest.UsageError(f"--glmgate-failures: the failure store {store.directory} holds cases that cannot "
                                f"be replayed (--glmgate-no-failures runs without it):\n  " + "\n  ".join(problems))
    n = sum(len(v) for v in replays.values())
    lines.append(f"glmgate: failure store {store.directory}: {n} recorded failing case{'' if n == 1 else 's'} "
                 f"replayed first, new ones recorded (--glmgate-no-failures: neither)")
    return replays


class _Lines:
    """A console for gate.merge_gate.provided_checks that keeps its lines for the report header."""

    def __init__(self, lines: list):
        self.lines = lines

    def print(self, line: str, markup: bool = False) -> None:
        self.lines.append(f"glmgate: {line}")


def resolve(config) -> Setup:
    """Every --glmgate-* option validated (pytest.UsageError: one line, what is wrong and what is expected)."""
    import torch

    from gate.merge_gate import provided_checks
    from oracle.config import Geometry

    device = config.getoption("glmgate_device")
    if device != "cpu" and not device.startswith("cuda"):
        raise _usage("--glmgate-device", f"expected cpu or cuda[:N], got {device!r}")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise _usage("--glmgate-device", f"{device}: no CUDA device is visible to torch on this machine "
                                         f"(use --glmgate-device cpu: Triton's interpreter, float32)")
    examples = config.getoption("glmgate_examples")
    if examples is not None and examples < 1:
        raise _usage("--glmgate-examples", f"expected a count >= 1, got {examples}")
    profile = _profile(config, device)
    dtype = config.getoption("glmgate_dtype") or ("float32" if device == "cpu" else "bfloat16")
    checks = _checks(config)
    cand, base = _targets(config, device, dtype)
    per = f"{examples} examples per check" if examples else "the profile's examples per check"
    lines = [f"glmgate: candidate {cand.impl.name} against the float64 oracle, baseline {base.impl.name}; "
             f"device {device}, {dtype}, profile {profile}, {per}, geometry {GEOMETRY}"]
    runnable, unprovided = provided_checks(checks, cand.impl, _Lines(lines))
    store = _store(config, lines)
    replays = _replays(store, runnable, lines)
    return Setup(cand, base, device, profile, examples, Geometry.preset(GEOMETRY), tuple(runnable),
                 tuple(unprovided), tuple(lines), store, replays)


class MatrixPlugin:
    """Registered by pytest_plugin.pytest_configure once the options are valid."""

    def __init__(self, config):
        self.setup = resolve(config)
        self.said = False
        config.addinivalue_line("markers", "glmgate: a check of the glmgate correctness matrix (-m glmgate)")
        config.addinivalue_line("markers", "gpu: needs a CUDA device")

    def pytest_report_header(self, config):
        self.said = True
        return list(self.setup.lines)

    @pytest.hookimpl(tryfirst=True)       # before -k / -m deselect: our items are selectable like any other
    def pytest_collection_modifyitems(self, session, config, items):
        # no file holds the matrix, so pytest's collection never reaches it: collect it here through the
        # same hooks pytest uses for a file (the terminal counts its items, a failure is a collection error)
        matrix = MatrixCollector.from_parent(session, name="glmgate", nodeid="glmgate")
        session.ihook.pytest_collectstart(collector=matrix)
        report = session.ihook.pytest_make_collect_report(collector=matrix)
        session.ihook.pytest_collectreport(report=report)
        if report.passed:
            items.extend(report.result)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        if isinstance(item, CheckItem) and report.skipped and isinstance(report.longrepr, tuple):
            # `SKIPPED glmgate::kda.decode: not covered: ...`, not a line of this plugin's source
            report.longrepr = (item.nodeid, None, report.longrepr[2])
        return report

    def pytest_collection_finish(self, session):
        # -q and --no-header print no header: say what came from where anyway, before any item runs
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if not self.said and reporter is not None and not session.config.option.collectonly:
            for line in self.setup.lines:
                reporter.write_line(line)
        self.said = True


class MatrixCollector(pytest.Collector):
    """The matrix under one node (`glmgate`), so its items are `glmgate::<check>`: it is no file, and
    pytest's own collection never reaches it (the plugin adds its items after collection)."""

    def collect(self):
        setup = self.config.pluginmanager.get_plugin("glmgate-matrix").setup
        from invariants.matrix import BY_NAME

        order = {c.name: i for i, c in enumerate(BY_NAME.values())}
        rows = [(c.name, c, None) for c in setup.checks]
        rows += [(r.check, BY_NAME[r.check], r) for r in setup.unprovided]
        items = []
        for name, check, not_run in sorted(rows, key=lambda row: order[row[0]]):
            item = CheckItem.from_parent(self, name=name, check=check, matrix=setup)
            item.add_marker(pytest.mark.glmgate)
            if setup.device.startswith("cuda"):
                item.add_marker(pytest.mark.gpu)
            if not_run is not None:
                item.add_marker(pytest.mark.skip(reason=f"not run: {not_run.message}"))
            items.append(item)
        return items


class CheckFailed(Exception):
    """A verdict against the candidate: the text is the whole report (repr_failure prints it as is)."""


class CheckError(Exception):
    """The check could not reach a verdict: the check's (or glmgate's) fault, not the candidate's."""


class CheckItem(pytest.Item):
    def __init__(self, *, check, matrix: Setup, **kw):
        super().__init__(**kw)
        self.check, self.matrix = check, matrix     # not `setup`: pytest calls item.setup()

    def reportinfo(self):
        # a line number, even for no file: pytest's skip-marker handling requires one
        return self.path, 0, f"glmgate {self.check.name}"

    def runtest(self):
        r, kept, printed = run(self.check, self.matrix)
        self.user_properties += [("status", r.status), ("examples", r.examples),
                                 ("margin_max", r.margin["max"]), ("called", ", ".join(r.covered))]
        if r.repro:
            self.user_properties.append(("repro", r.repro))
        self.add_report_section("call", "glmgate", summary(r))
        if r.status == "pass":
            return
        if r.status in ("not covered", "not run"):
            pytest.skip(f"{r.status}: {r.message}")
        if r.status == "fail":
            raise CheckFailed(failure_text(r, self.matrix, kept, printed))
        raise CheckError(f"{r.check} ERROR: the check itself could not reach a verdict ({r.examples} examples "
                         f"ran): a fault of the check or of glmgate, not a verdict on the candidate\n  {r.message}")

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, (CheckFailed, CheckError)):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)


def run(check, setup: Setup):
    """(CheckResult, what the failure store made of it (a line, or None), whether the check wrote to stderr).

    The store's cases of this check are replayed before the pinned examples and a failure's shrunk
    case is recorded; torch runs on one thread meanwhile (the interpreter's tiny ops spend ~100x their
    work in thread hand-offs on a small machine)."""
    import torch

    from invariants import engine

    replay = {} if setup.store is None else {"replay": setup.replays.get(check.name, ())}
    threads = torch.get_num_threads()
    if setup.device == "cpu":
        torch.set_num_threads(1)
    err = _Tee(sys.stderr)
    try:
        with contextlib.redirect_stderr(err):
            r = engine.run_check(check, setup.geometry, setup.cand, setup.base, setup.profile, setup.examples,
                                 **replay)
    finally:
        torch.set_num_threads(threads)
    kept = _keep(check, r, setup) if setup.store is not None and r.status == "fail" else None
    return r, kept, err.seen


def _keep(check, r, setup: Setup) -> Optional[str]:
    """Record a failure's shrunk case; a store that cannot be written costs a line, not the verdict."""
    from invariants.check import case_to_json
    from invariants.engine import describe_exception

    if r.shrunk_case is None:
        return None
    if r.shrunk_case in [case_to_json(c) for c in check.examples + check.gpu_examples + check.nightly_examples]:
        return "a pinned example of the check: every run replays it already, not recorded"
    known = r.shrunk_case in [case_to_json(c) for c in setup.replays.get(check.name, ())]
    try:
        path = setup.store.record(check, r, setup.cand.impl.name, setup.device,
                                  check.dtype or setup.cand.dtype_name)
    except Exception as e:
        return f"could not be recorded in {setup.store.directory}: {describe_exception(e)}"
    if path is None:
        return None
    return f"{'already recorded' if known else 'recorded'} in {path}: replayed first on the next run"


class _Tee(io.TextIOBase):
    """stderr as it was (pytest's capture, or the terminal under -s), noting whether anything was
    written: Hypothesis reports a drawn failure there (an explicit example's failure it does not)."""

    def __init__(self, stream):
        self.stream, self.seen = stream, False

    def write(self, s: str) -> int:
        self.seen = self.seen or bool(s.strip())
        return self.stream.write(s)

    def flush(self) -> None:
        self.stream.flush()


def _m(x) -> str:
    return "-" if x is None else f"{x:.3g}"


def summary(r) -> str:
    """The check's numbers, shown with a failure (and with -rA): margins, flips, what it called."""
    m = r.margin
    return (f"{r.check}: {r.status} after {r.examples} example{'' if r.examples == 1 else 's'} in "
            f"{r.seconds:.1f}s; error/limit p50 {_m(m['p50'])}, p99 {_m(m['p99'])}, max {_m(m['max'])}; "
            f"{r.flip_examples} legal flips, {r.ill_conditioned_examples} ill-conditioned; "
            f"called {', '.join(r.covered) or 'nothing of the candidate'}"
            + (f"\nworst seen: {r.worst_line}" if r.worst_line else ""))


def failure_text(r, setup: Setup, kept: Optional[str] = None, printed: bool = False) -> str:
    what = ": the candidate raised" if r.crashed else " broke a contract"
    out = [f"{r.check}{what} (candidate {setup.cand.impl.name}, {setup.device}, {setup.cand.dtype_name}, "
           f"profile {setup.profile})", f"  {r.message}"]
    if r.shrunk_case is not None:
        out.append(f"  shrunk scenario: {json.dumps(r.shrunk_case)}")
    if r.repro:
        out.append(f"  {r.repro}")
    out.append(f"  called: {', '.join(r.covered) or 'nothing of the candidate'}")
    if kept:
        out.append(f"  failure store: {kept}")
    if printed:
        out.append("  Hypothesis' own report (the falsifying example) is under 'Captured stderr call' below")
    return "\n".join(out)
