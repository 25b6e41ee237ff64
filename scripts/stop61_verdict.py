"""Issue 14 step 59's landing rule (docs/optimization_log.md "Step 59", written before scripts/gpu_stop61.sh ran)
applied to that call's logs and probe.json. Prints the ratios and errors the rule reads, the verdict and, last,
`lands: step59` or `lands: none`.

    python3 scripts/stop61_verdict.py DIR      (DIR: the call's log directory, $OUT/stop61)
"""
from __future__ import annotations

import sys

from verdict_common import at_least, no_slower, one_candidate

MUTANTS = ("mla_producer_staged_partials_drop_heads", "mla_combine_bf16_drops_last_split")


def speed(ratio, shapes) -> bool:
    return (at_least(ratio("B16_T32768", "kernel"), 1.04) and at_least(ratio("B32_T32768", "kernel"), 1.04)
            and no_slower(ratio, shapes))


def error(err, err_ours) -> bool:
    # not ours' bits (the partials rounded once more): the oracle error within 1.5x ours'
    return err <= 1.5 * err_ours


# the shapes the rule was written for (its probe's, scripts/gpu_stop61.sh); stop 62's probe timed both
# steps 58 and 59 over the union of theirs
SHAPES = ("B1_T131072", "B1_T32768", "B4_T32768", "B8_T32768", "B16_T32768", "B32_T32768", "B64_T32768", "B128_T32768")


if __name__ == "__main__":
    sys.exit(one_candidate(sys.argv[1], 59, "partstaged", MUTANTS, speed, error, only=SHAPES))
