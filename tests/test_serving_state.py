"""Serving scenarios as a state machine (ARCHITECTURE.md; SERVING.md B3 / B4 P2, P3, P4, P5).

Three impl.serving.Engine instances run the same scenario side by side: the one under test over impl.model
(Triton backend), a torch-backend one (the error baseline of the bound), both on $GLMGATE_SERVING_DEVICE in
$GLMGATE_SERVING_DTYPE (default cpu, float32 there and bfloat16 on cuda), and
one over the float64 oracle (always float64 on the CPU).

Rules: admit, admit a left-padded batch (one prefill, state split per request),
prefill chunk, decode, packed step (prefill chunks, 1-token decode rows and zero-length rows in ONE
forward), reorder a batch, speculate k in 1..3 then accept a in [0, k], fork (prefix-cache hit), cancel
(then a step naming the cancelled request must be refused, and its id may be reused by a fresh request).
Invariants after every rule, for every live request:

(a) impl state arrays == oracle state arrays: rel-L2 <= k x (torch backend's rel-L2) + floor, k and the
    dtype's floor those of the whole decoder's kernel_replacement contract (model.chunked_prefill.logits in
    invariants/contracts.toml: 4 x + 1e-5 in float32)
(b) cached logits == a COLD oracle run over the request's whole history (same bound for impl; 1e-8 for
    the oracle engine, whose state must also equal the cold state): nothing of a cancelled or rejected
    branch, of another document of a packed step or of a pad is visible. Packed steps and padded batches
    run packed on every engine, so (b) is "packed == each document alone" on the oracle and (a) on impl.
    The cold run of a history is computed once (it is a pure function of the history) and the engine's
    state is compared with it after every rule.

The reorder rule also runs the oracle on the permuted rows (a replica of the requests) and requires the
same per-request logits and states as the drawn order (1e-12); impl and the baseline run the permuted
order, so (a) holds impl's permuted step to the oracle's drawn one.

The serving mutants (impl/mutants/serving.py) are the check serving.state_machine's to catch, on its
pinned programs (tests/test_framework_mutants.py; the correct engine passes them: tests/test_matrix.py).

CI: profile "ci" runs SHARDS derandomized machines (one seed each, spread over the xdist workers) of
RUNS["ci"] examples x steps each: 200 rule steps in all. Geometry: tests/test_model.py's 5-layer cut of
preset "tiny" (KDA, full DSA, KDA, full DSA, shared DSA). The Triton interpreter costs ~0.3 s per token per forward, so prompts
and chunks are short.
"""
from __future__ import annotations

import functools
import os
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, initialize, invariant, multiple, rule

import impl.model as im
import oracle.model as om
from impl.serving import Engine, Request
from invariants.contracts import lookup
from invariants.profiles import default_profile
from invariants.target import DTYPES
from oracle.checkpoint import write_random
from test_model import _geometry, _rel

# (examples, rule steps per example) of each of the SHARDS machines: ci = 4 x 5 x 10 = 200 rule steps
# (the initial admit is one of each example's steps); four shards keep pytest -n 2's workers balanced
SHARDS = 4
RUNS = {"dev": (1, 8), "ci": (5, 10), "nightly": (15, 30), "gpu": (5, 20), "explore": (10, 20)}
_EXAMPLES, _STEPS = RUNS.get(default_profile(), RUNS["dev"])
SETTINGS = settings(settings.default, max_examples=_EXAMPLES, stateful_step_count=_STEPS, deadline=None,
                    suppress_health_check=list(HealthCheck))

MAX_PROMPT = 6          # tokens of a drawn prompt (and of a prefill chunk)
MAX_ROWS = 4            # rows of a packed step


def serving_target(env=os.environ) -> tuple[str, str]:
    """(device, dtype name) of the implementation engines: $GLMGATE_SERVING_DEVICE (default cpu) and
    $GLMGATE_SERVING_DTYPE (default float32 on cpu, bfloat16 on cuda)."""
    device = env.get("GLMGATE_SERVING_DEVICE") or "cpu"
    if device != "cpu" and not device.startswith("cuda"):
        raise ValueError(f"$GLMGATE_SERVING_DEVICE: expected cpu or cuda[:N], got {device!r}")
    dtype = env.get("GLMGATE_SERVING_DTYPE") or ("float32" if device == "cpu" else "bfloat16")
    if dtype not in DTYPES:
        raise ValueError(f"$GLMGATE_SERVING_DTYPE: expected one of {sorted(DTYPES)}, got {dtype!r}")
    return device, dtype


