"""Serving scenarios as a state machine (ARCHITECTURE.md; SERVING.md B3 / B4 P2, P3).

Three impl.serving.Engine instances run the same scenario side by side: the one under test over impl.model
(Triton backend, float32, CPU interpreter), a torch-backend one (the error baseline of the bound), and one
over the float64 oracle. Rules: admit, prefill chunk, decode, speculate k in 1..3 then accept a in [0, k],
fork (prefix-cache hit), cancel. Invariants after every rule, for every live request:

(a) impl state arrays == oracle state arrays: rel-L2 <= 4 x (torch backend's rel-L2) + 1e-5 (tests/test_model.py)
(b) cached logits == a COLD oracle run over the request's whole history (same bound for impl; 1e-8 for
    the oracle engine, whose state must also equal the cold state): nothing of a cancelled or rejected
    branch is visible.

Each serving mutant (impl.mutants.SERVING_MUTANTS) is driven through a fixed scenario of the same machine
and must break an invariant.

Geometry: tests/test_model.py's 5-layer cut of preset "tiny" (KDA, full DSA, KDA, full DSA, shared DSA).
"""
from __future__ import annotations

import functools
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import event as _event
from hypothesis.errors import InvalidArgument
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, rule

import impl.model as im
import oracle.model as om
from impl.mutants import SERVING_MUTANTS
from impl.serving import Engine
from oracle.checkpoint import write_random
from test_model import _geometry, _rel

SETTINGS = settings(max_examples=4, stateful_step_count=8, deadline=None,
                    suppress_health_check=list(HealthCheck))


@functools.lru_cache(maxsize=1)
def _models():
    d = write_random(tempfile.mkdtemp(prefix="glmgate-serving-"), _geometry(), seed=3)
    return om.load(d), im.load(d), im.load(d, backend="torch")


V = _geometry().vocab_size
tokens = st.integers(0, V - 1)


def event(value):
    """hypothesis.event, a no-op when a rule is called by hand (the fixed mutant scenarios)."""
    try:
        _event(value)
    except InvalidArgument:
        pass


def _arrays(state):
    """(name, array) of every cached array of a HybridState."""
    out = []
    for i, e in enumerate(state.layers):
        if e is None:
            continue
        for field, a in zip(e._fields, e):
            if a is not None:
                out.append((f"L{i}.{field}", a))
    return out


def _bounded(tag, got, base, ref):
    e, b = _rel(got, ref), _rel(base, ref)
    assert e <= 4 * b + 1e-5, f"{tag}: impl rel-L2 {e:.3e} > 4 x torch baseline {b:.3e} + 1e-5"


def _same_layout(tag, got, ref):
    assert got.seq_len == ref.seq_len, f"{tag}: seq_len {got.seq_len} vs {ref.seq_len}"
    assert [n for n, _ in _arrays(got)] == [n for n, _ in _arrays(ref)], f"{tag}: cached arrays differ"


