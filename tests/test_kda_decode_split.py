"""impl.kda.decode with a head's value blocks split over programs (issue 14 step 16's candidate,
impl.candidates.kda_decode_split; ours since step 39 while B·H < 2 · SMs): the same bits as one
program a head, in place and not, at every split; the arrival counters back at zero after every call; the
kernel edit that lets the first arrival write the window fails it; bad splits refused.
"""
from __future__ import annotations

import functools
import numpy as np
import pytest
import torch

from impl import kda as ik
from impl.mutants.catalogue import kernel_edited
from oracle import kda as ok
from oracle.types import KDAState
from strategies import tensors as tz


def _inputs(B, H, K, D=48, W=4, seed=0, device="cpu"):
    rng = np.random.default_rng(seed)
    w = tz.kda_weights(rng, H, K, D, W, "normal", None)
    x = tz.hidden_states(rng, B, 1, D, "normal")
    z, f, b, _ = ok.project(w, x)
    st = tz.kda_state(rng, B, H, K, W)
    t = lambda a: torch.from_numpy(np.asarray(a, dtype=np.float64)).float().to(device)  # noqa: E731
    return w.map(t), t(z[:, 0]), t(f[:, 0]), t(b[:, 0]), KDAState(t(st.recurrent), t(st.conv))


def _run(args, state, **kw):
    s = KDAState(state.recurrent.clone(), state.conv.clone())
    o, new = ik.decode(*args, s, **kw)
    return o, new.recurrent, new.conv


def check_splits(B, H, K, device="cpu", bv=None):
    w, z, f, b, state = _inputs(B, H, K, device=device)
    blocks = -(-K // (bv or ik._tile(min(64, K))))
    for inplace in (False, True):
        one = _run((w, z, f, b), state, inplace=inplace, vs=1, bv=bv)
        for vs in range(2, blocks + 1):
            got = _run((w, z, f, b), state, inplace=inplace, vs=vs, bv=bv)
            for name, x, y in zip(("o", "recurrent", "conv"), got, one):
                assert torch.equal(x, y), f"vs={vs} inplace={inplace}: {name}"
    assert all(int(a.abs().sum()) == 0 for a in ik._ARRIVALS.values()), "arrival counters left off zero"


@pytest.mark.parametrize("B,H,K", [(1, 2, 32), (2, 1, 64), (1, 3, 40)])
def test_every_split_gives_the_bits_of_one_program_a_head(B, H, K):
    check_splits(B, H, K)


@pytest.mark.gpu
def test_every_split_gives_the_bits_of_one_program_a_head_compiled():
    for B, H, K, bv in ((1, 64, 128, 32), (1, 64, 128, 64), (3, 4, 128, 16), (2, 2, 40, 16)):
        check_splits(B, H, K, device="cuda", bv=bv)


def test_auto_splits_only_small_batches_and_ours_splits_as_auto():
    dev = torch.device("cpu")   # the interpreter stands in for 4 SMs
    assert ik._value_splits(1, 2, 4, dev) == 4 and ik._value_splits(1, 2, 2, dev) == 2
    assert ik._value_splits(4, 2, 4, dev) == 1 and ik._value_splits(16, 64, 2, dev) == 1
    from impl.candidates import kda_decode_split
    from impl.launches import watching
    w, z, f, b, state = _inputs(1, 2, 32)
    # ours since step 39 as the candidate; vs=1 is ours before it
    for fn, want in ((ik.decode, 2), (kda_decode_split.decode, 2), (functools.partial(ik.decode, vs=1), 1)):
        seen = []
        with watching(lambda name, a: seen.append(a["VS"]) if name == "kda_decode_fused_fwd_kernel" else None):
            fn(w, z, f, b, KDAState(state.recurrent.clone(), state.conv.clone()))
        assert seen == [want], (fn, seen)


def test_the_first_arrival_writing_the_window_breaks_an_in_place_split_decode():
    """The planted edit (impl/mutants/kda.py DecodeFirstArrivalWritesWindow) on the interpreter, whose programs
    run in order: the first program writes the new window, the second reads it as the old."""
    w, z, f, b, state = _inputs(1, 2, 32)
    one = _run((w, z, f, b), state, inplace=True, vs=1)
    saved = dict(ik._ARRIVALS)
    ik._ARRIVALS.clear()
    try:
        with kernel_edited(ik, "kda_decode_fused_fwd_kernel", 'sem="acq_rel") == VS - 1', 'sem="acq_rel") == 0'):
            bad = _run((w, z, f, b), state, inplace=True, vs=2)
    finally:
        ik._ARRIVALS.clear()
        ik._ARRIVALS.update(saved)
    assert not torch.equal(bad[1], one[1])


@pytest.mark.parametrize("vs", [0, 3, True, 1.5, "all"])
def test_a_split_count_outside_the_heads_blocks_is_refused(vs):
    w, z, f, b, state = _inputs(1, 2, 32)
    with pytest.raises(ValueError, match=r"^vs: "):
        ik.decode(w, z, f, b, state, vs=vs)
