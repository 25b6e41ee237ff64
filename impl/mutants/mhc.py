"""mHC mutants: each a TorchMHC (impl/baseline/mhc.py) overriding ONE small method."""
from __future__ import annotations

from impl.baseline.mhc import COLS, ROWS, TorchMHC
from impl.mutants.catalogue import mutant


@mutant("mhc.write_back", "output")
class MhcCombNotTransposed(TorchMHC):
    """write_back mixes the streams with C instead of Cᵀ: output stream n takes row n of C, not column n."""

    def _comb_for_write_back(self, comb):
        return comb


@mutant("mhc.coefficients", "comb")
class MhcRowFirstSinkhorn(TorchMHC):
    """Sinkhorn starts with a row normalization: row, then (iters-1) x (column, row), ending on rows."""

    def _sinkhorn_step_order(self, iters):
        return (ROWS,) + (COLS, ROWS) * (iters - 1)


@mutant("mhc.coefficients", "pre")
class MhcPreNormalized(TorchMHC):
    """pre = sigmoid + hc_eps divided by its sum over the streams (a convex combination; SPEC: not normalized)."""

    def _pre(self, logits, eps):
        pre = super()._pre(logits, eps)
        return pre / pre.sum(dim=-1, keepdim=True)
