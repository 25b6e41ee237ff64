"""The MoE host glue in two launches (issue 14 step 8, docs/optimization_log.md): `impl.moe.align`'s
one-program kernel against the torch form it replaces at decode (`align_torch`), and `impl.moe.combine`
against the slot-order sum, bit for bit, on the interpreter.

Both are integer bookkeeping or a fixed-order float32 sum, so the property is equality, not a bound:
any pair in a wrong slot, a pad slot left unwritten, or a block tagged with the wrong expert differs.
Sizes span the kernel's chunks (32 pairs, 64 slots a pass), pad expert lanes (E < 16 and E = 288 of
the full geometry), both ways of writing the pad slots, and the threshold where `align` hands over to
the torch form.
"""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from impl import moe as imoe


@st.composite
def routings(draw):
    E = draw(st.sampled_from([1, 3, 8, 17, 288]))
    k = draw(st.integers(1, min(8, E)))
    N = draw(st.integers(0, imoe.ALIGN_KERNEL_PAIRS // k))
    distinct = draw(st.booleans())            # the router's ids are distinct per token; align must not care
    g = torch.Generator().manual_seed(draw(st.integers(0, 2 ** 31 - 1)))
    if distinct:
        ids = torch.rand(N, E, generator=g).argsort(-1)[:, :k]
    else:
        ids = torch.randint(0, E, (N, k), generator=g)
    # a few experts take most pairs: several blocks of one expert, and experts with none
    if draw(st.booleans()) and N:
        ids = torch.where(torch.rand(N, k, generator=g) < 0.7, ids % max(1, min(E, 3)), ids)
    return ids.long(), E, draw(st.sampled_from([4, 16, 128]))


@settings(max_examples=60, deadline=None, derandomize=True)
@given(routings(), st.booleans())
def test_align_kernel_is_the_torch_alignment(case, fill):
    """Both forms of the pad slots: written first (ours, issue 14 step 13) or found by a last pass (the peer)."""
    ids, E, block_m = case
    got = imoe.align(ids, E, block_m, fill)
    want = imoe.align_torch(ids, E, block_m)
    for name, g, w in zip(("sorted_ids", "block_expert"), got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, name
        assert torch.equal(g, w), f"{name}: ids {ids.tolist()}, E={E}, block_m={block_m}\n got {g.tolist()}\n want {w.tolist()}"


def test_align_above_the_kernel_threshold_is_the_torch_form():
    ids = torch.randint(0, 9, (imoe.ALIGN_KERNEL_PAIRS // 2 + 1, 2))
    for g, w in zip(imoe.align(ids, 9, 16), imoe.align_torch(ids, 9, 16)):
        assert torch.equal(g, w)


@settings(max_examples=20, deadline=None, derandomize=True)
@given(st.integers(0, 5), st.integers(1, 8), st.integers(1, 2100),
       st.sampled_from([torch.float32, torch.bfloat16, torch.float64]))
def test_combine_is_the_slot_order_sum(N, k, D, dtype):
    out = torch.randn(N, k, D, generator=torch.Generator().manual_seed(N * 977 + k * 31 + D))
    want = out[:, 0]
    for s in range(1, k):
        want = want + out[:, s]
    got = imoe.combine(out, dtype)
    assert got.dtype == dtype and torch.equal(got, want.to(dtype))


@pytest.mark.gpu
@settings(max_examples=40, deadline=None, derandomize=True)
@given(routings(), st.integers(1, 8), st.integers(1, 4200), st.sampled_from([torch.bfloat16, torch.float16]))
def test_align_and_combine_on_the_gpu(case, k, D, dtype):
    """The compiled kernels: the alignment bit for bit (both pad-slot forms; the written-first one over
    slots a pad store of another thread reached first: the barrier's order), and the slot sum rounded to
    bf16 / fp16 inside the kernel (the interpreter's path converts in torch) equal to torch's
    round-to-nearest-even."""
    ids, E, block_m = case
    ids = ids.cuda()
    want = imoe.align_torch(ids, E, block_m)
    for fill in (True, False):
        for g, w in zip(imoe.align(ids, E, block_m, fill), want):
            assert torch.equal(g, w), f"fill={fill}"
    out = torch.randn(3, k, D, device="cuda") * 1e3
    want = out[:, 0]
    for s in range(1, k):
        want = want + out[:, s]
    assert torch.equal(imoe.combine(out, dtype), want.to(dtype))
