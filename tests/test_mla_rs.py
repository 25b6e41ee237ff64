"""The sparse absorbed MLA kernel with the output's columns sliced over programs (config rs, issue 14 step 40's
probe; ours is 1): each slice's program scores its heads on the whole rows and accumulates only its columns. On the
CPU (float32) every slice count agrees with one program to float32 rounding (the interpreter's dots on narrower
tiles sum in another order: last-bit differences) and with a float64 reference, over one and several splits, -1 and
out-of-row entries, a short row, a contiguous and a paged cache; bad slice counts are refused. On the GPU in bf16 (64 heads a program, the tensor cores' other instruction)
its error against a float64 reference is held to at most twice ours'."""
from __future__ import annotations

import pytest
import torch

from impl import mla as im
from tests.test_mla_prefetch import _case, _paged


def _reference(q, lat, idx, lengths, scale):
    """float64 Σ_t softmax(scale q·c_t) c_t over each row's valid entries."""
    q, lat = q.double(), lat.double()
    B, S, H, R = q.shape
    out = torch.zeros(B, S, H, R, dtype=torch.float64, device=q.device)
    for b in range(B):
        for s in range(S):
            sel = idx[b, s]
            sel = sel[(sel >= 0) & (sel < lengths[b])]
            if sel.numel():
                c = lat[b, sel]
                out[b, s] = torch.softmax(scale * q[b, s] @ c.T, -1) @ c
    return out


@pytest.mark.parametrize("splits", [None, 1, 3])
@pytest.mark.parametrize("paged", [False, True])
@pytest.mark.parametrize("rs", [2, 4])
def test_on_the_cpu_every_slice_count_agrees_with_one_program(splits, paged, rs):
    q, lat, idx, lengths = _case(2, 300, 70, 3, 64)
    ref = _reference(q, lat, idx, lengths, 0.3)
    kw = {}
    if paged:
        lat, table = _paged(lat, 16)
        kw = dict(block_table=table, page_size=16)
    ours = im.sparse_absorbed(q, lat, idx, lengths, 0.3, splits, **kw)
    sliced = im.sparse_absorbed(q, lat, idx, lengths, 0.3, splits, dict(rs=rs), **kw)
    assert bool(torch.isfinite(ours).all()) and bool(ours.abs().sum() > 0)
    # float32 rounding: a few units in the last place of the largest value (a wrong slice is off by O(1))
    assert float((sliced - ours).abs().max()) <= 8 * 2 ** -24 * float(ours.abs().max())
    assert float((sliced.double() - ref).norm() / ref.norm()) <= 1e-6


@pytest.mark.parametrize("rs", [0, 3, 8, True, 2.0])
def test_a_slice_count_that_does_not_cut_the_tile_is_refused(rs):
    q, lat, idx, lengths = _case(1, 50, 10, 2, 64)
    with pytest.raises(ValueError, match="rs"):
        im.sparse_absorbed(q, lat, idx, lengths, 0.3, None, dict(rs=rs))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("B", [1, 32])
def test_on_the_gpu_in_bf16_64_heads_a_program_are_as_close_to_the_reference_as_ours(B):
    q, lat, idx, lengths = _case(B, 4096, 2051, 64, 512, device="cuda", dtype=torch.bfloat16, seed=B)
    ref = _reference(q, lat, idx, lengths, 0.0625)

    def err(o):
        return float((o.double() - ref).norm() / ref.norm())
    ours = err(im.sparse_absorbed(q, lat, idx, lengths, 0.0625))
    for cfg in (dict(bh=64, bw=32, num_warps=8, num_stages=3, rs=4), dict(rs=2)):
        assert err(im.sparse_absorbed(q, lat, idx, lengths, 0.0625, None, cfg)) <= 2 * ours + 1e-6, cfg
