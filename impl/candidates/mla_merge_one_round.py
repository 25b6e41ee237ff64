"""Issue 14 step 46's candidate: ours' sparse absorbed MLA decode with the split merge in ONE round of loads when
every split fits one tile (impl.mla.MERGE_ONE_ROUND = True; mla_merge_kernel's ONE_ROUND): the splits'
log-sum-exps and partial outputs are loaded together, where ours loads the log-sum-exps, takes their max L, and only
then loads the partials (docs/optimization_log.md "Step 46").

Why: the merge is latency-bound at small batches (3.3 us at B = 1 on an H100 for 2.1 MB, stop 47); its two dependent
rounds of loads are most of it, and the partials' addresses do not depend on L. Ours' split counts (<= 16) always
fit one tile, so the candidate takes the one-round path at every batch. The arithmetic is the same (the same max, the
same weights, the same sums in the same order): the same bits as ours (tests/test_mla_merge.py, on the CPU and the
GPU).

    python3 -m gate.cli gate --device cuda --candidate impl.candidates.mla_merge_one_round:Candidate --baseline triton \\
        --check mla.absorbed --check mla.batch ...
"""
from __future__ import annotations

import types

from impl.candidates.mla_heads64 import module_copy

mla = module_copy(f"{__name__}.mla", MERGE_ONE_ROUND=True)
Candidate = types.SimpleNamespace(mla=mla)
