"""Issue 14 step 51's candidate: step 49's producer kernel with blocks of 64 entries at every row count where it runs
(impl.mla.PRODUCER_BW64_ROWS = 1: impl.mla.PRODUCER_64),
2 shared-memory stages of 64 KB (with q's 64 KB: 200,740 B) and the producer warps at 64 registers (they copy a
block in two halves of 32 rows; at 56 they spilled 8-16 B), the consumer at 216 (no spill; sm_90, Triton 3.6).
docs/optimization_log.md "Step 51".

Why: step 50 showed the producer kernel's block costs a fixed chain (the mbarrier waits, the cross-warp-group max
and sum, p's layout conversion, the barrier before the stage goes back) that overlapping the dots does not shorten;
blocks of 64 run that chain half as often a row, with each block's scores one m64n32 MMA per warp group per K step
instead of m64n16.

Where it applies: where step 49's kernel does (impl.mla._producer_applies). Stop 53 (H100): gate at seed 92 passed;
1.131 / 1.212 / 1.219x the blocks of 32 at B = 64 / 128 / 256, 1.021 / 1.051x at B = 16 / 32, 0.975x at B = 8 (32K
cache, kernel alone). Its landing form, blocks of 64 from 16 rows only, is impl.candidates.mla_producer_bw64_16. The
producer mutant that copies half a block (impl/mutants/mla.py) runs through this candidate: its 8-row GPU pins then
take blocks of 64.
"""
from __future__ import annotations

import types

from impl.candidates.mla_heads64 import module_copy

# the form of its step: the q_abs copy and the float32 unsplit output (issue 14 steps 54, 55) pinned as before them
mla = module_copy(f"{__name__}.mla", PRODUCER=True, PRODUCER_BW64_ROWS=1, PRODUCER_AHEAD=False,
                  Q_STRIDES=False, OUT_UV=False)
Candidate = types.SimpleNamespace(mla=mla)
