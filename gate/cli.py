"""`glmgate`: the command line (ARCHITECTURE.md "CLI"). Thin: it calls the runner and renders.

Subcommands: run (the matrix), repro (one shrunk case), contracts (the declared table), zoo (every
planted mutant must be caught), bench (correctness-gated GPU benchmarks).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

EPILOG = """examples:
  glmgate run                              tiny geometry, Triton kernels in the CPU interpreter
  glmgate run --device cuda --examples 50  the same on a GPU (bf16)
  glmgate run --impl torch --check kda.chunked
  glmgate run --mechanism model            whole decoder paths + the cross-check against transformers 5.23
  glmgate run --require-reference          also exit 1 when that cross-check cannot run (no transformers)
  glmgate zoo                              every planted mutant must be caught
  glmgate repro '<json printed by a failure>'
  glmgate contracts
  glmgate bench --mechanism kda            on a GPU: our kernels vs flash-linear-attention
  glmgate bench --mechanism mla            sparse absorbed decode vs dense SDPA; index scoring vs torch
  glmgate bench --mechanism moe            fused MoE bf16 / NVFP4 W4A16 / W4A4 vs a torch expert loop
  glmgate bench --mechanism layer          a full decoder layer of each kind, stage shares measured
  glmgate kernels                          no GPU needed: every kernel compiled for sm_90 (regs, spills)
  glmgate checkpoint make-tiny /tmp/tiny   a random tiny checkpoint in transformers' on-disk layout
                                           (--nvfp4 compressed-tensors|modelopt: NVFP4 routed experts)
  glmgate checkpoint inspect /tmp/tiny     every layer, its kind, MLP and state shapes (--tensors: all)

