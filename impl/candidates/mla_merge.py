"""Issue 14 step 42's candidate: ours' sparse absorbed MLA with the selection splits merged in one pass
(mla_merge_kernel) instead of a split at a time with a running rescale (the merge before it), written in the
caller's dtype (no cast launch before W_UV). docs/optimization_log.md "Steps 42 and 43".
Gated on an H100 and landed in stop 47: ours' merge since; this module is ours' code again, kept as the record
`glmgate gate` ran (before landing it set a switch, MERGE = "tiles", that ours no longer has).

Why: at B = 1 (16 splits) the merge is a chain of 16 dependent round trips (4.7 us of a 45.9 us attention on an
H100, stop 47's profile) and its float32 output takes a cast launch (1.2 us) before W_UV's GEMM. Taking the
maximum log-sum-exp first, every split's weight is known and a tile of 16 splits' partial outputs is loaded at
once: two round trips.

The namespace is impl.mla loaded again as its own module (impl.candidates.mla_heads64.module_copy):

    python3 -m gate.cli gate --device cuda --candidate impl.candidates.mla_merge:Candidate --baseline triton \\
        --check mla.absorbed --check mla.absorbed_paged --check mla.batch ...

Before landing: not ours' bits wherever a selection was split (the weights e^(lse_j - L) against the running
rescale, and no float32 round trip before the cast); held to contracts.d/mla.toml's bounds like ours.
"""
from __future__ import annotations

import types

from impl.candidates.mla_heads64 import module_copy

mla = module_copy(f"{__name__}.mla", ROWS_UV=0)
Candidate = types.SimpleNamespace(mla=mla)
