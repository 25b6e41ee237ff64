"""Issue 14 step 55's candidate: step 54's (q_abs read through its strides) with the unsplit sparse kernel writing its
output in W_UV's dtype (impl.mla.OUT_UV; docs/optimization_log.md "Step 55").

Why: where the selection is not split (from 67 query rows at 64 heads on an H100's 132 SMs), ours' sparse kernel
writes a float32 [B, S, H, R] output that attend then casts to W_UV's dtype before the fold: a 5.8 us launch at
B = 128 (stop 55b's profile) reading 16.8 MB and writing 8.4. The kernel can round once itself (to nearest even,
as torch's cast does): the same bits, half the output's bytes, one launch fewer.

Where it applies: the unsplit launch with W_UV's fold after it (attend, and so every decode), on a GPU; the split
path already merges into the caller's dtype; the interpreter keeps the float32 output.
"""
from __future__ import annotations

import types

from impl.candidates.mla_heads64 import module_copy

# its step's form: the output stored from the MMA layout (step 58 pinned off)
mla = module_copy(f"{__name__}.mla", Q_STRIDES=True, OUT_UV=True, EPILOGUE_STAGED=False)
Candidate = types.SimpleNamespace(mla=mla)
