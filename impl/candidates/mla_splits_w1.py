"""Issue 14 step 45's second form: impl.candidates.mla_splits_w (one-block selection splits counted from W at every
row count below ROWS_64 on the GPU, their merge in one load) with ONE pipeline stage below ROWS_64 instead of ours'
two (docs/optimization_log.md "Step 45").

Why: the first form measured 1.08x at B = 1 but 0.95x / 0.93x / 0.90x at B = 2 / 4 / 7 (H100, stop 49): 33 splits
make 4 x 33 x B programs of 16 heads, and its launch keeps ours' 2 stages: two [64, 512] bf16 tiles of gathered rows
in shared memory (128 KB) for a loop that now runs ONE block, so one program an SM and B waves. One stage holds one
tile: two or three programs an SM, and B = 7's 924 programs in ~3 waves instead of 7. A row's bits are the same
alone and among 2-7 rows, as ours' (mla.batch: ours' error there is 0); the stage count changes no arithmetic.

    python3 -m gate.cli gate --device cuda --candidate impl.candidates.mla_splits_w1:Candidate --baseline triton \\
        --check mla.absorbed --check mla.batch --check mla.absorbed_paged --check mla.paths ...
"""
from __future__ import annotations

import types

from impl import interpreted
from impl.candidates import mla_splits_w as _w
from impl.candidates.mla_heads64 import module_copy

mla = module_copy(f"{__name__}.mla")
_ours_config = mla._launch_config


def _launch_config(rows: int, BR: int) -> dict:
    """Ours', with one pipeline stage below ROWS_64 rows on the GPU (one-block splits: nothing to pipeline)."""
    cfg = _ours_config(rows, BR)
    if rows < mla.ROWS_64 and not interpreted():
        cfg = dict(cfg, num_stages=1)
    return cfg


mla._launch_config, mla._splits, mla._merge_plan = _launch_config, _w._splits, _w._merge_plan
Candidate = types.SimpleNamespace(mla=mla)
