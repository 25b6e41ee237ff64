"""Our chunked KDA kernel is bitwise causal (impl/kernels/kda.py `_intra_column_block`, anchored on each
sub-chunk's first row): cutting anywhere in rows 1-7 of a sub-chunk and redrawing only the later gates
leaves every earlier output bit-identical. The row-7 anchor it replaced is not (the mutant
kda_intra_anchor_middle, which kda.causal catches): rows above it move in their last bits."""
from __future__ import annotations

import numpy as np
import torch

import impl.kda as ik
from strategies import tensors as tz

CUTS = (1, 3, 5, 7, 17, 20, 23)          # rows 1-7 of the first two sub-chunks


def _changed_outputs(anchor: int) -> list[int]:
    """For each cut, how many outputs before it changed when only the gates from the cut on did."""
    x = {n: torch.tensor(a, dtype=torch.float32)
         for n, a in tz.core_tensors(np.random.default_rng(0), 2, 8, 1, 64, "normal").items()}
    other = torch.tensor(tz.core_tensors(np.random.default_rng(1), 2, 8, 1, 64, "normal")["g"], dtype=torch.float32)
    base = ik._chunked(x["q"], x["k"], x["v"], x["g"], x["beta"], None, intra="columns", anchor=anchor)[0]
    changed = []
    for cut in CUTS:
        g = x["g"].clone()
        g[:, cut:] = other[:, cut:]
        o = ik._chunked(x["q"], x["k"], x["v"], g, x["beta"], None, intra="columns", anchor=anchor)[0]
        changed.append(int((o[:, :cut] != base[:, :cut]).sum()))
    return changed


def test_the_first_row_anchor_is_bitwise_causal():
    assert _changed_outputs(0) == [0] * len(CUTS)


def test_the_middle_row_anchor_leaks_later_gates_into_earlier_rows():
    assert sum(n > 0 for n in _changed_outputs(7)) >= 3
