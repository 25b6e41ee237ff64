"""Issue 14 steps 54 and 55's landing rules (docs/optimization_log.md "Step 54" and "Step 55", written before
scripts/gpu_stop56.sh ran) applied to that call's logs and probe.json. Prints each ratio the rules read, each rule's
verdict and, last, `lands: step54,step55` / `lands: step54` / `lands: none`.

    python3 scripts/stop56_verdict.py DIR      (DIR: the call's log directory, $OUT/stop56)
"""
from __future__ import annotations

import sys

from verdict_common import at_least as ok
from verdict_common import caught, gates_passed, get, load_probe, shapes_of, tests_passed

MUTANTS54 = ("mla_q_strides_rows_as_contiguous", "mla_q_strides_heads_step_r", "mla_producer_q_heads_step_r")
MUTANTS55 = ("mla_producer_out_uv_unnormalized",)


def main(argv) -> int:
    d = argv[1]
    probe = load_probe(d)

    def ratio(shape, part, num, den):
        return get(probe, shape, part, num) / get(probe, shape, part, den)

    shapes = shapes_of(probe)
    print("shape            kernel ours/qstrides  attend ours/qstrides  kernel qstrides/outuv  attend qstrides/outuv")
    for s in shapes:
        print(f"{s:16s} {ratio(s, 'kernel', 'ours', 'qstrides'):20.3f}  {ratio(s, 'attend', 'ours', 'qstrides'):20.3f}"
              f"  {ratio(s, 'kernel', 'qstrides', 'outuv'):21.3f}  {ratio(s, 'attend', 'qstrides', 'outuv'):21.3f}")
    t = tests_passed(d)
    g54, z54 = gates_passed(d, "gate54"), caught(d, "zoo54.log", MUTANTS54)
    p54 = (bool(shapes) and ok(ratio("B32_T32768", "kernel", "ours", "qstrides"), 1.03)
           and ok(ratio("B128_T32768", "kernel", "ours", "qstrides"), 1.03)
           and all(ok(ratio(s, p, "ours", "qstrides"), 0.99) for s in shapes for p in ("kernel", "attend")))
    land54 = g54 and t and z54 == len(MUTANTS54) and p54
    print(f"step 54: gates {int(g54)}; tests {int(t)}; mutants caught {z54} of {len(MUTANTS54)}; probe rule {int(p54)}"
          f"; lands {int(land54)}")
    g55, z55 = gates_passed(d, "gate55"), caught(d, "zoo54.log", MUTANTS55)
    p55 = (bool(shapes) and ok(ratio("B128_T32768", "attend", "qstrides", "outuv"), 1.02)
           and ok(ratio("B256_T32768", "attend", "qstrides", "outuv"), 1.02)
           and all(ok(ratio(s, p, "qstrides", "outuv"), 0.99) for s in shapes for p in ("kernel", "attend")))
    land55 = land54 and g55 and z55 == len(MUTANTS55) and p55
    print(f"step 55: gates {int(g55)}; mutants caught {z55} of {len(MUTANTS55)}; probe rule {int(p55)}"
          f"; lands {int(land55)} (only with step 54)")
    print("lands: " + (",".join(n for n, x in (("step54", land54), ("step55", land55)) if x) or "none"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
