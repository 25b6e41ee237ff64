"""What the issue 14 landing verdicts (scripts/stop*_verdict.py) share: a GPU call's logs and probe.json read back,
and the one-candidate rule they apply (gates, GPU tests, mutants, the probe's speed and the decode's oracle error)."""
from __future__ import annotations

import glob
import json
import os
import re

PASS = "0 failed, 0 regressions, 0 not covered, 0 errors, 0 not run"


def read(path: str) -> str:
    """The file's text, or "" when the step that writes it did not run."""
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def gates_passed(d: str, prefix: str) -> bool:
    """Whether the call's three gate logs `prefix`_*.log (two seeds and mla.causal) all passed."""
    logs = glob.glob(os.path.join(d, f"{prefix}_*.log"))
    return len(logs) == 3 and all(PASS in read(f) for f in logs)


def tests_passed(d: str) -> bool:
    """Whether tests.log's last line is pytest's summary with passes and no failure or error."""
    lines = read(os.path.join(d, "tests.log")).strip().splitlines()
    return bool(lines) and re.search(r"\d+ passed", lines[-1]) is not None and not re.search(r"failed|error",
                                                                                            lines[-1])


def caught(d: str, log: str, names) -> int:
    """How many of the mutants `names` the zoo log `log` shows caught."""
    text = read(os.path.join(d, log))
    return sum(1 for n in names if re.search(rf"^│ {n} +│ caught", text, re.M))


def load_probe(d: str) -> dict:
    """probe.json ({"B<b>_T<t>": {"kernel": {form: stats}, "attend": {...}}}), or {} when it is missing."""
    try:
        return json.load(open(os.path.join(d, "probe.json")))
    except (OSError, ValueError):
        return {}


def shapes_of(probe: dict) -> list:
    """The probe's shapes, by batch."""
    return sorted(probe, key=lambda k: (int(k.split("_")[0][1:]), k))


def get(probe: dict, shape: str, part: str, name: str, key: str = "median_us") -> float:
    return probe.get(shape, {}).get(part, {}).get(name, {}).get(key, float("nan"))


def at_least(x: float, lo: float) -> bool:
    """x >= lo; NaN (not measured) never passes."""
    return x == x and x >= lo


def no_slower(ratio, shapes) -> bool:
    """ratio (ours' median over a form's) >= 0.98x at B = 1 (the spread of identical launches: issue 14 step 54) and
    >= 0.99x at every other shape, kernel and decode alike."""
    b1 = [s for s in shapes if s.startswith("B1_")]
    return (all(at_least(ratio(s, p), 0.98) for s in b1 for p in ("kernel", "attend"))
            and all(at_least(ratio(s, p), 0.99) for s in shapes if s not in b1 for p in ("kernel", "attend")))


def one_candidate(d: str, step: int, form: str, mutants, speed, error, only=None) -> int:
    """A one-candidate landing rule over the call's logs in `d`: its gates (gate<step>_*.log), the GPU tests
    (tests.log), its mutants (zoo<step>.log), `speed(ratio, shapes)` over the probe (ratio(shape, part): ours' median
    over the form's) and `error(form's oracle rel-L2, ours')` at every shape. Prints the table, the verdict and
    `lands: step<step>` or `lands: none`. only: the shapes the rule was written for ("B32_T32768", ...), where one
    probe timed several candidates over the union of their rules' shapes; every one of them must have been timed."""
    probe = load_probe(d)
    if only is not None:
        missing = [s for s in only if s not in probe]
        probe = {s: v for s, v in probe.items() if s in only}
        if missing:
            print(f"not timed: {', '.join(missing)}")
            probe = {}

    def ratio(shape, part):
        return get(probe, shape, part, "ours") / get(probe, shape, part, form)

    shapes = shapes_of(probe)
    print(f"shape            kernel ours/{form}  decode ours/{form}  oracle rel-L2 ours  {form}")
    for s in shapes:
        print(f"{s:16s} {ratio(s, 'kernel'):20.3f}  {ratio(s, 'attend'):20.3f}  "
              f"{get(probe, s, 'attend', 'ours', 'oracle_rel_l2'):18.2e}  "
              f"{get(probe, s, 'attend', form, 'oracle_rel_l2'):.2e}")
    g, t = gates_passed(d, f"gate{step}"), tests_passed(d)
    z = caught(d, f"zoo{step}.log", mutants)
    p = bool(shapes) and speed(ratio, shapes)
    e = bool(shapes) and all(error(get(probe, s, "attend", form, "oracle_rel_l2"),
                                   get(probe, s, "attend", "ours", "oracle_rel_l2")) for s in shapes)
    land = g and t and z == len(mutants) and p and e
    print(f"step {step}: gates {int(g)}; tests {int(t)}; mutants caught {z} of {len(mutants)}; probe rule {int(p)}; "
          f"errors rule {int(e)}; lands {int(land)}")
    print("lands: " + (f"step{step}" if land else "none"))
    return 0
