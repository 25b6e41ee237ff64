"""`glmgate gate`: one verdict for a merge, and what a candidate provides.

The candidate runs every check it covers on the derandomized profile (`ci` on the CPU, `gpu` on CUDA),
and so does a peer (`--baseline`, our Triton path by default) on the same examples: derandomized draws
are a function of the check's name, so both meet the same cases. Per check: pass / FAIL / REGRESSION /
NOT COVERED / ERROR / NOT RUN, and the margin (p50, max of error / limit) of both. A candidate inside
its contracts whose p50 or max margin is more than `--regression-factor` times the peer's (and at least
REGRESSION_FLOOR of the limit: below that both are noise) is a regression.

Failure store (gate/failures_cmd.py): each check replays its recorded failures first, the candidate and
the peer the same ones; a new shrunk case of either is recorded (the entry names which impl failed it).

`--gpus N` (gate/multigpu.py): N worker processes, one per GPU, each this gate on its share of the checks,
merged into the same rows, files and exit code.

Outputs: the table and a summary line; `--json FILE|-`, `--junit FILE` (one testcase per check: failure
with the message and the repro line, error, or skipped), `--markdown FILE` (a PR comment). Exit codes as
`glmgate run`: 0 pass, 1 a broken contract or a regression, 2 a usage or input error, 3 a crash.
"""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from typing import NamedTuple, Optional

from invariants import precision

# a passing check is a regression when its p50 or max error/limit exceeds this many times the peer's
REGRESSION_FACTOR = 4.0
# a margin below this fraction of the limit is never a regression: at 1% of a bound the ratio of two
# margins measures rounding luck, not a worse kernel
REGRESSION_FLOOR = 0.05


def provided_checks(checks, impl, console):
    """(the checks `impl` can run, a "not run" row for each other one): a check calls its namespaces
    (Check.namespaces); a candidate that provides none of them is not run there, said once before any
    example runs (one that provides some is run, and coverage says whether its functions ran). A check
    calling an optional function (Check.optional) the candidate does not provide is not run either:
    "not covered (not provided)", the fallback's never standing in for it."""
    from impl.compose import provides
    from impl.registry import MECHANISMS
    from invariants.engine import CheckResult

    runnable, rows = [], []
    for c in checks:
        needed = c.namespaces(MECHANISMS)
        lacking = [f for f in c.optional if not callable(getattr(getattr(impl, f.split(".")[0], None),
                                                                 f.split(".", 1)[1], None))]
        if not any(provides(getattr(impl, m, None)) for m in needed):
            rows.append(CheckResult(c.name, c.mechanism, "not run", 0, -1.0, "", None, None,
                                    f"{impl.name!r} provides no {', '.join(needed)} namespace (the ones this "
                                    f"check calls)", None, {}, 0.0))
        elif lacking:
            # an optional calling convention (impl.registry.OPTIONAL_FUNCTIONS): ours never stands in
            rows.append(CheckResult(c.name, c.mechanism, "not run", 0, -1.0, "", None, None,
                                    f"not covered (not provided): {impl.name!r} does not provide the optional "
                                    f"{', '.join(lacking)}; nothing ran in its place", None, {}, 0.0))
        else:
            runnable.append(c)
    absent = [r.check for r in rows if not r.message.startswith("not covered")]
    if absent:
        console.print(f"not run: {len(absent)} checks need namespaces {impl.name!r} does not provide: "
                      f"{', '.join(absent)}", markup=False)
    for r in (r for r in rows if r.message.startswith("not covered")):
        console.print(f"not run: {r.check}: {r.message}", markup=False)
    for line in composition_lines(impl):
        console.print(line, markup=False)
    return runnable, rows


