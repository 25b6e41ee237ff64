"""Ours before issue 14 step 49: the sparse absorbed MLA decode with the Triton kernel at every launch
(impl.mla.PRODUCER = False: the gather, the dots and the online softmax as one chain in the same warps), the
peer of step 49's measurements (docs/optimization_log.md "Step 49"; impl.candidates.mla_producer is step 49)."""
from __future__ import annotations

import types

from impl.candidates.mla_heads64 import module_copy

mla = module_copy(f"{__name__}.mla", PRODUCER=False)
Candidate = types.SimpleNamespace(mla=mla)
