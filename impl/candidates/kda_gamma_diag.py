"""Issue 14 step 30's candidate: ours' KDA chunked prefill (the split intra pass, impl/kda.py) with no Γ launch:
the diagonal-block and off-diagonal kernels make Γ, the chunk-local cumsum of g, from g where they read it,
and Γ never reaches memory (`SplitTiles(diag_sub_first=True, diag_gamma=True)`).

Ours reads g and writes Γ in a launch of its own (float32 both: 1.07 GB at H = 64, T = 16K, ~370 us on an
H100), then the diagonal, off-diagonal and W / U kernels read Γ. Here:
- the diagonal kernel (one 16-row block a program) scans its chunk's g block by block and keeps its own
  block's Γ and Γ_last; its block-0 program stores e^Γ_last (the W / U kernel did);
- the off-diagonal kernel scans the same way where it loaded Γ;
- the W / U kernel reads no Γ;
- the diagonal kernel's grid puts a chunk's four blocks next to each other in the launch order, so the three
  re-reads of the chunk's g come from L2 (diag_sub_first).
Each block's scan starts from the previous block's last Γ added to its first g, so a sequential scan gives the
64-row scan's bits: on the CPU interpreter this candidate is ours bit for bit. On the GPU a scan's association
is its layout's, so the bits change by float32 rounding of Γ, and the contract is kda.chunked's and every
path's (docs/optimization_log.md step 30):

    python3 -m gate.cli gate --device cuda --candidate impl.candidates.kda_gamma_diag:Candidate --baseline triton \\
        --check kda.chunked --check kda.causal --check kda.paths --check kda.packed --check kda.batch \\
        --check kda.sublayer --check kda.rerun --check kda.device_report --check model.paths

Refuted on the H100 (docs/optimization_log.md step 30): the gate passed, but the scans cost more than the launch
they replace. At H = 64, T = 16K the diagonal kernel took 2267 us against 1074 and the off-diagonal one 1067
against 715; the pass took 4.46 ms against ours' 3.30. Kept so the measurement can be replayed
(scripts/kda_prefill_variants.py's gamma_ex).

Batch invariance: claimed, as ours (fixed tiles, per-(chunk, head) arithmetic). gated_chunked (the gate made
in the same scans, GATE 1 / 2) is the split pass's: tests/test_kda_gamma_diag.py holds it; ours' sublayer
makes g in torch, so this namespace has no gated_chunked, as ours.
"""
from __future__ import annotations

import types

from impl import kda as _kda

BATCH_INVARIANT = ("chunked",)
# as measured in step 30 (before step 31's flushed exps)
TILES = _kda.SplitTiles(diag_sub_first=True, diag_gamma=True, diag_ftz=False, diag_nan_last=False, off_ftz=False, x_w=False, aqk_lower=False)


def chunked(q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
    """impl.kda.chunked with Γ made by the intra kernels that read it (no Γ launch)."""
    return _kda._chunked(q, k, v, g, beta, state, chunk, cu_seqlens, boundary_states, split=TILES)


def chunked_ex(q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
    """impl.kda.chunked_ex (no host read; the NaN report on the device) on the same tiles."""
    return _kda._chunked(q, k, v, g, beta, state, chunk, cu_seqlens, boundary_states, split=TILES, sync=False)


def gated_chunked(q, k, v, f, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True, *,
                  A_log, dt_bias=None, lower_bound=None):
    """chunked(q, k, v, gate(f + dt_bias, A_log, lower_bound), beta, ...) with the gate inside the same scans (not
    in the namespace: the tests' handle on the GATE 1 / 2 path of the kernels)."""
    return _kda._chunked(q, k, v, f, beta, state, chunk, cu_seqlens, boundary_states,
                         gate=(A_log, dt_bias, lower_bound), split=TILES)


Candidate = types.SimpleNamespace(kda=types.SimpleNamespace(chunked=chunked, chunked_ex=chunked_ex,
                                                            BATCH_INVARIANT=BATCH_INVARIANT))
