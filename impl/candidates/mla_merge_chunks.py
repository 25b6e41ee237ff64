"""Issue 14 step 44's candidate: ours' sparse absorbed MLA with the split merge's rank in chunks of 128 over
programs (impl.mla.MERGE_BR = 128: a program per (query row, head, 128 ranks), four a head at rank 512) instead
of the whole rank a program. docs/optimization_log.md "Step 44". Gated on an H100 (all pass) and REFUTED by its
measurement: 1.005x the attention at B = 1 (the merge 3.3 -> 2.8 us), 0.97x at B = 4, 0.92x at B = 8, 0.82x at
B = 32 (four times the programs, each re-reading the splits' log-sum-exps). Ours keeps MERGE_BR = 0.

Why: at B = 1 the merge's 64 programs each pull a [16, 512] float32 tile (32 KB) of the splits' partial outputs
through one SM (3.3 us of a 42 us attention on an H100, stop 47); four chunks put 256 programs on the 132 SMs,
8 KB each. The arithmetic of each output element is unchanged (the same splits, the same tiles of 16 splits).

The namespace is impl.mla loaded again as its own module (impl.candidates.mla_heads64.module_copy):

    python3 -m gate.cli gate --device cuda --candidate impl.candidates.mla_merge_chunks:Candidate --baseline triton \\
        --check mla.absorbed --check mla.batch --check mla.absorbed_paged ...
"""
from __future__ import annotations

import types

from impl.candidates.mla_heads64 import module_copy

mla = module_copy(f"{__name__}.mla", MERGE_BR=128)
Candidate = types.SimpleNamespace(mla=mla)
