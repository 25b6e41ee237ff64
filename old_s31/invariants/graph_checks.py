"""CUDA-graph replay of the decode hot paths (docs/candidates.md section 15): a drawn sequence of decode
steps with changing metadata run (a) eagerly and (b) through ONE step captured at the first step and
replayed with every step's inputs and metadata copied into its persistent buffers (impl/graph.py).

The replay must equal the eager run bitwise (same kernels, same inputs: `graph_replay.vs_eager`, exact), and
both must hold the kernel_replacement contract against the oracle (`graph_eager.*`, `graph_replay.*`), the
oracle and the baseline running the same steps without a graph: each live row's state (KDA) or cached
latents (MLA) gathered from a pool by slot and written back.

Metadata the steps change: which pool slot each row reads and writes (rows join, leave and change
places: padding rows fill the captured batch), and for MLA each row's cache length (growing by one per
step, different per row) and its selection (how many positions, newest always first, then -1; an empty
row selects none). A buffer rebound instead of written, a host-side value taken at capture, or padding
rows left on the slots of rows that left all leave the eager run right and the replay stale (vllm #34874).

Both checks call optional functions (`kda.decode_graph`, `mla.absorbed_graph`): a candidate without them
is not run here, and ours never stands in for them.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from hypothesis import strategies as st

from invariants.check import BadCall, Check
from invariants.compare import Comparison
from invariants.labels import label
from invariants.target import ORACLE, Target
from oracle import kda as okda
from oracle import mla as omla
from oracle.config import Geometry
from oracle.types import KDAState
from strategies import tensors as tz
from strategies.geometry import DSAGeometry, KDAGeometry, dsa_geometries, kda_geometries
from strategies.tensors import SEEDS, families

TINY = Geometry.preset("tiny")     # the pinned examples' geometry
MAX_STEPS = 5
# a selection wider than two kernel blocks of 64 rows: a GPU then splits it across programs and merges
# (flash-decoding) inside the captured step; the tiny geometry's 11 never does
WIDE_TOPK, WIDE_KPOOL = 256, 4


# ------------------------------------------------------------------------ cases


class KDAGraphCase(NamedTuple):
    """Decode steps of requests held in a pool of `slots` KDA states, through one step captured at
    `max_batch` rows: steps[i] is the slot of each live row of step i, in row order."""

    geometry: KDAGeometry
    slots: int
    max_batch: int
    steps: tuple[tuple[int, ...], ...]
    family: str
    seed: int


class MLAGraphCase(NamedTuple):
    """Sparse MLA decode steps over a latent cache of `slots` slots (cached[s] tokens in slot s before the
    first step), through one step captured at `max_batch` rows: steps[i] is the slot of each live row of
    step i, keep[i][r] how many positions that row selects (at most the width and its length; 0: none)."""

    geometry: DSAGeometry
    slots: int
    max_batch: int
    cached: tuple[int, ...]
    steps: tuple[tuple[int, ...], ...]
    keep: tuple[tuple[int, ...], ...]
    family: str
    seed: int


@st.composite
def step_slots(draw, slots: int, max_batch: int, *, max_steps: int = MAX_STEPS) -> tuple:
    """2..max_steps steps (the first is the capture's: a replay goes stale only when a later step's
    metadata differs), each the distinct slots of its 1..min(max_batch, slots) live rows in row order;
    shrinks towards two steps of one row on slot 0."""
    # a prefix of a permutation, not a list drawn unique: rejected duplicates make Hypothesis's targeting
    # phase retry choice sequences it has already seen (measured: 25 minutes on 150 examples of one seed)
    rows = st.tuples(st.permutations(range(slots)), st.integers(1, min(max_batch, slots))).map(
        lambda p: tuple(p[0][:p[1]]))
    return tuple(draw(st.lists(rows, min_size=2, max_size=max_steps)))


@st.composite
def kda_graph_cases(draw, base) -> KDAGraphCase:
    g = draw(kda_geometries(base))
    # an engine's pool holds at least the captured batch: padding rows then come from rows that left
    max_batch = draw(st.integers(1, 4))
    slots = max_batch + draw(st.integers(0, 2))
    return KDAGraphCase(g, slots, max_batch, draw(step_slots(slots, max_batch)), draw(families()), draw(SEEDS))


@st.composite
def mla_graph_cases(draw, base) -> MLAGraphCase:
    """mla steps over the base geometry's pool sizes, or (a drawn boolean) a wide selection (topk 256,
    up to ~300 cached tokens; at most 2 rows and 2 steps, for the interpreter's sake): the width a GPU
    splits across programs inside the captured step."""
    wide = draw(st.booleans())
    g = draw(dsa_geometries(base, vary=False if wide else None))
    if wide:
        g = g._replace(topk=WIDE_TOPK, kpool=WIDE_KPOOL)
    max_batch = draw(st.integers(1, 2 if wide else 4))
    slots = max_batch + draw(st.integers(0, 1 if wide else 2))
    cached = tuple(draw(st.lists(st.integers(0, g.slots + 40), min_size=slots, max_size=slots)))
    steps = draw(step_slots(slots, max_batch, max_steps=2 if wide else MAX_STEPS))
    # as many positions as the width, or all the row has, or (an empty row) none: the boundaries first
    width = st.one_of(st.sampled_from((g.slots, 0)), st.integers(0, g.slots))
    keep = tuple(tuple(draw(width) for _ in s) for s in steps)
    return MLAGraphCase(g, slots, max_batch, cached, steps, keep, draw(st.sampled_from(("normal", "large"))),
                        draw(SEEDS))


def _label_steps(steps, max_batch: int) -> None:
    for a, b in zip(steps, steps[1:]):
        if set(b) - set(a):
            label("a request joins")
        if set(a) - set(b):
            label("a request leaves")
        if [s for s in a if s in b] != [s for s in b if s in a]:
            label("requests change rows")
    if any(len(s) < max_batch for s in steps):
        label("padding rows in the captured batch")


# ---------------------------------------------------------------- KDA: kda.decode_graph


def kda_graph_inputs(case: KDAGraphCase):
    """(weights, the pool [P, ...] before the steps, per step (z [B, C], f [B, H·K], b [B, H]))."""
    g = case.geometry
    rng = np.random.default_rng(case.seed)
    w = tz.kda_weights(rng, g.heads, g.head_dim, g.hidden, g.conv_width, case.family, g.lower_bound)
    pool = tz.kda_state(rng, case.slots, g.heads, g.head_dim, g.conv_width)
    rows = [len(s) for s in case.steps]
    z, f, b, _ = okda.project(w, tz.hidden_states(rng, sum(rows), 1, g.hidden, case.family))
    ends = np.cumsum([0] + rows)
    return w, pool, [(z[a:e, 0], f[a:e, 0], b[a:e, 0]) for a, e in zip(ends, ends[1:])]


def _stack(t: Target, rows):
    """Target t's rows [...] stacked into [n, ...]."""
    return t.cat([r[None] for r in rows], 0)


