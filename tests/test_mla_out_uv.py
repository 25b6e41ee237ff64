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


def decodes(ref_ns, ns, B: int) -> tuple:
    """(ref_ns', ns') attend outputs on the bench's decode inputs at B rows, 4K cache (tests/test_mla_stage_o.py too)."""
    from gate.bench_mla import decode_inputs
    w, latent, q, idx, lengths, _ = decode_inputs(B, 4096)
    return ref_ns.attend(w, q, latent, idx, lengths)[0], ns.attend(w, q, latent, idx, lengths)[0]


def paged_decodes(ref_ns, ns, B: int = 96, P: int = 64) -> tuple:
    """(ref_ns', ns') absorbed_paged outputs over the decode inputs' cache in shuffled pages of P."""
    from gate.bench_mla import decode_inputs
    w, latent, q, idx, lengths, _ = decode_inputs(B, 4096)
    T, R = latent.shape[1], latent.shape[2]
    M = T // P
    table = torch.randperm(B * M, device="cuda").reshape(B, M)
    pool = torch.empty(B * M, P, R, dtype=latent.dtype, device="cuda")
    pool[table.reshape(-1)] = latent.reshape(B * M, P, R)
    return (ref_ns.absorbed_paged(w, q, pool, table, P, lengths, idx)[0],
            ns.absorbed_paged(w, q, pool, table, P, lengths, idx)[0])


@pytest.mark.parametrize("B", [8, 70, 128, 200])
def test_the_decode_keeps_its_bits(B):
    o_before, o = decodes(before, cand, B)
    assert bool(torch.isfinite(o_before).all()) and bool(o_before.abs().sum() > 0)
    from gate.bench_mla import R, W
    splits = cand._launch(o.device, B, o.shape[2], W, R)["splits"]
    assert torch.equal(o, o_before), f"B = {B}, {splits} splits"


def test_the_paged_decode_keeps_its_bits():
    ref, got = paged_decodes(before, cand)
    assert torch.equal(got, ref)
