"""Issue 14 steps 42 and 43: the selection splits merged in one pass (mla_merge_kernel; impl.candidates.mla_merge,
ours since stop 47) and, at up to 2 query rows, merged with W_UV applied (impl.candidates.mla_merge_uv: ROWS_UV = 2,
mla_merge_uv_kernel; refuted, not landed).

- Both candidates are impl.mla loaded as their own modules; ours' output with W_UV is the same bits as its merge
  cast and folded by hand (the split path) or its float32 output cast and folded (no split).
- Against a float64 reference on the CPU: over 1 to 20 splits (20 is two tiles of 16), splits left empty by a
  short row, a row with no valid entry (0, not NaN), 1-3 query rows (the fused launch at <= 2, the merge then
  W_UV's GEMM at 3), and W_UV as kv_b_proj's strided view.
- On the GPU in bf16 at the released geometry (64 heads, rank 512, 2051 entries): within the mla bound, and no
  worse than ours by more than bf16's rounding.
"""
from __future__ import annotations

import pytest
import torch

from impl import mla as im
from impl.candidates import mla_merge, mla_merge_chunks, mla_merge_one_round, mla_merge_uv, mla_splits_w
from impl.candidates.mla_heads64 import module_copy
from tests.test_mla_heads64 import _case, _reference

N = 24   # W_UK's rows per head in kv_b_proj's view (keys first): W_UV is a strided slice after them


def _w_uv(H, V, R, device="cpu", dtype=torch.float32, seed=1):
    kv_b = torch.randn(H * (N + V), R, generator=torch.Generator().manual_seed(seed)) / R ** 0.5
    return kv_b.to(device, dtype).view(H, N + V, R)[:, N:]


def _rel(a, b):
    return float((a.double().cpu() - b).norm() / b.norm())


def _folded(ref, w_uv):
    return torch.einsum("bshr,hvr->bshv", ref, w_uv.double().cpu())


def test_ours_with_w_uv_is_its_merge_folded_by_hand():
    q, lat, idx, lengths = _case(1, 1, 300, 259, 2, 32)
    w_uv = _w_uv(2, 16, 32)
    for splits in (1, 4):
        lat_f32 = im.sparse_absorbed(q, lat, idx, lengths, 0.3, splits)
        by_hand = torch.einsum("bshr,hvr->bshv", lat_f32.to(w_uv.dtype), w_uv)
        assert torch.equal(im.sparse_absorbed(q, lat, idx, lengths, 0.3, splits, w_uv=w_uv), by_hand)
    assert im.ROWS_UV == 0 and mla_merge.mla.ROWS_UV == 0 and mla_merge_uv.mla.ROWS_UV == 2
    assert mla_merge.mla is not im and mla_merge_uv.mla is not im


@pytest.mark.parametrize("cand", [mla_merge, mla_merge_uv, mla_merge_chunks, mla_splits_w],
                         ids=["merge", "merge_uv", "chunks", "splits_w"])
@pytest.mark.parametrize("B,S", [(1, 1), (1, 2), (3, 1)])
@pytest.mark.parametrize("splits", [1, 3, 20])
def test_on_the_cpu_the_merge_agrees_with_the_reference(cand, B, S, splits):
    q, lat, idx, lengths = _case(B, S, 300, 259, 3, 48, seed=B * 10 + S)
    lengths[-1] = 40              # a short last row: most of its entries are out of row, later splits empty
    idx[0, 0, 30:] = -1           # row 0's first query: entries only in the first splits
    w_uv = _w_uv(3, 20, 48)
    ref = _reference(q, lat, idx, lengths, 0.3)
    assert _rel(cand.mla.sparse_absorbed(q, lat, idx, lengths, 0.3, splits), ref) < 1e-5
    o = cand.mla.sparse_absorbed(q, lat, idx, lengths, 0.3, splits, w_uv=w_uv)
    assert o.shape == (B, S, 3, 20) and o.dtype == w_uv.dtype
    assert _rel(o, _folded(ref, w_uv)) < 1e-5


@pytest.mark.parametrize("cand", [mla_merge, mla_merge_uv, mla_merge_chunks, mla_splits_w],
                         ids=["merge", "merge_uv", "chunks", "splits_w"])
def test_a_row_with_no_valid_entry_gives_zero_not_nan(cand):
    q, lat, idx, lengths = _case(2, 1, 100, 90, 2, 32, seed=5)
    idx[1] = -1
    o = cand.mla.sparse_absorbed(q[1:], lat[1:], idx[1:], lengths[1:], 0.3, 4, w_uv=_w_uv(2, 16, 32))
    assert torch.equal(o, torch.zeros_like(o))


def test_the_merge_in_rank_chunks_is_ours_bit_for_bit_on_the_cpu():
    """Step 44 moves ranks between programs and changes no element's arithmetic (on the interpreter: two chunks
    of a rank tile of 64, the second masked past R = 48)."""
    whole = module_copy("test_mla_merge_whole_rank", MERGE_BR=0).sparse_absorbed
    q, lat, idx, lengths = _case(2, 1, 300, 259, 3, 48, seed=9)
    assert mla_merge_chunks.mla._merge_chunk(64) == 32
    for splits in (3, 20):
        assert torch.equal(mla_merge_chunks.mla.sparse_absorbed(q, lat, idx, lengths, 0.3, splits),
                           whole(q, lat, idx, lengths, 0.3, splits))


