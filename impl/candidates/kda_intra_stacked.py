"""Issue 14 step 21: ours' intra-chunk kernel with the kk and qk products of each column block as ONE dot,
[k e^(Γ-ref); q e^(Γ-ref)] [2 BT, BK] against the shared column factor (intra_stack=True), on top of step 18's
measured winners (forward-substitution inverse, 168-register cap). The same products, rows and accumulation
order as ours; bitwise ours on the CPU interpreter (tests/test_kda_intra_blocked.py). The compiled sm_90 code
has a third fewer warpgroup waits and an eighth fewer barriers in the K loop (docs/optimization_log.md
step 21):

    python3 -m gate.cli gate --device cuda --candidate impl.candidates.kda_intra_stacked:Candidate \\
        --baseline triton --check kda.chunked --check kda.causal --check kda.paths --check kda.packed \\
        --check kda.batch
"""
from __future__ import annotations

from impl.candidates.kda_intra_tuned import candidate

Candidate = candidate(intra_stack=True)
chunked = Candidate.kda.chunked
