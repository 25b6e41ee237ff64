"""Issue 14 step 60 (impl.candidates.mla_merge_pdl): the split merge launched as a programmatic dependent of the sparse
kernel. Only the launch order changes (the merge's programs start early and wait for the sparse grid), so the decode
keeps ours' bits: held here on the GPU where the merge runs after the Triton kernel (B = 1 and 4), after the producer
kernel (B = 8 and 32), not at all (B = 128: one split), through the paged cache, and replayed from a CUDA graph (the
dependency captured as a programmatic edge)."""
from __future__ import annotations

import pytest
import torch

from impl.candidates.mla_heads64 import module_copy
from impl.candidates.mla_merge_pdl import mla as cand
from tests.test_mla_out_uv import decodes, paged_decodes

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

# ours before step 60, whether or not it has landed
before = module_copy(f"{__name__}.before", MERGE_PDL=False)


def test_it_applies_on_this_gpu():
    q = torch.zeros(1, device="cuda")
    assert cand._pdl(q) == (torch.cuda.get_device_capability()[0] >= 9)
    assert not before._pdl(q)


@pytest.mark.parametrize("B", [1, 4, 8, 32, 128])
def test_the_decode_keeps_its_bits(B):
    o_before, o = decodes(before, cand, B)
    assert bool(torch.isfinite(o_before).all()) and bool(o_before.abs().sum() > 0)
    assert torch.equal(o, o_before), f"B = {B}"


def test_the_paged_decode_keeps_its_bits():
    ref, got = paged_decodes(before, cand, B=32)
    assert torch.equal(got, ref)


@pytest.mark.parametrize("B", [4, 32])
def test_a_graph_replay_keeps_its_bits(B):
    from gate.bench_mla import decode_inputs
    from gate.benchlib import graph
    w, latent, q, idx, lengths, _ = decode_inputs(B, 4096)
    ref = before.attend(w, q, latent, idx, lengths)[0]
    out = {}

    def step():
        out["o"] = cand.attend(w, q, latent, idx, lengths)[0]

    replay = graph(step)                                 # warmed up (compiled) before the capture
    for _ in range(3):
        out["o"].zero_()
        replay()
        torch.cuda.synchronize()
        assert torch.equal(out["o"], ref), f"B = {B}"
