"""Serving scenarios as a check (`serving.state_machine`): a drawn program of serving operations runs on
three engines side by side, and after EVERY operation every live request is compared.

Engines (impl.serving.Engine, or the candidate's own engine class `Implementation.serving`): over the
float64 oracle model; over the candidate's mechanisms (its model composed by impl.model); over the
torch baseline's (the error scale of the contract). Operations (OPS; a program is a tuple of them):

    admit p          a new request with prompt p (its prefill pending), in the last freed slot if any
                     (engines recycle slots uncleared: impl/serving.py)
    admit_padded ps  several new requests prefilled as ONE left-padded batch
    prefill i n      the next n prompt tokens of live request i (n = 1 on a fresh request: a first
                     chunk of one token, which vllm #51483 routed as a decode of the slot's old state)
    decode i t       one token (the request's prefill finished first)
    step rows        ONE packed forward: per row a live request and its prefill chunk length or decode
                     tokens (zero-length rows allowed)
    verify rows      ONE packed forward whose rows with 2..4 tokens on a prefilled request are
                     speculative verify rows (the last sampled token + k <= 3 drafts), mixed with the
                     other rows as in step; then each accepts min(a, k) drafts (k <= 3: every a in
                     {0, 1, k-1, k}); consecutive verify ops are speculate/accept cycles in a row
    reorder rows o   the same rows stepped in the permuted order o
    speculate i d a  draft d, then accept a of them (rollback = restore + replay)
    fork i s c       a new request from request i's state (a prefix-cache hit) with the suffix s of its
                     prompt still to prefill (empty: none; sglang #29368 ran a short one from zeros),
                     its first c suffix tokens prefilled at once (0: by a later operation)
    cancel i p x c   cancel; a step naming it must be refused and move nothing; p: a fresh request
                     reusing the id, or None; x: the request's slot is left holding NaN first (an owner
                     whose state blew up: the next request admitted takes that slot); c: the reusing
                     request's first chunk prefilled at once (c = 1: vllm #51483's one-token first chunk)

Requests are named by their position among the live ones at the time (modulo their count), so a
program stays valid when the shrinker drops operations. Comparisons after each operation, per live
request (invariants/contracts.d/serving.toml): `history` exact; every state array and the cached
logits row against the oracle engine (kernel_replacement, the baseline engine's error as the scale);
the oracle engine's logits and state against a COLD oracle run over the request's whole history
(self_consistency: nothing of a cancelled or rejected branch, another document or a pad is visible);
a reordered step's oracle results against the drawn order's (self_consistency); a refused step
`refused` (exact: raised, nothing moved); every position of a verify row (`verify_logits`), before the
accept, against the cold oracle decoding the row's tokens one at a time after the request's history
(kernel_replacement; the oracle engine's: oracle_vs_cold).
"""
from __future__ import annotations

import dataclasses
import functools
import tempfile
from typing import NamedTuple, Optional

import numpy as np
from hypothesis import strategies as st

from invariants.check import Check
from invariants.compare import Comparison, to_numpy
from invariants.labels import label
from invariants.target import ORACLE, Target
from invariants.model_checks import base_name, geometry_of, model_cut, named_geometry, require_memory
from oracle.config import Geometry
from oracle.types import KDAState

MAX_PROMPT = 6      # tokens of a drawn prompt (and of a prefill chunk): the interpreter costs ~0.3 s a token
MAX_ROWS = 4        # rows of a packed step
MAX_OPS = 10        # operations of a drawn program
MAX_DRAFT = 3       # draft tokens of a verify row (q_len 2..MAX_DRAFT + 1)
MODEL_SEED = 3
TOKENS = 64         # token ids drawn: 0..TOKENS - 1 (a geometry's vocab_size must hold them)