reading a failure: the table names the broken check; below it, the contract line says which quantity
(output / final_state / boundary_states / conv_state) broke, by how much against its limit (k x the
baseline's error + floor), and the worst element; the shrunk scenario is the smallest case Hypothesis
found, and the `glmgate repro` line re-runs exactly that case.
"""


def _setup_device(device: str) -> None:
    """Pick the Triton backend before anything imports triton (the interpreter flag is read at import)."""
    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
        import torch
        # tiny shapes: thread hand-offs cost ~100x the arithmetic on a 2-core machine
        torch.set_num_threads(1)
    elif device.startswith("cuda"):
        os.environ.pop("TRITON_INTERPRET", None)
    else:
        raise SystemExit(f"--device: expected cpu or cuda[:N], got {device!r}")


def _target(impl_name: str, device: str, dtype: str):
    import torch

    from impl import registry
    from invariants.target import DTYPES, Target

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is visible to torch on this machine")
    if dtype not in DTYPES:
        raise SystemExit(f"--dtype: expected one of {sorted(DTYPES)}, got {dtype!r}")
    try:
        impl = registry.get(impl_name)
    except (ValueError, KeyError) as e:
        raise SystemExit(f"--impl: {e}")
    return Target(impl, device, DTYPES[dtype]), Target(registry.get("torch"), device, DTYPES[dtype])


def _geometry(args):
    from oracle.config import ConfigError, Geometry

    try:
        if args.config:
            return Geometry.from_pretrained(args.config)
        return Geometry.preset(args.geometry)
    except (ConfigError, OSError) as e:
        raise SystemExit(f"geometry: {e}")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="cpu", help="cpu (Triton interpreter, float32) or cuda (bf16)")
    p.add_argument("--dtype", default=None, help="working dtype (default float32 on cpu, bfloat16 on cuda)")
    p.add_argument("--geometry", default="tiny", help="preset name: tiny (default) or full")
    p.add_argument("--config", default=None, help="a HF config.json (or its directory) instead of a preset")
    p.add_argument("--profile", default=None, help="Hypothesis profile: dev, ci, nightly, gpu")
    p.add_argument("--examples", type=int, default=None, help="examples per check (overrides the profile)")
    p.add_argument("--seed", type=int, default=None, help="Hypothesis seed (default: the profile's)")


def _rich(stderr: bool = False):
    import shutil

    from rich.console import Console
    stream = sys.stderr if stderr else sys.stdout
    # pipes and CI logs report 80 columns: give the tables room instead of folding every word
    width = None if stream.isatty() else max(shutil.get_terminal_size((160, 40)).columns, 160)
    return Console(stderr=stderr, highlight=False, width=width)


def _run_checks(checks, geometry, cand, base, profile, examples, seed, console, title):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from gate.profiles import EXAMPLES
    from gate.runner import run_check

    results = []
    per = examples or EXAMPLES[profile]
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, transient=True,
                  disable=not console.is_terminal) as prog:
        task = prog.add_task(title, total=per * len(checks))
        for chk in checks:
            prog.update(task, description=f"{title}: {chk.name}")
            r = run_check(chk, geometry, cand, base, profile, examples, seed=seed,
                          on_example=_ticker(prog, task, console, chk.name, per))
            results.append(r)
            if not console.is_terminal:
                console.print(f"  {chk.name}: {r.status} ({r.examples} examples, {r.seconds:.1f}s)")
    return results


def _ticker(prog, task, console, name: str, per: int, quiet_s: float = 10.0):
    """Advance the bar; without a terminal (CI logs) print a line per example once a check has run
    longer than quiet_s (model.paths takes minutes in the interpreter: show it is alive)."""
    import time

    t0, n = time.time(), [0]

    def tick():
        prog.advance(task)
        n[0] += 1
        if not console.is_terminal and time.time() - t0 > quiet_s:
            console.print(f"    {name}: example {n[0]}/{per} ({time.time() - t0:.0f}s)", style="dim")
    return tick


def _table(results, title):
    from rich.table import Table

    t = Table(title=title)
    for col in ("mechanism", "check", "examples", "worst error / bound", "status"):
        t.add_column(col)
    for r in results:
        ratio = "-" if r.worst_ratio < 0 else f"{r.worst_ratio:.3g}"
        status = {"pass": "[green]pass[/]", "not run": "[bold yellow]NOT RUN[/]"}.get(r.status, "[bold red]FAIL[/]")
        t.add_row(r.mechanism, r.check, str(r.examples), ratio, status)
    return t


def cmd_run(args) -> int:
    _setup_device(args.device)
    from gate.profiles import default_profile, register
    from gate.runner import REFERENCE_CHECK, results_json, run_reference
    from invariants.matrix import BY_NAME, checks_for
    from invariants.reference import VERSION

    register()
    profile = args.profile or default_profile()
    dtype = args.dtype or ("float32" if args.device == "cpu" else "bfloat16")
    cand, base = _target(args.impl, args.device, dtype)
    geometry = _geometry(args)
    try:
        checks = checks_for([m.strip() for m in args.mechanism.split(",")]) if args.mechanism else \
            checks_for(sorted({c.mechanism for c in BY_NAME.values()}))
    except ValueError as e:
        raise SystemExit(f"--mechanism: {e}")
    # the oracle-vs-transformers cross-check belongs to mechanism "model" (no Hypothesis, no candidate)
    reference = any(c.mechanism == "model" for c in checks)
    if args.check:
        unknown = [c for c in args.check if c not in BY_NAME and c != REFERENCE_CHECK]
        if unknown:
            raise SystemExit(f"--check: unknown {unknown}; known: {sorted([*BY_NAME, REFERENCE_CHECK])}")
        reference = reference and REFERENCE_CHECK in args.check
        checks = [c for c in checks if c.name in args.check]
    # with --json - the JSON owns stdout; the human report goes to stderr
    console = _rich(stderr=args.json == "-")
    console.print(f"glmgate run: impl={cand.impl.name} device={args.device} dtype={dtype} "
                  f"geometry={args.config or args.geometry} profile={profile}")
    results = _run_checks(checks, geometry, cand, base, profile, args.examples, args.seed, console, "run")
    if reference:
        console.print(f"  {REFERENCE_CHECK}: the float64 oracle vs transformers {VERSION} (SPEC §13 tiny config) ...")
        results.append(run_reference())
        r = results[-1]
        console.print(f"  {r.check}: {r.status} ({r.examples} paths, {r.seconds:.1f}s)")
    console.print(_table(results, "glmgate: contracts"))
    for r in results:
        console.print(f"  {r.check}: worst seen {r.worst_line or '-'}", style="dim", markup=False)
    not_run = [r for r in results if r.status == "not run"]
    for r in not_run:
        console.print(f"\n[bold yellow]{r.check} NOT RUN[/]")
        console.print(f"  {r.message}" + ("" if args.require_reference else
                                          " (not an error without --require-reference)"), markup=False)
    failed = [r for r in results if r.status == "fail" or (r.status == "not run" and args.require_reference)]
    for r in (r for r in failed if r.status == "fail"):
        console.print(f"\n[bold red]{r.check} broke a contract[/]")
        console.print(f"  {r.message}", markup=False)
        if r.repro is None:                        # model.reference: fixed paths, nothing to shrink
            continue
        console.print(f"  shrunk scenario: {json.dumps(r.shrunk_case)}", markup=False)
        console.print(f"  worst case seen: {json.dumps(r.worst_case)}", markup=False)
        console.print(f"  {r.repro}", soft_wrap=True, markup=False)
    if args.json:
        meta = {"impl": cand.impl.name, "device": args.device, "dtype": dtype, "profile": profile}
        text = results_json(results, meta)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w") as fh:
                fh.write(text)
    return 1 if failed else 0


def cmd_repro(args) -> int:
    try:
        payload = json.loads(args.scenario)
    except json.JSONDecodeError as e:
        raise SystemExit(f"repro: the argument is not JSON ({e}); pass the quoted text after `glmgate repro`")
    for field in ("check", "case"):
        if field not in payload:
            raise SystemExit(f"repro: the JSON has no {field!r} field")
    device = args.device or payload.get("device", "cpu")
    _setup_device(device)
    from gate.runner import CheckCrashed, run_one
    from invariants.matrix import BY_NAME
    from invariants.report import ContractBroken, describe
    from strategies.cases import case_from_json

    if payload["check"] not in BY_NAME:
        raise SystemExit(f"repro: unknown check {payload['check']!r}; known: {sorted(BY_NAME)}")
    check = BY_NAME[payload["check"]]
    try:
        case = case_from_json(payload["case"])
    except (ValueError, TypeError) as e:
        raise SystemExit(f"repro: bad case: {e}")
    cand, base = _target(args.impl or payload.get("impl", "triton"), device,
                         args.dtype or payload.get("dtype", "float32"))
    print(f"repro {check.name} impl={cand.impl.name} device={device} dtype={cand.dtype_name}\ncase: {case!r}")
    try:
        verdicts = run_one(check, case, cand, base)
    except ContractBroken as e:
        for v in e.verdicts:
            print(("  FAIL " if not v.ok else "  ok   ") + describe(v))
        return 1
    except CheckCrashed as e:
        import traceback
        traceback.print_exception(e.exc)
        return 1
    for v in verdicts:
        print("  ok   " + describe(v))
    return 0


def cmd_contracts(args) -> int:
    from rich.table import Table

    from invariants.contracts import CONTRACTS_FILE, load

    t = Table(title=f"declared contracts ({CONTRACTS_FILE})")
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


# derandomized, as the suite's mutant meta-test: a verdict must not depend on the draw (under "dev",
# 8 random examples sometimes missed the E2M1 tie family that nvfp4_argmin_rounding needs)
ZOO_PROFILE = "ci"


def cmd_zoo(args) -> int:
    _setup_device(args.device)
    from impl import mutants
    from gate.profiles import register
    from invariants.matrix import checks_for

    register()
    from invariants.matrix import CHECKS
    in_matrix = {c.mechanism for c in CHECKS}
    names = args.mutant or sorted(n for n, m in mutants.MUTANTS.items() if m.mechanism in in_matrix)
    elsewhere = sorted([n for n, m in mutants.MUTANTS.items() if m.mechanism not in in_matrix]
                       + list(getattr(mutants, "SERVING_MUTANTS", {})))
    if args.list:
        table = {**mutants.MUTANTS, **getattr(mutants, "SERVING_MUTANTS", {})}
        for n in sorted(table):
            m = table[n]
            print(f"{n:40s} {m.mechanism:8s} {m.description}")
        return 0
    unknown = [n for n in names if n not in mutants.MUTANTS and n not in elsewhere]
    if unknown:
        raise SystemExit(f"zoo: unknown mutant(s) {unknown}; see `glmgate zoo --list`")
    serving = [n for n in names if n in getattr(mutants, "SERVING_MUTANTS", {})]
    if args.mutant is None:
        serving = sorted(getattr(mutants, "SERVING_MUTANTS", {}))
    names = [n for n in names if n in mutants.MUTANTS and mutants.MUTANTS[n].mechanism in in_matrix]
    dtype = args.dtype or ("float32" if args.device == "cpu" else "bfloat16")
    geometry = _geometry(args)
    console = _rich()
    escaped = []
    from rich.table import Table
    table = Table(title="glmgate zoo: planted mutants")
    for col in ("mutant", "status", "caught by", "shrunk scenario"):
        table.add_column(col, overflow="fold")
    for n in names:
        m = mutants.MUTANTS[n]
        cand, base = _target(f"mutant:{n}", args.device, dtype)
        checks = checks_for([m.mechanism])
        # the check named by the mutant's property first: it is the one designed to catch it
        checks.sort(key=lambda c: not m.caught_by.startswith(c.name))
        caught = None
        for chk in checks:
            r = _run_checks([chk], geometry, cand, base, args.profile or ZOO_PROFILE, args.examples,
                            args.seed, console, n)[0]
            if r.status == "fail":
                caught = r
                break
        if caught:
            table.add_row(n, "[green]caught[/]", caught.check, json.dumps(caught.shrunk_case))
            console.print(f"{n}: caught by {caught.check}: {caught.message[:300]}", markup=False)
        else:
            escaped.append(n)
            table.add_row(n, "[bold red]ESCAPED[/]", "-", "-")
            console.print(f"{n}: ESCAPED every {m.mechanism} check", markup=False)
    if serving:
        escaped += _zoo_serving(serving, table, console)
    console.print(table)
    return 1 if escaped else 0


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVING_TEST = "tests/test_serving_state.py"


def _zoo_serving(names, table, console) -> list:
    """Serving-engine mutants break the engine, not a mechanism: their catcher is the serving state
    machine's fixed scenarios (tests/test_serving_state.py), run here through pytest. Returns the
    escaped names; without the repository's tests/ (a non-editable install) they are reported NOT RUN."""
    import re
    import subprocess
    test = os.path.join(ROOT, SERVING_TEST)
    if not os.path.exists(test):
        for n in names:
            table.add_row(n, "[yellow]NOT RUN[/]", "serving.state_machine",
                          f"needs {SERVING_TEST} (run glmgate from a clone of the repository)")
        return []
    console.print(f"serving mutants: running the state machine's fixed scenarios ({SERVING_TEST})", markup=False)
    expr = "test_serving_mutant_breaks_an_invariant and (" + " or ".join(names) + ")"
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-rA", "-p", "no:cacheprovider", test, "-k", expr],
                       cwd=ROOT, capture_output=True, text=True)
    escaped = []
    for n in names:
        ran = re.findall(rf"(PASSED|FAILED) \S*test_serving_mutant_breaks_an_invariant\[{re.escape(n)}-(\w+)\]", r.stdout)
        msgs = re.findall(rf"{re.escape(n)} \((\w+)\): (.*)$", r.stdout, flags=re.M)
        if ran and all(status == "PASSED" for status, _ in ran):
            table.add_row(n, "[green]caught[/]", "serving.state_machine",
                          "; ".join(f"{sc}: {msg[:160]}" for sc, msg in msgs))
        else:
            escaped.append(n)
            why = "ESCAPED" if ran else "NOT COLLECTED"
            table.add_row(n, f"[bold red]{why}[/]", "serving.state_machine",
                          ", ".join(f"{sc} {st}" for st, sc in ran) or r.stdout.strip().splitlines()[-1:][0][:200])
    return escaped


