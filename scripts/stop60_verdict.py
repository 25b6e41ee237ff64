"""Issue 14 step 58's landing rule (docs/optimization_log.md "Step 58", written before scripts/gpu_stop60.sh ran)
applied to that call's logs and probe.json. Prints the ratios and errors the rule reads, the verdict and, last,
`lands: step58` or `lands: none`.

    python3 scripts/stop60_verdict.py DIR      (DIR: the call's log directory, $OUT/stop60)
"""
from __future__ import annotations

import sys

from verdict_common import at_least, no_slower, one_candidate

MUTANTS = ("mla_producer_staged_store_drops_heads",)


def speed(ratio, shapes) -> bool:
    return (at_least(ratio("B128_T32768", "attend"), 1.015) and at_least(ratio("B256_T32768", "attend"), 1.015)
            and no_slower(ratio, shapes))


def error(err, err_ours) -> bool:
    # the same bits as ours: the same oracle error, to the printed digit
    return err == err_ours


# the shapes the rule was written for (its probe's, scripts/gpu_stop60.sh); stop 62's probe timed both
# steps 58 and 59 over the union of theirs
SHAPES = ("B1_T131072", "B1_T32768", "B16_T32768", "B32_T32768", "B64_T32768", "B128_T32768", "B256_T32768")


if __name__ == "__main__":
    sys.exit(one_candidate(sys.argv[1], 58, "stageo", MUTANTS, speed, error, only=SHAPES))