def composition_lines(impl) -> list[str]:
    """One line per partially provided mechanism: what the candidate brings, what the fallback does."""
    from impl.compose import Composed
    from impl.registry import FUNCTIONS, MECHANISMS

    out = []
    for m in (*MECHANISMS, "model"):
        ns = getattr(impl, m, None)
        if isinstance(ns, Composed) and ns.provided:
            rest = "; ".join(f"{m}.{f} from {ns.origin(f)}" for f in FUNCTIONS[m] if f not in ns.provided)
            out.append(f"{m}: the candidate provides {', '.join(sorted(ns.provided))}; {rest}")
    if getattr(impl, "serving", None) is not None:
        out.append(f"serving: the candidate's engine {impl.serving.__name__} over our model (composing the "
                   f"candidate's mechanisms)")
    if getattr(impl, "not_provided", None):
        out.append(f"not provided (declared NOT_PROVIDED): {', '.join(sorted(impl.not_provided))}: their "
                   f"comparisons are NOT COVERED, never judged")
    line = precision.composition_line(impl)
    return out + ([line] if line else [])


class GateRow(NamedTuple):
    check: str
    status: str               # "pass" | "fail" | "regression" | "not covered" | "error" | "not run"
    candidate: object         # the candidate's CheckResult
    peer: Optional[object]    # the peer's CheckResult on the same examples (None: not run)
    note: str


def verdict(cand, peer, factor: float = REGRESSION_FACTOR) -> GateRow:
    """The gate's status of one check from the candidate's and the peer's results."""
    if cand.status != "pass" or peer is None or peer.status != "pass":
        note = cand.message if cand.status != "pass" else (
            "" if peer is None else f"peer {peer.status}: {peer.message}")
        return GateRow(cand.check, cand.status, cand, peer, note)
    for stat in ("p50", "max"):
        c, p = cand.margin[stat], peer.margin[stat]
        if c is not None and p is not None and c >= REGRESSION_FLOOR and c > factor * p:
            return GateRow(cand.check, "regression", cand, peer,
                           f"{stat} error/limit {c:.3g} is {c / p if p > 0 else float('inf'):.3g}x the peer's "
                           f"{p:.3g} on the same examples (allowed: {factor:g}x); the candidate's worst: "
                           f"{cand.worst_line}")
    return GateRow(cand.check, "pass", cand, peer, _uncovered(cand))


def _with_worst_repro(row: GateRow, cand, device: str, dtype: str) -> GateRow:
    """A regression's repro line: the candidate's worst example (a regression breaks no contract, so
    there is no shrunk case to re-run)."""
    from invariants.report import repro_line

    if row.status != "regression" or row.candidate.worst_case is None:
        return row
    repro = repro_line(row.check, row.candidate.worst_case, cand.impl.name, device, dtype)
    return row._replace(candidate=row.candidate._replace(repro=repro))


def _uncovered(cand) -> str:
    notes = [f"not covered (not provided): {', '.join(cand.not_provided)}" if cand.not_provided else "",
             f"judged in the declared precision: {', '.join(cand.judged_in)}" if getattr(cand, "judged_in", ()) else ""]
    return "; ".join(n for n in notes if n)


def exit_code(rows) -> int:
    from gate.cli import EXIT_BROKEN, EXIT_CRASH, EXIT_PASS

    if any((r.status == "fail" and not r.candidate.crashed) or r.status == "regression" for r in rows):
        return EXIT_BROKEN
    if any(r.status == "error" or (r.status == "fail" and r.candidate.crashed) for r in rows):
        return EXIT_CRASH
    return EXIT_PASS


def summary(rows) -> str:
    by = lambda s: sum(r.status == s for r in rows)  # noqa: E731
    return (f"{len(rows)} checks: {by('pass')} passed, {by('fail')} failed, {by('regression')} regressions, "
            f"{by('not covered')} not covered, {by('error')} errors, {by('not run')} not run")


def _m(x) -> str:
    return "-" if x is None else f"{x:.3g}"


def _cells(r: GateRow) -> list[str]:
    c, p = r.candidate.margin, (r.peer.margin if r.peer is not None else {"p50": None, "max": None})
    return [r.check, r.status.upper() if r.status != "pass" else "pass", _m(c["p50"]), _m(c["max"]),
            _m(p["p50"]), _m(p["max"]), _per_example(r.candidate), ", ".join(r.candidate.covered) or "-"]


def _per_example(r) -> str:
    """Seconds inside the candidate's functions per example: a slow candidate (autotuning or compiling
    per new shape) shows here, not as a slow glmgate."""
    return f"{r.candidate_seconds / r.examples:.3g}" if r.examples and r.covered else "-"