class ServingCase(NamedTuple):
    """A program of serving operations (module docstring), run from empty engines, on the serving cut of
    geometry `base` (a preset's name or a config as JSON, as ModelCase's; "tiny" for cases recorded
    before the field existed)."""

    ops: tuple
    base: str = "tiny"


# ----------------------------------------------------------------------------- the models


@functools.lru_cache(maxsize=2)
def geometry(base: str = "tiny") -> Geometry:
    """`base` cut to its first layers that hold every layer kind it has (model_cut: for "tiny" the first
    five, KDA, full DSA, KDA, full DSA, shared DSA), at most 4 Sinkhorn iterations: every layer kind of
    the geometry at the least interpreter cost per token. The serving bugs are in the state's
    bookkeeping, which the geometry's dimensions shape (heads, conv width, pools, pad id): a config
    given to `glmgate run --config` is the one the drawn programs run on."""
    g = geometry_of(base, model_cut(named_geometry(base)))
    if g.vocab_size < TOKENS:
        raise ValueError(f"serving.state_machine draws token ids 0..{TOKENS - 1}; this geometry's vocab_size "
                         f"is {g.vocab_size}: give a config with vocab_size >= {TOKENS}")
    return dataclasses.replace(g, hc_sinkhorn_iters=min(g.hc_sinkhorn_iters, 4))


@functools.lru_cache(maxsize=2)
def _checkpoint(base: str = "tiny") -> str:
    from oracle.checkpoint import write_random
    require_memory(geometry(base), "serving.state_machine")
    return write_random(tempfile.mkdtemp(prefix="glmgate-serving-"), geometry(base), seed=MODEL_SEED)


@functools.lru_cache(maxsize=2)
def _weights(base: str = "tiny"):
    """The float64 weights of the serving checkpoint, read once."""
    from oracle.checkpoint import load
    return load(_checkpoint(base))


@functools.lru_cache(maxsize=8)
def _model(t: Target, base: str = "tiny"):
    """t's decoder over the serving checkpoint, converted once per target: a model holds no request
    state (the engines do), so every engine of every program can share it."""
    return t.model(_weights(base))


def oracle_model(base: str = "tiny"):
    """The oracle's decoder over the serving checkpoint (the cold reruns' model)."""
    return _model(ORACLE, base)


def _engine(t: Target, base: str = "tiny"):
    """A fresh engine over t's decoder, t's own engine class if its implementation brings one."""
    from impl.serving import Engine
    return (getattr(t.impl, "serving", None) or Engine)(_model(t, base))


@functools.lru_cache(maxsize=512)
def _cold(history: tuple, base: str = "tiny"):
    """(last logits row, state) of the oracle over `history` from an empty state (a pure function)."""
    logits, state = oracle_model(base).forward(np.asarray([history]))
    return logits[0, -1], state


@functools.lru_cache(maxsize=128)
def _decodes(history: tuple, tokens: tuple, base: str = "tiny") -> np.ndarray:
    """Logits [len(tokens), V] of the oracle decoding `tokens` ONE AT A TIME after a cold run over
    `history`: what a verify row's positions must equal (never-speculated single-token decodes)."""
    state = _cold(history, base)[1] if history else None          # a fork of a request that fed nothing yet
    rows = []
    for t in tokens:
        logits, state = oracle_model(base).forward(np.asarray([[t]]), state=state)
        rows.append(logits[0, -1])
    return np.stack(rows)


# ----------------------------------------------------------------------------- the strategy

_tokens = st.integers(0, TOKENS - 1)
_prompts = st.lists(_tokens, min_size=1, max_size=MAX_PROMPT)
_live = st.integers(0, 7)                       # a live request by position (modulo the live count)
_rows = st.lists(st.tuples(_live, st.integers(0, 4), st.lists(_tokens, max_size=2)), min_size=1,
                 max_size=MAX_ROWS)
