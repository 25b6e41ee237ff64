"""The diagonal kernel's NaN report from Γ_last and β with no reduction (issue 14 step 32, ours since; its
candidate impl.candidates.kda_diag_nan_last): the report the counts over Γ and β gave, wherever the NaN sits (a
chunk's first, middle and last rows, a partial last chunk, packed documents), naming g or β as `chunked` does,
nothing for a NaN in k; and, on finite inputs, the counts' bits (only the report's code differs)."""
from __future__ import annotations

import pytest
import torch

from impl import kda as ik
from impl.candidates import kda_diag_nan_last as cand
from tests.test_kda_intra_blocked import _inputs

CU = torch.tensor([0, 49, 49, 120, 150])


@pytest.fixture(scope="module")
def work():
    return _inputs(1, 150, 2, 32, 16, lo=-1.0, seed=8)[1]


def _planted(work, name, row, value=float("nan"), col=5):
    q, k, v, g, beta, _ = (a.clone() if a is not None else None for a in work)
    x = {"q": q, "k": k, "g": g, "beta": beta}[name]
    if name == "beta":
        x[0, row, 1] = value
    else:
        x[0, row, 1, col] = value
    return q, k, v, g, beta


# rows: 64 a chunk's first (its Γ_last still sees it), 101 inside its third block, 127 its last, 149 the last
# row of the partial last chunk; with CU, 119 the last row of a document and 48 the last row before an empty one
@pytest.mark.parametrize("name,row,cu,want", [
    ("g", 64, None, [1, 0]), ("g", 101, None, [1, 0]), ("g", 127, None, [1, 0]), ("g", 149, None, [1, 0]),
    ("beta", 64, None, [0, 1]), ("beta", 149, None, [0, 1]),
    ("g", 119, CU, [1, 0]), ("beta", 48, CU, [0, 1]),
    ("k", 101, None, [0, 0]),
])
def test_the_report_names_the_input_wherever_the_nan_sits(work, name, row, cu, want):
    info = cand.chunked_ex(*_planted(work, name, row), work[5] if cu is None else None, 64, cu, True)[3]
    assert info.tolist() == want


def test_an_inf_meeting_a_minus_inf_in_g_is_reported_as_g(work):
    """Γ turns NaN where +inf and -inf meet in its sum, as ours' count over Γ sees it."""
    q, k, v, g, beta = _planted(work, "g", 70, float("inf"))
    g[0, 90, 1, 5] = float("-inf")
    assert cand.chunked_ex(q, k, v, g, beta, None, 64, None, True)[3].tolist() == [1, 0]


COUNTS = cand.TILES._replace(diag_nan_last=False)


@pytest.mark.parametrize("cu", [None, CU])
def test_finite_inputs_give_the_counts_bits(work, cu):
    args = (*work[:5], work[5] if cu is None else None, 64, cu, True)
    counts = ik._chunked(*args, split=COUNTS, sync=False)
    assert all(torch.equal(a, b) for a, b in zip(cand.chunked_ex(*args)[:3], counts[:3]))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name,row,want", [("g", 64, [1, 0]), ("g", 127, [1, 0]), ("g", 149, [1, 0]),
                                           ("beta", 149, [0, 1]), ("k", 101, [0, 0])])
def test_the_report_on_the_gpu_in_bf16(name, row, want):
    _, w = _inputs(1, 150, 2, 64, 64, lo=-1.0, seed=8, device="cuda", dtype=torch.bfloat16)
    info = cand.chunked_ex(*_planted(w, name, row), None, 64, None, True)[3]
    assert info.tolist() == want
    args = (*w[:5], None, 64, None, True)
    counts = ik._chunked(*args, split=COUNTS, sync=False)
    assert all(torch.equal(a, b) for a, b in zip(cand.chunked_ex(*args)[:3], counts[:3]))
