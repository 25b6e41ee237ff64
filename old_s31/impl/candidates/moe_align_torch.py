"""Our MoE with the host glue of before issue 14 step 8: the peer the one-launch glue is timed beside.

`impl.moe.align` sorts the (token, slot) pairs by expert in one program at decode (moe_align_fwd_kernel)
and `impl.moe.combine` sums the slots in one launch (moe_combine_fwd_kernel). Here both go back to
their torch forms: `impl.moe.align_torch` (~25 launches: counts, a stable argsort, cumulative sums, a
scatter, a searchsorted) and the slot loop (k - 1 adds in float32, then a conversion to x's dtype).
Every output is bitwise ours (the same integers, the same float32 sums in the same order):

    PYTHONPATH=. python3 scripts/profile_replay.py --peer impl.candidates.moe_align_torch:Candidate
    python3 -m gate.cli gate --candidate impl.candidates.moe_align_torch:Candidate --baseline triton --check moe.forward
"""
from __future__ import annotations

import types

from impl import moe as _moe
from impl.candidates import moe_namespace


def combine_loop(out, dtype):
    """Σ_slots out [N, k, D] in slot order by k - 1 torch adds, float32 (experts / dense_mlp convert)."""
    y = out[:, 0]
    for s in range(1, out.shape[1]):
        y = y + out[:, s]
    return y.to(dtype)


def grouped(x2, ids, wts, E, I, dense=None, nv=None, limit=10.0, w4a4=False, split=None):
    """impl.moe._grouped with the torch alignment and the slot loop."""
    return _moe._grouped(x2, ids, wts, E, I, dense, nv, limit, w4a4, split=split, align_fn=_moe.align_torch,
                         combine_fn=combine_loop)


MOE = moe_namespace(__name__, grouped=grouped)
Candidate = types.SimpleNamespace(moe=MOE)