# a verify op's rows: as _rows, then the drafts to accept; a row's tokens are a verify row's (the last
# sampled token and 1..MAX_DRAFT drafts: the branch it shrinks to) or a decode row's (0 or 1 token)
_vrows = st.lists(st.tuples(_live, st.integers(0, 4),
                            st.one_of(st.lists(_tokens, min_size=2, max_size=MAX_DRAFT + 1),
                                      st.lists(_tokens, max_size=1)),
                            st.integers(0, MAX_DRAFT)), min_size=1, max_size=MAX_ROWS)
OPS = {
    "admit": st.tuples(st.just("admit"), _prompts),
    "admit_padded": st.tuples(st.just("admit_padded"),
                              st.lists(st.lists(_tokens, min_size=1, max_size=3), min_size=2, max_size=3)),
    "prefill": st.tuples(st.just("prefill"), _live, st.integers(1, MAX_PROMPT)),
    "decode": st.tuples(st.just("decode"), _live, _tokens),
    "step": st.tuples(st.just("step"), _rows),
    "verify": st.tuples(st.just("verify"), _vrows),
    "reorder": st.tuples(st.just("reorder"), _rows, st.floats(0, 1, exclude_max=True)),
    "speculate": st.tuples(st.just("speculate"), _live, st.lists(_tokens, min_size=1, max_size=3), st.integers(0, 3)),
    "fork": st.tuples(st.just("fork"), _live, st.lists(_tokens, max_size=3), st.integers(0, 3)),
    "cancel": st.tuples(st.just("cancel"), _live, st.one_of(st.none(), _prompts), st.booleans(), st.integers(0, 3)),
}
# drawn twice as often: the verify, prefix-hit-with-suffix and recycled-slot families each need their
# operation AND a later one on the same request, which 12 CPU examples of ten-way draws rarely combine
# (a second, distinct strategy object each: one_of drops repeated ones)
TWICE = ("verify", "fork", "cancel")


@st.composite
def serving_cases(draw, base: Optional[Geometry] = None, *, max_ops: int = MAX_OPS) -> ServingCase:
    """A program: an admit first (most operations need a live request), then up to max_ops - 1
    operations of any kind, on the serving cut of `base` (the preset "tiny" when None)."""
    name = "tiny" if base is None else base_name(base)
    geometry(name)                      # a geometry the programs cannot run on is refused before any draw
    first = draw(OPS["admit"])
    rest = draw(st.lists(st.one_of(*OPS.values(), *(OPS[k].map(tuple) for k in TWICE)), max_size=max_ops - 1))
    return ServingCase(tuple(_plain(op) for op in [first, *rest]), name)


def _plain(op):
    """JSON-shaped: tuples become lists (a case round-trips through `glmgate repro`); the reorder
    permutation is stored as a float in [0, 1) that picks one at run time (rows change with shrinking)."""
    return [_plain(x) if isinstance(x, (tuple, list)) else x for x in op]


# ----------------------------------------------------------------------------- running a program


def _arrays(state) -> list:
    """(name, float64 copy) of every cached array of a HybridState: a copy, since engines update their
    KDA slots in place and a comparison is judged after the whole program ran."""
    out = []
    for i, e in enumerate(state.layers):
        if e is None:
            continue
        for field, a in zip(e._fields, e):
            if a is not None:
                out.append((f"L{i}.{field}", np.array(to_numpy(a), copy=True)))
    return out