def test_step45_splits_come_from_w_alone_so_a_row_is_the_same_bits_alone_or_among_others():
    """Step 45's candidate: one block of entries a split, counted from W (19 at W = 300, blocks of 16 under the
    interpreter) at every row count below 16, its merge in rank chunks (BJ 32 x BRM 16 at R = 48); a row's output
    is bitwise the same alone as among two others, and agrees with the reference."""
    q, lat, idx, lengths = _case(3, 1, 300, 259, 3, 48, seed=11)
    lengths[2] = 40
    plans = {rows: mla_splits_w.mla._launch(q.device, rows, 3, 300, 48)["splits"] for rows in (1, 3, 15)}
    assert plans == {1: 19, 3: 19, 15: 19} and mla_splits_w.mla._merge_plan(19, 64) == (32, 16)
    together = mla_splits_w.mla.sparse_absorbed(q, lat, idx, lengths, 0.3)
    for b in range(3):
        alone = mla_splits_w.mla.sparse_absorbed(q[b:b + 1], lat[b:b + 1], idx[b:b + 1], lengths[b:b + 1], 0.3)
        assert torch.equal(alone, together[b:b + 1])
    assert _rel(together, _reference(q, lat, idx, lengths, 0.3)) < 1e-5


def test_step46_the_one_round_merge_is_ours_bit_for_bit_on_the_cpu():
    """Step 46's candidate loads the log-sum-exps and the partials in one round when the splits fit one tile (here
    1-16 splits: one tile of up to 16), the same arithmetic as ours' two rounds; 20 splits (two tiles) keep the
    two-round path. A short row leaves later splits empty; a row with no valid entry gives 0."""
    q, lat, idx, lengths = _case(2, 1, 300, 259, 3, 48, seed=21)
    lengths[1] = 40
    idx[0, 0, 30:] = -1
    for splits in (2, 5, 16, 20):
        assert torch.equal(mla_merge_one_round.mla.sparse_absorbed(q, lat, idx, lengths, 0.3, splits),
                           im.sparse_absorbed(q, lat, idx, lengths, 0.3, splits))
    idx[1] = -1
    o = mla_merge_one_round.mla.sparse_absorbed(q[1:], lat[1:], idx[1:], lengths[1:], 0.3, 4)
    assert torch.equal(o, torch.zeros_like(o)) and mla_merge_one_round.mla.MERGE_ONE_ROUND and not im.MERGE_ONE_ROUND


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("B", [1, 4, 8, 32])
def test_on_the_gpu_the_one_round_merge_is_ours_bit_for_bit(B):
    q, lat, idx, lengths = _case(B, 1, 4096, 2051, 64, 512, device="cuda", dtype=torch.bfloat16, seed=B)
    assert torch.equal(mla_merge_one_round.mla.sparse_absorbed(q, lat, idx, lengths, 0.0625),
                       im.sparse_absorbed(q, lat, idx, lengths, 0.0625))


def test_a_w_uv_of_the_wrong_shape_or_layout_is_refused():
    q, lat, idx, lengths = _case(1, 1, 100, 90, 2, 32)
    for bad in (torch.zeros(3, 16, 32), torch.zeros(2, 16, 31), torch.zeros(2, 32, 16).transpose(1, 2)):
        with pytest.raises(ValueError, match="w_uv"):
            mla_merge_uv.mla.sparse_absorbed(q, lat, idx, lengths, 0.3, 4, w_uv=bad)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("B,S", [(1, 1), (2, 1), (1, 2), (4, 1), (32, 1)])
@pytest.mark.parametrize("cand", [mla_merge, mla_merge_uv, mla_merge_chunks, mla_splits_w],
                         ids=["merge", "merge_uv", "chunks", "splits_w"])
def test_on_the_gpu_in_bf16_the_merge_agrees_with_the_reference(cand, B, S):
    from invariants.contracts import bench_bound
    q, lat, idx, lengths = _case(B, S, 4096, 2051, 64, 512, device="cuda", dtype=torch.bfloat16, seed=B + S)
    w_uv = _w_uv(64, 256, 512, "cuda", torch.bfloat16)
    rows = sorted({0, B - 1})
    ref = _folded(_reference(q[rows], lat[rows], idx[rows], lengths[rows], 0.0625), w_uv)
    got = cand.mla.sparse_absorbed(q, lat, idx, lengths, 0.0625, w_uv=w_uv)
    ours = im.sparse_absorbed(q, lat, idx, lengths, 0.0625, w_uv=w_uv)
    bound = bench_bound("mla", "absorbed", "output", "bfloat16")
    assert _rel(got[rows], ref) <= bound
    assert _rel(got[rows], ref) <= 2 * _rel(ours[rows], ref) + 1e-3
