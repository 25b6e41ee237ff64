"""Candidates above the mechanisms: a model port (`model`: forward, deserialize) and a serving engine
class (`serving`), each run by the checks of its level through the candidate path, each with a planted
bug of its level caught there: a port whose continuation forgets the padding of earlier calls, an
engine that hands a cancelled request's slot to a new request without clearing it."""
from __future__ import annotations

import pytest
import torch

from gate.merge_gate import provided_checks
from impl import model as im
from impl import registry
from impl.compose import Composed
from impl.serving import Engine
from invariants import serving_checks
from invariants.coverage import Recorder, recording
from invariants.engine import run_check
from invariants.matrix import BY_NAME, evaluate
from invariants.target import Target
from oracle.config import Geometry
from oracle.types import DSACache

TINY = Geometry.preset("tiny")


class ModelPort:
    """A whole-model port: here our decoder, called as a user's own forward would be."""

    class model:
        @staticmethod
        def forward(weights, input_ids, state=None, attention_mask=None, backend=None):
            return im.forward(weights, input_ids, state, attention_mask, backend)


def _all_real(state):
    """The state with every cached token flagged real: the padding of earlier calls forgotten."""
    layers = []
    for e in state.layers:
        if isinstance(e, DSACache) and e.index_rows is not None:
            rows = e.index_rows.clone()
            rows[..., -1] = 1
            e = DSACache(e.latent, rows)
        layers.append(e)
    return type(state)(state.layer_types, layers, state.seq_len)


class ModelPortForgetsPadding:
    """A port whose continuation rebuilds the cache validity from the new call's mask alone."""

    class model:
        @staticmethod
        def forward(weights, input_ids, state=None, attention_mask=None, backend=None):
            state = None if state is None else _all_real(state)
            return im.forward(weights, input_ids, state, attention_mask, backend)


class EngineAsIs(Engine):
    """A serving engine class of the user's: ours, unchanged."""


class SlotReuse(Engine):
    """Keeps a cancelled request's state as a free slot and hands it, uncleared, to the next request
    admitted under that id."""

    def __init__(self, model):
        super().__init__(model)
        self.free = {}

    def cancel(self, rid):
        self.free[rid] = self.requests[rid].state
        super().cancel(rid)

    def admit(self, rid, prompt):
        super().admit(rid, prompt)
        if rid in self.free:
            self.requests[rid].state = self.free.pop(rid)


class WithEngine:
    serving = EngineAsIs


class WithSlotReuse:
    serving = SlotReuse


def _targets(name):
    return Target(registry.get(f"test_levels:{name}"), "cpu", torch.float32), \
        Target(registry.get("torch"), "cpu", torch.float32)


def test_a_model_port_is_composed_from_impl_model_and_only_runs_the_checks_of_its_level():
    impl = registry.get("test_levels:ModelPort")
    assert isinstance(impl.model, Composed) and sorted(impl.model.provided) == ["forward"]
    assert impl.model.deserialize is im.deserialize
    runnable, not_run = provided_checks(list(BY_NAME.values()), impl, _Quiet())
    assert [c.name for c in runnable] == ["model.paths", "model.causal", "serving.state_machine"], runnable
    assert all(r.status == "not run" for r in not_run)


def test_a_model_port_is_judged_by_the_model_paths_and_its_padding_bug_is_caught():
    # the pass on one drawn example (the record's pin costs ~24 s on the interpreter, that one ~5 s); the
    # failure on the pin, which crosses the padding and, pinned, is not shrunk
    cand, base = _targets("ModelPort")
    r = run_check(BY_NAME["model.paths"]._replace(examples=()), TINY, cand, base, "ci", max_examples=1)
    assert r.status == "pass" and r.covered == ("model.forward",), r
    cand, base = _targets("ModelPortForgetsPadding")
    bad = run_check(BY_NAME["model.paths"], TINY, cand, base, "ci", max_examples=1)
    assert bad.status == "fail" and not bad.crashed and bad.covered == ("model.forward",), bad


def _serving(name):
    """The candidate's engines over the slot-reuse program, their construction recorded."""
    cand, base = _targets(name)
    rec = Recorder()
    cand = cand._replace(impl=recording(cand.impl, rec))
    return evaluate(BY_NAME["serving.state_machine"], serving_checks.SLOT_REUSE, cand, base), rec.called


def test_a_serving_engine_is_run_by_the_state_machine_and_its_slot_reuse_bug_is_caught():
    good, called = _serving("WithEngine")
    assert all(v.ok for v in good) and called == {"serving.EngineAsIs"}, called
    bad, called = _serving("WithSlotReuse")
    broken = [v for v in bad if not v.ok]
    assert broken and called == {"serving.SlotReuse"}
    assert {v.contract.quantity for v in broken} & {"state", "logits"}, [v.contract.quantity for v in broken]


@pytest.mark.parametrize("serving, match", [(3, "engine CLASS"),
                                             (type("Half", (), {"admit": lambda self: None}), "lacks")],
                         ids=["an instance, not a class", "a class without the operations"])
def test_a_serving_entry_that_is_not_an_engine_class_is_refused(serving, match, monkeypatch):
    import sys
    import types
    mod = types.ModuleType("bad_engine_candidate")
    mod.Candidate = type("Candidate", (), {"serving": serving})
    monkeypatch.setitem(sys.modules, "bad_engine_candidate", mod)
    with pytest.raises(ValueError, match=match):
        registry.get("bad_engine_candidate:Candidate")


class _Quiet:
    def print(self, *args, **kwargs):
        pass
