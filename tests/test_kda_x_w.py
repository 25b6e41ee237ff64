"""X handed from the off-diagonal kernel to the W / U kernel in the W / U dots' operand dtype (issue 14 step 34,
SplitTiles(x_w=True), ours since; impl.candidates.kda_x_w): the W / U kernel rounded the float32 X to that dtype on
load, so rounding it where it is stored must give the bits of the float32 hand-over (x_w=False) on every input: on
the CPU (float32, where only the stores move) over dense rows with a given state, partial chunks, a 7-token
document, packed documents with an empty one, strong decays (the exact pairs pass; the GPU test covers them packed)
and chunked_ex, with torch.empty's blocks NaN-filled so that a block read but never written shows; on the GPU in
bf16 (where X is stored as bf16) at full head dims, the bounded gate's extreme and strong decays included."""
from __future__ import annotations

import pytest
import torch

from impl import kda as ik
from impl.candidates import kda_x_w as cand
from tests.test_kda_intra_blocked import _inputs

_X_W = ik.SplitTiles(x_w=True)
_BEFORE = ik.SplitTiles(x_w=False)
CU = torch.tensor([0, 7, 7, 90, 150])


def _same(a, b):
    return all((x is None and y is None) or torch.equal(x, y) for x, y in zip(a, b))


@pytest.fixture
def nan_empty(monkeypatch):
    """Every torch.empty filled with NaN while the test runs (impl.kda allocates aqk, X and Γ with it; the CPU
    allocator often hands back zeroed pages, which would hide a read of a block nobody wrote)."""
    real = torch.empty

    def empty(*args, **kwargs):
        t = real(*args, **kwargs)
        if t.is_floating_point():
            t.fill_(float("nan"))
        return t
    monkeypatch.setattr(ik.torch, "empty", empty)


@pytest.mark.parametrize("T,lo,cu", [(150, -1.0, None), (64, -5.0, None), (7, -1.0, None), (150, -1.0, CU),
                                     (100, -20.0, None)])
def test_on_the_cpu_the_same_bits_as_before(nan_empty, T, lo, cu):
    _, work = _inputs(1 if cu is not None or lo < -10 else 2, T, 2, 32, 16, lo=lo, seed=3, state=cu is None)
    args = (*work[:5], work[5], 64, cu, True)
    before = ik._chunked(*args, split=_BEFORE)
    assert all(bool(torch.isfinite(a).all()) for a in before if a is not None)
    assert _same(ik._chunked(*args, split=_X_W), before)
    assert _same(cand.chunked_ex(*args)[:3], ik._chunked(*args, split=_BEFORE, sync=False)[:3])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("lo", [-0.1, -5.0, -20.0])
def test_on_the_gpu_in_bf16_the_same_bits_as_before(lo):
    assert_gpu_same_bits(_X_W, _BEFORE, lo)


def assert_gpu_same_bits(new, before, lo):
    """ik._chunked with SplitTiles `new` gives `before`'s bits in bf16 on the GPU: dense rows with a state,
    two rows, and packed documents with an empty one, at full head dims and decays of `lo` a token."""
    for B, T, H, cu in ((1, 1000, 4, None), (2, 300, 2, None), (1, 300, 3, CU.tolist() + [300])):
        _, work = _inputs(B, T, H, 128, 128, lo=lo, device="cuda", dtype=torch.bfloat16, state=cu is None)
        cu_t = None if cu is None else torch.tensor(cu, device="cuda")
        args = (*work[:5], work[5], 64, cu_t, True)
        assert _same(ik._chunked(*args, split=new), ik._chunked(*args, split=before)), (B, T, H, lo)
