"""impl.candidates.moe_split_k (issue 14 step 7; a candidate, not landed): the decode tiles' gate_up GEMM in
K ranges, one program each, the ranges' float32 accumulators summed in a fixed order by a second kernel
that runs our epilogue. On the interpreter (two ranges over the tiny D) it must hold the oracle's
contract for dense and NVFP4 experts (gate/up global scales apart, linear and swizzled block scales) and
agree with our unsplit path to float32 summation order; prefill tiles and W4A4 are ours, unchanged."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import impl
from impl import moe as imoe
from impl import nvfp4 as inv
from impl.candidates import moe_split_k

interpreter_only = pytest.mark.skipif(not impl.interpreted(), reason="float32 CPU comparisons; CUDA: the gate")


def _spy(monkeypatch) -> list:
    calls, real = [], moe_split_k._grouped_split_k

    def counted(*a, **k):
        calls.append(a[-1])
        return real(*a, **k)
    monkeypatch.setattr(moe_split_k, "_grouped_split_k", counted)
    return calls


@interpreter_only
@pytest.mark.parametrize("form", ["dense", "nvfp4_linear", "nvfp4_swizzled"])
def test_the_split_gate_up_holds_the_oracle_and_our_values(form, monkeypatch):
    from oracle import moe as omoe
    from oracle import nvfp4 as onv
    from tests.test_moe_kernels import routing_of, t32, within
    from tests.test_moe_nvfp4_scales import _layer
    w, x, r = _layer(12, hidden=96)                   # 3 K steps of 32: ranges of 2 and 1 (the last part-masked)
    nv = None if form == "dense" else onv.quantize_experts(w.gate_up_proj, w.down_proj)
    want = omoe.experts(w, x, r, nvfp4=nv)
    nvt = None if nv is None else inv.experts_to(onv.swizzle_experts(nv) if form == "nvfp4_swizzled" else nv)
    args = (w.map(t32), t32(x), routing_of(r))
    calls = _spy(monkeypatch)
    got = moe_split_k.Candidate.moe.experts(*args, nvfp4=nvt)
    assert calls == [moe_split_k.SPLIT_K] and moe_split_k.SPLIT_K >= 2, "the split path did not run"
    within("moe" if nv is None else "nvfp4", "experts", "output", got, want)
    ours = imoe.experts(*args, nvfp4=nvt)
    assert float((got - ours).abs().max()) <= 1e-6 * float(ours.abs().max())


@interpreter_only
def test_prefill_tiles_and_w4a4_are_ours(monkeypatch):
    """More than 16 pairs an expert (the prefill tiles) or W4A4: our path, bit for bit."""
    from oracle import nvfp4 as onv
    from tests.test_moe_kernels import routing_of, t32
    from tests.test_moe_nvfp4_scales import _layer
    w, x, r = _layer(13)
    calls = _spy(monkeypatch)
    x_many = np.tile(x, (40, 1))                       # 360 tokens on 8 experts: 360 pairs an expert
    from oracle import moe as omoe
    r_many = omoe.route(w, x_many)
    args = (w.map(t32), t32(x_many), routing_of(r_many))
    assert torch.equal(moe_split_k.Candidate.moe.experts(*args), imoe.experts(*args))
    nv = onv.with_input_scales(onv.quantize_experts(w.gate_up_proj, w.down_proj), np.full(8, 300.0), np.full(8, 40.0))
    nvt = inv.experts_to(nv)
    args = (w.map(t32), t32(x), routing_of(r))
    assert torch.equal(moe_split_k.Candidate.moe.experts(*args, nvfp4=nvt, w4a4=True),
                       imoe.experts(*args, nvfp4=nvt, w4a4=True))
    assert calls == []
