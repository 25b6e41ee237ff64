"""Issue 14 step 41's candidate: ours' sparse absorbed MLA launch from 16 query rows on (step 40: 64 heads a
program, entry blocks of 32, 3 stages, splits for one wave of the SMs) taken down to 8 query rows
(docs/optimization_log.md "Step 41"). Below 8 rows and on the interpreter it is ours.

Why: below 16 rows ours gives a program 16 heads (4 head blocks gather every row) with enough splits for four
waves. Its first form (from 2 rows on; stop 46, H100) measured B = 8 / 12 1.72x / 1.71x ours, B = 4 1.11x, B = 2
0.81x; and its gate flagged mla.batch: a row alone (1 row, ours' launch) against the row among 3 (the 64-head
launch) moved from the same bits to 0.136 of the bound. From 8 rows on it keeps the large gains; B = 4-7 keep
ours' launch (1.1-1.2x was on offer there).

The namespace is impl.mla loaded again as its own module with ROWS_64 = 8 (impl.candidates.mla_heads64 shows how):

    python3 -m gate.cli gate --device cuda --candidate impl.candidates.mla_heads64_small:Candidate \\
        --baseline triton --check mla.absorbed --check mla.absorbed_paged --check mla.graph_replay ...

Gated on an H100 (stop 47: mla.batch and mla.absorbed at seeds 56 and 57, mla.paths / causal / absorbed_paged /
graph_replay / model.paths at 56; 20 examples a check, all passed, no regression) and landed: ours since step 41
(impl.mla.ROWS_64 = 8); since step 47 (ROWS_64 = 7, impl.candidates.mla_rows64_7) it is ours before that step,
the peer its benchmarks and replays name.
"""
from __future__ import annotations

import types

from impl.candidates.mla_heads64 import module_copy

ROWS_64 = 8

mla = module_copy(f"{__name__}.mla", ROWS_64=ROWS_64)
Candidate = types.SimpleNamespace(mla=mla)
