"""Issue 14 step 55 (impl.candidates.mla_out_uv): where the selection is not split and W_UV's fold follows, the sparse
kernel writes its output in W_UV's dtype, rounded in the kernel. torch's cast rounds to nearest even and so does the
kernel's, so the decode keeps ours' bits: held here on the GPU in bf16 at row counts with one split (the producer
kernel from 67 rows on an H100, a contiguous and a paged cache) and with several (where nothing changes). On the
CPU the interpreter keeps the float32 output (OUT_UV does not apply): the same bits trivially, not tested here."""
from __future__ import annotations

import pytest
import torch

from impl.candidates.mla_out_uv import mla as cand
from impl.candidates.mla_q_strides import mla as before

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.mark.parametrize("B", [8, 70, 128, 200])
def test_the_decode_keeps_its_bits(B):
    from gate.bench_mla import decode_inputs
    w, latent, q, idx, lengths, _ = decode_inputs(B, 4096)
    plan = cand._launch(q.device, B, q.shape[2], idx.shape[-1], latent.shape[-1])
    o_before, _ = before.attend(w, q, latent, idx, lengths)
    o, _ = cand.attend(w, q, latent, idx, lengths)
    assert bool(torch.isfinite(o_before).all()) and bool(o_before.abs().sum() > 0)
    assert torch.equal(o, o_before), f"B = {B}, {plan['splits']} splits"


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
