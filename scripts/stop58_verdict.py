"""Issue 14 step 57's landing rule (docs/optimization_log.md "Step 57", written before scripts/gpu_stop58.sh ran)
applied to that call's logs and probe.json. Prints the ratios and errors the rule reads, the verdict and, last,
`lands: step57` or `lands: none`.

    python3 scripts/stop58_verdict.py DIR      (DIR: the call's log directory, $OUT/stop58)
"""
from __future__ import annotations

import sys

from verdict_common import at_least, no_slower, one_candidate

MUTANTS = ("mla_split_partials_unnormalized",)


def speed(ratio, shapes) -> bool:
    return (at_least(ratio("B16_T32768", "kernel"), 1.04) and at_least(ratio("B32_T32768", "kernel"), 1.04)
            and no_slower(ratio, shapes))


def error(err, err_ours) -> bool:
    return err <= 1.5 * err_ours


if __name__ == "__main__":
    sys.exit(one_candidate(sys.argv[1], 57, "partbf16", MUTANTS, speed, error))
