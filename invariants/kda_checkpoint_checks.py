"""KDA prefix-cache checkpoints at any depth (kda.checkpoint): its case, run function and check record,
beside invariants/kda_checks.py (whose core inputs it uses) to keep that module under 600 lines.

A prefill saves the state at every 64-token chunk boundary (`chunked`'s boundary states). A later request
that shares the first d tokens resumes from a checkpoint at depth d, which must be the state after
EXACTLY d tokens, whatever d is: the saved boundary state at or below d (the right row, in 64-token
units), then the d % 64 tokens after it replayed (`checkpoint`). The request then continues over the
tokens after d. Depths on and off the chunk grid are drawn, with the grid's edges (0, 1, 63, 64, 65,
127, 128, 129, the prefill's length) behind a boolean.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from hypothesis import strategies as st

from invariants.check import BadCall, Check
from invariants.compare import Comparison
from invariants.kda_checks import G0, OUT_AXES, STATE_AXES, CoreCase, _core, core_inputs
from invariants.labels import label
from invariants.target import ORACLE, Target
from strategies.geometry import kda_geometries
from strategies.sequences import sequence_lengths
from strategies.tensors import SEEDS, families

CHUNK = 64
# depths around the chunk grid: where a checkpoint is (not) a saved boundary state, and where a
# boundary row read in another unit (128-token pages) or the aligned state taken as is first differs
GRID_DEPTHS = (0, 1, 2, 63, 64, 65, 127, 128, 129, 191, 192)


class CheckpointCase(NamedTuple):
    """A chunked prefill of `core` (batch rows), restored at depth `depth` and continued to its end."""

    core: CoreCase
    depth: int


@st.composite
def checkpoint_cases(draw, base, *, max_len: int = 200) -> CheckpointCase:
    # the draws that set an example's cost first: the shrinker simplifies in draw order
    length, batch = draw(sequence_lengths(max_len=max_len)), draw(st.integers(1, 2))
    # any depth is drawn in a fixed range and wrapped into the prefill: shrinking the prefill keeps a
    # depth that still fits (a fraction of the prefill would shrink with it, to 0, where nothing fails)
    on_grid, grid, anywhere = draw(st.booleans()), draw(st.sampled_from(GRID_DEPTHS)), draw(st.integers(0, max_len))
    g = draw(kda_geometries(base))
    core = CoreCase(g.heads, g.head_dim, batch, length, None, draw(st.booleans()), draw(families()), draw(SEEDS),
                    g.lower_bound)
    return CheckpointCase(core, min(grid, length) if on_grid else anywhere % (length + 1))


def _label(case: CheckpointCase) -> None:
    d, T = case.depth, case.core.length
    label("depth 0" if d == 0 else "depth = the prefill's length" if d == T else
          "depth on the chunk grid" if d % CHUNK == 0 else "depth off the chunk grid")
    if d >= 2 * CHUNK:
        label("depth past two chunks")


def _args(t: Target, x, a: int = 0, b=None):
    """q, k, v, g, beta of tokens [a, b) on target t (g float32)."""
    x = {n: v[:, a:b] for n, v in x.items()}
    return [t.tensor(x[n]) for n in ("q", "k", "v")] + [t.tensor(x["g"], f32=True), t.tensor(x["beta"])]


def restored(t: Target, case: CheckpointCase, x, state):
    """Target t's chunked prefill, its checkpoint at the case's depth, and the request continued from
    that checkpoint (as t returned it: a prefix-cache hit): (state, continued outputs, final state), the
    last two None when the depth is the whole prefill."""
    s0 = None if state is None else t.tensor(state, f32=True)
    with t.poisoned():
        _, _, bounds = t.impl.kda.chunked(*_args(t, x), s0, chunk=CHUNK)
        if bounds is None and case.depth >= CHUNK:
            return None                      # no boundary states to restore from (run_checkpoint)
        s_d = t.impl.kda.checkpoint(*_args(t, x), bounds, s0, depth=case.depth, chunk=CHUNK)
        if case.depth == case.core.length:
            return s_d, None, None
        o, final, _ = t.impl.kda.chunked(*_args(t, x, case.depth), s_d, chunk=CHUNK, boundary_states=False)
    return s_d, o, final


def reference(t: Target, case: CheckpointCase, x, state):
    """The oracle t (float64, or on the inputs as the working dtype holds them) with no checkpoint: the
    state after exactly `depth` tokens (the token loop over them), the one pass's later outputs and its
    final state."""
    d, s0 = case.depth, None if state is None else t.tensor(state, f32=True)
    o, final = t.impl.kda.recurrent(*_args(t, x), s0)
    B, _, H, K = x["q"].shape
    s_d = t.impl.kda.recurrent(*_args(t, x, 0, d), s0)[1] if d else \
        (t.tensor(np.zeros((B, H, K, x["v"].shape[-1])), f32=True) if s0 is None else s0)
    return s_d, o[:, d:], final


def run_checkpoint(case: CheckpointCase, cand: Target, base: Target):
    """Candidate and baseline checkpoints at the case's depth (and their continuations) against the
    oracle's state after exactly that many tokens (and its one pass)."""
    _label(case)
    x, state, _ = core_inputs(case.core)
    ref, held = reference(ORACLE, case, x, state), reference(cand.held_oracle(), case, x, state)
    got, bas = restored(cand, case, x, state), restored(base, case, x, state)
    if got is None:
        # judged as the boundary states the candidate left out: NOT COVERED if it declares them
        # NOT_PROVIDED, a broken contract if it returned None without saying so
        return [Comparison("chunked", "boundary_states", None, None)]
    res = [Comparison("checkpoint", "state", got[0], ref[0], bas[0], held_reference=held[0],
                      axes=("batch", *STATE_AXES))]
    if got[1] is not None:
        res += [Comparison("checkpoint", "output", got[1], ref[1], bas[1], held_reference=held[1], axes=OUT_AXES),
                Comparison("checkpoint", "final_state", got[2], ref[2], bas[2], held_reference=held[2],
                           axes=("batch", *STATE_AXES))]
    return res


