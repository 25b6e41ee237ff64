"""Issue 14 step 57's candidate: ours with each selection split's partial output stored in q's dtype (bf16) instead of
float32 (impl.mla.PART_BF16; docs/optimization_log.md "Step 57").

Why: stop 57's timeline of the producer kernel at B = 32 (4 splits, one wave of 128 programs): the blocks run at
~3.3 us each, near the HBM's rate for 128 programs' 64 KB, and the programs' epilogue, storing 128 KB of float32
partials each (16.8 MB at once), takes 4.0 us; the merge then reads them back (4.3 us). The float32 partials move half
as many bytes again as the selected rows themselves. In bf16 each partial is rounded once more (2^-9 relative) before
the float32 merge: within ours' bf16 contract, not ours' bits.

Where it applies: the split path (below 67 query rows at 64 heads on an H100) with bf16 or fp16 queries, both kernels;
the interpreter's float32 runs keep float32 partials.

Refuted (stop 58, H100): gated at two seeds, but 0.79-0.89x ours at B = 8-64 (the producer kernel's rows) and
1.02-1.04x at B = 1-4 (the Triton kernel's): the bf16 merge converts between its load and sum layouts through shared
memory (4.5 -> 12.4 us at B = 32) and the epilogue's bf16 stores are half-sector writes. Kept to replay the run: with
step 58's staged epilogue pinned off (ours since stop 62) and the merge on 4 warps (step 59's 2 warps: ours since
stop 64), as it ran.
"""
from __future__ import annotations

import types

from impl.candidates.mla_heads64 import module_copy

mla = module_copy(f"{__name__}.mla", PART_BF16=True, EPILOGUE_STAGED=False, MERGE_BF16_WARPS=False)
Candidate = types.SimpleNamespace(mla=mla)