class ServingMachine(RuleBasedStateMachine):
    """The scenario machine; ENGINE is the Engine class under test (a mutant in the mutant tests)."""

    ENGINE = Engine
    reqs = Bundle("reqs")

    def __init__(self):
        super().__init__()
        o, m, t = _models()
        self.oracle, self.eng, self.base = Engine(o), self.ENGINE(m), Engine(t)
        self.next_id = 0

    def _all(self, fn):
        for e in (self.oracle, self.eng, self.base):
            fn(e)

    def _fresh(self):
        self.next_id += 1
        return self.next_id

    def _finish_prefill(self, rid):
        n = self.oracle.pending(rid)
        if n:
            event("prefill finished before decode")
            self._all(lambda e: e.prefill_chunk(rid, n))

    # ------------------------------------------------------------------ rules

    @rule(target=reqs, prompt=st.lists(tokens, min_size=1, max_size=12))
    def admit(self, prompt):
        rid = self._fresh()
        self._all(lambda e: e.admit(rid, prompt))
        return rid

    @rule(rid=reqs, n=st.integers(1, 12))
    def prefill_chunk(self, rid, n):
        if not self.oracle.pending(rid):
            event("prefill chunk on a fully prefilled request")
        self._all(lambda e: e.prefill_chunk(rid, n))

    @rule(rid=reqs, tok=tokens)
    def decode(self, rid, tok):
        self._finish_prefill(rid)
        self._all(lambda e: e.decode(rid, tok))

    @rule(rid=reqs, draft=st.lists(tokens, min_size=1, max_size=3), data=st.data())
    def speculate_accept(self, rid, draft, data):
        a = data.draw(st.integers(0, len(draft)), label="accepted")
        event(f"accept {'none' if a == 0 else 'all' if a == len(draft) else 'some'}")
        self._finish_prefill(rid)
        self._all(lambda e: e.speculate(rid, draft))
        self._all(lambda e: e.accept(rid, a))

    @rule(target=reqs, src=reqs)
    def fork(self, src):
        rid = self._fresh()
        self._all(lambda e: e.fork(src, rid))
        return rid

    @rule(rid=consumes(reqs))
    def cancel(self, rid):
        self._all(lambda e: e.cancel(rid))

    # ------------------------------------------------------------------ invariants

    @invariant()
    def same_live_requests(self):
        assert self.eng.live() == self.oracle.live() == self.base.live()

    @invariant()
    def impl_state_matches_oracle_state(self):
        for rid in self.oracle.live():
            ref, got, base = self.oracle.state(rid), self.eng.state(rid), self.base.state(rid)
            assert self.eng.history(rid) == self.oracle.history(rid), f"request {rid}: history differs"
            _same_layout(f"request {rid}", got, ref)
            for (name, r), (_, g), (_, b) in zip(_arrays(ref), _arrays(got), _arrays(base)):
                _bounded(f"request {rid} state {name}", g, b, r)

    @invariant()
    def cached_continuation_equals_cold_run(self):
        o = self.oracle.model
        for rid in self.oracle.live():
            hist = self.oracle.history(rid)
            if not hist:
                assert self.oracle.logits(rid) is None and self.eng.logits(rid) is None
                continue
            cold, cold_state = o.forward(np.asarray([hist]))
            cold = cold[0, -1]
            assert _rel(self.oracle.logits(rid), cold) <= 1e-8, f"request {rid}: oracle engine logits != cold run"
            _same_layout(f"request {rid} (oracle engine vs cold)", self.oracle.state(rid), cold_state)
            for (name, r), (_, g) in zip(_arrays(cold_state), _arrays(self.oracle.state(rid))):
                assert _rel(g, r) <= 1e-8, f"request {rid}: oracle engine state {name} != cold run"
            _bounded(f"request {rid} cached logits vs cold run", self.eng.logits(rid), self.base.logits(rid), cold)


TestServingStateMachine = ServingMachine.TestCase
TestServingStateMachine.settings = SETTINGS


# ---------------------------------------------------------------------------------------- mutants

def _machine(engine_cls):
    return type(f"Machine_{engine_cls.__name__}", (ServingMachine,), {"ENGINE": engine_cls})()


def _check(m):
    m.same_live_requests()
    m.impl_state_matches_oracle_state()
    m.cached_continuation_equals_cold_run()


def _scenario_rollback(m):
    """admit + prefill, speculate 3, accept 1 (rollback replays one token)."""
    r = m.admit([3, 1, 4, 1, 5, 9])
    m.prefill_chunk(r, 12)
    _check(m)
    m.speculate_accept(r, [2, 6, 5], _Fixed(1))
    _check(m)


def _scenario_fork(m):
    """admit + prefill, fork, decode the fork: the donor must be untouched."""
    r = m.admit([3, 1, 4, 1, 5, 9])
    m.prefill_chunk(r, 12)
    f = m.fork(r)
    _check(m)
    m.decode(f, 7)
    _check(m)


class _Fixed:
    """Stands in for st.data() in a hand-driven rule call."""

    def __init__(self, value):
        self.value = value

    def draw(self, strategy, label=None):
        return self.value


SCENARIOS = {
    "serving_rollback_keeps_conv_window": _scenario_rollback,
    "serving_fork_aliases_buffers": _scenario_fork,
    "serving_prefix_hit_drops_indexer_rows": _scenario_fork,
}


def test_fixed_scenarios_pass_on_the_correct_engine():
    for scenario in set(SCENARIOS.values()):
        scenario(_machine(Engine))


@pytest.mark.parametrize("name", sorted(SERVING_MUTANTS))
def test_serving_mutant_breaks_an_invariant(name):
    mut = SERVING_MUTANTS[name]
    assert mut.mechanism == "serving" and mut.caught_by == "serving.state_machine.state"
    with pytest.raises(AssertionError) as err:
        SCENARIOS[name](_machine(mut.factory()))
    print(f"{name}: {str(err.value).splitlines()[0]}")
