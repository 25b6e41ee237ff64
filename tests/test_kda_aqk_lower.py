"""aqk's blocks right of the diagonal neither stored by the off-diagonal kernel nor read by the state pass (issue 14
step 35, SplitTiles(aqk_lower=True), ours since; impl.candidates.kda_aqk_lower): they are zeros, and the state
pass's masked load gives the same zeros, so the bits of the whole rows (aqk_lower=False) on every input. aqk comes
from torch.empty: a block the state pass did read unwritten would carry whatever the allocator left there, so the
CPU runs fill every torch.empty with NaN first (a read of an unwritten block turns the output NaN, never
silently equal). On the CPU (float32): dense rows with a given state, partial chunks, a 7-token document, packed
documents with an empty one, strong decays (the exact pairs pass; the GPU test covers them packed), a row cut into
segments (the two-level scan) and chunked_ex; on the GPU in bf16 at full head dims."""
from __future__ import annotations

import pytest
import torch

from impl import kda as ik
from impl.candidates import kda_aqk_lower as cand
from tests.test_kda_intra_blocked import _inputs
from tests.test_kda_x_w import CU, _same, assert_gpu_same_bits
from tests.test_kda_x_w import nan_empty  # noqa: F401 (a fixture)

_LOWER = ik.SplitTiles(aqk_lower=True)
_BEFORE = ik.SplitTiles(aqk_lower=False)


@pytest.mark.parametrize("T,lo,cu,nseg", [(150, -1.0, None, None), (64, -5.0, None, None), (7, -1.0, None, None),
                                          (150, -1.0, CU, None), (100, -20.0, None, None),
                                          (200, -1.0, None, 2)])
def test_on_the_cpu_the_same_bits_as_before(nan_empty, T, lo, cu, nseg):
    _, work = _inputs(1 if cu is not None or lo < -10 else 2, T, 2, 32, 16, lo=lo, seed=4, state=cu is None)
    args = (*work[:5], work[5], 64, cu, True)
    before = ik._chunked(*args, split=_BEFORE, nseg=nseg)
    assert all(bool(torch.isfinite(a).all()) for a in before if a is not None)
    assert _same(ik._chunked(*args, split=_LOWER, nseg=nseg), before)
    assert _same(cand.chunked_ex(*args)[:3], ik._chunked(*args, split=_BEFORE, sync=False)[:3])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("lo", [-0.1, -5.0, -20.0])
def test_on_the_gpu_in_bf16_the_same_bits_as_before(lo):
    assert_gpu_same_bits(_LOWER, _BEFORE, lo)
