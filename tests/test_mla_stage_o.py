"""Issue 14 step 58 (impl.candidates.mla_stage_o): the producer kernel's bf16 output staged through shared memory and
stored a whole row at a time. The same values rounded the same way (to nearest even, into q's tile instead of into
registers), so the decode keeps ours' bits: held here on the GPU in bf16 where the output is staged (the unsplit
launch, from 67 query rows on an H100; contiguous and paged caches) and where it is not (B = 8: split)."""
from __future__ import annotations

import pytest
import torch

from impl.candidates.mla_heads64 import module_copy
from impl.candidates.mla_stage_o import mla as cand

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

# ours before step 58, whether or not it has landed
before = module_copy(f"{__name__}.before", EPILOGUE_STAGED=False)


@pytest.mark.parametrize("B", [8, 70, 128, 200])
def test_the_decode_keeps_its_bits(B):
    from gate.bench_mla import decode_inputs
    w, latent, q, idx, lengths, _ = decode_inputs(B, 4096)
    o_before, _ = before.attend(w, q, latent, idx, lengths)
    o, _ = cand.attend(w, q, latent, idx, lengths)
    assert bool(torch.isfinite(o_before).all()) and bool(o_before.abs().sum() > 0)
    assert torch.equal(o, o_before), f"B = {B}"


def test_the_paged_decode_keeps_its_bits():
    from gate.bench_mla import decode_inputs
    B, P = 96, 64
    w, latent, q, idx, lengths, _ = decode_inputs(B, 4096)
    T, R = latent.shape[1], latent.shape[2]
    M = T // P
    table = torch.randperm(B * M, device="cuda").reshape(B, M)
    pool = torch.empty(B * M, P, R, dtype=latent.dtype, device="cuda")
    pool[table.reshape(-1)] = latent.reshape(B * M, P, R)
    got = cand.absorbed_paged(w, q, pool, table, P, lengths, idx)[0]
    ref = before.absorbed_paged(w, q, pool, table, P, lengths, idx)[0]
    assert torch.equal(got, ref)
