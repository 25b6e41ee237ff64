"""Our dense MLP with gate_proj and up_proj concatenated on every call (before issue 14 step 4).

The peer that step 4 (impl.moe.gate_up: a view of the fused halves, no copy) is timed beside:

    PYTHONPATH=. python3 scripts/profile_replay.py --peer impl.candidates.gate_up_copy:Candidate

Every output is bitwise ours (the kernel reads the same values); only the per-call copy of both halves
(a [2F, D] torch.cat: 97 us and 192 MiB a decode step at the full geometry's dense MLP) comes back.
"""
from __future__ import annotations

import types

import torch

from impl.candidates import moe_namespace


MOE = moe_namespace(__name__, gate_up_fn=lambda w: torch.cat([w.gate_proj, w.up_proj]))
Candidate = types.SimpleNamespace(moe=MOE)