DEVICE, DTYPE = serving_target()
if DEVICE == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
    # with CUDA present conftest leaves Triton compiling for the GPU: CPU tensors would crash every kernel
    pytest.skip("the Triton engines run on the CPU only in the interpreter (TRITON_INTERPRET=1); on a CUDA "
                "machine set GLMGATE_SERVING_DEVICE=cuda", allow_module_level=True)
# invariant (a)'s bound: the whole decoder's kernel_replacement contract, k x baseline + floor[dtype]
CONTRACT = lookup("model", "chunked_prefill", "logits")
if CONTRACT.metric != "rel_l2":
    raise ValueError(f"{CONTRACT.key} gates {CONTRACT.metric}; the serving invariants measure rel_l2")


@functools.lru_cache(maxsize=1)
def _models():
    """(oracle float64 CPU, impl Triton, impl torch baseline), the impl pair on DEVICE in DTYPE."""
    d = write_random(tempfile.mkdtemp(prefix="glmgate-serving-"), _geometry(), seed=3)
    dtype = DTYPES[DTYPE]
    return (om.load(d), im.load(d, device=DEVICE, dtype=dtype),
            im.load(d, device=DEVICE, dtype=dtype, backend="torch"))


V = _geometry().vocab_size
tokens = st.integers(0, V - 1)
prompts = st.lists(tokens, min_size=1, max_size=MAX_PROMPT)


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
    limit = CONTRACT.limit(DTYPE, b)
    assert e <= limit, (f"{tag}: impl rel-L2 {e:.3e} > {CONTRACT.k:g} x torch baseline {b:.3e} + "
                        f"{CONTRACT.floor[DTYPE]:g} = {limit:.3e} ({DEVICE}, {DTYPE})")


def _same_layout(tag, got, ref):
    assert got.seq_len == ref.seq_len, f"{tag}: seq_len {got.seq_len} vs {ref.seq_len}"
    assert [n for n, _ in _arrays(got)] == [n for n, _ in _arrays(ref)], f"{tag}: cached arrays differ"


def _same(tag, got_logits, got_state, ref_logits, ref_state, tol):
    """Logits rows and every state array within rel-L2 `tol` (oracle vs oracle)."""
    if ref_logits is None:                 # nothing fed yet
        assert got_logits is None, f"{tag}: logits of a request with no tokens"
    else:
        assert _rel(got_logits, ref_logits) <= tol, f"{tag}: logits differ"
    _same_layout(tag, got_state, ref_state)
    for (name, r), (_, g) in zip(_arrays(ref_state), _arrays(got_state)):
        assert _rel(g, r) <= tol, f"{tag}: state {name} differs"


def _replica(engine: Engine, rids) -> Engine:
    """A new Engine over the same model holding deep copies of the requests `rids`."""
    out = Engine(engine.model)
    for rid in rids:
        r = engine.requests[rid]
        out.requests[rid] = Request(rid, list(r.prompt), r.state.snapshot(), list(r.history),
                                    None if r.logits is None else np.array(r.logits))
    return out


@functools.lru_cache(maxsize=512)
def _cold(history: tuple):
    """(last logits row, state) of the oracle run over `history` from an empty state."""
    logits, state = _models()[0].forward(np.asarray([history]))
    return logits[0, -1], state