def pool_decode(t: Target, w, pool0: KDAState, steps, xs):
    """The steps on target t without a graph, one `decode` call each over the live rows' states gathered
    from a pool by slot and written back: (outputs per step, the pool after them)."""
    wt, pool = t.weights(w), t.state(pool0)
    rec, conv = [pool.recurrent[s] for s in range(len(pool0.recurrent))], [pool.conv[s] for s in range(len(pool0.conv))]
    outs = []
    for slots, (z, f, b) in zip(steps, xs):
        state = KDAState(_stack(t, [rec[s] for s in slots]), _stack(t, [conv[s] for s in slots]))
        with t.poisoned():
            o, new = t.impl.kda.decode(wt, t.tensor(z), t.tensor(f, f32=True), t.tensor(b), state)
        for r, s in enumerate(slots):
            rec[s], conv[s] = new.recurrent[r], new.conv[r]
        outs.append(o)
    return outs, KDAState(_stack(t, rec), _stack(t, conv))


def graph_steps(step, t: Target, args, replay: bool):
    """Every step's inputs through `step` (a GraphStep): eagerly, or captured at the first and replayed;
    each output copied before the next step overwrites it."""
    outs = []
    for i, a in enumerate(args):
        with t.poisoned():
            if replay and i == 0:
                step.capture(*a)
            outs.append((step.replay(*a) if replay else step.eager(*a)).clone())
    return outs


