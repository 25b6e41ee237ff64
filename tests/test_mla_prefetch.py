"""The sparse absorbed MLA kernel's next block's selection entries loaded a block ahead (issue 14 step 38, ours;
config prefetch=False is the kernel before it): the same loads and the same arithmetic, so the same bits on every
input: on the CPU (float32) over one and several selection splits, -1 and out-of-row entries, a short row, a
contiguous and a paged cache; on the GPU in bf16 at the full geometry's rank and selection width."""
from __future__ import annotations

import pytest
import torch

from impl import mla as im


def _case(B, T, W, H, R, device="cpu", dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, 1, H, R, generator=gen).to(device, dtype)
    lat = torch.randn(B, T, R, generator=gen).to(device, dtype)
    idx = torch.randint(-1, T + 5, (B, 1, W), generator=gen).to(device)
    lengths = torch.tensor([T - 40 * b for b in range(B)], device=device)
    return q, lat, idx, lengths


def _paged(lat, P, seed=1):
    """(the page pool, the block table) holding `lat`'s rows in shuffled pages of P."""
    B, T, R = lat.shape
    M = -(-T // P)
    table = torch.randperm(B * M, generator=torch.Generator().manual_seed(seed)).reshape(B, M)
    pool = torch.zeros(B * M, P, R, dtype=lat.dtype)
    for b in range(B):
        for m in range(M):
            rows = lat[b, m * P:(m + 1) * P]
            pool[table[b, m], :rows.shape[0]] = rows
    return pool, table


@pytest.mark.parametrize("splits", [None, 1, 3])
@pytest.mark.parametrize("paged", [False, True])
def test_on_the_cpu_the_same_bits_as_without_it(splits, paged):
    q, lat, idx, lengths = _case(2, 300, 70, 3, 32)
    kw = {}
    if paged:
        lat, table = _paged(lat, 16)
        kw = dict(block_table=table, page_size=16)
    before = im.sparse_absorbed(q, lat, idx, lengths, 0.3, splits, dict(prefetch=False), **kw)
    assert bool(torch.isfinite(before).all()) and bool(before.abs().sum() > 0)
    assert torch.equal(im.sparse_absorbed(q, lat, idx, lengths, 0.3, splits, **kw), before)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("B,splits", [(1, None), (32, None), (4, 1)])
def test_on_the_gpu_in_bf16_the_same_bits_as_without_it(B, splits):
    q, lat, idx, lengths = _case(B, 4096, 2051, 64, 512, device="cuda", dtype=torch.bfloat16, seed=B)
    before = im.sparse_absorbed(q, lat, idx, lengths, 0.0625, splits, dict(prefetch=False))
    assert torch.equal(im.sparse_absorbed(q, lat, idx, lengths, 0.0625, splits), before)