BENCHES = {"kda": "bench_kda", "mla": "bench_mla", "dsa": "bench_mla", "moe": "bench_moe", "nvfp4": "bench_moe",
           "layer": "bench_layer"}


def cmd_bench(args, rest) -> int:
    mech = args.mechanism or "kda"
    if mech not in BENCHES:
        raise SystemExit(f"bench --mechanism: {mech!r} has no benchmark; choose one of {sorted(BENCHES)}")
    import importlib
    return importlib.import_module(f"gate.{BENCHES[mech]}").main(rest)


def cmd_checkpoint(args) -> int:
    from oracle import checkpoint as ock
    from oracle.config import ConfigError

    if args.action == "make-tiny":
        g = _geometry(args)
        d = ock.write_random(args.dir, g, args.seed, nvfp4=args.nvfp4)
        experts = f", routed experts NVFP4 ({args.nvfp4})" if args.nvfp4 else ""
        print(f"wrote {d}/model.safetensors and config.json ({len(ock.tensor_map(d))} tensors, "
              f"geometry {args.config or args.geometry}, seed {args.seed}{experts})")
        return 0
    try:
        w = ock.load(args.dir)
    except (ock.CheckpointError, ConfigError, OSError) as e:
        raise SystemExit(f"checkpoint inspect: {e}")
    g = w.geometry
    layout = next((lw.mlp.nvfp4.layout for lw in w.layers if getattr(lw.mlp, "nvfp4", None) is not None), None)
    print(f"{args.dir}: {g.num_hidden_layers} layers, hidden {g.hidden_size}, vocab {g.vocab_size}, "
          f"kpool {g.index_kpool} ({g.index_slots} slots), {g.n_routed_experts} experts top-{g.num_experts_per_tok}"
          f", routed experts {'NVFP4 (' + layout + ' layout)' if layout else 'unquantized'}")
    for lw in w.layers:
        kind = "KDA" if lw.kda is not None else f"DSA({lw.indexer_type})"
        mlp = type(lw.mlp).__name__.replace("Weights", "") + ("+NVFP4" if getattr(lw.mlp, "nvfp4", None) else "")
        state = (f"state: recurrent [B,{g.linear_num_heads},{g.linear_head_dim},{g.linear_head_dim}] f32 + conv "
                 f"[B,{g.conv_dim},{g.linear_conv_kernel_dim}]" if lw.kda is not None else
                 f"state: latent [B,T,{g.kv_lora_rank}]" + (f" + indexer rows [B,T,{2 * g.index_head_dim + 1}]"
                                                           if lw.indexer is not None else ""))
        print(f"  layer {lw.index:3d}  {kind:14s} {mlp:9s} {state}")
    if layout:
        _print_nvfp4(args.dir, g, layout)
    if args.tensors:
        for name, shape, dtype in ock.tensor_map(args.dir):
            print(f"    {name:90s} {str(list(shape)):20s} {dtype}")
    return 0


