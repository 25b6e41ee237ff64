"""Our MoE experts with the split NVFP4 tiles dequantized by the fp16 product (issue 14 step 1), never by the
two-codes-per-instruction inline PTX (step 11, impl.moe.NVFP4_PAIRS).

The peer that step 11's default (PAIRS wherever it can run: bf16 dots on a CUDA GPU) is gated against:

    python3 -m gate.cli gate --device cuda --candidate triton \\
        --baseline impl.candidates.nvfp4_fp16_split:Candidate --check nvfp4.gate --check nvfp4.batch \\
        --check moe.forward
"""
from __future__ import annotations

import types

from impl import moe as _moe


class MoE:
    """The moe namespace: `experts` only (impl.moe.experts' signature)."""

    @staticmethod
    def experts(w, x, routing, nvfp4=None, w4a4=False):
        """impl.moe.experts with the split tiles' fp16 dequantization."""
        return _moe.experts_with(w, x, routing, nvfp4, w4a4, pairs=False)


Candidate = types.SimpleNamespace(moe=MoE)
