"""The sparse absorbed MLA decode with the Triton kernel at every launch (impl.mla.PRODUCER = False: the gather, the
dots and the online softmax as one chain in the same warps): ours while step 49 is not landed, named so the probes
keep their peer whichever way impl.mla.PRODUCER is set (docs/optimization_log.md "Step 49";
impl.candidates.mla_producer is step 49)."""
from __future__ import annotations

import types

from impl.candidates.mla_heads64 import module_copy

# the form of its step: the q_abs copy and the float32 unsplit output (issue 14 steps 54, 55) pinned as before them
mla = module_copy(f"{__name__}.mla", PRODUCER=False, Q_STRIDES=False, OUT_UV=False)
Candidate = types.SimpleNamespace(mla=mla)
