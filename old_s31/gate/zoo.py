"""`glmgate zoo`: every planted mutant (impl/mutants/) against the checks of its mechanism, its designated
check first, in process through the engine `glmgate run` uses; one table row per mutant."""
from __future__ import annotations

import json

from gate.cli import UsageError, _geometry, _profile, _rich, _run_checks, _setup_device, _target

# derandomized, as the suite's mutant meta-test: a verdict must not depend on the draw (under "dev",
# 8 random examples sometimes missed the E2M1 tie family that nvfp4_argmin_rounding needs)
ZOO_PROFILE = "ci"


def _zoo_mutant(n, m, args, dtype, geometry, profile, console, table) -> bool:
    """Run mutant n's mechanism checks (its designated catcher first, each replaying its pinned examples
    before drawing: run_check) until one fails; one table row. True when caught."""
    from invariants.matrix import checks_for

    # a mutant whose property is a float32 contract (e.g. the KDA state carried between chunks) runs in
    # float32 on every device: in bf16 the inputs' own rounding hides it (impl/mutants/kda.py says why)
    own = getattr(m, "dtype", None)
    if own and own != dtype:
        console.print(f"{n}: its property is a {own} contract: run in {own} on {args.device}", markup=False)
        dtype = own
    if m.device and not args.device.startswith(m.device):
        # its bug needs sizes only a GPU affords: no CPU verdict either way (not run, not escaped)
        table.add_row(n, "[yellow]GPU only[/]", m.check, f"needs --device {m.device}: shown by {m.check}'s CUDA pins")
        console.print(f"{n}: GPU only, not run on {args.device}", markup=False)
        return True
    cand, base = _target(f"mutant:{n}", args.device, dtype)
    checks = checks_for([m.mechanism])
    if m.device:
        # judged on its check's CUDA pins (the nightly ones too) and one drawn example
        checks = [c for c in checks if c.name == m.check]
        profile, args = "nightly", _with_examples(args, 1)
    # the mutant's own check first: it is the one designed to catch it
    checks.sort(key=lambda c: c.name != m.check)
    errors = []
    for chk in checks:
        r = _run_checks([chk], geometry, cand, base, profile, args.examples, args.seed, console, n)[0]
        if r.status == "fail":
            table.add_row(n, "[green]caught[/]", r.check + (f" ({dtype})" if own else ""), json.dumps(r.shrunk_case))
            console.print(f"{n}: caught by {r.check}: {r.message[:300]}", markup=False)
            return True
        if r.status == "not run" and chk.name == m.check:
            # this machine cannot run its designated check (model.sharded: fewer GPUs than ranks): no
            # verdict either way, as for a GPU-only mutant on the CPU (the other checks cannot see it)
            table.add_row(n, "[yellow]NOT RUN[/]", m.check, r.message[:300])
            console.print(f"{n}: NOT RUN: {r.message}", markup=False)
            return True
        if r.status == "error":
            errors.append(r)
    if errors:
        # a check that could not reach a verdict proves nothing either way: not an escape
        table.add_row(n, "[bold red]ERROR[/]", ", ".join(r.check for r in errors), errors[0].message[:300])
        console.print(f"{n}: ERROR in {errors[0].check}: {errors[0].message}", markup=False)
    else:
        table.add_row(n, "[bold red]ESCAPED[/]", "-", "-")
        console.print(f"{n}: ESCAPED every {m.mechanism} check", markup=False)
    return False


def _with_examples(args, n: int):
    import argparse
    return argparse.Namespace(**{**vars(args), "examples": n})


def cmd_zoo(args) -> int:
    _setup_device(args.device)
    from impl import mutants
    from invariants.matrix import CHECKS  # noqa: F401  (building the table validates every mutant's check)

    if args.list:
        for n, m in sorted(mutants.MUTANTS.items()):
            print(f"{n:40s} {m.check + '.' + m.quantity:36s} {m.description}" + (" [GPU only]" if m.device else ""))
        return 0
    names = args.mutant or sorted(mutants.MUTANTS)
    unknown = [n for n in names if n not in mutants.MUTANTS]
    if unknown:
        raise UsageError(f"zoo: unknown mutant(s) {unknown}; see `glmgate zoo --list`")
    profile = _profile(args, ZOO_PROFILE)
    if args.device.startswith("cuda"):
        import torch
        if not torch.cuda.is_available():
            raise UsageError("--device cuda: no CUDA device is visible to torch on this machine")
    dtype = args.dtype or ("float32" if args.device == "cpu" else "bfloat16")
    geometry = _geometry(args)
    console = _rich()
    from rich.table import Table
    table = Table(title=f"glmgate zoo: planted mutants on {args.device}, {dtype} (profile {profile})")
    for col in ("mutant", "status", "caught by", "shrunk scenario / why"):
        table.add_column(col, overflow="fold")
    missed = [n for n in names if not _zoo_mutant(n, mutants.MUTANTS[n], args, dtype, geometry, profile,
                                                  console, table)]
    console.print(table)
    return 1 if missed else 0
