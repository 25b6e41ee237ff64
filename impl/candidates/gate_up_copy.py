"""Our dense MLP with gate_proj and up_proj concatenated on every call (before issue 14 step 4).

The peer that step 4 (impl.moe.gate_up: a view of the fused halves, no copy) is timed beside:

    PYTHONPATH=. python3 scripts/profile_replay.py --peer impl.candidates.gate_up_copy:Candidate

Every output is bitwise ours (the kernel reads the same values); only the per-call copy of both halves
(a [2F, D] torch.cat: 97 us and 192 MiB a decode step at the full geometry's dense MLP) comes back.
"""
from __future__ import annotations

import types

import torch

from impl import moe as _moe


def dense_mlp(w, x):
    """impl.moe.dense_mlp with the gate-then-up matrix concatenated on every call."""
    return _moe.dense_mlp_with(w, x, gate_up_fn=lambda w: torch.cat([w.gate_proj, w.up_proj]))


def shared_expert(w, x):
    """impl.moe.shared_expert through this dense_mlp."""
    return torch.zeros_like(x) if w.shared is None else dense_mlp(w.shared, x)


def forward(w, x, nvfp4=None, w4a4=False, *, ops=None):
    """impl.moe.forward whose shared expert concatenates."""
    return _moe.forward(w, x, nvfp4, w4a4, ops=MOE if ops is None else ops)


MOE = types.SimpleNamespace(**{k: getattr(_moe, k) for k in dir(_moe) if not k.startswith("__")})
MOE.dense_mlp, MOE.shared_expert, MOE.forward = dense_mlp, shared_expert, forward
Candidate = types.SimpleNamespace(moe=MOE)
