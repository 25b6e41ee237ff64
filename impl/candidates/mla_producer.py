"""Issue 14 step 49's candidate: ours' sparse absorbed MLA decode with the gather in a producer warp group
(impl/kernels/mla_gluon.py, a Gluon kernel for Hopper; docs/optimization_log.md "Step 49").

Why: ours runs each block of 32 selected rows as one dependent chain in the same warps (the entries, the gather,
two dots, the online softmax): ~2.2-2.5 us a block at B = 32 and 128 on an H200, where the block's 32 KB take
~0.9 us at an SM's share of HBM bandwidth (30.7 % and 44.4 % of copy). Triton's automatic warp specialization
leaves that kernel's code unchanged (step 48), so the producer is written by hand: 4 warps only gather, with
cp.async into a ring of shared-memory stages and an mbarrier pair a stage, while the kernel's 8 warps run the dots.

Where it applies: the launches that take 64 heads a program (from impl.mla.ROWS_64 query rows on, on a GPU), an
unpaged cache, bf16 operands, a rank R that is a power of two from 16 to 512 (the released 512, the checks' tiny
16), on a Hopper GPU (sm_90) under Triton 3.6 (the kernel's Gluon API). Everything else (the 16-head launch below
ROWS_64 rows, the paged cache, float32, the CPU interpreter, which cannot run Gluon, another Triton) launches ours'
Triton kernel, so the gate holds ours there; `launched` counts which kernel ran (the probe prints it and its check
fails if the producer never ran: a candidate that silently ran ours is no result).

    python3 -m gate.cli gate --device cuda --candidate impl.candidates.mla_producer:Candidate --baseline triton \\
        --check mla.absorbed --check mla.batch --check mla.paths --check mla.graph_replay ...
"""
from __future__ import annotations

import types

import torch

from impl import interpreted
from impl.candidates.mla_heads64 import module_copy
from impl.kernels.mla import mla_sparse_absorbed_fwd_kernel as _ours_kernel

STAGES = 3            # 3 x 32 KB of rows + q's 64 KB: 168 KB of shared memory (4 stages: 200 KB)
PRODUCER_WARPS = 4
PRODUCER_REGS = 56    # 16 cp.async a thread a block: their 16 addresses and the entries; no spill (sm_90, Triton 3.6)
CONSUMER_WARPS = 8    # two warp groups along R: the [64, 512] float32 accumulator at 128 registers a thread

# what ran, by kernel name: the bench and the probes print it (a candidate that silently ran ours is no result)
launched = {"producer": 0, "ours": 0}


def _producer_kernel():
    """The Gluon kernel, or None under a Triton other than 3.6 (its Gluon API, impl/kernels/mla_gluon.py)."""
    import triton
    if not triton.__version__.startswith("3.6."):
        return None
    try:
        from impl.kernels.mla_gluon import mla_sparse_absorbed_ws_kernel
    except ImportError:
        return None
    return mla_sparse_absorbed_ws_kernel


def applies(q, c, H, R, BH, BW, BR, PAGED) -> bool:
    """Whether the producer kernel takes this launch (the module docstring's conditions)."""
    return (q.is_cuda and not interpreted() and not PAGED and BH == 64 and H <= BH and BW == 32
            and R == BR and 16 <= R <= 512 and q.dtype == torch.bfloat16 and c.dtype == torch.bfloat16
            and torch.cuda.get_device_capability(q.device)[0] == 9 and _producer_kernel() is not None)


def _copy_tile(R: int) -> dict:
    """The producer's copy tile: VEC elements a thread (8 bf16: one 16-byte cp.async), TR threads along a row, so
    that a warp's 32 / TR rows times PRODUCER_WARPS fit in a block of 32 entries (no element copied twice)."""
    vec = 8 if R >= 32 else 4
    return dict(VEC=vec, TR=min(32, R // vec))


class _Dispatch:
    """Stands in for impl.kernels.mla.mla_sparse_absorbed_fwd_kernel in the candidate's copy of impl.mla:
    `kernel[grid](...)` with ours' arguments launches the producer kernel where it applies, else ours'."""

    def __getitem__(self, grid):
        def launch(q, c, indices, lengths, out, lse, block_table, S, T, W, W_SPLIT, M, scale, *, H, R, BH, BW,
                   BR, PRECISION, SPLIT, PAGED, PAGE, PREFETCH, num_warps, num_stages=None):
            if applies(q, c, H, R, BH, BW, BR, PAGED):
                launched["producer"] += 1
                _producer_kernel()[(grid[0], 1, grid[2])](
                    q, c, indices, lengths, out, lse, S, T, W, W_SPLIT, scale, H=H, R=R, BH=BH, BW=BW,
                    STAGES=STAGES, SPLIT=SPLIT, PRODUCER_WARPS=PRODUCER_WARPS, PRODUCER_REGS=PRODUCER_REGS,
                    **_copy_tile(R), num_warps=CONSUMER_WARPS)
                return
            launched["ours"] += 1
            _ours_kernel[grid](q, c, indices, lengths, out, lse, block_table, S, T, W, W_SPLIT, M, scale, H=H, R=R,
                               BH=BH, BW=BW, BR=BR, PRECISION=PRECISION, SPLIT=SPLIT, PAGED=PAGED, PAGE=PAGE,
                               PREFETCH=PREFETCH, num_warps=num_warps,
                               **({} if num_stages is None else {"num_stages": num_stages}))
        return launch


mla = module_copy(f"{__name__}.mla", mla_sparse_absorbed_fwd_kernel=_Dispatch())
Candidate = types.SimpleNamespace(mla=mla)
