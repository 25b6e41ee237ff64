"""Issue 14 step 40's candidate (impl.candidates.mla_heads64, ours since stop 46): the sparse absorbed MLA kernel
with 64 heads a program, entry blocks of 32 and selection splits for one wave of the SMs from 16 query rows on.

- The candidate is impl.mla loaded as its own module: ours' launch is untouched by it.
- Its launch: ours' below 16 query rows and on the interpreter; from 16 rows on 64 heads and as many splits as
  keep the programs within one wave (checked with a stand-in for a 132-SM GPU, the H100's and H200's count).
- The kernel at 64 heads a program (more heads than the tile is masked) against a float64 reference, on the CPU
  over splits and a paged cache, and on the GPU in bf16 at the released geometry's rank and selection width.
- Step 41's candidate (impl.candidates.mla_heads64_small): the same launch from 8 query rows on.
"""
from __future__ import annotations

import pytest
import torch

from impl import mla as im
from impl.candidates import mla_heads64 as cand
from impl.candidates import mla_heads64_small as small

HEADS64 = dict(bh=64, bw=32, num_warps=8, num_stages=3)


def _reference(q, lat, idx, lengths, scale):
    """float64 Σ_t softmax(q·c_t · scale) c_t over each row's valid entries (0 with none)."""
    B, S, H, R = q.shape
    out = torch.zeros(B, S, H, R, dtype=torch.float64)
    q, lat = q.double().cpu(), lat.double().cpu()
    for b in range(B):
        for s in range(S):
            sel = idx[b, s].cpu()
            sel = sel[(sel >= 0) & (sel < int(lengths[b]))]
            if len(sel):
                c = lat[b, sel]                                                   # [n, R]
                out[b, s] = torch.softmax(q[b, s] @ c.T * scale, -1) @ c
    return out


def _case(B, S, T, W, H, R, device="cpu", dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, S, H, R, generator=gen).to(device, dtype)
    lat = torch.randn(B, T, R, generator=gen).to(device, dtype)
    # distinct positions per row (a selection is a set), some -1 and some past the row's length
    idx = torch.stack([torch.stack([torch.randperm(T + 5, generator=gen)[:W] - 1 for _ in range(S)])
                       for _ in range(B)]).to(device)
    lengths = torch.tensor([T - 7 * b for b in range(B)], device=device)
    return q, lat, idx, lengths


def _rel(a, b):
    return float((a.double().cpu() - b).norm() / b.norm())


def test_the_candidate_is_its_own_module_and_leaves_ours_alone():
    assert cand.mla is not im
    assert cand.mla.attend.__globals__["_launch_config"] is cand.mla._launch_config
    assert cand.mla._launch_config.__globals__ is vars(cand.mla)
    assert im.attend.__globals__["_launch_config"] is im._launch_config
    assert cand.mla._SELF is cand.mla and cand.mla.ROWS_64 == 16


