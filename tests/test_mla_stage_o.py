"""Issue 14 step 58 (impl.candidates.mla_stage_o): the producer kernel's bf16 output staged through shared memory and
stored a whole row at a time. The same values rounded the same way (to nearest even, into q's tile instead of into
registers), so the decode keeps ours' bits: held here on the GPU in bf16 where the output is staged (the unsplit
launch, from 67 query rows on an H100; contiguous and paged caches) and where it is not (B = 8: split)."""
from __future__ import annotations

import pytest
import torch

from impl.candidates.mla_heads64 import module_copy
from impl.candidates.mla_stage_o import mla as cand
from tests.test_mla_out_uv import decodes, paged_decodes

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

# ours before step 58, whether or not it has landed
before = module_copy(f"{__name__}.before", EPILOGUE_STAGED=False)


@pytest.mark.parametrize("B", [8, 70, 128, 200])
def test_the_decode_keeps_its_bits(B):
    o_before, o = decodes(before, cand, B)
    assert bool(torch.isfinite(o_before).all()) and bool(o_before.abs().sum() > 0)
    assert torch.equal(o, o_before), f"B = {B}"


def test_the_paged_decode_keeps_its_bits():
    ref, got = paged_decodes(before, cand)
    assert torch.equal(got, ref)
