"""Issue 14 step 45's final form as a candidate: step 45's one-block selection splits (counted from W: 33 of 63
entries at W = 2051, blocks of 64) and its merge of up to 64 splits in one load (impl.candidates.mla_splits_w's
`_merge_plan`) for a lone query row on the GPU only; from 2 query rows on, ours' 16 splits (docs/optimization_log.md
"Step 45").

Why: step 45's measurement (H100, stop 49) gave the one-block splits 1.08x at B = 1 (the gather 12.0 -> 6.9 us, the
merge 3.3 -> 4.8) but 0.95x / 0.93x / 0.90x at B = 2 / 4 / 7 (2 to 7 waves of 132 programs where ours runs 1 to 4).
Taking them at one row only makes a lone row's bits differ from the same row among 2-7 rows: mla declares no batch
invariance (impl.mla.BATCH_INVARIANT is empty, and from 8 rows on the launch changes anyway).

At <= 16 splits the merge plan is ours' (16 splits at most: the whole rank a program), so from 2 rows on this is
ours' launch and bits. On the CPU (the interpreter) it is ours: tests/test_mla_merge.py holds the one-block splits
and the chunked merge there through impl.candidates.mla_splits_w.

    python3 -m gate.cli gate --device cuda --candidate impl.candidates.mla_splits_b1:Candidate --baseline triton \\
        --check mla.absorbed --check mla.batch --check mla.absorbed_paged --check mla.paths ...
"""
from __future__ import annotations

import types

from impl.candidates import mla_splits_w as _w
from impl.candidates.mla_heads64 import module_copy

mla = module_copy(f"{__name__}.mla")
_ours_splits = mla._splits


def _splits(device, rows: int, programs: int, W: int, BW: int) -> int:
    """One block of BW entries a split, from W, for one query row on the GPU; ours' rule elsewhere."""
    if rows == 1 and device.type == "cuda":
        return _w.block_splits(W, BW)
    return _ours_splits(device, rows, programs, W, BW)


mla._splits, mla._merge_plan = _splits, _w._merge_plan
Candidate = types.SimpleNamespace(mla=mla)
