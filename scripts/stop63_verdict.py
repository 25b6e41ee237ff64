"""Issue 14 step 60's landing rule (docs/optimization_log.md "Step 60", written before scripts/gpu_stop62.sh ran)
applied to scripts/gpu_stop63.sh's logs on the tree with steps 58-59 landed (gate60_*.log, tests60.log, zoo60.log,
probe60.json). Prints the ratios and errors the rule reads, the verdict and, last, `lands: step60` or `lands: none`.

    python3 scripts/stop63_verdict.py DIR      (DIR: the call's log directory, $OUT/stop63)
"""
from __future__ import annotations

import sys

from verdict_common import at_least, no_slower, one_candidate

MUTANTS = ("mla_merge_pdl_no_wait",)
SHAPES = ("B1_T131072", "B1_T32768", "B4_T32768", "B16_T32768", "B32_T32768", "B64_T32768")


def speed(ratio, shapes) -> bool:
    return (at_least(ratio("B16_T32768", "kernel"), 1.015) and at_least(ratio("B32_T32768", "kernel"), 1.015)
            and no_slower(ratio, shapes))


def error(err, err_ours) -> bool:
    # only the launch order changes: ours' bits, the same oracle error to the printed digit
    return err == err_ours


if __name__ == "__main__":
    sys.exit(one_candidate(sys.argv[1], 60, "pdl", MUTANTS, speed, error, only=SHAPES, probe_file="probe60.json",
                           tests_log="tests60.log"))
