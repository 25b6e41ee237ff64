"""Issue 14 step 50's candidate: ours' producer kernel (step 49) with the consumer's scores a block ahead: block
i + 1's q · c^T issued to the tensor cores before block i's softmax, so the softmax runs while they compute, and
block i's p · c queued behind them (impl/kernels/mla_gluon.py `_consume_overlap`; impl.mla.PRODUCER_OVERLAP;
docs/optimization_log.md "Step 50").

Why: step 48's probe showed the kernel waits on its chain of dots and softmax, not on memory, and step 49 measured
~2.4 us a block of 32 rows at B = 128 with the gather moved out. In `_consume` the 32 score MMAs, the softmax and
p · c run strictly one after another; here the scores of the next block and the softmax of this one overlap.

Where it applies: where ours' producer kernel does (impl.mla._producer_applies); elsewhere ours' Triton kernel.

    python3 -m gate.cli gate --device cuda --candidate impl.candidates.mla_producer_overlap:Candidate \
        --baseline triton --check mla.absorbed --check mla.batch --check mla.paths --check mla.graph_replay ...
"""
from __future__ import annotations

import types

from impl.candidates.mla_heads64 import module_copy

# the form of its step: the q_abs copy and the float32 unsplit output (issue 14 steps 54, 55) pinned as before them
mla = module_copy(f"{__name__}.mla", PRODUCER_OVERLAP=True, PRODUCER_AHEAD=False, Q_STRIDES=False, OUT_UV=False)
Candidate = types.SimpleNamespace(mla=mla)
