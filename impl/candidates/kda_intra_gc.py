"""Issue 14 step 23: Γ, the chunk-local cumulative sum of the log decays g, computed by its own kernel
(kda_chunk_cumsum_fwd_kernel) before ours' intra-chunk kernel, which then reads Γ instead of scanning g along
the tokens itself (g_cumsum=True); on top of step 18's measured winners (forward-substitution inverse,
168-register cap). Bitwise ours on the CPU interpreter with the same inverse (tests/test_kda_intra_blocked.py).
The compiled sm_90 intra kernel has 17 % fewer instructions and 27 % fewer shared-memory operations;
the new pass reads g and writes Γ once (docs/optimization_log.md step 23):

    python3 -m gate.cli gate --device cuda --candidate impl.candidates.kda_intra_gc:Candidate \\
        --baseline triton --check kda.chunked --check kda.causal --check kda.paths --check kda.packed \\
        --check kda.batch
"""
from __future__ import annotations

from impl.candidates.kda_intra_tuned import candidate

Candidate = candidate(g_cumsum=True)
chunked = Candidate.kda.chunked
