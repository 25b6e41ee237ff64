"""`--gpus N|auto` of `glmgate run` and `glmgate gate`: the selected checks spread over N worker processes,
one per GPU, their results merged into the report one process writes; and the GPU pinning of pytest-xdist
workers (conftest.py, GLMGATE_PIN_GPUS).

The split. `partition` deals the checks out over N workers by an estimated cost (COST_CUDA / COST_CPU: the
seconds one check takes; greedy, heaviest first, each to the least-loaded worker, ties to the table order
and the lowest worker: the same split on every run). Worker K is the same CLI (`glmgate run` or
`glmgate gate`, every option of the parent forwarded, the parent's profile resolved) on its checks only
(`--check` each), writing `--json` to a temporary folder, started with CUDA_VISIBLE_DEVICES set to the K-th
visible GPU, so torch and Triton in it never see another. The parent waits, shows which worker runs which
check and how many are done (from the lines each worker prints as a check finishes), then rebuilds every
check's result from the workers' JSON and reports them in the single run's order: the table, the summary
line, the JSON, JUnit and markdown files and the exit code are those of one process (only the timings
differ). A worker that dies (a segfault, a CUDA error that kills the process, the OOM killer) is an ERROR
row for each check it had not reported, naming the worker, its GPU and how it died, with the tail of its
stderr; its logs are kept (the folder is named). Ctrl-C is passed to every worker, which reports what it
finished (`glmgate run`: the merged report then covers the checks that finished, exit 130).

`--gpus 1` (or `auto` on a one-GPU host) is exactly the single-process path. On `--device cpu`, `--gpus N`
runs N worker processes without a GPU (how the tests exercise the split on a machine without one).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Optional

# conftest.py: pin each pytest-xdist worker to one GPU when set to 1 (`pytest --gpus-per-worker` sets it)
from gate.gpu_pin import PIN_ENV  # noqa: E402
# set to 1: `--gpus N` with N above the visible GPUs shares them round robin (checks the split's verdict on a
# one-GPU host; its wall time says nothing of N GPUs)
SHARE_ENV = "GLMGATE_GPUS_SHARE"
# cli._interrupted_rows's message: a worker's row for a check a Ctrl-C stopped
INTERRUPTED = "interrupted (Ctrl-C) before it finished"

# Estimated seconds of one check on one H200 under the `gpu` profile (40 drawn examples, the CUDA pins
# included), from the per-check times of the GPU runs in bench_results/ (issues 11 to 13); only the ratios
# matter. A check not listed costs DEFAULT_COST.
COST_CUDA = {
    "kda.recurrent": 15, "kda.chunked": 45, "kda.causal": 55, "kda.decode": 6, "kda.sublayer": 40,
    "kda.paths": 60, "kda.packed": 40, "kda.rerun": 40, "kda.checkpoint": 30, "kda.scale": 60,
    "dsa.index": 120, "mla.absorbed": 90, "mla.paths": 25, "mla.causal": 10, "dsa.index_paged": 5,
    "mla.absorbed_paged": 6, "mhc.coefficients": 8, "mhc.write_back": 1, "moe.route": 30, "moe.forward": 10,
    "nvfp4.quantize": 1, "nvfp4.dequantize": 1, "nvfp4.gate": 30, "model.paths": 45, "model.causal": 20,
    "serving.state_machine": 400, "kda.batch": 20, "dsa.batch": 2, "mla.batch": 3, "moe.batch": 16,
    "mhc.batch": 6, "nvfp4.batch": 17, "dsa.rerun": 1, "mla.rerun": 1, "moe.rerun": 10, "mhc.rerun": 1,
    "nvfp4.rerun": 2, "kda.graph_replay": 20, "mla.graph_replay": 20, "model.reference": 30,
    "kda.device_report": 5,
}
# Process CPU seconds of one check in the interpreter under the `ci` profile (tests/test_matrix.py's draws)
COST_CPU = {
    "kda.recurrent": 7.5, "kda.chunked": 12.3, "kda.causal": 30.3, "kda.decode": 8.3, "kda.sublayer": 8.0,
    "kda.paths": 27.9, "kda.packed": 14.5, "kda.rerun": 2.9, "kda.checkpoint": 10, "kda.scale": 8,
    "dsa.index": 1.8, "dsa.index_paged": 3.1, "mla.absorbed": 12.1, "mla.paths": 12.6, "mla.causal": 20.1,
    "mla.absorbed_paged": 2.1, "mhc.coefficients": 5.5, "mhc.write_back": 6.5, "moe.route": 8.7,
    "moe.forward": 8.0, "nvfp4.quantize": 2, "nvfp4.dequantize": 2, "nvfp4.gate": 36.1, "model.paths": 57.6,
    "model.causal": 30.9, "serving.state_machine": 57.1, "kda.graph_replay": 5, "mla.graph_replay": 8,
    "model.reference": 20, "kda.device_report": 10,
}
DEFAULT_COST = 10.0


def cost(name: str, device: str) -> float:
    """The estimated seconds of check `name` on `device` (cpu, or a GPU)."""
    return float((COST_CPU if device == "cpu" else COST_CUDA).get(name, DEFAULT_COST))


def partition(names, n: int, weight) -> list[list[str]]:
    """`names` dealt out over `n` workers: heaviest first (`weight(name)`; ties in the given order), each
    to the worker with the least weight so far (ties: the lowest index); each worker's names in the given
    order. Deterministic; every name exactly once; the heaviest and the lightest worker differ by at most
    the largest single weight (each name goes to a least-loaded worker)."""
    names = list(names)
    if len(set(names)) != len(names):
        raise ValueError(f"partition: a name appears twice in {names}")
    if n < 1:
        raise ValueError(f"partition: {n} workers")
    w = [float(weight(x)) for x in names]
    loads, parts = [0.0] * n, [[] for _ in range(n)]
    for i in sorted(range(len(names)), key=lambda i: (-w[i], i)):
        k = min(range(n), key=lambda k: (loads[k], k))
        parts[k].append(i)
        loads[k] += w[i]
    return [[names[i] for i in sorted(p)] for p in parts]


# ------------------------------------------------------------------------------------------------ pinning
# (gate/gpu_pin.py: conftest.py's part, re-exported here)
from gate.gpu_pin import _listed, _nvml_count, pin_xdist_worker, xdist_gpu  # noqa: E402,F401


# ------------------------------------------------------------------------------------------------ the flag

def add_flags(p) -> None:
    p.add_argument("--gpus", default=None, metavar="N|auto",
                   help="spread the checks over N worker processes, one per GPU (CUDA_VISIBLE_DEVICES set "
                        "for each), the report merged into the one a single process writes; auto: every "
                        "visible GPU; 1 (the default): one process (gate/multigpu.py)")
    p.set_defaults(gpus_parser=p)


def gpu_ids() -> list[str]:
    """The device ids a worker can be pinned to: CUDA_VISIBLE_DEVICES's entries when it is set, else
    0..count-1; as many as torch counts."""
    import torch

    count = torch.cuda.device_count()
    listed = _listed(os.environ)
    return (listed if listed is not None else [str(i) for i in range(count)])[:count]


def workers(args) -> int:
    """The number of worker processes `--gpus` asks for (1: the single-process path); UsageError for a
    count this host cannot give."""
    from gate.cli import UsageError

    spec = getattr(args, "gpus", None)
    if spec is None:
        return 1
    spec = str(spec).strip().lower()
    cpu = args.device == "cpu"
    if spec == "auto":
        if cpu:
            raise UsageError("--gpus auto: --device cpu uses no GPU; run on --device cuda, or give the number "
                             "of worker processes (--gpus N)")
        n = len(gpu_ids())
    else:
        try:
            n = int(spec)
        except ValueError:
            n = 0
        if n < 1:
            raise UsageError(f"--gpus: expected a number of GPUs >= 1 or auto, got {spec!r}")
    if n == 1:
        return 1
    if getattr(args, "kernel_paths", False):
        raise UsageError("--kernel-paths records the kernels one process launches: run it with --gpus 1")
    if not cpu:
        if args.device != "cuda":
            raise UsageError(f"--gpus {n} picks one GPU per worker itself: use --device cuda, not {args.device}")
        ids = gpu_ids()
        if n > len(ids) and os.environ.get(SHARE_ENV) != "1":
            where = os.environ.get("CUDA_VISIBLE_DEVICES")
            raise UsageError(f"--gpus {n}: only {len(ids)} CUDA device{'s' if len(ids) != 1 else ''} visible to "
                             f"torch on this machine" + (f" (CUDA_VISIBLE_DEVICES={where})" if where is not None
                                                         else "") +
                             f"; use --gpus {len(ids)} or --gpus auto")
    return n


# ------------------------------------------------------------------------------------------------ workers

# a check's line in a worker's log (gate.cli._run_checks and cmd_run print it without a terminal)
DONE = re.compile(r"^  ([\w.]+): (pass|fail|error|not run|not covered) \((.*)\)\s*$")
EXAMPLE = re.compile(r"^    ([\w.]+): example (\d+)/(\d+) ")
# other lines of a worker worth passing on (the failure store, the warm-up)
RELAY = ("  recorded the shrunk case", "  the shrunk case is already recorded", "  the failing case is a pinned",
         "  warning:", "warm-up:")
# a worker started with -c: the parent's sys.path (so it imports exactly what the parent did), then the CLI
BOOT = ("import json, sys; sys.path[:] = json.loads(sys.argv[1]); del sys.argv[1]; "
        "from gate.cli import main; sys.exit(main(sys.argv[1:]))")


class Worker:
    """One worker process: its checks (in the single run's order), command line, GPU and files."""

    def __init__(self, index: int, gpu: Optional[str], checks, cmd, folder: str, load: float = 0.0):
        self.index, self.gpu, self.checks, self.cmd, self.load = index, gpu, list(checks), list(cmd), load
        self.json = os.path.join(folder, f"worker{index}.json")
        self.out = os.path.join(folder, f"worker{index}.out")
        self.err = os.path.join(folder, f"worker{index}.err")
        self.proc: Optional[subprocess.Popen] = None
        self.started = self.ended = 0.0
        self.finished: dict = {}      # check -> status, from its log (the candidate's, for a gate)
        self.peer: dict = {}          # gate: check -> the peer's status
        self.example = ""             # the example the current check is at (its log's latest line)
        self._offset, self._partial = 0, b""

    @property
    def label(self) -> str:
        return f"worker {self.index} ({'no GPU' if not self.gpu else 'GPU ' + self.gpu})"

    def start(self, environ=None) -> None:
        env = dict(os.environ if environ is None else environ)
        env["CUDA_VISIBLE_DEVICES"] = self.gpu or ""
        env["TTY_COMPATIBLE"] = "0"              # rich: a log file, whatever FORCE_COLOR says
        env.pop("FORCE_COLOR", None)
        env["PYTHONUNBUFFERED"] = "1"
        env["PYTHONFAULTHANDLER"] = "1"          # a segfault leaves the Python stack in its stderr
        env["GLMGATE_WORKER"] = str(self.index)
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            # a session of its own: a Ctrl-C at the terminal reaches the parent only, which passes it on once
            self.proc = subprocess.Popen(self.cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env,
                                         start_new_session=True)
        self.started = time.time()

    def alive(self) -> bool:
        if self.proc is None:
            return False
        if self.proc.poll() is None:
            return True
        self.ended = self.ended or time.time()
        return False

    def new_lines(self) -> list[str]:
        """The lines its stdout gained since the last call (whole lines only)."""
        try:
            with open(self.out, "rb") as fh:
                fh.seek(self._offset)
                data = fh.read()
        except OSError:
            return []
        self._offset += len(data)
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()
        return [line.decode("utf-8", "replace").rstrip("\r") for line in lines]

    def stderr_tail(self, lines: int = 30, chars: int = 6000) -> str:
        """The last `lines` whole lines of its stderr (faulthandler's list of extension modules left out)."""
        try:
            with open(self.err, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                cut = fh.tell() > chars
                fh.seek(max(0, fh.tell() - chars))
                text = fh.read().decode("utf-8", "replace")
        except OSError:
            return ""
        kept = text.splitlines()[1 if cut else 0:]
        kept = [ln for ln in kept if ln.strip() and not ln.startswith("Extension modules:")][-lines:]
        return "\n".join(kept) or "(empty)"

    def current(self, gate: bool) -> str:
        """What it runs now, from its log: the first of its checks without a line (the worker runs them
        in this order); for a gate, then the peer on the candidate's passing ones."""
        todo = [c for c in self.checks if c not in self.finished]
        if todo:
            return ("candidate " if gate else "") + todo[0]
        todo = [c for c in self.checks if self.finished[c] == "pass" and c not in self.peer] if gate else []
        return f"peer {todo[0]}" if todo else "reporting"

    def died(self) -> str:
        """How it ended, in words."""
        rc = self.proc.returncode if self.proc is not None else None
        if rc is None:
            return "did not start"
        if rc < 0:
            try:
                return f"killed by signal {signal.Signals(-rc).name}"
            except ValueError:
                return f"killed by signal {-rc}"
        return f"exited with code {rc}"


class _Display:
    """Progress while the workers run: a bar per worker (its current check, done / its total) on a
    terminal; otherwise a line per finished check, with the worker and the run's done / total."""

    def __init__(self, workers, console, gate: bool):
        self.workers, self.console, self.gate = workers, console, gate
        self.total, self.done = sum(len(w.checks) for w in workers), 0
        self.prog, self.tasks = None, {}
        if console.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.prog = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=console, transient=True)
            self.tasks["all"] = self.prog.add_task(f"{len(workers)} workers: checks done", total=self.total)
            for w in workers:
                self.tasks[w.index] = self.prog.add_task(w.label, total=len(w.checks))
            self.prog.start()

    def say(self, text: str) -> None:
        (self.prog.console if self.prog else self.console).print(text, markup=False, highlight=False)

    def update(self) -> None:
        for w in self.workers:
            for line in w.new_lines():
                self._line(w, line)
            if self.prog:
                now = "done" if w.proc is not None and not w.alive() else w.current(self.gate) + w.example
                self.prog.update(self.tasks[w.index], completed=len(w.finished),
                                 description=f"{w.label}: {now}")
        if self.prog:
            self.prog.update(self.tasks["all"], completed=self.done)

    def _line(self, w: Worker, line: str) -> None:
        m = DONE.match(line)
        if m and m.group(1) in w.checks:
            name, status = m.group(1), m.group(2)
            w.example = ""
            if name not in w.finished:
                w.finished[name] = status
                self.done += 1
                self.say(f"  [{w.label}] {'candidate ' if self.gate else ''}{name}: {status} ({m.group(3)}); "
                         f"{self.done}/{self.total} checks done")
            else:
                w.peer[name] = status
                self.say(f"  [{w.label}] peer {name}: {status} ({m.group(3)})")
            return
        m = EXAMPLE.match(line)
        if m:
            w.example = f" example {m.group(2)}/{m.group(3)}"
            if not self.prog:
                self.say(f"  [{w.label}] {line.strip()}")
            return
        if line.startswith(RELAY):
            self.say(f"  [{w.label}] {line.strip()}")

    def close(self) -> None:
        if self.prog:
            self.prog.stop()


def run_workers(workers, console, gate: bool = False, grace: float = 120.0, poll: float = 0.2,
                environ=None) -> bool:
    """Start every worker, show their progress until all have ended, and return whether the run was
    interrupted: on Ctrl-C (or SIGTERM) every live worker gets one SIGINT and `grace` seconds to write
    its report; a second Ctrl-C, or the grace running out, kills them. No worker outlives this call."""
    import threading

    display = _Display(workers, console, gate)
    interrupted, deadline = False, None
    main = threading.current_thread() is threading.main_thread()
    old = signal.getsignal(signal.SIGTERM) if main else None
    if main:
        signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        for w in workers:
            w.start(environ)
        while any(w.alive() for w in workers):
            try:
                display.update()
                if deadline is not None and time.time() > deadline:
                    for w in workers:
                        if w.alive():
                            w.proc.kill()
                time.sleep(poll)
            except KeyboardInterrupt:
                if interrupted:                  # the second one: stop waiting
                    deadline = 0.0
                    continue
                interrupted, deadline = True, time.time() + grace
                display.say(f"interrupted: each worker reports the checks it finished (up to {grace:.0f} s; "
                            f"Ctrl-C again to stop them now)")
                for w in workers:
                    if w.alive():
                        w.proc.send_signal(signal.SIGINT)
        display.update()
    finally:
        for w in workers:
            if w.alive():
                w.proc.kill()
                w.proc.wait()
                w.alive()
        display.close()
        if main:
            signal.signal(signal.SIGTERM, old)
    return interrupted


# ------------------------------------------------------------------------------------------------ merging

def result_of(d: dict):
    """A CheckResult back from its JSON (`CheckResult.to_json`): the tuple fields tuples again."""
    from invariants.engine import CheckResult

    tuples = {k for k, v in CheckResult._field_defaults.items() if isinstance(v, tuple)}
    return CheckResult(**{k: (tuple(v or ()) if k in tuples else v) for k, v in d.items()
                          if k in CheckResult._fields})


def _mechanism(name: str) -> str:
    return name.split(".", 1)[0]


def lost(w: Worker, name: str, why: str):
    """The error row of a check worker `w` did not report."""
    from invariants.engine import CheckResult

    had = (f"; it had finished {name} ({w.finished[name]}), but the result was lost with the worker"
           if name in w.finished else "")
    return CheckResult(name, _mechanism(name), "error", 0, -1.0, "", None, None, f"{w.label} {why}{had}", None,
                       {}, 0.0)


def _report_of(w: Worker) -> tuple[Optional[dict], str]:
    """(the worker's JSON, "") or (None, why it has none); UsageError when the worker refused its
    arguments (exit 2), with its own line."""
    from gate.cli import EXIT_USAGE, UsageError

    try:
        with open(w.json) as fh:
            return json.load(fh), ""
    except (OSError, ValueError):
        pass
    if w.proc is not None and w.proc.returncode == EXIT_USAGE:
        last = [ln for ln in w.stderr_tail().splitlines() if ln.strip()]
        line = last[-1] if last else f"{w.label}: a usage error"
        raise UsageError(re.sub(r"^glmgate \w+: error: ", "", line))
    tail = "\n".join("    " + line for line in w.stderr_tail().splitlines())
    rc = w.proc.returncode if w.proc is not None else None
    how = w.died() if rc in (0, 1) else f"crashed ({w.died()})"      # 0, 1: a verdict, but no report
    return None, (f"{how} before it reported its checks; the last lines of its stderr:\n"
                  f"{tail}\n  (its whole output: {w.out}, {w.err})")


def merge_run(workers, docs: dict, order, interrupted: bool = False) -> tuple[list, bool]:
    """The results of `glmgate run`'s workers in the single run's `order`, and whether the run was
    `interrupted` or any worker says it was. `docs`: worker index -> its JSON, or the reason it has none
    (a string). A check a Ctrl-C stopped is left out (the caller adds its "not run" row, as one process
    does), and so is every check of a worker without a report after a Ctrl-C."""
    by_name = {}
    for w in workers:
        doc = docs[w.index]
        if isinstance(doc, str):
            if not interrupted:
                by_name.update({c: lost(w, c, doc) for c in w.checks})
            continue
        stopped = bool(doc.get("meta", {}).get("interrupted"))
        interrupted |= stopped
        for d in doc.get("results", ()):
            if d.get("status") == "not run" and d.get("message") == INTERRUPTED and stopped:
                continue
            if d.get("check") in w.checks:
                by_name[d["check"]] = result_of(d)
        if not stopped:
            by_name.update({c: lost(w, c, f"{w.died()} and reported no result for this check")
                            for c in w.checks if c not in by_name})
    return [by_name[c] for c in order if c in by_name], interrupted


def merge_gate(workers, docs: dict, order, mechanisms=()) -> tuple[list, dict]:
    """The GateRows of `glmgate gate`'s workers in the single run's `order`, and the warm-up seconds per
    mechanism (the longest any worker took; in the order of `mechanisms`)."""
    from gate.merge_gate import GateRow

    rows, warm = {}, {}
    for w in workers:
        doc = docs[w.index]
        if isinstance(doc, str):
            for c in w.checks:
                r = lost(w, c, doc)
                rows[c] = GateRow(c, "error", r, None, r.message)
            continue
        for d in doc.get("checks", ()):
            if d["check"] in w.checks:
                rows[d["check"]] = GateRow(d["check"], d["status"], result_of(d["candidate"]),
                                           None if d["peer"] is None else result_of(d["peer"]), d["note"])
        for m, s in (doc.get("meta", {}).get("warmup_seconds") or {}).items():
            warm[m] = max(warm.get(m, 0.0), s)
        for c in w.checks:
            if c not in rows:
                r = lost(w, c, f"{w.died()} and reported no result for this check")
                rows[c] = GateRow(c, "error", r, None, r.message)
    ordered = [m for m in dict.fromkeys(mechanisms) if m in warm] + [m for m in warm if m not in mechanisms]
    return [rows[c] for c in order if c in rows], {m: warm[m] for m in ordered}


# ------------------------------------------------------------------------------------------------ the split

SKIP = {"help", "gpus", "check", "mechanism", "json", "junit", "markdown", "list", "kernel_paths", "profile"}


def forwarded(args, parser) -> list[str]:
    """The parent's options as a worker's arguments (those of `parser` that differ from their default),
    less the ones the split sets itself (SKIP: the checks, the outputs, the profile)."""
    import argparse

    out = []
    for a in parser._actions:
        if a.dest in SKIP or not a.option_strings or not hasattr(args, a.dest):
            continue
        flag = next((s for s in a.option_strings if s.startswith("--")), a.option_strings[0])
        v = getattr(args, a.dest)
        if isinstance(a, argparse._StoreConstAction):        # store_true / store_false / store_const
            if v == a.const and v != a.default:
                out.append(flag)
        elif isinstance(a, argparse._AppendAction):
            if v != a.default:
                out += [f"{flag}={x}" for x in v or ()]
        elif isinstance(a, argparse._StoreAction):
            if v != a.default:
                out.append(f"{flag}={v}")
    return out


def plan(args, n: int, names, profile: str, folder: str) -> list[Worker]:
    """The workers of a split: `names` partitioned by cost, each worker's command line and GPU."""
    cpu = args.device == "cpu"
    ids = [] if cpu else gpu_ids()
    parts = partition(names, n, lambda c: cost(c, args.device))
    common = [sys.executable, "-c", BOOT, json.dumps(sys.path), args.cmd,
              *forwarded(args, args.gpus_parser), f"--profile={profile}"]
    out = []
    for k, part in enumerate(p for p in parts if p):
        cmd = common + [f"--check={c}" for c in part] + [f"--json={os.path.join(folder, f'worker{k}.json')}"]
        out.append(Worker(k, None if cpu else ids[k % len(ids)], part, cmd, folder,
                          sum(cost(c, args.device) for c in part)))
    return out


def _split(args, n: int, names, profile: str, console, gate: bool):
    """Run the workers; (workers, {index: JSON or why none}, interrupted, folder)."""
    folder = tempfile.mkdtemp(prefix="glmgate-gpus-")
    workers_ = plan(args, n, names, profile, folder)
    what = "GPUs" if args.device != "cpu" else "worker processes (no GPU)"
    console.print(f"split over {len(workers_)} {what}: {len(names)} checks, by estimated cost "
                  f"(gate/multigpu.py)", markup=False)
    for w in workers_:
        console.print(f"  {w.label}: {', '.join(w.checks)} (estimated {w.load:.0f} s)", markup=False)
    t0 = time.time()
    interrupted = run_workers(workers_, console, gate)
    docs = {}
    for w in workers_:
        doc, why = _report_of(w)
        docs[w.index] = doc if doc is not None else why
    console.print(f"split over {len(workers_)} {what}: {time.time() - t0:.1f} s wall", markup=False)
    for w in workers_:
        console.print(f"  {w.label}: {len(w.checks)} checks in {(w.ended or time.time()) - w.started:.1f} s, "
                      f"{w.died()}", markup=False)
    return workers_, docs, interrupted, folder


def _done(folder: str, docs: dict, console) -> None:
    """Remove the workers' folder, unless one crashed (its logs are named in its rows)."""
    if any(isinstance(d, str) for d in docs.values()):
        console.print(f"the workers' logs are kept in {folder}", markup=False)
    else:
        shutil.rmtree(folder, ignore_errors=True)


def run_split(args, n: int, checks, reference: bool, profile: str, console, results: list) -> list:
    """`glmgate run --gpus N`: `checks` (and model.reference when `reference`) over N workers, their
    results appended to `results` in the single run's order; KeyboardInterrupt (after appending the
    checks that finished) when the run was interrupted, as one process raises it."""
    from invariants.engine import REFERENCE_CHECK

    names = [c.name for c in checks] + ([REFERENCE_CHECK] if reference else [])
    if not names:
        return results
    workers_, docs, interrupted, folder = _split(args, n, names, profile, console, gate=False)
    merged, stopped = merge_run(workers_, docs, names, interrupted)
    results += merged
    _done(folder, docs, console)
    if stopped:
        raise KeyboardInterrupt
    return results


def gate_split(args, n: int, checks, profile: str, console) -> tuple[list, dict]:
    """`glmgate gate --gpus N`: the candidate and its peer on `checks` over N workers; (the GateRows in
    the single run's order, the warm-up seconds per mechanism)."""
    names = [c.name for c in checks]
    if not names:
        return [], {}
    workers_, docs, interrupted, folder = _split(args, n, names, profile, console, gate=True)
    if interrupted:
        _done(folder, docs, console)
        raise KeyboardInterrupt
    rows, warm = merge_gate(workers_, docs, names, [c.mechanism for c in checks])
    _done(folder, docs, console)
    return rows, warm