class _Run:
    """Three engines (oracle, candidate, baseline) stepped together; `out` collects the comparisons."""

    def __init__(self, cand: Target, base: Target, geometry_name: str = "tiny"):
        self.targets, self.geometry_name = (ORACLE, cand, base), geometry_name
        self.oracle, self.cand, self.base = self.engines = tuple(_engine(t, geometry_name) for t in self.targets)
        self.next_id, self.out = 0, []
        self.verified = set()            # requests the previous operation verified (cycles in a row)

    def all(self, fn) -> None:
        for t, e in zip(self.targets, self.engines):
            with t.poisoned():
                fn(e)

    def live(self, i):
        ids = self.oracle.live()
        return ids[i % len(ids)] if ids else None

    def fresh(self):
        self.next_id += 1
        return self.next_id

    def finish_prefill(self, rid) -> None:
        n = self.oracle.pending(rid)
        if n:
            self.all(lambda e: e.prefill_chunk(rid, n))

    def rows(self, spec, accepts=None) -> list:
        """Distinct live requests with a prefill chunk (pending prompt) or decode tokens (a row may be
        empty); with `accepts` (a verify op), a row of 2+ tokens on a prefilled request is a verify row,
        and accepts[rid] the drafts it keeps: min(a, k); there a request with its prompt pending and a
        chunk length 0 has its prefill finished first (in a forward of its own) to join as a decode-phase row."""
        rows, seen = [], set()
        for i, n, toks, *a in spec:
            rid = self.live(i)
            if rid is None or rid in seen:
                continue
            seen.add(rid)
            if accepts is not None and n == 0:
                self.finish_prefill(rid)
            pending = self.oracle.requests[rid].prompt
            if pending:
                rows.append((rid, pending[:min(n, len(pending))]))
            elif accepts is not None and len(toks) >= 2:
                rows.append((rid, list(toks), True))
                accepts[rid] = min(a[0], len(toks) - 1)
            else:
                rows.append((rid, list(toks)))
        return rows

    # ------------------------------------------------------------------ comparisons

    def compare(self, where: str) -> None:
        live = self.oracle.live()
        self.out.append(Comparison("state_machine", "live_requests", np.asarray(self.cand.live(), float),
                                   np.asarray(live, float), kind="exact", where=where, axes=("slot",)))
        for rid in live:
            at = f"{where}, request {rid}"
            hist = self.oracle.history(rid)
            self.out.append(Comparison("state_machine", "history", np.asarray(self.cand.history(rid), float),
                                       np.asarray(hist, float), kind="exact", where=at, axes=("token",)))
            ref, got, bas = (_arrays(e.state(rid)) for e in self.engines)
            self.out.append(Comparison("state_machine", "layout", np.asarray([len(got)], float),
                                       np.asarray([len(ref)], float), kind="exact", where=at))
            for (name, r), (_, g), (_, b) in zip(ref, got, bas):
                self.out.append(Comparison("state_machine", "state", g, r, b, where=f"{at} {name}"))
            if not hist:
                continue
            cold, cold_state = _cold(tuple(hist), self.geometry_name)
            self.out.append(Comparison("state_machine", "cached_logits", _copy(self.cand.logits(rid)), cold,
                                       _copy(self.base.logits(rid)), where=at))
            self.out.append(Comparison("state_machine", "oracle_vs_cold", _copy(self.oracle.logits(rid)), cold,
                                       kind="self_consistency", where=at))
            for (name, c), (_, o) in zip(_arrays(cold_state), ref):
                self.out.append(Comparison("state_machine", "oracle_vs_cold", o, c, kind="self_consistency",
                                           where=f"{at} {name}"))

    # ------------------------------------------------------------------ operations

    def admit(self, prompt):
        rid = self.fresh()
        self.all(lambda e: e.admit(rid, prompt))
        _label_slot(self.oracle, rid)

    def admit_padded(self, prompts):
        rids = [self.fresh() for _ in prompts]
        if len({len(p) for p in prompts}) > 1:
            label("padded batch: rows of different lengths")
        self.all(lambda e: e.admit_padded(list(zip(rids, prompts))))

    def prefill(self, i, n):
        rid = self.live(i)
        if rid is not None:
            _label_rows([(rid, self.oracle.requests[rid].prompt[:n])], self.oracle)
            self.all(lambda e: e.prefill_chunk(rid, n))

    def decode(self, i, tok):
        rid = self.live(i)
        if rid is not None:
            self.finish_prefill(rid)
            self.all(lambda e: e.decode(rid, tok))

    def step(self, spec):
        rows = self.rows(spec)
        if rows:
            _label_rows(rows, self.oracle)
            self.all(lambda e: e.step(rows))

    def verify(self, spec, *, where):
        """ONE packed step with verify rows; each verify position's logits against the cold oracle's
        single-token decodes of the row; then every verify row accepts min(a, k) of its k drafts."""
        accepts = {}
        rows = self.rows(spec, accepts)
        if not rows:
            return
        _label_rows(rows, self.oracle)
        _label_verify(rows, accepts, self.verified)
        hist = {rid: tuple(self.oracle.history(rid)) for rid in accepts}
        got = []
        for t, e in zip(self.targets, self.engines):
            with t.poisoned():
                got.append(e.step(rows))
        for j, row in enumerate(rows):
            if len(row) < 3:
                continue
            rid, toks = row[0], tuple(row[1])
            ref = _decodes(hist[rid], toks, self.geometry_name)
            for q in range(len(toks)):
                at = f"{where}, request {rid} verify row {list(toks)} position {q}"
                ora, cand, base = (_copy(g[j][q]) for g in got)
                self.out.append(Comparison("state_machine", "verify_logits", cand, ref[q], base, where=at))
                self.out.append(Comparison("state_machine", "oracle_vs_cold", ora, ref[q], kind="self_consistency",
                                           where=at))
        for rid, a in accepts.items():
            self.all(lambda e, rid=rid, a=a: e.accept(rid, a))
        self.verified = set(accepts)

    def reorder(self, spec, pick, *, where):
        """The same rows in a permuted order: the oracle's per-request results equal the drawn order's."""
        rows = self.rows(spec)
        if not rows:
            return
        perms = [list(p) for p in _permutations(len(rows))]
        order = perms[min(int(pick * len(perms)), len(perms) - 1)]
        permuted = [rows[i] for i in order]
        if permuted != rows:
            label("reorder: a different order")
        replica = _replica(self.oracle, [r for r, _ in rows])
        self.oracle.step(rows)
        replica.step(permuted)
        for rid, _ in rows:
            at = f"{where}, request {rid} stepped in order {order}"
            self.out.append(Comparison("state_machine", "reorder", _copy(replica.logits(rid)),
                                       _copy(self.oracle.logits(rid)), kind="self_consistency", where=at))
        for t, e in zip(self.targets[1:], self.engines[1:]):
            with t.poisoned():
                e.step(permuted)

    def speculate(self, i, draft, a):
        rid = self.live(i)
        if rid is None:
            return
        a = min(a, len(draft))
        label(f"speculate: accept {'none' if a == 0 else 'all' if a == len(draft) else 'some'}")
        self.finish_prefill(rid)
        self.all(lambda e: e.speculate(rid, draft))
        self.all(lambda e: e.accept(rid, a))

    def fork(self, i, suffix=(), chunk=0):
        """A prefix hit with `suffix` pending; its first `chunk` tokens prefilled at once (0: later)."""
        src = self.live(i)
        if src is not None:
            rid = self.fresh()
            if suffix:
                label("prefix hit: a suffix shorter than a chunk to prefill")
            self.all(lambda e: e.fork(src, rid, list(suffix)))
            if suffix and chunk:
                self.all(lambda e: e.prefill_chunk(rid, chunk))

    def cancel(self, i, reuse, poison=False, chunk=0, *, where):
        """Cancel (its slot left holding NaN first when `poison`); a step naming the cancelled request
        is refused before any request moves; maybe a fresh request reuses the id (and the slot) and must
        start from nothing, whatever the slot holds: its first `chunk` tokens prefilled at once (0: later)."""
        rid = self.live(i)
        if rid is None:
            return
        if poison and any([_fill_nan(e.state(rid)) for e in self.engines]):       # every engine's slot
            label("cancelled request's slot left holding NaN")
        self.all(lambda e: e.cancel(rid))
        others = self.oracle.live()[:2]
        for e in self.engines:
            before = {r: e.history(r) for r in others}
            refused = 0.0
            try:
                e.step([(r, []) for r in others] + [(rid, [0])])
            except KeyError:
                refused = 1.0
            moved = [r for r, h in before.items() if e.history(r) != h] + ([rid] if rid in e.live() else [])
            self.out.append(Comparison("state_machine", "refused", np.asarray([refused, len(moved)], float),
                                       np.asarray([1.0, 0.0]), kind="exact",
                                       where=f"{where}: a step naming cancelled request {rid}"))
        if reuse:
            label("cancelled id reused by a fresh request")
            self.all(lambda e: e.admit(rid, reuse))
            _label_slot(self.oracle, rid)
            if chunk:
                _label_rows([(rid, reuse[:chunk])], self.oracle)
                self.all(lambda e: e.prefill_chunk(rid, chunk))


