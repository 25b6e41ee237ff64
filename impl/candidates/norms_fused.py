"""Issue 14 step 14's candidate, the three RMSNorms as one Triton launch each (impl/kernels/norm.py), kept as the
record the gate ran: since step 14 landed it is ours' code (impl.norm.launch, called by impl.model.rmsnorm,
impl.mla.rmsnorm and impl.kda.gated_rmsnorm); impl.candidates.norms_torch holds the torch forms it replaced.

    python3 -m gate.cli gate --device cuda --candidate impl.candidates.norms_fused:Candidate \\
        --baseline triton --check kda.sublayer --check mla.paths --check model.paths
"""
from __future__ import annotations

import types

from impl import kda, mla, model

Candidate = types.SimpleNamespace(kda=types.SimpleNamespace(gated_rmsnorm=kda.gated_rmsnorm),
                                  mla=types.SimpleNamespace(rmsnorm=mla.rmsnorm),
                                  model=types.SimpleNamespace(rmsnorm=model.rmsnorm))
