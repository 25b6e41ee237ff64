"""Issue 14 step 49's candidate (impl.candidates.mla_producer): the sparse MLA gather in a producer warp group
(impl/kernels/mla_gluon.py, Gluon under Triton 3.6, sm_90), where impl.mla._producer_applies; ours since it landed.

- On the CPU (and under any Triton but 3.6) the candidate launches ours' Triton kernel: the same bits as ours.
- Where it applies and where it does not (a stand-in for a Hopper GPU under Triton 3.6).
- Step 51's blocks of 64 (impl.candidates.mla_producer_bw64 at every row count, mla_producer_bw64_16 from 16 rows
  on): which block each launch takes.
- On a GPU (Hopper, Triton 3.6), for the blocks of 32 and of 64: it runs, it matches a float64 reference within
  mla's bf16 bound over splits, -1 entries and entries past a row's length, and a paged cache gives the contiguous
  cache's bits (the property whose failure kept step 49 from landing in stop 52: the paged path then ran the Triton
  kernel).
"""
from __future__ import annotations

import pytest
import torch
import triton

from invariants.contracts import bench_bound
from impl import mla as im
from impl.candidates import mla_producer as cand
from impl.candidates import mla_producer_ahead, mla_producer_bw64, mla_producer_bw64_16
from tests.test_mla_heads64 import _case, _reference, _rel, flat_and_paged

# the producer kernel's forms the GPU tests run: blocks of 32, of 64 (step 51), the entries a block ahead (step 52)
GPU_FORMS, GPU_IDS = [cand.mla, mla_producer_bw64.mla, mla_producer_ahead.mla], ["bw32", "bw64", "ahead"]
HOPPER_36 = (torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9
             and triton.__version__.startswith("3.6."))


def test_the_candidate_is_ours_with_the_producer_switched_on():
    assert cand.mla is not im and cand.mla.PRODUCER is True and im.PRODUCER is True
    assert cand.mla.sparse_absorbed.__globals__ is vars(cand.mla)


@pytest.mark.parametrize("ns, rows, bw", [
    (cand.mla, 7, 32), (cand.mla, 256, 32),
    (mla_producer_bw64.mla, 7, 64), (mla_producer_bw64.mla, 256, 64),
    (mla_producer_bw64_16.mla, 7, 32), (mla_producer_bw64_16.mla, 15, 32), (mla_producer_bw64_16.mla, 16, 64),
    (im, 7, 32), (im, 256, 64),    # ours since step 51 landed
    (mla_producer_ahead.mla, 7, 32), (mla_producer_ahead.mla, 256, 64),
], ids=["32@7", "32@256", "bw64@7", "bw64@256", "bw64_16@7", "bw64_16@15", "bw64_16@16", "ours@7", "ours@256",
        "ahead@7", "ahead@256"])
def test_which_entry_block_each_launch_takes(ns, rows, bw):
    blk = ns._producer_block(rows)
    # blocks of 64 fit 2 stages only (with q's 64 KB); their producer copies in halves at 64 registers; step 52's
    # producer carries the next block's entries: 64 / 72 registers (fewer spilled on sm_90 under Triton 3.6)
    regs = {32: 56, 64: 64} if not ns.PRODUCER_AHEAD else {32: 64, 64: 72}
    assert blk == (dict(BW=64, STAGES=2, REGS=regs[64]) if bw == 64 else dict(BW=32, STAGES=3, REGS=regs[32]))


def test_on_the_cpu_it_launches_ours_kernel_with_ours_bits():
    q, lat, idx, lengths = _case(2, 1, 60, 40, 4, 16, seed=5)
    a = im.sparse_absorbed(q, lat, idx, lengths, 0.25)
    b = cand.mla.sparse_absorbed(q, lat, idx, lengths, 0.25)
    assert torch.equal(a, b)


class _Dev:
    """Stands in for a CUDA tensor on a Hopper GPU in `_producer_applies`' checks."""

    def __init__(self, dtype=torch.bfloat16):
        self.is_cuda, self.dtype, self.device = True, dtype, "cuda:0"


@pytest.mark.parametrize("plan, R, H, dtype, applies", [
    (dict(bh=64, bw=32, br=512), 512, 64, torch.bfloat16, True),      # the released geometry's 64-head launch
    (dict(bh=64, bw=32, br=16), 16, 2, torch.bfloat16, True),         # the checks' tiny geometry
    (dict(bh=16, bw=64, br=512), 512, 64, torch.bfloat16, False),     # the 16-head launch below ROWS_64 rows
    (dict(bh=64, bw=32, br=512), 512, 64, torch.float32, False),      # float32 operands
    (dict(bh=64, bw=32, br=1024), 576, 64, torch.bfloat16, False),    # a rank that is not a power of two
])
def test_where_it_applies(monkeypatch, plan, R, H, dtype, applies):
    monkeypatch.setattr(cand.mla, "interpreted", lambda: False)
    monkeypatch.setattr(cand.mla, "mla_sparse_absorbed_ws_kernel", object())
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    assert cand.mla._producer_applies(_Dev(dtype), _Dev(dtype), H, R, plan) is applies
    # ours since the landing: the same rule
    monkeypatch.setattr(im, "interpreted", lambda: False)
    monkeypatch.setattr(im, "mla_sparse_absorbed_ws_kernel", object())
    assert im._producer_applies(_Dev(dtype), _Dev(dtype), H, R, plan) is applies


@pytest.mark.gpu
@pytest.mark.skipif(not HOPPER_36, reason="needs a Hopper GPU and Triton 3.6 (the producer kernel's Gluon API)")
@pytest.mark.parametrize("ns", GPU_FORMS, ids=GPU_IDS)
@pytest.mark.parametrize("B", [8, 32])
def test_on_the_gpu_it_runs_and_matches_the_reference(B, ns):
    q, lat, idx, lengths = _case(B, 1, 1024, 700, 64, 512, device="cuda", dtype=torch.bfloat16, seed=B)
    plan = ns._launch(q.device, B, 64, idx.shape[-1], 512)
    assert ns._producer_applies(q, lat, 64, 512, plan)
    got = ns.sparse_absorbed(q, lat, idx, lengths, 0.0625)
    rows = sorted({0, B - 1})
    ref = _reference(q[rows], lat[rows], idx[rows], lengths[rows], 0.0625)
    assert _rel(got[rows], ref) <= bench_bound("mla", "absorbed", "output", "bfloat16")


@pytest.mark.gpu
@pytest.mark.skipif(not HOPPER_36, reason="needs a Hopper GPU and Triton 3.6 (the producer kernel's Gluon API)")
@pytest.mark.parametrize("ns", GPU_FORMS, ids=GPU_IDS)
def test_on_the_gpu_the_paged_cache_gives_the_contiguous_bits(ns):
    flat, paged = flat_and_paged(ns)
    assert torch.equal(flat, paged)
