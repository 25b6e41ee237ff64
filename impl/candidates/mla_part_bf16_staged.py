"""Issue 14 step 59's candidate: step 57's bf16 split partials again, now with what sank them fixed: the producer
kernel's split store staged through shared memory (step 58's EPILOGUE_STAGED: whole-row 16-byte stores instead of
half sectors) and the merge of bf16 partials on 2 warps (impl.mla.MERGE_BF16_WARPS: every warp along the rank, no
reduction across warps through shared memory). docs/optimization_log.md "Step 59".

Why: at B = 8-64 the float32 partials are 16.8 MB written in the programs' epilogue (4.0 us at B = 32, stop 57's
timeline) and read back by the merge (4.5 us); stop 58 measured bf16 partials 0.79-0.89x ours for two compiled-code
reasons that steps 58 and 59 remove (the merge's PTX at 2 warps: no shared memory, no barrier).

Where it applies: as step 57's (the split path with bf16 or fp16 queries); ours' bf16 bounds, not ours' bits.
Built in stop 55 (compiled under Triton 3.6). Landed in stop 64 (H100, its rule in the log: gated at seeds 115 and
116 and mla.causal at 115, its mutants caught, 1.026-1.140x sparse_absorbed at B = 4-64): ours since; kept so the
probe's `partstaged` form and stop 61-64's scripts replay as they ran.
"""
from __future__ import annotations

import types

from impl.candidates.mla_heads64 import module_copy

mla = module_copy(f"{__name__}.mla", PART_BF16=True, EPILOGUE_STAGED=True, MERGE_BF16_WARPS=True)
Candidate = types.SimpleNamespace(mla=mla)