HEADERS = ["check", "status", "candidate p50", "candidate max", "peer p50", "peer max", "candidate s/example",
           "candidate functions run"]


def table(rows, title: str):
    from rich.table import Table

    t = Table(title=title)
    for h in HEADERS:
        t.add_column(h, overflow="fold")
    for r in rows:
        t.add_row(*_cells(r))
    return t


def markdown(rows, meta: dict) -> str:
    """A PR comment: the verdict, the table, then why each non-passing check did not pass."""
    code = exit_code(rows)
    head = {0: "passed", 1: "BLOCKED: a broken contract or a regression", 3: "BLOCKED: a crash"}[code]
    out = [f"### glmgate gate: {head}", "",
           f"candidate `{meta['candidate']}` vs peer `{meta['baseline']}` on {meta['device']} "
           f"({meta['dtype']}), profile {meta['profile']}: {summary(rows)}", ""]
    warm = meta.get("warmup_seconds") or {}
    if warm or meta.get("fixed_shapes"):
        out += [f"warm-up outside the examples: {', '.join(f'{m} {s:.1f} s' for m, s in warm.items()) or 'none'}"
                + ("; fixed shapes (the base geometry's dimensions only)" if meta.get("fixed_shapes") else ""), ""]
    out += ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in _cells(r)) + " |" for r in rows]
    bad = [r for r in rows if r.status != "pass" or r.note]
    if bad:
        out += ["", "<details><summary>why</summary>", ""]
        for r in bad:
            out.append(f"- **{r.check}** ({r.status}): {r.note}")
            if r.candidate.repro:
                out.append(f"  `{r.candidate.repro}`")
        out += ["", "</details>"]
    return "\n".join(out) + "\n"


def junit(rows, meta: dict) -> str:
    """JUnit XML: one testcase per check (classname = mechanism); FAIL and REGRESSION are failures
    (message + repro line), ERROR an error, NOT COVERED and NOT RUN skipped with why."""
    suite = ET.Element("testsuite", name="glmgate", tests=str(len(rows)),
                       failures=str(sum(r.status in ("fail", "regression") for r in rows)),
                       errors=str(sum(r.status == "error" for r in rows)),
                       skipped=str(sum(r.status in ("not covered", "not run") for r in rows)),
                       time=f"{sum(r.candidate.seconds for r in rows):.3f}")
    props = ET.SubElement(suite, "properties")
    for k, v in meta.items():
        ET.SubElement(props, "property", name=str(k), value=str(v))
    for r in rows:
        case = ET.SubElement(suite, "testcase", classname=f"glmgate.{r.candidate.mechanism}", name=r.check,
                             time=f"{r.candidate.seconds:.3f}")
        text = r.note + (f"\n{r.candidate.repro}" if r.candidate.repro else "")
        if r.status in ("fail", "regression"):
            ET.SubElement(case, "failure", message=f"{r.status}: {r.note[:500]}", type=r.status).text = text
        elif r.status == "error":
            ET.SubElement(case, "error", message=r.note[:500], type="error").text = text
        elif r.status in ("not covered", "not run"):
            ET.SubElement(case, "skipped", message=f"{r.status}: {r.note[:500]}")
        if r.candidate.covered:
            ET.SubElement(case, "system-out").text = "called: " + ", ".join(r.candidate.covered) + (
                f"\n{r.note}" if r.status == "pass" and r.note else "")
    return ET.tostring(suite, encoding="unicode", xml_declaration=True)


def as_json(rows, meta: dict) -> str:
    return json.dumps({"meta": meta, "summary": summary(rows), "exit_code": exit_code(rows),
                       "checks": [{"check": r.check, "status": r.status, "note": r.note,
                                   "candidate": r.candidate.to_json(),
                                   "peer": None if r.peer is None else r.peer.to_json()} for r in rows]},
                      indent=2, default=str)


def cmd_gate(args) -> int:
    """`glmgate gate --candidate pkg.mod:obj`: see the module docstring."""
    from gate import warmup

    with warmup.fixed_shapes(args.fixed_shapes):
        return _gate(args)


