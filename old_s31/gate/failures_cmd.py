"""The failure store in the CLI (invariants/failures.py, docs/failures.md): `--failures DIR` /
`--no-failures` of `glmgate run` and `glmgate gate` (replay each check's recorded failures first, record
each new shrunk case), and `glmgate db list | export | import | clear | remove`.

Every store error is an input error (exit 2), one line per file saying what is wrong and how to remove
it; a run checks every selected check's entries before any example runs, so a stale entry costs no
minutes of interpreted kernels.
"""
from __future__ import annotations

from gate.cli import EXIT_PASS, UsageError


def add_store_flags(p) -> None:
    p = p.add_mutually_exclusive_group()
    p.add_argument("--failures", default=None, metavar="DIR",
                   help="the failure store: each check's recorded failures are replayed first, new shrunk "
                        "cases recorded (default $GLMGATE_FAILURES, else ./.glmgate-failures)")
    p.add_argument("--no-failures", action="store_true", help="neither replay nor record failures")


def open_store(args):
    """The store the flags name, or None under --no-failures."""
    from invariants.failures import FailureStore, default_directory

    if getattr(args, "no_failures", False):
        return None
    return FailureStore(args.failures or default_directory())


def load_replays(store, checks, console) -> dict:
    """{check name: its recorded cases} for the checks about to run, said once per check that has
    some; UsageError listing every file that cannot be replayed."""
    from invariants.failures import FailureStoreError

    if store is None:
        return {}
    replays, problems = {}, []
    for chk in checks:
        try:
            replays[chk.name] = store.cases(chk)
        except FailureStoreError as e:
            problems.append(str(e))
    if len(problems) == 1:
        raise UsageError(problems[0])
    if problems:
        raise UsageError(f"{len(problems)} checks have recorded failures that cannot be replayed:\n  " +
                         "\n  ".join(problems))
    for name, cases in replays.items():
        if cases:
            console.print(f"replaying {len(cases)} recorded failure{'s' if len(cases) != 1 else ''} of {name} "
                          f"from {store.directory}", markup=False)
    return replays


def keep(store, chk, result, cand, console) -> None:
    """Record a failed check's new shrunk case; a store that cannot be written costs the run a warning
    only (the verdict stands without it)."""
    if store is None or result.shrunk_case is None:
        return
    from invariants.check import case_to_json

    if result.shrunk_case in [case_to_json(c) for c in chk.examples + chk.gpu_examples + chk.nightly_examples]:
        # every run replays its pinned examples already: a copy in the store would only be clutter
        console.print(f"  the failing case is a pinned example of {chk.name}: not recorded", markup=False)
        return
    try:
        known = store.path_of(chk.name, result.shrunk_case).exists()     # a replayed case failed again
        path = store.record(chk, result, cand.impl.name, str(cand.device), chk.dtype or cand.dtype_name)
    except OSError as e:
        console.print(f"  warning: could not record the shrunk case of {chk.name} in {store.directory}: {e}",
                      markup=False)
        return
    console.print(f"  the shrunk case is already recorded in {path}" if known else
                  f"  recorded the shrunk case in {path}", markup=False)


def add_parser(sub) -> None:
    d = sub.add_parser("db", help="the failure store: list, export FILE, import FILE, clear [--check NAME], "
                                  "remove FILE")
    actions = d.add_subparsers(dest="action", required=True)
    specs = {"list": "one line per recorded failure: check, impl, device, dtype, recorded, file",
             "export": "write every recorded failure into one JSON file (a CI artifact)",
             "import": "merge an export into the store (entries already recorded are kept once)",
             "clear": "delete the recorded failures (of one check with --check)",
             "remove": "delete recorded failures by file (as `glmgate db list` names them)"}
    for name, text in specs.items():
        a = actions.add_parser(name, help=text, description=text)
        a.add_argument("--failures", default=None, metavar="DIR",
                       help="the store (default $GLMGATE_FAILURES, else ./.glmgate-failures)")
        if name in ("export", "import"):
            a.add_argument("file")
        if name == "remove":
            a.add_argument("files", nargs="+")
        if name in ("list", "clear"):
            a.add_argument("--check", default=None, help="only this check's entries")
    d.set_defaults(fn=cmd_db)


def cmd_db(args) -> int:
    from invariants.failures import FailureStoreError

    store = open_store(args)
    try:
        return ACTIONS[args.action](store, args)
    except FailureStoreError as e:
        raise UsageError(str(e))
    except OSError as e:
        raise UsageError(f"{getattr(e, 'filename', None) or store.directory}: {e.strerror or e}")


def _list(store, args) -> int:
    entries = store.entries(args.check)
    if not entries:
        print(f"no recorded failures{' of ' + args.check if args.check else ''} in {store.directory}")
        return EXIT_PASS
    rows = [("check", "impl", "device", "dtype", "recorded", "file")]
    rows += [(e.check, e.impl, e.device, e.dtype, e.recorded, str(e.path)) for e in entries]
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[5])
    return EXIT_PASS


def _export(store, args) -> int:
    n = store.export(args.file)
    print(f"exported {n} recorded failure{'s' if n != 1 else ''} from {store.directory} to {args.file}")
    return EXIT_PASS


def _import(store, args) -> int:
    added, present = store.import_(args.file)
    print(f"imported {added} recorded failure{'s' if added != 1 else ''} from {args.file} into {store.directory} "
          f"({present} already recorded)")
    return EXIT_PASS


def _clear(store, args) -> int:
    n = store.clear(args.check)
    print(f"removed {n} recorded failure{'s' if n != 1 else ''}{' of ' + args.check if args.check else ''} "
          f"from {store.directory}")
    return EXIT_PASS


def _remove(store, args) -> int:
    import pathlib

    from invariants.failures import FailureStore

    for f in args.files:
        # without --failures a file names its own store (<store>/<check>/<hash>.json), so the line a
        # stale entry prints works whatever store it lies in
        own = store if args.failures else FailureStore(pathlib.Path(f).parent.parent)
        print(f"removed {own.remove(f)}")
    return EXIT_PASS


ACTIONS = {"list": _list, "export": _export, "import": _import, "clear": _clear, "remove": _remove}
