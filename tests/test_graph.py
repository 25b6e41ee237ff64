"""The CUDA-graph decode steps (impl/graph.py) and their planted bugs, beyond what the matrix runs: the
graph mutants are right eagerly and wrong only under replay, and a capture runs nothing on the pool.
(kda.graph_replay and mla.graph_replay themselves run in tests/test_matrix.py, the mutants in
tests/test_framework_mutants.py, the bad calls in tests/test_bad_calls.py.)
"""
from __future__ import annotations

import pytest
import torch

from impl import mutants, registry
from invariants.matrix import BY_NAME, evaluate
from invariants.target import Target
from oracle.types import KDAState

GRAPH_MUTANTS = sorted(n for n, m in mutants.MUTANTS.items() if m.check.endswith(".graph_replay"))


def test_every_graph_check_has_mutants_of_both_kinds_of_staleness():
    """A buffer not refreshed before a replay, and a host-side value fixed at capture, for each check."""
    assert {mutants.get(n).check for n in GRAPH_MUTANTS} == {"kda.graph_replay", "mla.graph_replay"}
    assert len(GRAPH_MUTANTS) >= 4


@pytest.mark.parametrize("name", GRAPH_MUTANTS)
def test_a_graph_mutant_is_right_eagerly_and_stale_only_under_replay(name):
    m = mutants.get(name)
    check = BY_NAME[m.check]
    cand = Target(registry.get(f"mutant:{name}"), "cpu", torch.float32)
    base = Target(registry.get("torch"), "cpu", torch.float32)
    verdicts = evaluate(check, check.examples[0], cand, base)
    eager = [v for v in verdicts if v.contract.path == "graph_eager"]
    assert eager and all(v.ok for v in eager), [v.message for v in eager if not v.ok]
    stale = [v for v in verdicts if (v.contract.path, v.contract.quantity) == ("graph_replay", "vs_eager")]
    assert any(not v.ok for v in stale), f"{name}: the replay equals the eager run on {check.examples[0]}"


@pytest.mark.parametrize("impl", ["triton", "torch"])
def test_a_capture_runs_nothing_on_the_pool_and_the_first_replay_runs_the_first_step(impl):
    from invariants.graph_checks import K0, KDAGraphCase, kda_graph_inputs

    t = Target(registry.get(impl), "cpu", torch.float32)
    w, pool, xs = kda_graph_inputs(KDAGraphCase(K0, 2, 2, ((1,), (1,)), "normal", 3))
    start = t.state(pool)
    step = t.impl.kda.decode_graph(t.weights(w), start, 2)
    args = (t.tensor(xs[0][0]), t.tensor(xs[0][1], f32=True), t.tensor(xs[0][2]), t.index((1,), long=True))
    step.capture(*args)
    assert torch.equal(step.pool.recurrent, start.recurrent) and torch.equal(step.pool.conv, start.conv)
    o = step.replay(*args)
    # the step decodes max_batch = 2 rows (the live one, then a zero row on a zero scratch slot): the eager
    # expectation runs the same two rows, since a torch GEMM's bits may follow its row count (measured: the
    # torch baseline's B=1 and B=2 decodes differ in the last bit on one CPU and agree on another)
    pad = lambda a: torch.cat([a, torch.zeros_like(a[:1])])
    expect, new = t.impl.kda.decode(t.weights(w), *(pad(a) for a in args[:3]),
                                    KDAState(pad(start.recurrent[1:]), pad(start.conv[1:])))
    assert torch.equal(o, expect[:1]) and torch.equal(step.pool.recurrent[1], new.recurrent[0])
    assert torch.equal(step.pool.recurrent[0], start.recurrent[0])        # a slot no row used