def _verdicts(args, checks, geometry, cand, base, peer, profile, factor, dtype, console, store, replays):
    """(one GateRow per check, in order; the warm-up seconds per mechanism) in this process."""
    from gate.cli import UsageError, _run_checks
    from gate import warmup

    try:
        warm = warmup.run(cand.impl, checks, geometry, args.device, dtype, console) if args.warmup else {}
    except warmup.WarmupFailed as e:
        raise UsageError(f"--candidate: {e} (the candidate's set-up is broken before any example ran; "
                         f"--no-warmup runs the examples without it)") from e
    results = _run_checks(checks, geometry, cand, base, profile, args.examples, args.seed, console, "candidate",
                          store=store, replays=replays)
    # the peer only where the candidate passed: a regression is a question about a passing candidate
    again = [c for c, r in zip(checks, results) if r.status == "pass"]
    peers = {r.check: r for r in _run_checks(again, geometry, peer, base, profile, args.examples, args.seed,
                                             console, "peer", store=store, replays=replays)}
    return [_with_worst_repro(verdict(r, peers.get(r.check), factor), cand, args.device, dtype)
            for r in results], warm


def _gate(args) -> int:
    from gate.cli import UsageError, _geometry, _profile, _rich, _select, _setup_device, _target
    from gate import multigpu
    from gate.failures_cmd import load_replays, open_store

    from invariants.profiles import DERANDOMIZED

    factor = REGRESSION_FACTOR if args.regression_factor is None else args.regression_factor
    if not factor > 1:
        raise UsageError(f"--regression-factor: expected a factor > 1, got {factor}")
    _setup_device(args.device)
    profile = _profile(args, "ci" if args.device == "cpu" else "gpu")
    if profile not in DERANDOMIZED and args.seed is None:
        raise UsageError(f"--profile {profile}: the gate compares the candidate and its peer on the same "
                         f"examples; use a derandomized profile ({', '.join(sorted(DERANDOMIZED))}) or give --seed")
    dtype = args.dtype or ("float32" if args.device == "cpu" else "bfloat16")
    cand, base = _target(args.candidate, args.device, dtype, "--candidate")
    peer = _target(args.baseline, args.device, dtype, "--baseline")[0]
    workers = multigpu.workers(args)            # --gpus N: N worker processes, one per GPU
    geometry = _geometry(args)
    args.check = args.check or None
    checks, _ = _select(args)
    console = _rich(stderr=args.json == "-")
    console.print(f"glmgate gate: candidate={cand.impl.name} peer={peer.impl.name} device={args.device} "
                  f"dtype={dtype} profile={profile}")
    checks, unprovided = provided_checks(checks, cand.impl, console)
    # read once, before the candidate records anything: the peer replays exactly the candidate's cases
    store = open_store(args)
    replays = load_replays(store, checks, console)
    if workers > 1:
        # each worker runs this gate (warm-up, candidate, peer) on its share of the checks
        rows, warm = multigpu.gate_split(args, workers, checks, profile, console)
    else:
        rows, warm = _verdicts(args, checks, geometry, cand, base, peer, profile, factor, dtype, console, store,
                               replays)
    rows += [GateRow(r.check, "not run", r, None, r.message) for r in unprovided]
    meta = {"candidate": cand.impl.name, "baseline": peer.impl.name, "device": args.device, "dtype": dtype,
            "profile": profile, "examples": args.examples, "seed": args.seed, "regression_factor": factor,
            "failures": store and str(store.directory), "warmup_seconds": warm, "fixed_shapes": args.fixed_shapes}
    console.print(table(rows, "glmgate gate"))
    console.print(summary(rows), markup=False)
    for r in rows:
        if r.status != "pass" or r.note:
            console.print(f"  {r.check} {r.status.upper()}: {r.note}", markup=False)
            if r.candidate.shrunk_case and r.status == "fail":
                console.print(f"    shrunk scenario: {json.dumps(r.candidate.shrunk_case)}", markup=False)
            if r.candidate.repro and r.status in ("fail", "error", "regression"):
                console.print(f"    {r.candidate.repro}", soft_wrap=True, markup=False)
    for where, render in ((args.json, as_json), (args.junit, junit), (args.markdown, markdown)):
        if where == "-":
            print(render(rows, meta))
        elif where:
            with open(where, "w") as fh:
                fh.write(render(rows, meta))
    return exit_code(rows)
