"""Issue 14 step 1 (docs/optimization_log.md): our MoE experts with the NVFP4 weight tiles in the split form.

The low nibbles (even k) and the high nibbles (odd k) of each weight byte are dequantized as two
[BN, BK/2] tiles, with no re-interleave into K order, each dotted with the matching strided half of
the activation tile; e2m1 · 2^-14 is multiplied by the fp8 block scale in fp16 (exact) and converted
once to the dot dtype, the 2^14 joining the global decode scale in the epilogue (impl/kernels/moe.py
`_nvfp4_halves`, SPLIT). Everything else is our Triton implementation: routing, the shared expert and
the layer's forward (which calls this `experts`); dense (bf16 / float32) experts run unchanged.

    python3 -m gate.cli gate --candidate impl.candidates.nvfp4_split:Candidate --baseline triton \\
        --check nvfp4.gate --check nvfp4.batch --check moe.forward --check moe.batch --check moe.rerun

Only nvfp4.gate (W4A16 and W4A4, linear and swizzled scales) and nvfp4.batch (W4A4) hand `experts`
NVFP4 weights; the moe checks run its dense path, the same code as the peer's.
"""
from __future__ import annotations

import types

from impl import moe as _moe


class MoE:
    """The moe namespace: `experts` only (impl.moe.experts' signature)."""

    @staticmethod
    def experts(w, x, routing, nvfp4=None, w4a4=False):
        """impl.moe.experts with split NVFP4 weight tiles."""
        return _moe.experts_with(w, x, routing, nvfp4, w4a4, split=True)


Candidate = types.SimpleNamespace(moe=MoE)
