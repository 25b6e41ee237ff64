"""The split path's launches sit back to back: nothing between the sparse kernel and the merge, so a merge launched
as the sparse kernel's programmatic dependent (issue 14 step 60) waits on that kernel and nothing else. Held under
the checks' poisoned memory, where every torch.empty is a fill kernel: stop 64 found the merge's output allocated
between the two launches, whose fill then ran between them; the merge waited on the fill, so step 60's race mutant
(the merge without its wait) could never read early and escaped every check on the GPU. Here on the CPU, each launch
and allocation is recorded in the order the host issues them."""
from __future__ import annotations

import types

import pytest
import torch

from impl import mla as im
from invariants.target import poisoned_memory
from tests.test_mla_heads64 import _case


def _recorded(monkeypatch):
    """ours' sparse launch, merge launch and torch.empty calls, recorded in order as they run."""
    events = []
    gather, merge, torch_ = im._gather_attend, im.mla_merge_kernel, im.torch

    def gather_attend(*a, **k):
        events.append("sparse")
        return gather(*a, **k)

    class Merge:
        def __getitem__(self, grid):
            launch = merge[grid]

            def run(*a, **k):
                events.append("merge")
                return launch(*a, **k)
            return run

    def empty(*a, **k):
        events.append("empty")
        return torch_.empty(*a, **k)

    proxy = types.SimpleNamespace(**{n: getattr(torch_, n) for n in dir(torch_) if not n.startswith("__")})
    proxy.empty = empty
    monkeypatch.setattr(im, "_gather_attend", gather_attend)
    monkeypatch.setattr(im, "mla_merge_kernel", Merge())
    monkeypatch.setattr(im, "torch", proxy)
    return events


@pytest.mark.parametrize("splits", [2, 4])
def test_nothing_is_allocated_between_the_sparse_launch_and_the_merge(monkeypatch, splits):
    q, lat, idx, lengths = _case(1, 1, 300, 259, 2, 32)
    ref = im.sparse_absorbed(q, lat, idx, lengths, 0.3, splits)
    events = _recorded(monkeypatch)
    with poisoned_memory():
        out = im.sparse_absorbed(q, lat, idx, lengths, 0.3, splits)
    assert events.count("sparse") == 1 and events.count("merge") == 1, events
    i = events.index("sparse")
    assert events[i + 1] == "merge", f"launched in this order: {events}"
    # the recorder changed nothing but the record
    assert torch.equal(out, ref)