def graph_decode(t: Target, w, pool0: KDAState, case: KDAGraphCase, xs, replay: bool):
    """The steps through the candidate's kda.decode_graph: (outputs per step, its pool after them)."""
    with t.poisoned():
        step = t.impl.kda.decode_graph(t.weights(w), t.state(pool0), case.max_batch)
    args = [(t.tensor(z), t.tensor(f, f32=True), t.tensor(b), t.index(slots, long=True))
            for slots, (z, f, b) in zip(case.steps, xs)]
    outs = graph_steps(step, t, args, replay)
    return outs, step.pool.map(lambda a: a.clone())


def run_kda_graph(case: KDAGraphCase, cand: Target, base: Target):
    """Eager and replayed decode steps of the candidate: replay == eager bitwise, both within the decode
    contract of the oracle (the baseline running the same steps without a graph)."""
    _label_steps(case.steps, case.max_batch)
    w, pool0, xs = kda_graph_inputs(case)
    ref, held, bas = (pool_decode(t, w, pool0, case.steps, xs) for t in (ORACLE, cand.held_oracle(), base))
    runs = {"graph_eager": graph_decode(cand, w, pool0, case, xs, False),
            "graph_replay": graph_decode(cand, w, pool0, case, xs, True)}
    res = []
    for i in range(len(case.steps)):
        res += [Comparison(p, "output", o[i], ref[0][i], bas[0][i], held_reference=held[0][i])
                for p, (o, _) in runs.items()]
        res.append(Comparison("graph_replay", "vs_eager", runs["graph_replay"][0][i], runs["graph_eager"][0][i],
                              kind="exact"))
    for q, j in (("final_state", 0), ("conv_state", 1)):
        res += [Comparison(p, q, s[j], ref[1][j], bas[1][j], held_reference=held[1][j]) for p, (_, s) in runs.items()]
        res.append(Comparison("graph_replay", "vs_eager", runs["graph_replay"][1][j], runs["graph_eager"][1][j],
                              kind="exact"))
    return res


# ---------------------------------------------------------------- MLA: mla.absorbed_graph


class MLAStep(NamedTuple):
    """One step's float64 inputs: q [B, H, N], c [B, R], slots, lengths [B], indices [B, W] int64."""

    q: np.ndarray
    c: np.ndarray
    slots: tuple
    lengths: np.ndarray
    indices: np.ndarray


def selection(rng, length: int, keep: int, width: int) -> np.ndarray:
    """[width] positions of a row of `length` cached tokens: min(keep, width, length) of them, the newest
    first (the tail is always attended), then distinct earlier ones, then -1 (SPEC §8: the indexer's layout)."""
    k = min(keep, width, length)
    out = -np.ones(width, dtype=np.int64)
    if k:
        out[:k] = np.concatenate([[length - 1], rng.permutation(length - 1)[:k - 1]])
    return out


def mla_graph_inputs(case: MLAGraphCase):
    """(MLA weights, the latent cache [P, T, R] before the steps (zero past each slot's tokens), the steps)."""
    g = case.geometry
    rng = np.random.default_rng(case.seed)
    mw = tz.mla_weights(rng, g)
    lengths = list(case.cached)
    T = max(n + sum(s in slots for slots in case.steps) for s, n in enumerate(case.cached))
    scale = 30.0 if case.family == "large" else 1.0
    _, _, latent = omla.project(mw, scale * rng.standard_normal((case.slots, T, g.hidden)))
    latent = np.where(np.arange(T)[None, :, None] < np.array(lengths)[:, None, None], latent, 0.0)
    steps = []
    for slots, keep in zip(case.steps, case.keep):
        for s in slots:
            lengths[s] += 1
        q, _, c = omla.project(mw, scale * rng.standard_normal((len(slots), 1, g.hidden)))
        n = np.array([lengths[s] for s in slots])
        idx = np.stack([selection(rng, int(L), k, g.slots) for L, k in zip(n, keep)])
        steps.append(MLAStep(q[:, 0], c[:, 0], tuple(slots), n, idx))
    return mw, latent, steps


def cache_attend(t: Target, mw, latent0, steps):
    """The steps on target t without a graph: each new latent written into a float64 cache of slots, then
    `absorbed` over the live rows' gathered caches: (outputs per step, the cache after them)."""
    mwt, cache = mw.map(t.tensor), latent0.copy()
    outs = []
    for st_ in steps:
        cache[list(st_.slots), st_.lengths - 1] = st_.c
        with t.poisoned():
            o, _ = t.impl.mla.absorbed(mwt, t.tensor(st_.q[:, None]), t.tensor(cache[list(st_.slots)]),
                                       t.index(st_.indices[:, None], long=True))
        outs.append(o[:, 0])
    return outs, cache