def test_its_launch_from_16_query_rows_on_a_132_sm_gpu(monkeypatch):
    # a stand-in for a GPU of 132 SMs (the H100's and the H200's count): the rule, not a device
    for mod in (cand.mla, im):
        monkeypatch.setattr(mod, "interpreted", lambda: False)
        monkeypatch.setattr(mod, "num_sms", lambda device: 132)
    gpu = torch.device("cuda")
    assert cand.mla._launch_config(16, 512) == HEADS64
    for rows in (1, 6):
        assert cand.mla._launch_config(rows, 512) == im._launch_config(rows, 512)
    assert cand.mla._launch_config(15, 512) == im._launch_config(6, 512)
    # 2051 entries in blocks of 32, one head block: programs within one wave of 132
    for rows, splits in ((16, 8), (32, 4), (33, 4), (44, 3), (64, 2), (66, 2), (67, 1), (128, 1), (4096, 1)):
        assert cand.mla._splits(gpu, rows, rows, 2051, 32) == splits, rows
        assert rows * splits <= 132 or splits == 1
    # never a split of fewer than 2 blocks: 100 entries are 1 split at 16 rows, not 8
    assert cand.mla._splits(gpu, 16, 16, 100, 32) == 1
    assert cand.mla._splits(gpu, 6, 24, 2051, 64) == im._splits(gpu, 6, 24, 2051, 64)
    # ours since step 40 from 16 rows on (below that steps 41 and 47 moved ours: the next tests)
    for rows in (1, 6, 16, 32, 100, 128, 4096):
        assert im._launch_config(rows, 512) == cand.mla._launch_config(rows, 512)
        programs = rows * -(-64 // im._launch_config(rows, 512)["bh"])
        bw = im._launch_config(rows, 512)["bw"]
        assert im._splits(gpu, rows, programs, 2051, bw) == cand.mla._splits(gpu, rows, programs, 2051, bw)
    assert cand.mla._launch_config(8, 512) != HEADS64 == im._launch_config(8, 512)


def test_step41s_candidate_takes_the_launch_down_to_8_rows(monkeypatch):
    # impl.candidates.mla_heads64_small: ours' module with ROWS_64 = 8 (132-SM stand-in as above); ours before step 47
    for mod in (small.mla, im):
        monkeypatch.setattr(mod, "interpreted", lambda: False)
        monkeypatch.setattr(mod, "num_sms", lambda device: 132)
    gpu = torch.device("cuda")
    for rows in (1, 2, 6):
        assert small.mla._launch_config(rows, 512) == im._launch_config(rows, 512) != HEADS64
        assert small.mla._splits(gpu, rows, 4 * rows, 2051, 64) == im._splits(gpu, rows, 4 * rows, 2051, 64)
    for rows, splits in ((8, 16), (12, 11), (15, 8), (16, 8), (128, 1)):
        assert small.mla._launch_config(rows, 512) == HEADS64
        assert small.mla._splits(gpu, rows, rows, 2051, 32) == splits, rows
    # ours since step 47: the same launch at every row count but 7 (the next test)
    assert im.ROWS_64 == 7
    for rows in (1, 6, 8, 12, 15, 16, 32, 100, 128, 4096):
        assert im._launch_config(rows, 512) == small.mla._launch_config(rows, 512)
        programs = rows * -(-64 // im._launch_config(rows, 512)["bh"])
        bw = im._launch_config(rows, 512)["bw"]
        assert im._splits(gpu, rows, programs, 2051, bw) == small.mla._splits(gpu, rows, programs, 2051, bw)


def test_step47s_candidate_takes_the_launch_down_to_7_rows_only(monkeypatch):
    # impl.candidates.mla_rows64_7: ours since step 47 (ROWS_64 = 7; 132-SM stand-in as above) against ours before it
    # (impl.candidates.mla_heads64_small, ROWS_64 = 8): at and below 6 query rows (mla.batch's drawn batches reach 6)
    # the launch and split count must stay as they were, so a row's bits there stay ours'
    from impl.candidates import mla_rows64_7 as r7
    for mod in (r7.mla, small.mla, im):
        monkeypatch.setattr(mod, "interpreted", lambda: False)
        monkeypatch.setattr(mod, "num_sms", lambda device: 132)
    gpu = torch.device("cuda")
    assert r7.mla.ROWS_64 == 7 and r7.mla is not im
    for rows in range(1, 7):
        assert r7.mla._launch(gpu, rows, 64, 2051, 512) == small.mla._launch(gpu, rows, 64, 2051, 512) != HEADS64
    assert r7.mla._launch_config(7, 512) == HEADS64 != small.mla._launch_config(7, 512)
    assert r7.mla._launch(gpu, 7, 64, 2051, 512)["splits"] == 18     # 132 // 7 programs of 64 heads: one wave
    for rows in (8, 16, 128):
        assert r7.mla._launch(gpu, rows, 64, 2051, 512) == small.mla._launch(gpu, rows, 64, 2051, 512)
    for rows in (*range(1, 9), 16, 128):
        assert im._launch(gpu, rows, 64, 2051, 512) == r7.mla._launch(gpu, rows, 64, 2051, 512)


@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("paged", [False, True])
def test_on_the_cpu_64_heads_a_program_agree_with_the_reference(splits, paged):
    q, lat, idx, lengths = _case(2, 2, 200, 70, 3, 32)
    ref = _reference(q, lat, idx, lengths, 0.3)
    kw = {}
    if paged:
        from tests.test_mla_prefetch import _paged
        lat, table = _paged(lat, 16)
        kw = dict(block_table=table, page_size=16)
    got = im.sparse_absorbed(q, lat, idx, lengths, 0.3, splits, HEADS64, **kw)
    assert _rel(got, ref) < 1e-5


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("B,S,ns", [(16, 1, cand), (32, 1, cand), (128, 1, cand), (2, 8, cand), (8, 1, small),
                                    (12, 1, small), (1, 12, small), (2, 4, small)])
def test_on_the_gpu_in_bf16_the_candidate_agrees_with_the_reference(B, S, ns):
    from invariants.contracts import bench_bound
    q, lat, idx, lengths = _case(B, S, 4096, 2051, 64, 512, device="cuda", dtype=torch.bfloat16, seed=B)
    got = ns.mla.sparse_absorbed(q, lat, idx, lengths, 0.0625)
    ours = im.sparse_absorbed(q, lat, idx, lengths, 0.0625)
    rows = sorted({0, B - 1})
    ref = _reference(q[rows], lat[rows], idx[rows], lengths[rows], 0.0625)
    bound = bench_bound("mla", "absorbed", "output", "bfloat16")
    assert _rel(got[rows], ref) <= bound
    # no worse than ours by more than bf16's rounding of the same sums
    assert _rel(got[rows], ref) <= 2 * _rel(ours[rows], ref) + 1e-3


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_the_gpu_the_paged_cache_gives_the_contiguous_bits():
    flat, paged = flat_and_paged(cand.mla)
    assert torch.equal(flat, paged)


def flat_and_paged(ns):
    """ns.sparse_absorbed on the GPU at B = 32 over a contiguous cache and the same rows in shuffled pages of 64:
    (flat, paged) outputs (tests/test_mla_producer.py holds step 49's kernel to the same)."""
    q, lat, idx, lengths = _case(32, 1, 1024, 700, 64, 512, dtype=torch.bfloat16, seed=3)
    from tests.test_mla_prefetch import _paged
    pool, table = _paged(lat, 64)
    q, lat, idx, lengths = q.cuda(), lat.cuda(), idx.cuda(), lengths.cuda()
    flat = ns.sparse_absorbed(q, lat, idx, lengths, 0.0625)
    paged = ns.sparse_absorbed(q, pool.cuda(), idx, lengths, 0.0625, block_table=table.cuda(), page_size=64)
    return flat, paged
