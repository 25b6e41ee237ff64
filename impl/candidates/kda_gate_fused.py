"""Issue 14 step 24: the KDA prefill from the gate's input. The Γ kernel of step 23 (kda_chunk_cumsum_fwd_kernel)
makes the log decays itself, g = -e^A_log · softplus(f + dt_bias) (or the lower-bound gate), from f as
its projection gives it (GATE), so the sublayer's four float32 passes over [T, H·K] (f's cast, the bias,
softplus, the scale) and g itself never reach memory. `gated_chunked` is the fast path impl.kda.sublayer
takes where a namespace has one (impl.registry.FAST_PATHS); `chunked` is step 23's (Γ first, on step 18's
winners), so every path that hands g over runs the same intra kernel (docs/optimization_log.md step 24):

    python3 -m gate.cli gate --device cuda --candidate impl.candidates.kda_gate_fused:Candidate \\
        --baseline triton --check kda.sublayer --check kda.chunked --check kda.packed --check kda.paths \\
        --check model.paths
"""
from __future__ import annotations

import types

from impl import kda as _kda
from impl.candidates.kda_intra_tuned import BATCH_INVARIANT, MAXNREG

OPTIONS = dict(intra="columns", inv_merge=False, intra_maxnreg=MAXNREG, g_cumsum=True)


def chunked(q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
    """impl.kda.chunked with Γ first (step 23) on step 18's winners."""
    return _kda._chunked(q, k, v, g, beta, state, chunk, cu_seqlens, boundary_states, **OPTIONS)


def gated_chunked(q, k, v, f, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True, *,
                  A_log, dt_bias=None, lower_bound=None):
    """chunked(q, k, v, gate(f + dt_bias, A_log, lower_bound), beta, ...) with the gate inside the Γ kernel.

    Args:
        f: [B, T, H, K] the gate's input before dt_bias (any float dtype: the kernel adds the bias in float32);
        A_log: [H];  dt_bias: [H·K] or None;  lower_bound: None (the softplus gate) or a float
    Returns:
        as chunked: o [B, T, H, V], final [N, H, K, V] float32, boundary states or None
    """
    return _kda._chunked(q, k, v, f, beta, state, chunk, cu_seqlens, boundary_states,
                         gate=(A_log, dt_bias, lower_bound), **OPTIONS)


Candidate = types.SimpleNamespace(kda=types.SimpleNamespace(chunked=chunked, gated_chunked=gated_chunked,
                                                            BATCH_INVARIANT=BATCH_INVARIANT))