def graph_attend(t: Target, mw, latent0, case: MLAGraphCase, steps, replay: bool):
    """The steps through the candidate's mla.absorbed_graph: (outputs per step, its cache after them)."""
    with t.poisoned():
        step = t.impl.mla.absorbed_graph(mw.map(t.tensor), t.tensor(latent0), case.max_batch, case.geometry.slots)
    args = [(t.tensor(s.q), t.tensor(s.c), t.index(s.slots, long=True), t.index(s.lengths, long=True),
             t.index(s.indices, long=True)) for s in steps]
    outs = graph_steps(step, t, args, replay)
    return outs, step.latent.clone()


def _label_selections(case: MLAGraphCase, steps) -> None:
    if case.geometry.slots > 256:
        label("wide selection: split across programs on a GPU")
    widths = [int((s.indices >= 0).sum(1).max()) for s in steps]
    if any(b > a for a, b in zip(widths, widths[1:])):
        label("the widest selection grows after the capture")
    if any((s.indices < 0).all(1).any() for s in steps):
        label("an empty selection row")


def run_mla_graph(case: MLAGraphCase, cand: Target, base: Target):
    """Eager and replayed sparse decode steps of the candidate: replay == eager bitwise (outputs and the
    cache), both within the absorbed contract of the oracle (the baseline: torch absorbed, no graph)."""
    _label_steps(case.steps, case.max_batch)
    mw, latent0, steps = mla_graph_inputs(case)
    _label_selections(case, steps)
    ref, bas = cache_attend(ORACLE, mw, latent0, steps), cache_attend(base, mw, latent0, steps)
    runs = {"graph_eager": graph_attend(cand, mw, latent0, case, steps, False),
            "graph_replay": graph_attend(cand, mw, latent0, case, steps, True)}
    res = []
    for i in range(len(steps)):
        res += [Comparison(p, "output", o[i], ref[0][i], bas[0][i]) for p, (o, _) in runs.items()]
        res.append(Comparison("graph_replay", "vs_eager", runs["graph_replay"][0][i], runs["graph_eager"][0][i],
                              kind="exact"))
    res += [Comparison(p, "latent_cache", c, ref[1], base.tensor(bas[1])) for p, (_, c) in runs.items()]
    res.append(Comparison("graph_replay", "vs_eager", runs["graph_replay"][1], runs["graph_eager"][1], kind="exact"))
    return res


# ----------------------------------------------------------------------------- the records

K0, D0 = KDAGeometry.from_geometry(TINY), DSAGeometry.from_geometry(TINY)

CHECKS = (
    Check("kda.graph_replay", "kda", KDAGraphCase, kda_graph_cases, run_kda_graph,
          "decode steps of requests in a state pool (rows join, leave, change places) through one step "
          "captured at the first and replayed: bitwise the eager steps; both within the decode contract",
          # a request joins after the capture and takes the first row, then both leave and a third
          # arrives (a padding row where the second was)
          examples=(KDAGraphCase(K0, 3, 2, ((0,), (1, 0), (2,)), "normal", 0),),
          cpu_examples=4, optional=("kda.decode_graph",)),
    Check("mla.graph_replay", "mla", MLAGraphCase, mla_graph_cases, run_mla_graph,
          "sparse decode steps over a latent cache of slots (lengths growing per row, selections changing "
          "width, empty rows) through one step captured at the first and replayed: bitwise the eager "
          "steps; both within the absorbed contract",
          # lengths differ per row and grow; the widest selection grows from 3 after the capture; an empty
          # row; slot 1 starts with no cached token
          examples=(MLAGraphCase(D0, 3, 2, (5, 0, 12), ((0,), (0, 2), (2, 1)), ((3,), (11, 0), (4, 1)),
                                 "normal", 0),),
          cpu_examples=6, optional=("mla.absorbed_graph",)),
)


# ----------------------------------------------------------------------------- calls to refuse


