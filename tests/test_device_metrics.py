"""invariants/device_metrics.py (full-geometry comparisons measured where the arrays live) gives the
verdict compare.py's NumPy path gives: the same metrics, the same bitwise verdict and first difference.
Run here on the CPU device (the code path is the same torch code a CUDA tensor takes)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from invariants import compare, device_metrics

CPU = torch.device("cpu")


def _pair(seed: int, shape=(3, 50, 4)):
    rng = np.random.default_rng(seed)
    r = rng.standard_normal(shape)
    c = r + 1e-3 * rng.standard_normal(shape)
    r[0, 0, 0], c[0, 0, 0] = 0.0, 0.0                     # an exact zero of r where c agrees
    r[1, 2, 3] = 0.0                                      # ... and one where c does not (max_rel inf)
    c[2, 7, 1] = np.nan                                   # a non-finite mismatch
    r[2, 9, 0] = c[2, 9, 0] = -np.inf                     # non-finite on both sides: not a mismatch
    return c, r


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("nan", [True, False])
def test_device_metrics_equal_the_numpy_metrics(seed, nan):
    c, r = _pair(seed)
    if not nan:
        c[2, 7, 1] = r[2, 7, 1]
    want = compare.metrics(c, r)
    got = device_metrics.metrics(torch.tensor(c, dtype=torch.float32).double(), r, CPU)
    want32 = compare.metrics(torch.tensor(c, dtype=torch.float32), r)
    assert got.worst_index == want32.worst_index and got.nonfinite_mismatch == want.nonfinite_mismatch
    for name in compare.METRICS + ("cosine", "worst_candidate", "worst_reference"):
        a, b = getattr(got, name), getattr(want32, name)
        assert a == pytest.approx(b, rel=1e-12, abs=1e-300, nan_ok=True) or (np.isinf(a) and np.isinf(b)), name


def test_device_bitwise_and_first_difference_agree_with_numpy():
    c, r = _pair(2)
    assert device_metrics.bitwise_equal(c.copy(), c, CPU) and compare.bitwise_equal(c.copy(), c)
    assert not device_metrics.bitwise_equal(c, r, CPU)
    assert device_metrics.first_difference(torch.tensor(c), r, CPU) == compare.first_difference(c, r)
    axes = ("batch", "token", "head")
    assert device_metrics.first_difference(torch.tensor(c), r, CPU, axes) == compare.first_difference(c, r, axes)
    assert device_metrics.first_difference(torch.tensor(c), c, CPU) is None
    assert device_metrics.differ(c, r[:1], CPU) is None


def test_only_large_cuda_tensors_take_the_device_path():
    assert device_metrics.device_of(np.zeros(device_metrics.DEVICE_MIN), torch.zeros(4)) is None
    assert device_metrics.device_of(torch.zeros(device_metrics.DEVICE_MIN)) is None          # on the CPU
