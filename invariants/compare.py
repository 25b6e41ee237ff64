"""Metrics between a candidate and a reference array (TESTING.md: report several, gate on one).

Letters: any shape; both arrays are brought to float64 NumPy first.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np


class Metrics(NamedTuple):
    rel_l2: float            # ||c - r|| / ||r|| over the finite entries of r
    max_abs_scaled: float    # max |c - r| / max |r|
    cosine: float
    worst_index: Optional[tuple]
    worst_candidate: float
    worst_reference: float
    nonfinite_mismatch: int  # entries finite in one and not in the other

    def get(self, metric: str) -> float:
        if self.nonfinite_mismatch:
            return float("inf")
        if metric not in ("rel_l2", "max_abs_scaled"):
            raise ValueError(f"metric: expected rel_l2 or max_abs_scaled, got {metric!r}")
        return getattr(self, metric)


def to_numpy(x) -> np.ndarray:
    """float64 NumPy from NumPy or torch (any device, any dtype)."""
    if hasattr(x, "detach"):
        x = x.detach().float().cpu().numpy() if x.dtype.is_floating_point else x.detach().cpu().numpy()
    return np.asarray(x, dtype=np.float64)


def metrics(candidate, reference) -> Metrics:
    c, r = to_numpy(candidate), to_numpy(reference)
    if c.shape != r.shape:
        raise ValueError(f"shape mismatch: candidate {c.shape} vs reference {r.shape}")
    fc, fr = np.isfinite(c), np.isfinite(r)
    mismatch = int(np.count_nonzero(fc != fr))
    both = fc & fr
    d = np.where(both, c - r, 0.0)
    rr = np.where(both, r, 0.0)
    cc = np.where(both, c, 0.0)
    nr, nd = np.linalg.norm(rr), np.linalg.norm(d)
    rel = nd / nr if nr > 0 else nd
    ref_max = np.abs(rr).max(initial=0.0)
    mas = np.abs(d).max(initial=0.0) / ref_max if ref_max > 0 else np.abs(d).max(initial=0.0)
    nc = np.linalg.norm(cc)
    cos = float(np.sum(cc * rr) / (nc * nr)) if nc > 0 and nr > 0 else float(nc == nr)
    if mismatch:
        idx = tuple(int(i) for i in np.argwhere(fc != fr)[0])
    elif d.size:
        idx = tuple(int(i) for i in np.unravel_index(np.argmax(np.abs(d)), d.shape))
    else:
        idx = None
    wc = float(c[idx]) if idx is not None else 0.0
    wr = float(r[idx]) if idx is not None else 0.0
    return Metrics(float(rel), float(mas), cos, idx, wc, wr, mismatch)


def bitwise_equal(a, b) -> bool:
    a, b = to_numpy(a), to_numpy(b)
    return a.shape == b.shape and np.array_equal(a, b, equal_nan=True)
