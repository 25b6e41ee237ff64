"""A prefix-cache checkpoint at any depth (`checkpoint`): the oracle's against its own token loop, and
what the implementations return where the depth sits on the chunk grid (kda.checkpoint, in
tests/test_matrix.py, holds the implementations to the oracle at every drawn depth)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from impl import registry
from invariants import kda_checkpoint_checks as kcc
from invariants.contracts import float64_tolerance
from invariants.target import Target
from oracle import kda as okda
from oracle.config import Geometry
from strategies import tensors as tz

TINY = Geometry.preset("tiny")
REORDERED_SUM = float64_tolerance("reordered_sum")


def _inputs(T: int, seed: int, family: str = "gate_high", initial: bool = True):
    rng = np.random.default_rng(seed)
    x = tz.core_tensors(rng, 2, 8, 2, T, family)
    return x, tz.initial_state(rng, 2, 2, 8) if initial else None


@given(st.integers(1, 200), st.data())
@example(130, None)
def test_the_oracles_checkpoint_is_its_token_loops_state_after_exactly_depth_tokens(T, data):
    depth = 128 if data is None else data.draw(st.integers(0, T))
    x, state = _inputs(T, T)
    args = [x[n] for n in ("q", "k", "v", "g", "beta")]
    _, _, bounds = okda.chunked(*args, state, chunk=64)
    got = okda.checkpoint(*args, bounds, state, depth)
    want = okda.recurrent(*(a[:, :depth] for a in args), state)[1] if depth else state
    assert np.abs(got - want).max() <= REORDERED_SUM * max(1.0, np.abs(want).max()), (T, depth)


@pytest.mark.parametrize("impl", ["triton", "torch"])
def test_a_depth_on_the_grid_restores_the_saved_boundary_state_bit_for_bit(impl):
    t = Target(registry.get(impl), "cpu", torch.float32)
    x, state = _inputs(130, 3)
    args = kcc._args(t, x)
    s0 = t.tensor(state, f32=True)
    _, _, bounds = t.impl.kda.chunked(*args, s0, chunk=64)
    for depth, want in ((0, s0), (64, bounds[:, 0]), (128, bounds[:, 1])):
        assert torch.equal(t.impl.kda.checkpoint(*args, bounds, s0, depth), want), depth