def _copy(a) -> np.ndarray:
    return np.array(to_numpy(a), copy=True)


def _permutations(n: int):
    import itertools
    return list(itertools.permutations(range(n)))


def _replica(engine, rids):
    """A new engine over the same model holding deep copies of the requests `rids`."""
    from impl.serving import Engine, Request
    out = Engine(engine.model)
    for rid in rids:
        r = engine.requests[rid]
        out.requests[rid] = Request(rid, list(r.prompt), r.state.snapshot(), list(r.history),
                                    None if r.logits is None else np.array(r.logits))
    return out


def _label_rows(rows, oracle) -> None:
    lens = [len(r[1]) for r in rows]
    if len(rows) > 1 and 0 in lens:
        label("packed: zero-length row")
    if any(n == 1 for n in lens[1:-1]):
        label("packed: 1-token row mid-batch")
    reqs = [oracle.requests[r[0]] for r in rows]
    if any(q.prompt for q in reqs) and any(not q.prompt and r[1] for q, r in zip(reqs, rows)):
        label("packed: prefill chunk and decode rows together")
    for q, r in zip(reqs, rows):
        if q.state.seq_len == 0 and len(r[1]) == 1:
            label("first chunk of one token" + (" in a recycled slot" if q.slot else ""))


def _label_slot(oracle, rid) -> None:
    slot = oracle.requests[rid].slot
    if slot:
        nan = any(np.isnan(e.recurrent).any() for e in slot if e is not None)
        label("fresh request in a recycled slot" + (" holding NaN" if nan else ""))


