"""Issue 14 step 60's candidate: ours with the split merge launched as a programmatic dependent of the sparse kernel
(impl.mla.MERGE_PDL; docs/optimization_log.md "Step 60").

Why: a split launch (from 2 to 66 query rows at 64 heads on an H100) is two kernels, the sparse kernel and the merge,
and in a CUDA graph the merge's programs start only after the sparse kernel's last program has finished and the
launch has been processed. Stop 56's profile left ~8 us of a B = 32 decode that only the graph replay sees (5-7 us
for the unsplit, one-kernel graph at B = 128): the second launch's share is what this step can take. With
programmatic dependent launch the sparse kernel's programs signal at their start (griddepcontrol.launch_dependents)
and the merge's grid is launched while they run; each merge program waits (griddepcontrol.wait) until the sparse
grid has completed and its partials are visible, then does ours' loads and arithmetic: ours' bits.

GPU only (sm_90 and later; inline PTX the interpreter cannot run): on the CPU the candidate is ours.

Refuted (stop 62, H100, not gated): ours' bits (its GPU tests, CUDA-graph replays among them), but sparse_absorbed
only 1.002-1.007x ours at B = 16-64 (0.4 us at B = 32; predicted 1-2.5 us), the decode 1.009-1.020x: the merge's
launch is not where the graph replay's extra time goes. Kept to replay the run.
"""
from __future__ import annotations

import types

from impl.candidates.mla_heads64 import module_copy

mla = module_copy(f"{__name__}.mla", MERGE_PDL=True)
Candidate = types.SimpleNamespace(mla=mla)
