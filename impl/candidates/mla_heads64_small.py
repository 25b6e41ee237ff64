"""Issue 14 step 41's candidate: ours' sparse absorbed MLA launch from 16 query rows on (step 40: 64 heads a
program, entry blocks of 32, 3 stages, splits for one wave of the SMs) taken down to 2 query rows
(docs/optimization_log.md "Step 41"). Below 2 rows (B = 1 decode) and on the interpreter it is ours.

Why: below 16 rows ours gives a program 16 heads (4 head blocks gather every row) with enough splits for four
waves. Step 40's probe measured 64 heads a program at B = 8 with 8 splits 1.49x ours, at B = 4 with 16 splits
1.13x; the one-wave rule gives B = 4 32 splits and B = 8 16 (128 programs), B = 2 32 (64: the cap of 2 blocks a
split).

The namespace is impl.mla loaded again as its own module with ROWS_64 = 2 (impl.candidates.mla_heads64 shows how):

    python3 -m gate.cli gate --device cuda --candidate impl.candidates.mla_heads64_small:Candidate \\
        --baseline triton --check mla.absorbed --check mla.absorbed_paged --check mla.graph_replay ...

Not ours' bits on a GPU below 16 rows (another head block, entry block and split count); held to
contracts.d/mla.toml's bounds like ours.
"""
from __future__ import annotations

import types

from impl.candidates.mla_heads64 import module_copy

ROWS_64 = 2

mla = module_copy(f"{__name__}.mla", ROWS_64=ROWS_64)
Candidate = types.SimpleNamespace(mla=mla)
