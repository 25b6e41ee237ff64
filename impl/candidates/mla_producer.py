"""Issue 14 step 49's candidate: the sparse absorbed MLA decode with the gather in a producer warp group
(impl/kernels/mla_gluon.py, a Gluon kernel for Hopper under Triton 3.6; docs/optimization_log.md "Step 49").
Gated in stop 52 (H200, seeds 92 and 93: passed); landed in stop 53 (H100: gated again at seeds 92 and 93 with the
paged cache in the producer, its GPU tests and four mutants): impl.mla.PRODUCER is True, so this candidate is ours
with blocks of 32 at every row count (impl.mla.PRODUCER_BW64_ROWS = 0), the probe's `producer`. The Triton kernel at
every launch, ours before stop 53, is impl.candidates.mla_gather_chain (the probe's `chain`).

Why: the Triton kernel runs each block of 32 selected rows as one dependent chain in the same warps (the entries,
the gather, two dots, the online softmax); Triton's automatic warp specialization leaves its code unchanged
(step 48), so the producer is written by hand: 4 warps only gather, with cp.async into a ring of shared-memory
stages and an mbarrier pair a stage, while the kernel's 8 warps run the dots.

Where it applies (impl.mla._producer_applies): 64 heads a program (from ROWS_64 query rows on, on a GPU), a
contiguous or a paged cache (the block table is read in the producer partition since stop 52), bf16 operands, a
rank that is a power of two from 16 to 512, a Hopper GPU, Triton 3.6. Elsewhere the Triton kernel runs, so the gate
holds ours there.

    python3 -m gate.cli gate --device cuda --candidate impl.candidates.mla_producer:Candidate --baseline triton \\
        --check mla.absorbed --check mla.batch --check mla.paths --check mla.graph_replay ...
"""
from __future__ import annotations

import types

from impl.candidates.mla_heads64 import module_copy

# the form of its step: the q_abs copy and the float32 unsplit output (issue 14 steps 54, 55) pinned as before them
mla = module_copy(f"{__name__}.mla", PRODUCER=True, PRODUCER_BW64_ROWS=0, PRODUCER_AHEAD=False,
                  Q_STRIDES=False, OUT_UV=False)
Candidate = types.SimpleNamespace(mla=mla)
