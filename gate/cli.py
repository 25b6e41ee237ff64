"""`glmgate`: differential tests of the GLM-5.3-Flash decoder against its float64 oracle.

Thin: it calls the runner (invariants/engine.py) and renders.

Subcommands: run (the matrix), repro (one shrunk case), contracts (the declared table), zoo (every
planted mutant must be caught), bench (correctness-gated GPU benchmarks), db (the failure store that
run and gate replay first: gate/failures_cmd.py).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import traceback

# exit codes (README "Exit codes"): a verdict, a usage problem, or a crash are told apart by CI
EXIT_PASS, EXIT_BROKEN, EXIT_USAGE, EXIT_CRASH, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class UsageError(Exception):
    """Bad arguments or input (exit 2): the message names the problem and what is expected."""

EPILOG = """examples:
  glmgate run                              tiny geometry, Triton kernels in the CPU interpreter
  glmgate run --device cuda --examples 50  the same on a GPU (bf16)
  glmgate run --impl torch --check kda.chunked
  glmgate run --mechanism model            whole decoder paths + the cross-check against transformers 5.23
  glmgate run --require-reference          also exit 1 when that cross-check cannot run (no transformers)
  glmgate run --device cuda --profile gpu  reproducible GPU verdicts: the same 40 examples every run
  glmgate run --device cuda --profile explore   nightly: 150 random examples, new failures kept in .hypothesis-db
  glmgate gate --candidate mykernels:KDA   one merge verdict: pass / FAIL / REGRESSION / NOT COVERED per
                                           check (--junit r.xml --markdown pr.md for CI)
  glmgate zoo                              every planted mutant must be caught
  glmgate repro '<json printed by a failure>'
  glmgate db list                          recorded failures, replayed first by run and gate (docs/failures.md)
  glmgate contracts
  glmgate bench --mechanism kda            on a GPU: our kernels vs flash-linear-attention
  glmgate bench --mechanism mla            sparse absorbed decode vs dense SDPA; index scoring vs torch
  glmgate bench --mechanism moe            fused MoE bf16 / NVFP4 W4A16 / W4A4 vs a torch expert loop
  glmgate bench --mechanism layer          a full decoder layer of each kind, stage shares measured
  glmgate kernels                          no GPU needed: every kernel compiled for sm_90 (regs, spills)
  glmgate checkpoint make-tiny /tmp/tiny   a random tiny checkpoint in transformers' on-disk layout
                                           (--nvfp4 compressed-tensors|modelopt: NVFP4 routed experts)
  glmgate checkpoint inspect /tmp/tiny     every layer, its kind, MLP and state shapes (--tensors: all)