def _label_verify(rows, accepts, previous) -> None:
    if len(rows) > len(accepts):
        label("verify: rows mixed with prefill chunks or decode rows")
    for row in rows:
        if len(row) == 3:
            k, a = len(row[1]) - 1, accepts[row[0]]
            label(f"verify: accept {'none' if a == 0 else 'all' if a == k else 'some'} of {k}")
            if row[0] in previous:
                label("verify: speculate/accept cycles in a row")


def _fill_nan(state) -> bool:
    """Fill every KDA array of `state` with NaN in place (the slot buffers); whether there were any."""
    filled = False
    for e in state.layers:
        if isinstance(e, KDAState):
            for a in e:
                if isinstance(a, np.ndarray):
                    a.fill(np.nan)
                else:
                    a.fill_(float("nan"))
            filled = True
    return filled


def run_state_machine(case: ServingCase, cand: Target, base: Target) -> list:
    """Run the program on the oracle, candidate and baseline engines; compare after every operation."""
    run = _Run(cand, base, case.base)
    for k, op in enumerate(case.ops):
        kind, args = op[0], list(op[1:])
        where = f"after op {k} ({kind})"
        getattr(run, kind)(*args, **({"where": where} if kind in ("reorder", "cancel", "verify") else {}))
        run.compare(where)
    return run.out


