"""Issue 14 step 54 (impl.candidates.mla_q_strides): the sparse kernels read q_abs through its row and head strides
instead of a contiguous copy. The same values into the same registers, so the same bits as ours before it (which
copies) on every input: the W_UK fold's layout ([H, B·S, R] memory seen as [B, S, H, R]) at one and several queries
a row, one and several selection splits, a contiguous and a paged cache; on the CPU in float32 (the Triton kernel
under the interpreter) and on the GPU in bf16 (the Triton kernel below 7 query rows, the producer kernel from 7 on)."""
from __future__ import annotations

import pytest
import torch

from impl.candidates.mla_heads64 import module_copy
from impl.candidates.mla_q_strides import mla as cand
from tests.test_mla_prefetch import _paged

# ours before step 54 (the contiguous copy), whether or not it has landed
im = module_copy(f"{__name__}.before", Q_STRIDES=False, OUT_UV=False)


def _folded(B, S, H, R, N=16, device="cpu", dtype=torch.float32, seed=0):
    """q_abs as attend makes it: the einsum of q [B, S, H, N] with W_UK [H, N, R] (strided: heads outermost)."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, S, H, N, generator=gen).to(device, dtype)
    w_uk = (torch.randn(H, N, R, generator=gen) * N ** -0.5).to(device, dtype)
    return torch.einsum("bshn,hnr->bshr", q, w_uk)


def _case(B, S, T, W, H, R, device="cpu", dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed + 1)
    lat = torch.randn(B, T, R, generator=gen).to(device, dtype)
    idx = torch.randint(-1, T + 5, (B, S, W), generator=gen).to(device)
    lengths = torch.tensor([T - 40 * b for b in range(B)], device=device)
    return _folded(B, S, H, R, device=device, dtype=dtype, seed=seed), lat, idx, lengths


def _paged_on(lat, P):
    """tests/test_mla_prefetch.py's page pool and block table for `lat` (built on the CPU), on lat's device."""
    pool, table = _paged(lat.cpu(), P)
    return pool.to(lat.device), table.to(lat.device)


def test_the_fold_is_strided_and_read_where_it_is():
    q = _folded(2, 3, 4, 32)
    assert not q.is_contiguous()                       # else this file would test nothing
    got, row, head = cand._q_operand(q)
    assert got.data_ptr() == q.data_ptr() and (row, head) == (q.stride(1), q.stride(2))
    one = _folded(3, 1, 4, 32)
    assert cand._q_operand(one)[1:] == (one.stride(0), one.stride(2))
    # ours before it copies
    assert im._q_operand(q)[0].is_contiguous() and im._q_operand(q)[1:] == (4 * 32, 32)


@pytest.mark.parametrize("make", ["float64", "rank_strided", "rows_unequal"])
def test_what_cannot_be_read_where_it_is_is_copied(make):
    q = _folded(2, 3, 4, 32)
    if make == "float64":
        q = q.double()
    elif make == "rank_strided":
        q = torch.randn(2, 3, 4, 64)[..., ::2]
    else:
        q = torch.randn(2, 4, 4, 32)[:, :3]            # a batch stride of 4 rows over S = 3: rows not equally spaced
        assert q.stride(0) != q.shape[1] * q.stride(1)
    got, row, head = cand._q_operand(q)
    assert got.is_contiguous() and got.dtype == torch.float32 and (row, head) == (4 * 32, 32)


@pytest.mark.parametrize("S,splits", [(1, None), (1, 3), (3, None), (3, 1)])
@pytest.mark.parametrize("paged", [False, True])
def test_on_the_cpu_the_same_bits_as_ours(S, splits, paged):
    q, lat, idx, lengths = _case(2, S, 300, 70, 3, 32)
    kw = {}
    if paged:
        lat, table = _paged_on(lat, 16)
        kw = dict(block_table=table, page_size=16)
    ours = im.sparse_absorbed(q, lat, idx, lengths, 0.3, splits, **kw)
    assert bool(torch.isfinite(ours).all()) and bool(ours.abs().sum() > 0)
    assert torch.equal(cand.sparse_absorbed(q, lat, idx, lengths, 0.3, splits, **kw), ours)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("B,S", [(2, 1), (1, 3), (32, 1), (128, 1), (4, 4)])
@pytest.mark.parametrize("paged", [False, True])
def test_on_the_gpu_in_bf16_the_same_bits_as_ours(B, S, paged):
    q, lat, idx, lengths = _case(B, S, 4096, 2051, 64, 512, device="cuda", dtype=torch.bfloat16, seed=B)
    kw = {}
    if paged:
        lat, table = _paged_on(lat, 64)
        kw = dict(block_table=table, page_size=64)
    assert cand._q_operand(q)[0].data_ptr() == q.data_ptr()
    ours = im.sparse_absorbed(q, lat, idx, lengths, 0.0625, **kw)
    assert bool(torch.isfinite(ours).all())
    assert torch.equal(cand.sparse_absorbed(q, lat, idx, lengths, 0.0625, **kw), ours)
