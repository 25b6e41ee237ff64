"""Ours' three RMSNorms before issue 14 step 14: torch ops (~7 launches a norm at a decode step), brought through
the norm seams (impl.registry.SEAMS). The peer the layer replays time ours' one-launch norms against:

    PYTHONPATH=. python3 scripts/profile_replay.py --peer impl.candidates.norms_torch:Candidate
"""
from __future__ import annotations

import types

from impl import kda, mla, model

Candidate = types.SimpleNamespace(kda=types.SimpleNamespace(gated_rmsnorm=kda.gated_rmsnorm_torch),
                                  mla=types.SimpleNamespace(rmsnorm=mla.rmsnorm_torch),
                                  model=types.SimpleNamespace(rmsnorm=model.rmsnorm_torch))
