"""Issue 14 step 59's landing rule (docs/optimization_log.md "Step 59", written before scripts/gpu_stop61.sh ran)
applied to that call's logs and probe.json. Prints the ratios and errors the rule reads, the verdict and, last,
`lands: step57` or `lands: none`.

    python3 scripts/stop61_verdict.py DIR      (DIR: the call's log directory, $OUT/stop61)
"""
from __future__ import annotations

import glob
import json
import os
import re
import sys

PASS = "0 failed, 0 regressions, 0 not covered, 0 errors, 0 not run"
MUTANTS = ("mla_producer_staged_partials_drop_heads", "mla_combine_bf16_drops_last_split")


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def main(argv) -> int:
    d = argv[1]
    try:
        probe = json.load(open(os.path.join(d, "probe.json")))
    except (OSError, ValueError):
        probe = {}

    def get(shape, part, name, key="median_us"):
        return probe.get(shape, {}).get(part, {}).get(name, {}).get(key, float("nan"))

    def ratio(shape, part):
        return get(shape, part, "ours") / get(shape, part, "partstaged")

    shapes = sorted(probe, key=lambda k: (int(k.split("_")[0][1:]), k))
    print("shape            kernel ours/partstaged  decode ours/partstaged  oracle rel-L2 ours  partstaged")
    for s in shapes:
        print(f"{s:16s} {ratio(s, 'kernel'):20.3f}  {ratio(s, 'attend'):20.3f}  "
              f"{get(s, 'attend', 'ours', 'oracle_rel_l2'):18.2e}  {get(s, 'attend', 'partstaged', 'oracle_rel_l2'):.2e}")
    ok = lambda x, lo: x == x and x >= lo                                   # NaN (not measured) never passes
    logs = glob.glob(os.path.join(d, "gate59_*.log"))
    g = len(logs) == 3 and all(PASS in _read(f) for f in logs)
    last = _read(os.path.join(d, "tests.log")).strip().splitlines()
    t = bool(last) and re.search(r"\d+ passed", last[-1]) is not None and not re.search(r"failed|error", last[-1])
    zoo = _read(os.path.join(d, "zoo59.log"))
    z = sum(1 for n in MUTANTS if re.search(rf"^│ {n} +│ caught", zoo, re.M))
    b1 = [s for s in shapes if s.startswith("B1_")]
    rest = [s for s in shapes if s not in b1]
    p = (bool(shapes) and ok(ratio("B16_T32768", "kernel"), 1.04) and ok(ratio("B32_T32768", "kernel"), 1.04)
         and all(ok(ratio(s, part), 0.98) for s in b1 for part in ("kernel", "attend"))
         and all(ok(ratio(s, part), 0.99) for s in rest for part in ("kernel", "attend")))
    # not ours' bits (the partials rounded once more): the oracle error within 1.5x ours'
    e = bool(shapes) and all(get(s, "attend", "partstaged", "oracle_rel_l2") <= 1.5 * get(s, "attend", "ours",
                                                                                       "oracle_rel_l2")
                             for s in shapes)
    land = g and t and z == len(MUTANTS) and p and e
    print(f"step 59: gates {int(g)}; tests {int(t)}; mutants caught {z} of {len(MUTANTS)}; probe rule {int(p)}; "
          f"errors rule {int(e)}; lands {int(land)}")
    print("lands: " + ("step57" if land else "none"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