class ServingMachine(RuleBasedStateMachine):
    """The scenario machine: impl.serving.Engine over the Triton model, the torch model and the oracle."""

    reqs = Bundle("reqs")

    def __init__(self):
        super().__init__()
        o, m, t = _models()
        self.oracle, self.eng, self.base = Engine(o), Engine(m), Engine(t)
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

    @initialize(target=reqs, prompt=prompts)
    def first_request(self, prompt):
        """One live request from the start: most rules need one, and a machine that can only admit
        wastes its draws (Hypothesis gives up on the rule filter)."""
        return self.admit(prompt)

    @rule(target=reqs, prompt=prompts)
    def admit(self, prompt):
        rid = self._fresh()
        self._all(lambda e: e.admit(rid, prompt))
        return rid

    @rule(target=reqs, batch=st.lists(st.lists(tokens, min_size=1, max_size=3), min_size=2, max_size=3))
    def admit_padded(self, batch):
        """Several new requests prefilled as ONE left-padded batch; each must equal its own prefill."""
        rids = [self._fresh() for _ in batch]
        if len({len(p) for p in batch}) > 1:
            event("padded batch: rows of different lengths")
        self._all(lambda e: e.admit_padded(list(zip(rids, batch))))
        return multiple(*rids)

    @rule(rid=reqs, n=st.integers(1, MAX_PROMPT))
    def prefill_chunk(self, rid, n):
        if not self.oracle.pending(rid):
            event("prefill chunk on a fully prefilled request")
        self._all(lambda e: e.prefill_chunk(rid, n))

    @rule(rid=reqs, tok=tokens)
    def decode(self, rid, tok):
        self._finish_prefill(rid)
        self._all(lambda e: e.decode(rid, tok))

    def _draw_rows(self, data):
        """1..MAX_ROWS distinct live requests, each with a prefill chunk (pending prompt), 1-2 decode
        tokens, or nothing (a zero-length row)."""
        live = self.oracle.live()
        rids = data.draw(st.lists(st.sampled_from(live), min_size=1, max_size=MAX_ROWS, unique=True), label="rows")
        rows = []
        for rid in rids:
            pending = self.oracle.requests[rid].prompt
            if pending:
                n = data.draw(st.integers(0, min(len(pending), 4)), label=f"chunk of {rid}")
                rows.append((rid, pending[:n]))
            else:
                rows.append((rid, data.draw(st.lists(tokens, max_size=2), label=f"decode of {rid}")))
        return rows

    def _label(self, rows):
        lens = [len(t) for _, t in rows]
        if 0 in lens:
            event("packed: zero-length row")
        if any(n == 1 for n in lens[1:-1]):
            event("packed: 1-token row mid-batch")
        if any(self.oracle.requests[r].prompt for r, _ in rows) and any(
                not self.oracle.requests[r].prompt and t for r, t in rows):
            event("packed: prefill chunk and decode rows together")

    @rule(data=st.data())
    def packed_step(self, data):
        if not self.oracle.live():
            return
        rows = self._draw_rows(data)
        self._label(rows)
        self._all(lambda e: e.step(rows))

    @rule(data=st.data())
    def reorder_batch(self, data):
        """The same rows in a permuted order give the same per-request results."""
        if not self.oracle.live():
            return
        rows = self._draw_rows(data)
        perm = data.draw(st.permutations(range(len(rows))), label="order")
        self._reorder(rows, perm)

    def _reorder(self, rows, perm):
        permuted = [rows[i] for i in perm]
        if permuted != rows:
            event("reorder: a different order")
        self._label(rows)
        replica = _replica(self.oracle, [r for r, _ in rows])
        self.oracle.step(rows)
        replica.step(permuted)
        for rid, _ in rows:
            _same(f"request {rid} stepped in order {list(perm)}", replica.logits(rid), replica.state(rid),
                  self.oracle.logits(rid), self.oracle.state(rid), 1e-12)
        self.eng.step(permuted)
        self.base.step(permuted)

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

    @rule(target=reqs, rid=consumes(reqs), reuse=st.booleans(), prompt=prompts)
    def cancel(self, rid, reuse, prompt):
        """Cancel; a packed step naming the cancelled request is refused before any request moves;
        maybe a fresh request reuses the id (slot reuse) and must start from nothing."""
        self._all(lambda e: e.cancel(rid))
        others = self.oracle.live()[:2]
        before = {r: self.oracle.history(r) for r in others}
        rows = [(r, []) for r in others] + [(rid, [0])]
        for e in (self.oracle, self.eng, self.base):
            with pytest.raises(KeyError, match="not live"):
                e.step(rows)
            assert rid not in e.live()
            assert all(e.history(r) == h for r, h in before.items()), "a refused step moved a request"
        if not reuse:
            return multiple()
        event("cancelled id reused by a fresh request")
        self._all(lambda e: e.admit(rid, prompt))
        return rid

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
        for rid in self.oracle.live():
            hist = self.oracle.history(rid)
            if not hist:
                assert self.oracle.logits(rid) is None and self.eng.logits(rid) is None
                assert self.oracle.state(rid).seq_len == self.eng.state(rid).seq_len == 0
                continue
            cold, cold_state = _cold(tuple(hist))
            assert _rel(self.oracle.logits(rid), cold) <= 1e-8, f"request {rid}: oracle engine logits != cold run"
            _same_layout(f"request {rid} (oracle engine vs cold)", self.oracle.state(rid), cold_state)
            for (name, r), (_, g) in zip(_arrays(cold_state), _arrays(self.oracle.state(rid))):
                assert _rel(g, r) <= 1e-8, f"request {rid}: oracle engine state {name} != cold run"
            _bounded(f"request {rid} cached logits vs cold run", self.eng.logits(rid), self.base.logits(rid), cold)


