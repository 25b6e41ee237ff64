"""Issue 14 step 43's candidate: step 42's one-pass merge (impl.candidates.mla_merge) that, at up to 2 query
rows (B·S), also applies W_UV (impl.mla.ROWS_UV = 2: mla_merge_uv_kernel): the merge, the cast and W_UV's GEMM
in one launch. docs/optimization_log.md "Steps 42 and 43".

Refuted on an H100 (stop 47): 0.80x ours at B = 1 (56.3 against 45.2 us): its kernel takes 21.5 us, latency-bound
(eight rank blocks a program, each a round trip for the partial outputs and W_UV's tile), where the merge and
cuBLAS's GEMM take 8.5; and its gate flagged mla.batch (a row alone, fused, against the row among 3, unfused).
Not landed; kept for the next form (docs/optimization_log.md says which).

Why: at B = 1 the attention is five launches (W_UK's GEMM, the gather kernel, the merge, a cast, W_UV's GEMM)
whose data is W_UK and W_UV (33.6 MB, 11 us at copy speed on an H100) and 2.4 MB of latent rows, yet it takes
45.9 us (stop 47). A GEMV over W_UV's [V, R] rows per head that merges the splits' partial outputs as it reads
them saves two launches and the merged latent's round trip; lat stays float32 into W_UV (the unfused path
rounds it to bf16 first).

    python3 -m gate.cli gate --device cuda --candidate impl.candidates.mla_merge_uv:Candidate --baseline triton \\
        --check mla.absorbed --check mla.absorbed_paged --check mla.graph_replay ...

Not ours' bits at <= 2 query rows with split selections (another summation order, lat unrounded); held to
contracts.d/mla.toml's bounds like ours.
"""
from __future__ import annotations

import types

from impl.candidates.mla_heads64 import module_copy

mla = module_copy(f"{__name__}.mla", ROWS_UV=2)
Candidate = types.SimpleNamespace(mla=mla)