def _print_nvfp4(directory, g, layout: str) -> None:
    """The quantized expert tensors on disk (NVFP4.md A5): expert 0 of each sparse layer, dtype and shape."""
    from oracle import checkpoint as ock

    print(f"  NVFP4 routed experts, {layout} layout (expert 0 shown; {g.n_routed_experts} per layer):")
    for name, shape, dtype in ock.tensor_map(directory):
        if ".mlp.experts.0." in name:          # every tensor of an expert is quantized in both layouts
            print(f"    {name:72s} {dtype:8s} {list(shape)}")


def cmd_kernels(args, rest) -> int:
    from gate import compile_check
    return compile_check.main(rest)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="glmgate", description=__doc__.split("\n")[0],
                                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)

    r = sub.add_parser("run", help="run the correctness matrix (exit 1 on a broken contract)")
    _common(r)
    r.add_argument("--mechanism", default=None, help="comma-separated mechanisms (default: all of kda, dsa, mla, "
                                                     "mhc, moe, nvfp4, model)")
    r.add_argument("--check", action="append", help="run only this check (repeatable), e.g. kda.chunked or "
                                                    "model.reference")
    r.add_argument("--require-reference", action="store_true",
                   help="exit 1 when the model.reference cross-check (the float64 oracle vs transformers 5.23, "
                        "run with mechanism model) cannot run because transformers is missing; without this "
                        "flag it is reported as NOT RUN with the install line (pip install -e '.[reference]') "
                        "and does not change the exit code")
    r.add_argument("--impl", default="triton", help="triton (default), torch, mutant:<name>, pkg.mod:obj")
    r.add_argument("--json", default=None, help="write results as JSON to this path ('-' = stdout)")
    r.set_defaults(fn=cmd_run)

    rp = sub.add_parser("repro", help="re-run one shrunk failure from its JSON")
    rp.add_argument("scenario", help="the JSON printed after `glmgate repro` by a failure")
    rp.add_argument("--impl", default=None)
    rp.add_argument("--device", default=None)
    rp.add_argument("--dtype", default=None)
    rp.set_defaults(fn=cmd_repro)

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
                    help="make-tiny: quantize the routed experts to NVFP4 in this checkpoint layout")
    ck.set_defaults(fn=cmd_checkpoint)

    kp = sub.add_parser("kernels", help="compile every Triton kernel for sm_90 without a GPU: registers, "
                                        "spills, shared memory (extra args: --arch, --kernel)")
    kp.set_defaults(fn=None)

    b = sub.add_parser("bench", help="GPU benchmarks against peers (extra args go to the benchmark)")
    b.add_argument("--mechanism", default="kda", help="kda (default), mla or dsa, moe or nvfp4, layer; "
                                                     "`glmgate bench --mechanism X -- --help` lists its options")
    b.set_defaults(fn=None)
    return p


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if args.cmd == "bench":
        return cmd_bench(args, rest)
    if args.cmd == "kernels":
        return cmd_kernels(args, rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
