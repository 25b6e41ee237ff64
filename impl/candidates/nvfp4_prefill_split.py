"""Issue 14 step 20's candidate: the NVFP4 W4A16 experts' split weight tiles (two codes per 32-bit
instruction on a GPU, PAIRS) at PREFILL too. Ours takes split tiles only for 16-row decode blocks
(impl.moe.split_tiles: BM <= 16) and the interleaved form for the 128-row prefill tiles; step 11's sweep
measured split + PAIRS prefill tiles 1.064x the interleaved ones at N = 4096 (H200), never gated
(no check drew more than 16 pairs an expert: nvfp4.gate and moe.forward have CUDA pins of 160 tokens
for that now). NOT yet gated on a GPU (docs/optimization_log.md step 20).

    python3 -m gate.cli gate --device cuda --candidate impl.candidates.nvfp4_prefill_split:Candidate \\
        --baseline triton --check nvfp4.gate --check moe.forward --profile gpu

The same quantities at a different rounding of nothing: the split form dequantizes the same e2m1 codes
and fp8 scales exactly (tests/test_nvfp4_split.py), so the W4A16 outputs differ from ours only in the
dots' summation order. W4A4 and dense weights run ours unchanged.
"""
from __future__ import annotations

import types

from impl import moe as _moe


class MoE:
    """The moe namespace: `experts` only (impl.moe.experts' signature)."""

    @staticmethod
    def experts(w, x, routing, nvfp4=None, w4a4=False):
        """impl.moe.experts with split NVFP4 weight tiles at every size (W4A16; W4A4 keeps ours)."""
        return _moe.experts_with(w, x, routing, nvfp4, w4a4, split=None if w4a4 else True)


Candidate = types.SimpleNamespace(moe=MoE)
