"""Run a glmgate command with impl.mhc's launch constants set as given: the gate of a launch form before it
is landed (the same constants the landed form would have, nothing else changed).

    PYTHONPATH=. python3 scripts/with_mhc_launch.py _PARTIAL_DOT=1 _BR_PARTIAL=16 -- gate --device cuda ...
    PYTHONPATH=. python3 scripts/with_mhc_launch.py --pick variants.json -- gate ...
    PYTHONPATH=. python3 scripts/with_mhc_launch.py --pick variants.json -- scripts/profile_replay.py ...

After `--`: glmgate's arguments, or a script (a .py path) and its arguments, run in this process.

--pick FILE[:SLACK] takes the fastest variant at the largest token count of a scripts/mhc_variants.py JSON
among those that kept batch invariance and cost at most SLACK us (default 1) more than the landed default
at one token.
"""
from __future__ import annotations

import json
import sys


def pick(path: str, slack: float = 1.0) -> dict:
    """The chosen variant's constants from a mhc_variants JSON (see the module docstring)."""
    d = json.load(open(path))
    rows = [r for r in d["rows"] if r["variant"] != "one_program_peer"]
    big, one = max(r["tokens"] for r in rows), min(r["tokens"] for r in rows)

    def med(r):
        v = sorted(r["coeff_us"])
        return v[len(v) // 2]
    base = med(next(r for r in rows if r["tokens"] == one and r["variant"] == "default"))
    ok = {r["variant"] for r in rows if r["tokens"] == one and med(r) <= base + slack}
    ok -= {r["variant"] for r in rows if not r.get("batch_invariant", True)}
    best = min((r for r in rows if r["tokens"] == big and r["variant"] in ok), key=med)
    print(f"with_mhc_launch: picked {best['variant']} ({med(best):.1f} us at {big} tokens): "
          f"{d['variants'][best['variant']]}", flush=True)
    return d["variants"][best["variant"]]


def main(argv: list) -> int:
    sep = argv.index("--")
    spec, rest = argv[:sep], argv[sep + 1:]
    from impl import mhc
    path, _, slack = (spec[1] if spec[:1] == ["--pick"] else "").partition(":")
    consts = pick(path, float(slack or 1.0)) if spec[:1] == ["--pick"] else {
        k: (int(v) if v.lstrip("-").isdigit() else v) for k, v in (a.split("=", 1) for a in spec)}
    for k, v in consts.items():
        if not hasattr(mhc, k):
            raise SystemExit(f"with_mhc_launch: impl.mhc has no launch constant {k}")
        setattr(mhc, k, type(getattr(mhc, k))(v))
    print(f"with_mhc_launch: {consts}", flush=True)
    if rest and rest[0].endswith(".py"):
        import runpy
        sys.argv = rest
        try:
            runpy.run_path(rest[0], run_name="__main__")
        except SystemExit as e:
            return int(e.code or 0)
        return 0
    from gate.cli import main as glmgate
    return glmgate(rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
