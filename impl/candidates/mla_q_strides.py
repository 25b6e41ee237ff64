"""Issue 14 step 54's candidate: ours with the sparse kernels reading q_abs through its row and head strides
(impl.mla.Q_STRIDES; `_q_operand`; docs/optimization_log.md "Step 54").

Why: the W_UK fold (`torch.einsum("bshn,hnr->bshr")`) runs one GEMM a head and returns [H, B·S, R] memory seen as
[B, S, H, R]; ours copies it contiguous before the sparse kernel, an elementwise launch of 3.7 / 4.3 / 8.2 / 13.0 us
at B = 16 / 32 / 64 / 128 on an H100 (stop 55b's profile), 7-10 % of the sparse attention. Each head's rank row is
contiguous either way, so the kernels' q load stays coalesced.

Where it applies: both sparse kernels (the producer kernel and the Triton kernel), where q_abs is of the kernels'
dtype with equally spaced rows b·S + s and a unit stride along R; anything else is copied as in ours. The same
values into the same registers: the same bits as ours.
"""
from __future__ import annotations

import types

from impl.candidates.mla_heads64 import module_copy

mla = module_copy(f"{__name__}.mla", Q_STRIDES=True, OUT_UV=False)
Candidate = types.SimpleNamespace(mla=mla)
