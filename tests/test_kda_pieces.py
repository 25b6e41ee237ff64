"""A long B = 1 row in pieces along its tokens, each piece's state pass on a second stream beside the next piece's
intra pass (issue 14 step 36, SplitTiles(pieces=...); impl.candidates.kda_pieces): the same launches on fewer chunks
each, the state handed from piece to piece in float32, so the bits of the unpieced row (pieces=1) on every input,
outputs, final state, boundary states and the NaN report. On the CPU (float32, the interpreter runs the pieces in
order) with every torch.empty NaN-filled, and a spy on the state pass's launches proving the pieces ran; on the GPU
in bf16 at full size, where the second stream makes it a question of ordering (a state pass that ran before its
piece's intra pass would read the allocator's leftovers), eagerly and replayed from a captured graph."""
from __future__ import annotations

import pytest
import torch

from impl import kda as ik
from impl.candidates import kda_pieces as cand
from tests.test_kda_intra_blocked import _inputs
from tests.test_kda_x_w import _same
from tests.test_kda_x_w import nan_empty  # noqa: F401 (a fixture)

_PIECES = ik.SplitTiles(pieces=4)
_WHOLE = ik.SplitTiles(pieces=1)


class _StateLaunches:
    """The state kernel's launches (grid, T) while the context is open."""

    def __init__(self, monkeypatch):
        self.launches, real = [], ik.kda_state_chunked_fwd_kernel
        spy = self

        class Spy:
            def __getitem__(self, grid):
                def launch(*args, **kwargs):
                    spy.launches.append((grid, args[13]))
                    return real[grid](*args, **kwargs)
                return launch
        monkeypatch.setattr(ik, "kda_state_chunked_fwd_kernel", Spy())


def test_piece_bounds_are_whole_chunks_and_cover_the_row():
    # the interpreter's minimum is one chunk a piece
    assert ik._piece_bounds(321, 4) == [(0, 64), (64, 192), (192, 256), (256, 321)]
    assert ik._piece_bounds(130, 4) == [(0, 64), (64, 128), (128, 130)]
    assert ik._piece_bounds(256, 2) == [(0, 128), (128, 256)]
    assert ik._piece_bounds(64, 4) == [] and ik._piece_bounds(100, 1) == []


# one case: a given state, boundary states, a partial last chunk; the pieces change no kernel's arithmetic (the
# strong-decay pairs pass, the packed rows and the rest are the matrix's), only which chunks a launch walks
@pytest.mark.parametrize("T,lo,state,boundary", [(200, -0.1, True, True)])
def test_on_the_cpu_the_same_bits_as_one_piece(nan_empty, monkeypatch, T, lo, state, boundary):
    # 4 heads: the interpreter's state pass then runs one program a head without segments (4 stand-in SMs)
    _, work = _inputs(1, T, 4, 16, 16, lo=lo, seed=5, state=state)
    args = (*work[:5], work[5], 64, None, boundary)
    whole = ik._chunked(*args, split=_WHOLE)
    assert all(bool(torch.isfinite(a).all()) for a in whole if a is not None)
    spy = _StateLaunches(monkeypatch)
    assert _same(ik._chunked(*args, split=_PIECES), whole)
    bounds = ik._piece_bounds(T, 4)
    assert [t for _, t in spy.launches] == [t1 - t0 for t0, t1 in bounds] and len(bounds) >= 2
    ex = cand.chunked_ex(*args)
    assert _same(ex[:3], whole) and ex[3].tolist() == [0, 0]


@pytest.mark.parametrize("B,H,cu,nseg", [(2, 4, None, None), (1, 4, [0, 70, 140], None), (1, 4, None, 2)])
def test_rows_that_are_not_cut_run_as_before(monkeypatch, B, H, cu, nseg):
    """Two rows, packed documents, segments (forced here; 3 heads or fewer on the interpreter's 4 stand-in SMs
    take them too): no piece, ours' bits."""
    _, work = _inputs(B, 140, H, 16, 16, lo=-1.0, seed=6, state=cu is None)
    cu_t = None if cu is None else torch.tensor(cu)
    args = (*work[:5], work[5], 64, cu_t, True)
    whole = ik._chunked(*args, split=_WHOLE, nseg=nseg)
    spy = _StateLaunches(monkeypatch)
    assert _same(ik._chunked(*args, split=_PIECES, nseg=nseg), whole)
    assert len({t for _, t in spy.launches}) == 1


@pytest.mark.parametrize("where", [150])
def test_a_nan_in_a_later_piece_is_reported(where):
    _, work = _inputs(1, 200, 4, 16, 16, lo=-1.0, seed=7)
    g = work[3].clone()
    g[0, where, 1, 3] = float("nan")
    args = (work[0], work[1], work[2], g, work[4], None, 64, None, False)
    assert cand.chunked_ex(*args)[3].tolist() == [1, 0]
    with pytest.raises(ValueError, match="g"):
        cand.chunked(*args)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("T,lo", [(4100, -5.0), (16384, -0.1), (2048, -20.0)])
def test_on_the_gpu_in_bf16_the_same_bits_as_one_piece(T, lo):
    """64 heads of 128: the state pass runs one program a (V-block, head), so the row is cut (16 chunks a piece
    at least): 4, 4 and 2 pieces. Three calls each, eager, then chunked_ex replayed from a captured graph."""
    _, work = _inputs(1, T, 64, 128, 128, lo=lo, seed=8, device="cuda", dtype=torch.bfloat16, state=True)
    args = (*work[:5], work[5], 64, None, True)
    whole = ik._chunked(*args, split=_WHOLE)
    assert len(ik._piece_bounds(T, 4)) == (2 if T == 2048 else 4)
    for _ in range(3):
        assert _same(ik._chunked(*args, split=_PIECES), whole), (T, lo)
    ex_whole = ik._chunked(*args, split=_WHOLE, sync=False)
    cand.chunked_ex(*args)          # compiled before the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = cand.chunked_ex(*args)
    for _ in range(2):
        graph.replay()
        torch.cuda.synchronize()
        assert _same(captured, ex_whole), (T, lo)


@pytest.mark.parametrize("pieces", [0, -2, 2.0, True])
def test_a_bad_piece_count_is_refused(pieces):
    _, work = _inputs(1, 70, 1, 16, 16)
    with pytest.raises(ValueError, match="pieces"):
        ik._chunked(*work[:5], None, 64, None, False, split=ik.SplitTiles(pieces=pieces))
