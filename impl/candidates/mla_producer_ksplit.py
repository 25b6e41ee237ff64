"""Issue 14 step 53's candidate: ours' producer kernel with the consumer as two 4-warp partitions, each with half of the
latent rank (impl.mla.PRODUCER_KSPLIT; impl/kernels/mla_gluon.py `_consume_half`), and the producer loading the
entries a block ahead (step 52's `_produce_ahead`). docs/optimization_log.md "Step 53".

Why: Nsight Compute's per-instruction samples (stop 53b, H100, B = 128, blocks of 64) put ~26 % of the consumer's
per-block samples in the softmax and its three exchanges between the two warp groups through shared memory (the
row max, the row sum, p's layout), and ~30 % in the scores' 32 m64 n32 MMAs a warp group and their wait. Split along
the rank instead of the entries, each half computes m64 n64 partial scores (16 MMAs) over its half of the rank; one
exchange of the partial scores gives both the whole block, so the max, the sum and p stay in registers.

Where it applies: where ours' producer kernel runs (impl.mla._producer_applies). Not the same bits as ours: the
scores are summed in two halves of the rank. Built on the CPU and compiled for sm_90 under Triton 3.6
(`glmgate kernels`); not run on a GPU yet.
"""
from __future__ import annotations

import types

from impl.candidates.mla_heads64 import module_copy

mla = module_copy(f"{__name__}.mla", PRODUCER_KSPLIT=True)
Candidate = types.SimpleNamespace(mla=mla)