# ----------------------------------------------------------------------------- pinned programs
# Each drives one serving bug class to where it shows (every mutant of impl/mutants/serving.py fails
# one); the record below pins them, so every run (`glmgate zoo` and CI too) replays them first, in
# the order of EXAMPLES: the least cost per mutant caught first, as a mutant's run stops at the first
# program it fails (SLOT_REUSE and FORK catch three each, ROLLBACK two, PADDED one; the others pin
# paths no mutant needs: the speculate a = 0 rollback, packed and reordered steps, verify cycles).

# a prefix-cache hit whose suffix (2 tokens) is shorter than a chunk
FORK = ServingCase((["admit", [3, 1, 4, 1, 5, 9]], ["prefill", 0, 12], ["fork", 0, [2, 6]], ["prefill", 1, 12]))
# the cancelled request's slot is left holding NaN; the fresh request admitted into it (its id
# reused) starts with a first chunk of one token, then decodes (one token at a time: a NaN that leaked
# is judged as state, not refused by the multi-token KDA path's NaN check)
SLOT_REUSE = ServingCase((["admit", [3, 1, 4, 1, 5, 9]], ["prefill", 0, 12], ["cancel", 0, [2], True],
                          ["prefill", 0, 1], ["decode", 0, 7]))
# a rollback (keep 1 of 3), then a verify row whose 3 drafts are all accepted
ROLLBACK = ServingCase((["admit", [3, 1, 4, 1, 5, 9]], ["prefill", 0, 12], ["speculate", 0, [2, 6, 5], 1],
                        ["verify", [[0, 0, [5, 2, 6, 5], 3]]]))
PADDED = ServingCase((["admit_padded", [[3, 1, 4, 1], [2, 7], [8]]],
                      ["step", [[0, 0, [5]], [1, 0, [6]], [2, 0, [7]]]]))
REJECT_ALL = ServingCase((["admit", [3, 1, 4, 1, 5, 9]], ["prefill", 0, 12], ["speculate", 0, [2, 6, 5], 0]))
PACKED = ServingCase((["admit", [3, 1, 4, 1, 5, 9]], ["admit", [2, 7, 1]], ["admit", [8, 2]], ["admit", [6, 6, 6]],
                      ["prefill", 1, 3], ["prefill", 2, 2],
                      ["step", [[0, 3, []], [1, 0, [5]], [2, 0, []], [3, 2, []]]],
                      ["reorder", [[0, 3, []], [1, 0, []], [2, 0, [4]], [3, 1, []]], 0.9],
                      ["cancel", 1, None]))
# three speculate/accept cycles in a row on request 1 (accept all 3, none of 1, all 2), in packed steps
# beside a decode row, a prefill chunk and a second verify row (accept 1 of 2)
VERIFY = ServingCase((["admit", [3, 1, 4, 1, 5, 9]], ["admit", [2, 7]], ["step", [[0, 6, []], [1, 2, []]]],
                      ["admit", [8, 2, 8]],
                      ["verify", [[0, 0, [5, 2, 6, 5], 3], [1, 0, [4], 0], [2, 2, [], 0]]],
                      ["verify", [[0, 0, [1, 3], 0], [1, 0, [7, 7, 1], 1]]],
                      ["verify", [[0, 0, [9, 9, 2], 2]]]))
EXAMPLES = (SLOT_REUSE, FORK, ROLLBACK, PADDED, REJECT_ALL, PACKED, VERIFY)

CHECKS = (
    Check("serving.state_machine", "serving", ServingCase, serving_cases, run_state_machine,
          "a drawn program of serving operations (admit into recycled slots, chunked prefill, packed steps, "
          "speculative verify rows and accept, speculate and roll back, fork with a suffix, cancel, reorder) "
          "on oracle, candidate and baseline engines, compared after every operation: every state array, "
          "the cached logits, every verify position, the history, a cold rerun",
          examples=EXAMPLES, cpu_examples=1, dtype="float32"),
)