def _shard(k: int):
    """The machine as test case k: Hypothesis seeds a derandomized run from the machine class, so
    each shard draws other scenarios, and xdist spreads the shards over its workers."""
    machine = type(f"ServingMachineShard{k}", (ServingMachine,), {"__doc__": ServingMachine.__doc__})
    case = machine.TestCase
    case.settings = SETTINGS
    return case


for _k in range(SHARDS):
    globals()[f"TestServingStateMachineShard{_k}"] = _shard(_k)


@pytest.mark.parametrize("env, expected", [
    ({}, ("cpu", "float32")),
    ({"GLMGATE_SERVING_DTYPE": "bfloat16"}, ("cpu", "bfloat16")),
    ({"GLMGATE_SERVING_DEVICE": "cuda"}, ("cuda", "bfloat16")),
    ({"GLMGATE_SERVING_DEVICE": "cuda:1", "GLMGATE_SERVING_DTYPE": "float32"}, ("cuda:1", "float32")),
], ids=["default", "cpu bf16", "cuda default dtype", "cuda:1 f32"])
def test_serving_target_reads_device_and_dtype_from_the_environment(env, expected):
    assert serving_target(env) == expected


@pytest.mark.parametrize("env, match", [({"GLMGATE_SERVING_DEVICE": "tpu"}, "GLMGATE_SERVING_DEVICE"),
                                        ({"GLMGATE_SERVING_DTYPE": "fp8"}, "GLMGATE_SERVING_DTYPE")])
def test_serving_target_refuses_an_unknown_device_or_dtype(env, match):
    with pytest.raises(ValueError, match=match):
        serving_target(env)


def test_invariant_a_bound_is_the_model_contract_for_the_engines_dtype():
    c = lookup("model", "chunked_prefill", "logits")
    _bounded("ok", np.full(4, 1.0 + (c.floor[DTYPE] * 0.9) / 2), np.ones(4), np.ones(4))
    with pytest.raises(AssertionError, match=rf"> {c.k:g} x torch baseline .* \+ {c.floor[DTYPE]:g} = .*{DTYPE}"):
        _bounded("too far", np.full(4, 1.0 + c.floor[DTYPE] * 1.1), np.ones(4), np.ones(4))


# ---------------------------------------------------------------------------------------- bad calls

def _engine():
    """An oracle engine with request 1 (prompt pending) and request 2 (prefilled)."""
    e = Engine(_models()[0])
    e.admit(1, [3, 1, 4])
    e.admit(2, [2, 7])
    e.prefill_chunk(2, 2)
    return e


# a good row first: the bad one after it must still leave every request as it was
BAD_STEPS = [
    ("step([(1, [3]), (9, [1])])", [(1, [3]), (9, [1])], KeyError, "not live"),
    ("step([(2, [1]), (2, [])])", [(2, [1]), (2, [])], ValueError, "two rows"),
    ("step([(2, [5]), (1, [4])])", [(2, [5]), (1, [4])], ValueError, "next of them"),
    ("step([(1, [3]), (2,)])", [(1, [3]), (2,)], ValueError, "pair"),
]


@pytest.mark.parametrize("rows,exc,match", [b[1:] for b in BAD_STEPS], ids=[b[0] for b in BAD_STEPS])
def test_step_refuses_bad_rows_and_moves_nothing(rows, exc, match):
    e = _engine()
    before = {r: (e.history(r), e.pending(r)) for r in e.live()}
    with pytest.raises(exc, match=match):
        e.step(rows)
    assert {r: (e.history(r), e.pending(r)) for r in e.live()} == before


BAD_ADMITS = [
    ("admit_padded([(5, [1]), (5, [2])])", [(5, [1]), (5, [2])], "distinct"),
    ("admit_padded([(2, [1]), (5, [2])])", [(2, [1]), (5, [2])], "already live"),
    ("admit_padded([(5, []), (6, [2])])", [(5, []), (6, [2])], "empty prompt"),
    ("admit_padded([])", [], "distinct"),
]


@pytest.mark.parametrize("items,match", [b[1:] for b in BAD_ADMITS], ids=[b[0] for b in BAD_ADMITS])
def test_admit_padded_refuses_bad_items(items, match):
    e = _engine()
    with pytest.raises(ValueError, match=match):
        e.admit_padded(items)
    assert e.live() == [1, 2]