def _kda_step(ns, t: Target, max_batch: int = 2):
    """ns.decode_graph over a pool of 3 tiny-geometry states, and step inputs of `rows` live rows."""
    rng = np.random.default_rng(18)
    w = tz.kda_weights(rng, K0.heads, K0.head_dim, K0.hidden, K0.conv_width)
    pool = tz.kda_state(rng, 3, K0.heads, K0.head_dim, K0.conv_width)
    step = ns.decode_graph(t.weights(w), t.state(pool), max_batch)
    z, f, b, _ = okda.project(w, tz.hidden_states(rng, 3, 1, K0.hidden, "normal"))

    def args(slots):
        n = len(slots)
        return t.tensor(z[:n, 0]), t.tensor(f[:n, 0], f32=True), t.tensor(b[:n, 0]), t.index(slots, long=True)
    return step, args


def _mla_step(ns, t: Target):
    """ns.absorbed_graph over a cache of 2 slots of 6 tokens, and step inputs of given lengths and indices."""
    rng = np.random.default_rng(19)
    mw = tz.mla_weights(rng, D0)
    step = ns.absorbed_graph(mw.map(t.tensor), t.tensor(rng.standard_normal((2, 6, D0.kv_rank))), 2, D0.slots)
    q, c = rng.standard_normal((2, D0.heads, D0.nope_dim)), rng.standard_normal((2, D0.kv_rank))

    def args(lengths, indices):
        idx = -np.ones((len(lengths), D0.slots), dtype=np.int64)
        idx[:, :len(indices[0])] = indices
        n = len(lengths)
        return (t.tensor(q[:n]), t.tensor(c[:n]), t.index(list(range(n)), long=True), t.index(lengths, long=True),
                t.index(idx, long=True))
    return step, args


def _kda_eager(ns, t: Target, slots):
    step, args = _kda_step(ns, t)
    return step.eager(*args(slots))


def _mla_eager(ns, t: Target, lengths, indices):
    step, args = _mla_step(ns, t)
    return step.eager(*args(lengths, indices))


def _replay_uncaptured(ns, t: Target):
    step, args = _kda_step(ns, t)
    return step.replay(*args((0,)))


def _captured_twice(ns, t: Target):
    step, args = _kda_step(ns, t)
    step.capture(*args((0,)))
    return step.capture(*args((1,)))


# the oracle has no graph step: these are the Triton implementation's and the torch baseline's
GRAPH_TARGETS = ("triton", "torch")

BAD_CALLS_BY_MECHANISM = {
    "kda": (
        BadCall("decode_graph(max_batch 0)", lambda ns, t: _kda_step(ns, t, max_batch=0), r"^max_batch",
                targets=GRAPH_TARGETS),
        BadCall("decode_graph(replay before capture)", _replay_uncaptured, r"^replay", targets=GRAPH_TARGETS),
        BadCall("decode_graph(capture twice)", _captured_twice, r"^capture", targets=GRAPH_TARGETS),
        BadCall("decode_graph(3 rows, max_batch 2)", lambda ns, t: _kda_eager(ns, t, (0, 1, 2)), r"^z: 3 live rows",
                targets=GRAPH_TARGETS),
        BadCall("decode_graph(a slot twice)", lambda ns, t: _kda_eager(ns, t, (1, 1)), r"^slots", targets=GRAPH_TARGETS),
        BadCall("decode_graph(a slot past the pool)", lambda ns, t: _kda_eager(ns, t, (3,)), r"^slots",
                targets=GRAPH_TARGETS),
    ),
    "mla": (
        BadCall("absorbed_graph(length 0)", lambda ns, t: _mla_eager(ns, t, [0], [[-1]]), r"^lengths",
                targets=GRAPH_TARGETS),
        BadCall("absorbed_graph(length past the cache)", lambda ns, t: _mla_eager(ns, t, [7], [[6]]), r"^lengths",
                targets=GRAPH_TARGETS),
        BadCall("absorbed_graph(index past the row's length)",
                lambda ns, t: _mla_eager(ns, t, [3, 4], [[2, 3], [3, 1]]), r"^indices", targets=GRAPH_TARGETS),
        BadCall("absorbed_graph(a position twice in a row)", lambda ns, t: _mla_eager(ns, t, [4], [[3, 3]]),
                r"^indices", targets=GRAPH_TARGETS),
    ),
}
