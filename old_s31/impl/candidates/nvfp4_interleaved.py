"""Our MoE experts with every NVFP4 weight tile in the interleaved form (before issue 14 step 1).

The peer that step 1's default (impl.moe.split_tiles: split tiles at decode, interleaved at prefill and
for W4A4) is gated against, and the form to compare any later tile change with:

    python3 -m gate.cli gate --device cuda --candidate triton \\
        --baseline impl.candidates.nvfp4_interleaved:Candidate --check nvfp4.gate --check nvfp4.batch
"""
from __future__ import annotations

import types

from impl import moe as _moe


class MoE:
    """The moe namespace: `experts` only (impl.moe.experts' signature)."""

    @staticmethod
    def experts(w, x, routing, nvfp4=None, w4a4=False):
        """impl.moe.experts with interleaved NVFP4 weight tiles."""
        return _moe.experts_with(w, x, routing, nvfp4, w4a4, split=False)


Candidate = types.SimpleNamespace(moe=MoE)