reading the table: p50 / p99 / max are the error / limit of the examples (per example the worst of
its comparisons; 1 is the limit, inf a broken exact comparison): a check whose max sits far below 1
never comes near its limit, one whose p50 is near 1 always sits at it. flips: examples with a legal
discrete-decision difference (a tie within tolerance); ill-cond.: examples whose baseline error exceeded
its cap, so the limit was capped. status: pass, FAIL (the candidate broke a contract or raised), NOT
COVERED (every example held but none of the candidate's functions ran: nothing of it was tested), ERROR
(the check itself could not reach a verdict; the exception and where it was raised follow the table),
NOT RUN (with why). The dim line under the table names, per check, the candidate functions it called.

exit codes: 0 every check passed (or was not covered / not run, as the summary line says); 1 a contract
broke (also when something else crashed); 2 a usage or input error (bad flag, unknown check, bad
config, a candidate that cannot be imported); 3 a crash: the candidate raised inside a check, a check
could not reach a verdict, or glmgate itself failed; 130 interrupted (the report covers what finished).

reading a failure: the table names the broken check; below it, the contract line says which quantity
(output / final_state / boundary_states / conv_state) broke, by how much against its limit (k x the
baseline's error + floor), and the worst element; the shrunk scenario is the smallest case Hypothesis
found, and the `glmgate repro` line re-runs exactly that case.
"""


def _setup_device(device: str) -> None:
    """Pick the Triton backend before anything imports triton (the interpreter flag is read at import)."""
    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
        from impl.interpreter import quiet_discarded_lanes
        quiet_discarded_lanes()
        import torch
        # tiny shapes: thread hand-offs cost ~100x the arithmetic on a 2-core machine
        torch.set_num_threads(1)
    elif device.startswith("cuda"):
        os.environ.pop("TRITON_INTERPRET", None)
    else:
        raise UsageError(f"--device: expected cpu or cuda[:N], got {device!r}")


def _target(impl_name: str, device: str, dtype: str, flag: str = "--impl"):
    import torch

    from impl import registry
    from invariants.target import DTYPES, Target

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device is visible to torch on this machine")
    if dtype not in DTYPES:
        raise UsageError(f"--dtype: expected one of {sorted(DTYPES)}, got {dtype!r}")
    try:
        impl = registry.get(impl_name)
    except (ValueError, KeyError) as e:
        raise UsageError(f"{flag}: {e}")
    return Target(impl, device, DTYPES[dtype]), Target(registry.get("torch"), device, DTYPES[dtype])


def _geometry(args):
    from oracle.config import ConfigError, Geometry

    try:
        if args.config:
            return Geometry.from_pretrained(args.config)
        return Geometry.preset(args.geometry)
    except (ConfigError, OSError) as e:
        raise UsageError(f"geometry: {e}")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="cpu", help="cpu (Triton interpreter, float32) or cuda (bf16)")
    p.add_argument("--dtype", default=None, help="working dtype (default float32 on cpu, bfloat16 on cuda)")
    p.add_argument("--geometry", default="tiny", help="preset name: tiny (default) or full")
    p.add_argument("--config", default=None, help="a HF config.json (or its directory) instead of a preset")
    p.add_argument("--profile", default=None,
                   help="Hypothesis profile: dev (8 random), ci (20 derandomized), gpu (40 derandomized: the "
                        "same examples every run), explore (150 random, kept in .hypothesis-db), nightly (300 "
                        "random, kept in .hypothesis-db)")
    p.add_argument("--examples", type=int, default=None, help="examples per check (overrides the profile)")
    p.add_argument("--seed", type=int, default=None, help="Hypothesis seed (default: the profile's)")


def _profile(args, default: str) -> str:
    """The chosen profile, validated with --examples and --seed (one line when --seed overrides a
    derandomized profile's fixed draws)."""
    from invariants.profiles import DERANDOMIZED, check_name, register

    register()
    try:
        profile = check_name(args.profile) if args.profile else default
    except ValueError as e:
        raise UsageError(str(e))
    if args.examples is not None and args.examples < 1:
        raise UsageError(f"--examples: expected a count >= 1, got {args.examples}")
    if args.seed is not None and profile in DERANDOMIZED:
        # Hypothesis lets @seed override derandomize: the run stays reproducible, but not with the profile's draws
        print(f"note: --seed {args.seed} replaces the {profile} profile's fixed draws with seed {args.seed}'s "
              f"(the same examples on every run with this seed); to explore fresh random examples use "
              f"--profile explore", file=sys.stderr)
    return profile


def _rich(stderr: bool = False):
    import shutil

    from rich.console import Console
    stream = sys.stderr if stderr else sys.stdout
    # pipes and CI logs report 80 columns: give the tables room instead of folding every word
    width = None if stream.isatty() else max(shutil.get_terminal_size((160, 40)).columns, 160)
    return Console(stderr=stderr, highlight=False, width=width)


def _run_checks(checks, geometry, cand, base, profile, examples, seed, console, title, results=None,
                store=None, replays=None):
    """Run `checks` in order, each replaying its `replays` cases first and recording a new shrunk case
    in `store` (gate/failures_cmd.py), appending each result to `results` as it finishes (so a Ctrl-C
    leaves the finished ones there for the report); returns `results`."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from gate.failures_cmd import keep
    from gate.progress import Ticker

    from invariants.engine import examples_for, pins_for, run_check

    results = [] if results is None else results
    device = str(cand.device)
    # a check runs its replayed failures, then its pinned examples, then the drawn ones: all are counted
    per = {chk.name: examples_for(chk, profile, device, examples) + len(pins_for(chk, device, profile))
           + len((replays or {}).get(chk.name, ())) for chk in checks}
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, transient=True,
                  disable=not console.is_terminal) as prog:
        task = prog.add_task(title, total=sum(per.values()))
        for chk in checks:
            prog.update(task, description=f"{title}: {chk.name}")
            with Ticker(prog, task, console, chk.name, per[chk.name]) as tick:
                r = run_check(chk, geometry, cand, base, profile, examples, seed=seed, on_example=tick,
                              replay=(replays or {}).get(chk.name, ()))
            results.append(r)
            if not console.is_terminal:
                console.print(f"  {chk.name}: {r.status} ({r.examples} examples, {r.seconds:.1f}s)")
            keep(store, chk, r, cand, console)
    return results


STATUS = {"pass": "[green]pass[/]", "fail": "[bold red]FAIL[/]", "error": "[bold red]ERROR[/]",
          "not run": "[bold yellow]NOT RUN[/]", "not covered": "[bold yellow]NOT COVERED[/]"}


def _ratio(x) -> str:
    return "-" if x is None else f"{x:.3g}"


def _table(results, title):
    from rich.table import Table

    t = Table(title=title)
    for col in ("mechanism", "check", "examples"):
        t.add_column(col)
    for col in ("error/limit p50", "p99", "max", "flips", "ill-cond."):
        t.add_column(col, justify="right")
    t.add_column("status")
    for r in results:
        m = r.margin
        top = _ratio(m["max"])
        if m["max"] is not None and m["max"] > 1:
            top = f"[bold red]{top}[/]"
        t.add_row(r.mechanism, r.check, str(r.examples), _ratio(m["p50"]), _ratio(m["p99"]), top,
                  str(r.flip_examples), str(r.ill_conditioned_examples), STATUS.get(r.status, r.status))
    return t


def _select(args):
    """(checks, whether model.reference runs) from --mechanism and --check."""
    from invariants.engine import REFERENCE_CHECK
    from invariants.matrix import BY_NAME, checks_for

    try:
        checks = checks_for([m.strip() for m in args.mechanism.split(",")]) if args.mechanism else \
            checks_for(sorted({c.mechanism for c in BY_NAME.values()}))
    except ValueError as e:
        raise UsageError(f"--mechanism: {e}")
    # the oracle-vs-transformers cross-check belongs to mechanism "model" (no Hypothesis, no candidate)
    reference = any(c.mechanism == "model" for c in checks)
    if args.check:
        unknown = [c for c in args.check if c not in BY_NAME and c != REFERENCE_CHECK]
        if unknown:
            raise UsageError(f"--check: unknown {unknown}; known: {sorted([*BY_NAME, REFERENCE_CHECK])}")
        reference = reference and REFERENCE_CHECK in args.check
        checks = [c for c in checks if c.name in args.check]
    return checks, reference


def _interrupted_rows(checks, reference, results):
    """A "not run" row for every selected check a Ctrl-C stopped before it finished."""
    from invariants.engine import REFERENCE_CHECK, CheckResult

    done = {r.check for r in results}
    names = [(c.name, c.mechanism) for c in checks] + ([(REFERENCE_CHECK, "model")] if reference else [])
    return [CheckResult(n, m, "not run", 0, -1.0, "", None, None, "interrupted (Ctrl-C) before it finished",
                        None, {}, 0.0) for n, m in names if n not in done]


def _report(results, args, console) -> None:
    """The table, the summary line, then why each check did not pass."""
    from invariants.engine import REFERENCE_CHECK, summarize, summary_line

    console.print(_table(results, "glmgate: contracts"))
    console.print(summary_line(summarize(results)), markup=False)
    for r in results:
        called = f"; called {', '.join(r.covered)}" if r.covered else ""
        called += f"; NOT COVERED (not provided): {', '.join(r.not_provided)}" if r.not_provided else ""
        console.print(f"  {r.check}: worst seen {r.worst_line or '-'}{called}", style="dim", markup=False)
    for r in (r for r in results if r.status == "not run"):
        console.print(f"\n[bold yellow]{r.check} NOT RUN[/]")
        quiet = r.check != REFERENCE_CHECK or args.require_reference
        console.print(f"  {r.message}" + ("" if quiet else " (not an error without --require-reference)"),
                      markup=False)
    for r in (r for r in results if r.status == "not covered"):
        console.print(f"\n[bold yellow]{r.check} NOT COVERED[/]: {r.message}")
    for r in (r for r in results if r.status == "error"):
        console.print(f"\n[bold red]{r.check} ERROR[/]: the check could not reach a verdict "
                      f"({r.examples} examples ran)")
        console.print(f"  {r.message}", markup=False)
    for r in (r for r in results if r.status == "fail"):
        what = "raised (the candidate crashed)" if r.crashed else "broke a contract"
        console.print(f"\n[bold red]{r.check} {what}[/]")
        console.print(f"  {r.message}", markup=False)
        if r.repro is None:                        # model.reference: fixed paths, nothing to shrink
            continue
        console.print(f"  shrunk scenario ({r.shrink_seconds:.0f} s shrinking): {json.dumps(r.shrunk_case)}", markup=False)
        console.print(f"  worst case seen: {json.dumps(r.worst_case)}", markup=False)
        console.print(f"  {r.repro}", soft_wrap=True, markup=False)


def _write_json(results, meta: dict, where: str) -> None:
    from invariants.engine import results_json

    text = results_json(results, meta)
    if where == "-":
        print(text)
    else:
        with open(where, "w") as fh:
            fh.write(text)


def _exit_code(results, require_reference: bool) -> int:
    """EXIT_BROKEN when any contract broke (a definite verdict outranks a crash elsewhere), else
    EXIT_CRASH when the candidate raised or a check reached no verdict, else EXIT_PASS."""
    from invariants.engine import REFERENCE_CHECK

    if any((r.status == "fail" and not r.crashed)
           or (r.status == "not run" and r.check == REFERENCE_CHECK and require_reference) for r in results):
        return EXIT_BROKEN
    if any(r.status == "error" or (r.status == "fail" and r.crashed) for r in results):
        return EXIT_CRASH
    return EXIT_PASS


def cmd_run(args) -> int:
    from gate.failures_cmd import load_replays, open_store
    from gate import merge_gate, multigpu, paths_cmd

    if args.list:
        from gate.list_cmd import list_checks
        list_checks(_rich())
        return 0
    _setup_device(args.device)
    from invariants.profiles import default_profile
    from invariants.engine import REFERENCE_CHECK, run_reference
    from invariants.reference import VERSION

    try:
        default = default_profile()
    except ValueError as e:
        raise UsageError(str(e))
    profile = _profile(args, default)
    dtype = args.dtype or ("float32" if args.device == "cpu" else "bfloat16")
    cand, base = _target(args.impl, args.device, dtype)
    workers = multigpu.workers(args)            # --gpus N: N worker processes, one per GPU
    geometry = _geometry(args)
    checks, reference = _select(args)
    # with --json - the JSON owns stdout; the human report goes to stderr
    console = _rich(stderr=args.json == "-")
    console.print(f"glmgate run: impl={cand.impl.name} device={args.device} dtype={dtype} "
                  f"geometry={args.config or args.geometry} profile={profile}")
    checks, unprovided = merge_gate.provided_checks(checks, cand.impl, console)
    store = open_store(args)
    replays = load_replays(store, checks, console)
    results, interrupted = list(unprovided), False
    try:
        if workers > 1:
            multigpu.run_split(args, workers, checks, reference, profile, console, results)
        else:
            _run_checks(checks, geometry, cand, base, profile, args.examples, args.seed, console, "run", results,
                        store, replays)
            if reference:
                console.print(f"  {REFERENCE_CHECK}: the float64 oracle vs transformers {VERSION} (tiny config) ...")
                results.append(run_reference())
                r = results[-1]
                console.print(f"  {r.check}: {r.status} ({r.examples} paths, {r.seconds:.1f}s)")
    except KeyboardInterrupt:
        interrupted = True
        results += _interrupted_rows(checks, reference, results)
    meta = {"impl": cand.impl.name, "device": args.device, "dtype": dtype, "profile": profile,
            "seed": args.seed, "examples": args.examples, "interrupted": interrupted,
            "failures": store and str(store.directory), **paths_cmd.meta(args)}
    try:
        _report(results, args, console)
    finally:
        if args.json:
            _write_json(results, meta, args.json)
    if interrupted:
        console.print("\n[bold yellow]interrupted[/]: the report covers the checks that finished")
        return EXIT_INTERRUPTED
    return _exit_code(results, args.require_reference)


def cmd_repro(args) -> int:
    try:
        payload = json.loads(args.scenario)
    except json.JSONDecodeError as e:
        raise UsageError(f"repro: the argument is not JSON ({e}); pass the quoted text after `glmgate repro`")
    for field in ("check", "case"):
        if field not in payload:
            raise UsageError(f"repro: the JSON has no {field!r} field")
    device = args.device or payload.get("device", "cpu")
    _setup_device(device)
    from invariants.engine import CheckCrashed, run_one
    from invariants.matrix import BY_NAME, case_of
    from invariants.report import ContractBroken, describe

    if payload["check"] not in BY_NAME:
        raise UsageError(f"repro: unknown check {payload['check']!r}; known: {sorted(BY_NAME)}")
    check = BY_NAME[payload["check"]]
    try:
        case = case_of(payload["case"])
    except (ValueError, TypeError) as e:
        raise UsageError(f"repro: bad case: {e}")
    cand, base = _target(args.impl or payload.get("impl", "triton"), device,
                         args.dtype or payload.get("dtype", "float32"))
    print(f"repro {check.name} impl={cand.impl.name} device={device} dtype={cand.dtype_name}\ncase: {case!r}")
    try:
        verdicts = run_one(check, case, cand, base)
    except ContractBroken as e:
        for v in e.verdicts:
            print(("  FAIL " if not v.ok else "  ok   ") + describe(v))
        return EXIT_BROKEN
    except CheckCrashed as e:
        traceback.print_exception(e.exc)
        return EXIT_CRASH
    except Exception as e:          # the check itself could not reach a verdict (an undeclared contract)
        from invariants.engine import describe_exception
        print(f"  ERROR {describe_exception(e)}")
        return EXIT_CRASH
    for v in verdicts:
        print("  ok   " + describe(v))
    return 0


def cmd_contracts(args) -> int:
    from rich.table import Table

    from invariants.contracts import CONTRACTS_DIR, load

    t = Table(title=f"declared contracts ({CONTRACTS_DIR}/*.toml)")
    for col in ("mechanism", "path", "quantity", "kind", "metric", "bound", "reason"):
        t.add_column(col, overflow="fold")
    for c in load().values():
        if c.kind == "kernel_replacement":
            bound = f"{c.k:g} x baseline + " + ", ".join(f"{k} {v:g}" for k, v in c.floor.items())
        elif c.kind == "exact":
            bound = "bitwise"
        else:
            bound = ", ".join(f"{k} {v:g}" for k, v in c.bound.items())
        t.add_row(c.mechanism, c.path, c.quantity, c.kind, c.metric, bound, c.reason)
    _rich().print(t)
    return 0


def cmd_gate(args) -> int:
    from gate.merge_gate import cmd_gate as run
    return run(args)


def cmd_zoo(args) -> int:
    from gate import zoo
    return zoo.cmd_zoo(args)


BENCHES = {"kda": "bench_kda", "mla": "bench_mla", "dsa": "bench_mla", "moe": "bench_moe", "nvfp4": "bench_moe",
           "layer": "bench_layer", "mhc": "bench_mhc"}


def cmd_bench(args, rest) -> int:
    mech = args.mechanism or "kda"
    if mech not in BENCHES:
        raise UsageError(f"bench --mechanism: {mech!r} has no benchmark; choose one of {sorted(BENCHES)}")
    import importlib
    # `glmgate bench --mechanism X -- OPTIONS`: the separator itself is not one of the benchmark's options
    return importlib.import_module(f"gate.{BENCHES[mech]}").main(rest[1:] if rest[:1] == ["--"] else rest)


def cmd_checkpoint(args) -> int:
    from gate.checkpoint_cmd import cmd_checkpoint as run
    return run(args)


def cmd_kernels(args, rest) -> int:
    from gate import compile_check
    return compile_check.main(rest)


def build_parser() -> argparse.ArgumentParser:
    from gate import cost, failures_cmd, multigpu, paths_cmd, warmup

    p = argparse.ArgumentParser(prog="glmgate", description=__doc__.split("\n")[0],
                                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"glmgate {_version()}")
    sub = p.add_subparsers(dest="cmd", required=True)

    r = sub.add_parser("run", help="run the correctness matrix (exit 1 on a broken contract)")
    _common(r)
    r.add_argument("--mechanism", default=None, help="comma-separated mechanisms (default: all; "
                                                     "`glmgate run --list` shows them)")
    r.add_argument("--check", action="append", help="run only this check (repeatable), e.g. kda.chunked or "
                                                    "model.reference")
    r.add_argument("--require-reference", action="store_true",
                   help="exit 1 when the model.reference cross-check (the float64 oracle vs transformers 5.23, "
                        "run with mechanism model) cannot run because transformers is missing; without this "
                        "flag it is reported as NOT RUN with the install line (pip install -e '.[reference]') "
                        "and does not change the exit code")
    r.add_argument("--impl", default="triton", help="triton (default), torch, mutant:<name>, pkg.mod:obj")
    r.add_argument("--json", default=None, help="write results as JSON to this path ('-' = stdout)")
    r.add_argument("--list", action="store_true", help="print every check (name, case type, pinned examples, "
                                                       "CPU example cap, what it holds) and exit")
    failures_cmd.add_store_flags(r)
    paths_cmd.add_flags(r, cmd_run)
    multigpu.add_flags(r)

    rp = sub.add_parser("repro", help="re-run one shrunk failure from its JSON")
    rp.add_argument("scenario", help="the JSON printed after `glmgate repro` by a failure")
    rp.add_argument("--impl", default=None)
    rp.add_argument("--device", default=None)
    rp.add_argument("--dtype", default=None)
    rp.set_defaults(fn=cmd_repro)

    gt = sub.add_parser("gate", help="one verdict for a merge: the candidate on every check it covers, its "
                                     "margins against a peer's on the same examples (exit 1 on a broken "
                                     "contract or a regression)")
    _common(gt)
    gt.add_argument("--candidate", required=True, help="pkg.mod:obj (docs/candidates.md), triton, torch or "
                                                       "mutant:<name>")
    gt.add_argument("--baseline", default="triton", help="the peer whose margins a regression is measured "
                                                         "against: triton (default), torch or pkg.mod:obj")
    gt.add_argument("--mechanism", default=None, help="comma-separated mechanisms (default: all)")
    gt.add_argument("--check", action="append", help="only this check (repeatable)")
    gt.add_argument("--regression-factor", type=float, default=None,
                    help="flag a passing check whose p50 or max error/limit exceeds this many times the peer's "
                         "(and 0.05 of the limit); default 4 (gate/merge_gate.py REGRESSION_FACTOR)")
    gt.add_argument("--json", default=None, help="write the verdict as JSON to this path ('-' = stdout)")
    gt.add_argument("--junit", default=None, help="write JUnit XML (one testcase per check) to this path")
    gt.add_argument("--markdown", default=None, help="write a markdown summary (a PR comment) to this path")
    failures_cmd.add_store_flags(gt)
    warmup.add_flags(gt)
    multigpu.add_flags(gt)
    gt.set_defaults(fn=cmd_gate)
    failures_cmd.add_parser(sub)

    c = sub.add_parser("contracts", help="print the declared contract table")
    c.set_defaults(fn=cmd_contracts)

    z = sub.add_parser("zoo", help="run every planted mutant (profile ci by default: derandomized); exit 1 if any escapes")
    _common(z)
    z.add_argument("--mutant", action="append", help="only this mutant (repeatable)")
    z.add_argument("--list", action="store_true", help="list the mutants and exit")
    z.set_defaults(fn=cmd_zoo)

    ck = sub.add_parser("checkpoint", help="make-tiny DIR: write a random tiny checkpoint in the on-disk layout; "
                                           "inspect DIR: load it and print every layer, its state and tensors")
    ck.add_argument("action", choices=["make-tiny", "inspect"])
    ck.add_argument("dir")
    ck.add_argument("--geometry", default="tiny", help="preset for make-tiny (default tiny)")
    ck.add_argument("--config", default=None, help="a config.json for make-tiny instead of a preset")
    ck.add_argument("--seed", type=int, default=0)
    ck.add_argument("--tensors", action="store_true", help="inspect: also list every tensor (name, shape, dtype)")
    ck.add_argument("--nvfp4", default=None, choices=["compressed-tensors", "modelopt"],
                    help="make-tiny: NVFP4 routed experts in this layout (gate, up, down: a global scale each)")
    ck.set_defaults(fn=cmd_checkpoint)

    kp = sub.add_parser("kernels", help="compile every Triton kernel for sm_90 without a GPU: registers, "
                                        "spills, shared memory (extra args: --arch, --kernel)")
    kp.set_defaults(fn=None)

    b = sub.add_parser("bench", help="GPU benchmarks against peers (extra args go to the benchmark)")
    b.add_argument("--mechanism", default="kda", help="kda (default), mla or dsa, moe or nvfp4, mhc, layer; "
                                                     "`glmgate bench --mechanism X -- --help` lists its options")
    b.set_defaults(fn=None)
    cost.add_parser(sub)
    return p


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("glmgate")
    except PackageNotFoundError:
        return "(not installed: run from a source tree)"


def main(argv=None) -> int:
    """The CLI; returns the exit code (see EXIT_* and the epilog). argparse's own errors exit 2 itself."""
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    try:
        if args.cmd == "bench":
            return cmd_bench(args, rest)
        if args.cmd == "kernels":
            return cmd_kernels(args, rest)
        if rest:
            parser.error(f"unrecognized arguments: {' '.join(rest)}")
        return args.fn(args)
    except UsageError as e:
        print(f"glmgate {args.cmd}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception:
        traceback.print_exc()
        print(f"glmgate {args.cmd}: crashed outside any check (exit {EXIT_CRASH}): the traceback above is a "
              f"bug in glmgate, or in code it imported (a candidate's module)", file=sys.stderr)
        return EXIT_CRASH


if __name__ == "__main__":
    # `python3 -m gate.cli` runs this file as __main__: take main from gate.cli, whose UsageError is the
    # one the command modules (gate/*_cmd.py) raise, or their input errors would read as crashes
    from gate.cli import main as _main
    sys.exit(_main())
