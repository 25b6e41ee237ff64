"""invariants.compare's metrics for arrays too large to bring to the host: computed where they live.

At the full geometry a KDA output is 537M elements a row (T = 64K, H = 64, K = 128): the NumPy path would
copy it to the host in float64 (4.3 GB) and build ten temporaries of that size per comparison, minutes
per example. A comparison whose candidate or reference is a CUDA tensor of at least DEVICE_MIN elements
is measured on that device in float64 with the same formulas (compare.metrics), so the verdict is the
same up to the order of the float64 sums.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch

DEVICE_MIN = 1 << 22


def device_of(*arrays) -> Optional[torch.device]:
    """The CUDA device of the first large CUDA tensor among `arrays`, else None (the NumPy path)."""
    for a in arrays:
        if isinstance(a, torch.Tensor) and a.device.type == "cuda" and a.numel() >= DEVICE_MIN:
            return a.device
    return None


def _f64(a, device) -> torch.Tensor:
    t = a.detach() if isinstance(a, torch.Tensor) else torch.from_numpy(np.asarray(a))
    return t.to(device=device, dtype=torch.float64)


def _unravel(flat: int, shape) -> tuple:
    return tuple(int(i) for i in np.unravel_index(flat, tuple(shape))) if len(shape) else ()


def metrics(candidate, reference, device):
    """compare.Metrics of candidate vs reference, computed on `device` in float64."""
    from invariants.compare import Metrics

    c, r = _f64(candidate, device), _f64(reference, device)
    if c.shape != r.shape:
        raise ValueError(f"shape mismatch: candidate {tuple(c.shape)} vs reference {tuple(r.shape)}")
    fc, fr = torch.isfinite(c), torch.isfinite(r)
    bad = fc != fr
    mismatch = int(bad.sum())
    both = fc & fr
    zero = c.new_zeros(())
    d = torch.where(both, c - r, zero)
    rr = torch.where(both, r, zero)
    cc = torch.where(both, c, zero)
    nr, nd, nc = (float(torch.linalg.vector_norm(x)) for x in (rr, d, cc))
    rel = nd / nr if nr > 0 else nd
    ad, ar = d.abs(), rr.abs()
    ref_max = float(ar.max()) if ar.numel() else 0.0
    d_max = float(ad.max()) if ad.numel() else 0.0
    mas = d_max / ref_max if ref_max > 0 else d_max
    cos = float((cc * rr).sum()) / (nc * nr) if nc > 0 and nr > 0 else float(nc == nr)
    if mismatch:
        idx = _unravel(int(torch.argmax(bad.reshape(-1).to(torch.uint8))), c.shape)
    elif d.numel():
        idx = _unravel(int(torch.argmax(ad.reshape(-1))), c.shape)
    else:
        idx = None
    wc = float(c[idx]) if idx is not None else 0.0
    wr = float(r[idx]) if idx is not None else 0.0
    rms = nd / np.sqrt(max(int(both.sum()), 1))
    del c, r, fc, fr, both, cc
    per = torch.where(ad == 0, zero, ad / ar)             # ad / 0 = inf: a nonzero where r is exactly 0
    mixed = float((ad / (1.0 + ar)).max()) if ad.numel() else 0.0
    return Metrics(float(rel), float(mas), cos, idx, wc, wr, mismatch, float(rms), d_max / max(1.0, ref_max),
                   d_max, float(per.max()) if per.numel() else 0.0, mixed)


def _bits(a, device) -> torch.Tensor:
    t = a.detach() if isinstance(a, torch.Tensor) else torch.from_numpy(np.asarray(a))
    return t.to(device=device, dtype=torch.float64)


def differ(candidate, reference, device) -> Optional[torch.Tensor]:
    """The boolean tensor of elements that differ (NaN equal to NaN), or None when the shapes differ."""
    c, r = _bits(candidate, device), _bits(reference, device)
    if c.shape != r.shape:
        return None
    return ~((c == r) | (torch.isnan(c) & torch.isnan(r)))


def bitwise_equal(candidate, reference, device) -> bool:
    d = differ(candidate, reference, device)
    return d is not None and not bool(d.any())


def first_difference(candidate, reference, device, axes: tuple = ()) -> Optional[str]:
    """compare.first_difference's line for large device arrays (only the first differing element comes to
    the host); None when they do not differ or differ in shape (the NumPy path says so)."""
    d = differ(candidate, reference, device)
    if d is None or not bool(d.any()):
        return None
    idx = _unravel(int(torch.argmax(d.reshape(-1).to(torch.uint8))), d.shape)
    c, r = (float(_f64(a[idx] if isinstance(a, torch.Tensor) else np.asarray(a)[idx], device)) for a in
            (candidate, reference))
    from invariants.compare import check_axes, name_index
    check_axes(axes, tuple(d.shape))
    return (f"{int(d.sum())} of {d.numel()} elements differ; first at {name_index(idx, axes)}: candidate {c:.9g} "
            f"vs reference {r:.9g}")
