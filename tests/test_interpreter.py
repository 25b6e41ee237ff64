"""impl/interpreter.py: the interpreter's patch cache changes how fast kernels run on the CPU, never what
they compute.

Every mechanism record's first pinned example runs its candidate (the Triton kernels, interpreted) twice,
with the cache and with the interpreter's own patching, and every candidate array must be bitwise equal
(NaN positions included). The whole-model and serving records compose the same kernels.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import impl
from impl import interpreter, registry
from invariants.matrix import CHECKS
from invariants.target import Target

pytestmark = pytest.mark.skipif(not impl.interpreted(), reason="the cache only exists under the interpreter")

# kda.scale and kda.device_report launch kda.chunked's kernels on larger cases (10 s and 7 s of CI here): the
# cache's bits are a property of the kernels, which kda.chunked's record runs already
KERNEL_RECORDS = [c for c in CHECKS if c.mechanism not in ("model", "serving") and c.examples
                  and c.name not in ("kda.scale", "kda.device_report")]


def _arrays(comparisons) -> list[np.ndarray]:
    out = []
    for cmp in comparisons:
        x = cmp.candidate
        out.append(x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x))
    return out


def _candidate(check, case) -> list[np.ndarray]:
    cand = Target(registry.get("triton"), "cpu", torch.float32)
    base = Target(registry.get("torch"), "cpu", torch.float32)
    return _arrays(check.run(case, cand, base))


def _uncached(check, case) -> list[np.ndarray]:
    interpreter.uninstall()
    try:
        return _candidate(check, case)
    finally:
        assert interpreter.install()


def test_the_cache_is_installed_on_this_triton_and_skips_repeated_patching():
    """If a triton upgrade renames the interpreter's internals, this fails: the suite would still be
    right, only about twice as slow on the CPU; update impl/interpreter.py or drop it."""
    assert interpreter.available() and interpreter.install()
    before = interpreter.counts()
    mhc = next(c for c in KERNEL_RECORDS if c.name == "mhc.coefficients")
    _candidate(mhc, mhc.examples[0])
    after = interpreter.counts()
    assert after["skipped_calls"] > before["skipped_calls"], "no repeated patch was skipped"
    assert after["real_calls"] > before["real_calls"], "a launch must still patch for real"


@pytest.mark.parametrize("check", KERNEL_RECORDS, ids=lambda c: c.name)
def test_kernels_compute_bitwise_the_same_with_and_without_the_cache(check):
    for i, case in enumerate(check.examples[:1]):
        cached, plain = _candidate(check, case), _uncached(check, case)
        assert len(cached) == len(plain)
        for j, (a, b) in enumerate(zip(cached, plain)):
            assert a.shape == b.shape and a.dtype == b.dtype, f"example {i} comparison {j}"
            assert np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"), (
                f"{check.name} example {i} comparison {j}: the cache changed what the kernels compute")


def test_without_the_private_names_install_changes_nothing(monkeypatch):
    import triton.runtime.interpreter as ti

    monkeypatch.delattr(ti, "_patch_lang")
    assert not interpreter.available()
