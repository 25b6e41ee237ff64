"""Issue 14 step 45's candidate: below ROWS_64 query rows, the sparse absorbed MLA decode's selection split in
one-block splits counted from the selection's width alone (33 of 63 entries at W = 2051, blocks of 64), and the
split merge taking up to 64 splits in one load with the rank spread over programs so that a program's tile stays
8192 float32 (docs/optimization_log.md "Step 45").

Why: ours splits 16 ways below ROWS_64 (W_SPLIT 129): each program walks a 3-block chain whose last block holds
one entry, and at B = 1 that chain is the gather kernel's 11.9 us (H100, stop 48). 33 one-block splits took it to
6.9 us, but ours' merge, which loads 16 splits at a time, then took 5.8 us instead of 3.3 (one more dependent
round of loads). Here every split's log-sum-exp and every split's partial output are each one load: (64 splits x
128 ranks) tiles, 4 programs a head at rank 512.

The count depends on W and the block only (not on the batch): a row's bits are the same alone and among 2-7 rows,
as ours' 16 are (mla claims no batch invariance; ours keeps this one anyway). From ROWS_64 rows on, the launch and
the merge are ours' (at <= 16 splits the tile rule gives ours' whole-rank programs: the same bits as ours).

Under the interpreter the same rule runs below 16 rows (one block of 16 entries a split), with a 512-element merge
tile so that the CPU checks take the rank-chunked merge at the tiny geometry too.

The namespace is impl.mla loaded again as its own module (impl.candidates.mla_heads64.module_copy):

    python3 -m gate.cli gate --device cuda --candidate impl.candidates.mla_splits_w:Candidate --baseline triton \\
        --check mla.absorbed --check mla.batch --check mla.absorbed_paged --check mla.paths ...
"""
from __future__ import annotations

import types

import triton

from impl.candidates.mla_heads64 import module_copy
from impl import interpreted

MAX_SPLITS = 64          # a split merge's one load of log-sum-exps (and the partials' [64, BRM] tile)
TILE_GPU, TILE_INTERPRETED = 8192, 512   # float32 elements of a merge program's partials tile

mla = module_copy(f"{__name__}.mla")
_ours_splits = mla._splits


def block_splits(W: int, BW: int) -> int:
    """One block of BW entries a split, counted from W alone (at most MAX_SPLITS)."""
    return max(1, min(MAX_SPLITS, triton.cdiv(W, BW)))


def _splits(device, rows: int, programs: int, W: int, BW: int) -> int:
    """`block_splits` below ROWS_64 query rows on the GPU (below 16 under the interpreter); ours' rule elsewhere."""
    small = rows < (16 if interpreted() else mla.ROWS_64)
    if small and (device.type == "cuda" or interpreted()):
        return block_splits(W, BW)
    return _ours_splits(device, rows, programs, W, BW)


def tile_plan(tile_gpu: int):
    """A merge plan (impl.mla._merge_plan's signature): every split in one load (up to 64), the rank in chunks
    that keep a program's tile at `tile_gpu` float32 elements on the GPU (TILE_INTERPRETED under the interpreter)."""
    def plan(NS: int, BR: int) -> tuple:
        BJ = min(MAX_SPLITS, triton.next_power_of_2(NS))
        tile = TILE_INTERPRETED if interpreted() else tile_gpu
        return BJ, min(BR, max(8, tile // BJ))
    return plan


_merge_plan = tile_plan(TILE_GPU)
mla._splits, mla._merge_plan = _splits, _merge_plan
Candidate = types.SimpleNamespace(mla=mla)
