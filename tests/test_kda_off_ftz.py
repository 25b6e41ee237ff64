"""The off-diagonal kernel's exps flushed below float32's normal range (issue 14 step 33, ours since:
SplitTiles(off_ftz=True), impl.candidates.kda_off_ftz): a GPU compile's option (inline PTX), so on the interpreter
it is tl.exp's path (ours before step 33) bit for bit; on the GPU in bf16 the same bits where no factor falls below
e^-87, and within 2x tl.exp's error against the oracle where they do (the bounded gate's extreme and the softplus
gate's strong decays)."""
from __future__ import annotations

import functools

import pytest
import torch

from impl import kda as ik
from tests.test_kda_intra_blocked import _as_bf16_holds, _compare, _inputs

_OFF_FTZ = ik.SplitTiles(off_ftz=True)
_TL_EXP = ik.SplitTiles(off_ftz=False)


def test_on_the_interpreter_the_option_changes_nothing():
    _, work = _inputs(1, 150, 2, 32, 32, lo=-20.0, state=True)
    flushed = ik._chunked(*work[:5], work[5], 64, None, True, split=_OFF_FTZ)
    kept = ik._chunked(*work[:5], work[5], 64, None, True, split=_TL_EXP)
    assert all(torch.equal(a, b) for a, b in zip(flushed, kept))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_the_gpu_the_same_bits_where_no_factor_falls_below_e_minus_87():
    """g >= -0.1 a token: a chunk falls at most 6.3, so every factor is a normal float32 either way."""
    for B, T, H in ((1, 1000, 4), (2, 300, 2)):
        _, work = _inputs(B, T, H, 128, 128, lo=-0.1, device="cuda", dtype=torch.bfloat16, state=True)
        flushed = ik._chunked(*work[:5], work[5], 64, None, True, split=_OFF_FTZ)
        kept = ik._chunked(*work[:5], work[5], 64, None, True, split=_TL_EXP)
        assert all(torch.equal(a, b) for a, b in zip(flushed, kept)), (B, T, H)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("lo", [-5.0, -20.0])
def test_in_bf16_on_the_gpu_the_flushed_exps_match_the_oracle_as_closely_as_tl_exp(lo):
    """-5 a token: the bounded gate's extreme, whose earlier blocks' column factors reach e^-315; -20: the
    softplus gate's strong decays (the diagonal kernel's pairs too)."""
    fn = functools.partial(ik._chunked, split=_OFF_FTZ)
    for B, T, H in ((1, 300, 4), (2, 64, 2), (1, 1000, 3)):
        exact, work = _inputs(B, T, H, 128, 128, lo=lo, device="cuda", dtype=torch.bfloat16, state=True)
        exact = _as_bf16_holds(exact)
        _compare(exact, work, factor=2.0, fn=fn, ours=functools.partial(ik._chunked, split=_TL_EXP))
