"""`glmgate run --kernel-paths`: which code paths of our Triton kernels the run reached.

Every launch of a kernel of impl/kernels/ is judged against the declared table of its paths
(invariants/kernel_paths.py): after the run's own report, one row per path (the launches that took it)
and a summary line naming the paths the run's checks should have reached (under the `ci` profile on the
CPU) and did not. The JSON (`--json`) holds the same under meta.kernel_paths. It changes no verdict and
no exit code: a path missing from a `ci` run is tests/test_matrix.py's failure, not the run's.
"""
from __future__ import annotations

import functools

_ACTIVE: dict = {}          # the Coverage of the run in progress (one run per process)


def add_flags(p, cmd) -> None:
    """--kernel-paths on `glmgate run`; `cmd` (cmd_run) becomes the parser's `fn`, recording when asked."""
    p.add_argument("--kernel-paths", action="store_true",
                   help="after the report, list every declared code path of our Triton kernels and how many "
                        "launches took it (invariants/kernel_paths.py), and name the ones the run's checks "
                        "should have reached and did not")
    p.set_defaults(fn=_recorded(cmd))


def _recorded(cmd):
    @functools.wraps(cmd)
    def run(args):
        if not getattr(args, "kernel_paths", False) or getattr(args, "list", False):
            return cmd(args)
        from gate.cli import _rich, _setup_device
        _setup_device(args.device)
        from invariants import kernel_paths

        with kernel_paths.recording() as cov:
            _ACTIVE["coverage"], _ACTIVE["checks"] = cov, set()
            try:
                code = cmd(args)
            finally:
                _ACTIVE.clear()
        report(cov, _ran(args), _rich(stderr=args.json == "-"))
        return code
    return run


def _ran(args) -> set:
    """The checks this run selected (--mechanism / --check), whose declared paths it should reach."""
    from gate.cli import UsageError, _select
    try:
        return {c.name for c in _select(args)[0]}
    except UsageError:
        return set()


def meta(args) -> dict:
    """{"kernel_paths": {...}} for the run's JSON while --kernel-paths records, else {}."""
    cov = _ACTIVE.get("coverage")
    return {} if cov is None else {"kernel_paths": summary(cov, _ran(args))}


def summary(cov, ran: set) -> dict:
    """Per path its launches; the declared paths whose checks ran and that were not reached."""
    from invariants.kernel_paths import PATHS

    rows = [{"kernel": p.kernel, "path": p.name, "launches": cov.hits[(p.kernel, p.name)], "by": list(p.by),
             "why": p.why} for p in PATHS]
    # an implementation that launches none of our kernels (torch, a whole candidate) misses nothing of ours
    missed = [f"{p.kernel}: {p.name}" for p in PATHS if cov.launches and ran & set(p.by) and not cov.reached(p)]
    return {"launches": dict(cov.launches), "paths": rows, "reached": sum(r["launches"] > 0 for r in rows),
            "declared": len(rows), "missed": missed}


def report(cov, ran: set, console) -> None:
    """The paths of every kernel the run launched (a table) and one summary line."""
    from rich.table import Table

    from invariants.kernel_paths import KERNELS, PATHS

    s = summary(cov, ran)
    if not s["launches"]:
        console.print("kernel paths: no kernel of impl/kernels/ was launched (the implementation under test runs "
                      "none of ours)", markup=False)
        return
    t = Table(title="kernel paths of the kernels this run launched (invariants/kernel_paths.py)")
    for col in ("kernel", "path", "launches", "reached on the CPU by (ci)"):
        t.add_column(col, overflow="fold")
    for p, row in zip(PATHS, s["paths"]):
        if not cov.launches[p.kernel]:
            continue
        n = row["launches"]
        mark = str(n) if n else ("[bold red]0[/]" if ran & set(p.by) else "0")
        t.add_row(p.kernel, p.name, mark, ", ".join(p.by) or f"[dim]not on the CPU: {p.why}[/]")
    console.print(t)
    idle = [k for k in KERNELS if not cov.launches[k]]
    console.print(f"kernel paths: {s['reached']} of {s['declared']} reached; {sum(s['launches'].values())} launches "
                  f"of {len(s['launches'])} kernels" + (f"; not launched: {', '.join(idle)}" if idle else ""),
                  markup=False)
    if s["missed"]:
        console.print("  not reached, though a check that declares it ran (expected under the ci profile on the "
                      "CPU):\n    " + "\n    ".join(s["missed"]), markup=False)