CHECKS = (
    Check("kda.checkpoint", "kda", CheckpointCase, checkpoint_cases, run_checkpoint,
          "a prefix-cache checkpoint at ANY depth (on or off the 64-token grid) is the state after exactly that "
          "many tokens: the chunked prefill's boundary state at or below it plus the tokens after it replayed; "
          "the request continued from it matches the one pass",
          examples=(CheckpointCase(CoreCase(G0.heads, G0.head_dim, 1, 70, None, True, "normal", 0), 65),
                    CheckpointCase(CoreCase(G0.heads, G0.head_dim, 2, 200, None, False, "gate_high", 1), 150),
                    CheckpointCase(CoreCase(G0.heads, G0.head_dim, 1, 9, None, True, "gate_low", 2), 5)),
          cpu_examples=10),
)


def _bounds(t: Target, rows: int, T: int = 70):
    """`rows` boundary states [1, rows, H, K, V] (zeros) on target t, for a prefill of T tokens."""
    return t.tensor(np.zeros((1, rows, G0.heads, G0.head_dim, G0.head_dim)), f32=True)


# the kda namespace's calls to refuse (tests/test_bad_calls.py), beside kda_checks.BAD_CALLS
BAD_CALLS_BY_MECHANISM = {"kda": (
    BadCall("checkpoint(depth past T)", lambda ns, t: ns.checkpoint(*_core(t, T=5), None, None, 6),
            r"^depth: expected an int in \[0, T=5\]"),
    BadCall("checkpoint(depth -1)", lambda ns, t: ns.checkpoint(*_core(t, T=5), None, None, -1), r"^depth"),
    BadCall("checkpoint(boundary_states of another T)",
            lambda ns, t: ns.checkpoint(*_core(t, T=70), _bounds(t, 2), None, 64), r"^boundary_states: expected"),
    BadCall("checkpoint(no boundary_states at depth 64)",
            lambda ns, t: ns.checkpoint(*_core(t, T=70), None, None, 64), r"^boundary_states: expected"),
)}
