"""Issue 14 step 52's candidate: ours' producer kernel with the producer warps loading each block's entries one block
ahead (impl.mla.PRODUCER_AHEAD; impl/kernels/mla_gluon.py `_produce_ahead`; docs/optimization_log.md "Step 52").

Why: Nsight Compute's per-instruction stall samples (stop 53, H100, B = 128) put the producer warps' most sampled
stall on the compare of a block's freshly loaded entries: `_produce` loads a half's entries, waits for them, forms
that half's addresses and only then issues its copies, so at blocks of 64 in 2 stages the consumer waits on
`ready` in ~7 % of its samples. Loaded a block ahead, the entries' latency hides behind the previous block's wait
and copies.

Where it applies: where ours' producer kernel runs (impl.mla._producer_applies), blocks of 32 and of 64 alike; the
same rows into the same stages, so the same bits as ours. Gated at seeds 97 and 98 (stop 54b); ours since stop 55.
"""
from __future__ import annotations

import types

from impl.candidates.mla_heads64 import module_copy

# the form of its step: the q_abs copy and the float32 unsplit output (issue 14 steps 54, 55) pinned as before them
mla = module_copy(f"{__name__}.mla", PRODUCER_AHEAD=True, Q_STRIDES=False, OUT_UV=False)
Candidate = types.SimpleNamespace(mla=mla)
