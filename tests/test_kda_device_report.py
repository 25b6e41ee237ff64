"""`impl.kda.chunked_ex`, the KDA prefill without a host read (issue 14 step 28). The matrix's kda.device_report
holds it to `chunked` bit for bit, its NaN report to the inputs, and its dense calls to no host read (on the
CPU, through impl/host_sync.py's recorder). Here: `raise_on_nan` turns the report into chunked's ValueError
and refuses what is not a report; only the split pass runs without the read; and on the GPU a captured CUDA
graph holds a chunked_ex call (a host read inside a capture breaks it) whose replays give the eager bits and
report a NaN fed in after the capture.
"""
from __future__ import annotations

import pytest
import torch

from impl import kda as ik
from tests.test_kda_intra_blocked import _inputs


@pytest.mark.parametrize("report,gated,match", [
    ((1, 0), False, r"^g: contains NaN"),
    ((0, 1), False, r"^beta: contains NaN"),
    ((1, 1), False, r"^g: contains NaN"),
    ((1, 0), True, r"^f: the log decays gate\(f \+ dt_bias\) contain NaN"),
])
def test_raise_on_nan_raises_what_chunked_raises(report, gated, match):
    with pytest.raises(ValueError, match=match):
        ik.raise_on_nan(torch.tensor(report, dtype=torch.int32), gated=gated)


def test_raise_on_nan_passes_a_clean_report_and_chunked_ex_gives_one():
    _, work = _inputs(1, 70, 2, 16, 16, seed=1)
    *out, info = ik.chunked_ex(*work[:5], None, 64, None, True)
    assert info.dtype == torch.int32 and tuple(info.shape) == (2,) and info.tolist() == [0, 0]
    assert ik.raise_on_nan(info) is None


@pytest.mark.parametrize("info,what", [
    (torch.zeros(3, dtype=torch.int32), "(3,)"),
    (torch.zeros(2, dtype=torch.int64), "torch.int64"),
    ([0, 0], "list"),
])
def test_raise_on_nan_refuses_what_is_not_a_report(info, what):
    with pytest.raises(ValueError, match=r"^info: expected chunked_ex's int32 tensor of shape \(2,\), got .*"
                                         + what.replace("(", r"\(").replace(")", r"\)")):
        ik.raise_on_nan(info)


@pytest.mark.parametrize("intra", ["columns", "blocked"])
def test_only_the_split_pass_runs_without_a_host_read(intra):
    """The whole-chunk and blocked passes read a strong-decay flag back to re-run their pairs: no sync=False."""
    _, work = _inputs(1, 20, 1, 16, 16)
    with pytest.raises(ValueError, match=rf"^sync=False: only the split intra pass .* intra='{intra}'"):
        ik._chunked(*work[:5], None, 64, None, True, intra=intra, sync=False)


@pytest.mark.gpu
def test_on_the_gpu_a_captured_graph_holds_chunked_ex_and_its_replays_report_a_later_nan():
    """A CUDA-graph capture fails at the first host read: capturing chunked_ex is the GPU's own proof that it
    reads nothing back. Its replays equal the eager call bit for bit (bf16, a state, a partial chunk), and a
    NaN written into the captured g after the capture is reported by the replay."""
    _, work = _inputs(2, 300, 4, 128, 128, device="cuda", dtype=torch.bfloat16, state=True)
    q, k, v, g, beta, s = work
    eager = ik.chunked_ex(q, k, v, g, beta, s, 64, None, True)
    checked = ik.chunked(q, k, v, g, beta, s, 64, None, True)
    for name, a, b in zip(("output", "final state", "boundary states"), eager, checked):
        assert torch.equal(a, b), f"chunked_ex vs chunked: {name} not bit for bit"
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        ik.chunked_ex(q, k, v, g, beta, s, 64, None, True)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = ik.chunked_ex(q, k, v, g, beta, s, 64, None, True)
    graph.replay()
    torch.cuda.synchronize()
    for name, a, b in zip(("output", "final state", "boundary states", "report"), captured, eager):
        assert torch.equal(a, b), f"replay vs eager: {name} not bit for bit"
    g[1, 257, 3, 100] = float("nan")
    graph.replay()
    assert captured[3].tolist() == [1, 0], f"a NaN in g after the capture: report {captured[3].tolist()}"
    with pytest.raises(ValueError, match=r"^g: contains NaN"):
        ik.raise_on_nan(captured[3])
