"""Issue 14 step 58's candidate: ours with the producer kernel's bf16 output staged through shared memory and stored a
whole row at a time (impl.mla.EPILOGUE_STAGED; impl/kernels/mla_gluon.py `_store_o_staged`; docs/optimization_log.md
"Step 58").

Why: from the warp-group MMA's accumulator layout a warp's store covers 8 rows x 8 columns, eight full 32-byte sectors
in float32 but eight half sectors in bf16: step 55's bf16 unsplit output cost the kernel ~2.5 us of device time at
B = 128 against the float32 one (stop 58's profile), and step 57's bf16 partials lost for the same reason. Written into
q's shared-memory tile (free after the last block) and read back row-contiguous, a warp stores 512 contiguous bytes.

Where it applies: the producer kernel's entries-ahead form (ours) when its output is in q's dtype: the unsplit launch
before W_UV's fold (from 67 query rows at 64 heads on an H100). The same values, rounded the same way: ours' bits.
Built in stop 55 (compiled for sm_90 under Triton 3.6: the same registers and shared memory as ours, 16-byte global
stores). Landed in stop 62 (H100: gated at two seeds, the decode 1.038x / 1.037x at B = 128 / 256 with ours'
bits): ours since, this candidate equals ours.
"""
from __future__ import annotations

import types

from impl.candidates.mla_heads64 import module_copy

mla = module_copy(f"{__name__}.mla", EPILOGUE_STAGED=True)
Candidate = types.SimpleNamespace(mla=mla)
