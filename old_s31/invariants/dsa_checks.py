"""The KPool/DSA indexer row of the correctness matrix: cases, run functions, check records (SPEC §8).

Selections are compared tie-aware (invariants.compare.compare_selection): the oracle's scores decide
which pools are tied at the k-th place, and any tied choice is accepted and labelled.
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np
from hypothesis import strategies as st

from invariants.check import BadCall, Check
from invariants.compare import Comparison
from invariants.labels import label
from invariants.target import ORACLE, Target
from oracle import dsa as odsa
from oracle.config import Geometry
from strategies import tensors as tz
from strategies.geometry import DSAGeometry, dsa_geometries
from strategies.sequences import sequence_lengths
from strategies.tensors import SEEDS

TINY = Geometry.preset("tiny")     # the pinned examples' geometry


# ------------------------------------------------------------------------ cases


class IndexCase(NamedTuple):
    """T cached tokens, the last `queries` of them querying (1 = a decode step after any prefix);
    `tie` = "exact" copies one pool's tokens into the next so their scores tie on purpose; `holes`:
    tokens of row 0 after its left padding that are pad too (a mask with holes, as a packed or
    right-padded batch leaves in a cache: the pools holding one are not complete, SPEC §8.3)."""

    geometry: DSAGeometry
    batch: int
    length: int
    queries: int
    left_pad: tuple[int, ...]
    tie: str
    family: str
    seed: int
    holes: tuple[int, ...] = ()


def dsa_lengths(g: DSAGeometry, *, max_len: int = 80) -> st.SearchStrategy[int]:
    """Pool-boundary lengths (every length up to 2·kpool + 1, around topk + kpool, 63..65), lengths
    past topk + kpool (the selection no longer covers the whole prefix: real top-k sparsity, where
    selections can go wrong), or the general boundary-biased lengths; a third each."""
    special = sorted({n for n in list(range(1, 2 * g.kpool + 2))
                      + [g.topk + g.kpool - 1, g.topk + g.kpool, g.topk + g.kpool + 1, 23, 63, 64, 65]
                      if 1 <= n <= max_len})
    general = sequence_lengths(max_len=max_len)
    sparse = st.integers(g.topk + g.kpool, max_len) if g.topk + g.kpool <= max_len else general
    return st.integers(0, 2).flatmap(lambda pick: (st.sampled_from(special), sparse, general)[pick])


@st.composite
def index_cases(draw, base, *, max_len: int = 80) -> IndexCase:
    g = draw(dsa_geometries(base))
    length = draw(dsa_lengths(g, max_len=max_len))
    queries = draw(st.sampled_from(sorted({1, length}))) if draw(st.booleans()) else \
        draw(st.integers(1, length))
    batch = draw(st.integers(1, 2))
    pad = tuple(draw(st.integers(0, min(length - 1, 9))) for _ in range(batch))
    tie, family, seed = draw(st.sampled_from(("none", "exact"))), draw(st.sampled_from(("normal", "large"))), draw(SEEDS)
    holes = ()
    if pad[0] < length - 1 and draw(st.integers(0, 3)) == 0:
        holes = tuple(sorted(draw(st.sets(st.integers(pad[0] + 1, length - 1), min_size=1, max_size=3))))
    return IndexCase(g, batch, length, queries, pad, tie, family, seed, holes)


# ---------------------------------------------------------------- run functions


def _mask(batch, length, left_pad):
    m = np.ones((batch, length))
    for r, p in enumerate(left_pad):
        m[r, :p] = 0.0
    return m


def _tie_exact(a, mask, kpool):
    """Copy each row's first pool of real tokens into its second: equal pooled keys, tied scores."""
    a = a.copy()
    for r in range(a.shape[0]):
        f = int(np.argmax(mask[r] > 0))
        if f + 2 * kpool <= a.shape[1]:
            a[r, f + kpool:f + 2 * kpool] = a[r, f:f + kpool]
            label("exact score tie made on purpose")
    return a


def index_inputs(case: IndexCase):
    g = case.geometry
    rng = np.random.default_rng(case.seed)
    w = tz.indexer_weights(rng, g, case.family)
    a = rng.standard_normal((case.batch, case.length, g.hidden))
    mask = _mask(case.batch, case.length, case.left_pad)
    mask[0, list(case.holes)] = 0.0
    if case.tie == "exact":
        a = _tie_exact(a, mask, g.kpool)
    q_lat = rng.standard_normal((case.batch, case.length, g.q_rank))
    return w, a, q_lat, mask


def token_pool(packed, w) -> np.ndarray:
    """[B, T] kept-pool id of every cached token, -1 for tokens in no COMPLETE pool of their row.

    A pool kept because it is complete in another batch row is no pool in this one: its tokens are the
    row's tail (a selection holds them as raw tokens, never as a pick), so they map to -1 here.
    """
    _, member_idx, pool_valid, _, _ = odsa.pool_keys(packed, w.compress_ape, w.kpool)
    B, T = packed.shape[:2]
    out = -np.ones((B, T), dtype=np.int64)
    for b in range(B):
        for p in np.flatnonzero(pool_valid[b]):
            out[b, member_idx[b, p]] = p
    return out


def run_index_on(t: Target, w, a, q_lat, mask, S):
    """(indexer rows of every token, the selection of the last S queries) on target t."""
    wt = w.map(t.tensor)
    at, qt, mt = t.tensor(a), t.tensor(q_lat), t.tensor(mask)
    with t.poisoned():
        packed = t.impl.dsa.index_rows(wt, at, mt)
        sel = t.impl.dsa.index(wt, at[:, -S:], qt[:, -S:], packed, mt[:, -S:])
    return packed, sel


def _candidate_scores(scores, ref):
    """Scores of candidate pools only (non-candidates are -inf in the oracle, finfo.min in kernels), in
    units of each query's score magnitude (ref.scale = max Σ_j |w_j| |qI_j| |K̄| / sqrt(d_i)): the signed head mix cancels,
    so a small score carries the rounding of large terms and a plain rel-L2 over I would call a
    correct bf16 kernel 30% off on a query whose scores nearly cancel."""
    s = np.asarray(scores.detach().float().cpu() if hasattr(scores, "detach") else scores, dtype=np.float64)
    cand = np.asarray(ref.candidate)
    if s.shape != cand.shape:
        return s    # another number of kept pools: the contract reports the shape mismatch
    size = np.asarray(ref.scale, dtype=np.float64)[..., None]
    return np.where(cand, s, 0.0) / np.where(size > 0, size, 1.0)


def _label_sparsity(length: int, g) -> None:
    label("selection really sparse (T >= topk + kpool)" if length >= g.topk + g.kpool
          else "selection covers the whole prefix (T < topk + kpool)")


def run_index(case: IndexCase, cand: Target, base: Target):
    _label_sparsity(case.length, case.geometry)
    if any(case.left_pad):
        label("left padding")
    if case.holes:
        label("pad tokens inside the cache (mask holes)")
    if case.queries == 1:
        label("decode query after a prefix")
    w, a, q_lat, mask = index_inputs(case)
    S = case.queries
    packed, ref = run_index_on(ORACLE, w, a, q_lat, mask, S)
    pc, sc_ = run_index_on(cand, w, a, q_lat, mask, S)
    pb, sb = run_index_on(base, w, a, q_lat, mask, S)
    return [Comparison("index_rows", "index_rows", pc, packed, pb),
            Comparison("scores", "scores", _candidate_scores(sc_.scores, ref), _candidate_scores(ref.scores, ref),
                       _candidate_scores(sb.scores, ref)),
            Comparison("index", "selection", sc_.indices, (ref, token_pool(packed, w)), kind="selection")]


# ----------------------------------------------------------------------------- the records

G0 = DSAGeometry.from_geometry(TINY)
# the released checkpoint's indexer: index_topk 2048, kpool 4 (2051 slots); a selection covers every pool
# up to 8192 + 3 tokens, so the CUDA pins sit on both sides of that budget and in the thousands past it
GFULL = DSAGeometry.from_geometry(Geometry.preset("full"))
FULL_INDEX_PINS = (IndexCase(GFULL, 1, 8191, 4, (0,), "none", "normal", 10),      # 2047 pools + a 3-token tail
                   IndexCase(GFULL, 1, 8196, 4, (0,), "none", "normal", 11),      # 2049 pools: one dropped
                   IndexCase(GFULL, 2, 8199, 2, (0, 5), "exact", "normal", 12),   # left padding, an exact tie
                   IndexCase(GFULL, 1, 12000, 16, (0,), "none", "large", 13),     # 3000 pools, 16 queries
                   IndexCase(GFULL, 1, 3000, 64, (0,), "none", "normal", 14))     # 64 queries under the budget

CHECKS = (
    Check("dsa.index", "dsa", IndexCase, index_cases, run_index,
          "indexer rows, pool scores and the tie-aware selection at pool-boundary lengths",
          examples=(IndexCase(G0, 1, 5, 5, (0,), "none", "normal", 0),              # tail only, P = 1
                    IndexCase(G0, 2, 13, 13, (0, 3), "none", "normal", 1),          # real top-k, left padding
                    IndexCase(G0, 1, 23, 1, (0,), "exact", "normal", 2),            # decode query, exact tie
                    IndexCase(G0._replace(kpool=8), 1, 17, 17, (0,), "none", "large", 3),
                    IndexCase(G0, 2, 21, 21, (0, 3), "none", "normal", 4, (5, 9)),    # mask holes
                    # a decode query over 16 pools whose 2nd and 3rd scores agree to 7 mantissa bits
                    IndexCase(G0, 2, 64, 1, (0, 0), "none", "normal", 0),
                    # 31 pools of 2: the interpreter's selection runs them over two tiles
                    IndexCase(G0._replace(kpool=2), 1, 63, 1, (0,), "none", "normal", 0)),
          gpu_examples=FULL_INDEX_PINS),
)


# ----------------------------------------------------------------------------- calls to refuse


def _index_call(t: Target, B: int = 2, T: int = 6, **change):
    """(w, a, q_lat, packed) of T tokens all querying, on target t; `change` edits a float64 input
    (w: the IndexerWeights) before the conversion. packed holds the unedited weights' rows."""
    rng = np.random.default_rng(15)
    w = tz.indexer_weights(rng, G0)
    a, q_lat = rng.standard_normal((B, T, G0.hidden)), rng.standard_normal((B, T, G0.q_rank))
    x = {"w": w, "a": a, "q_lat": q_lat, "packed": odsa.index_rows(w, a)}
    x = {n: change[n](v) if n in change else v for n, v in x.items()}
    return x["w"].map(t.tensor), t.tensor(x["a"]), t.tensor(x["q_lat"]), t.tensor(x["packed"])


def _index(ns, t, mask=None, **change):
    """ns.index on _index_call's inputs (mask: float64, converted)."""
    w, a, q_lat, packed = _index_call(t, **change)
    return ns.index(w, a, q_lat, packed, *(() if mask is None else (t.tensor(mask),)))


def _topk_10(w):
    """Indexer weights keeping 10 tokens, not a multiple of their pool size 4."""
    return dataclasses.replace(w, topk=10)


BAD_CALLS = (
    BadCall("index(topk 10 not a multiple of kpool 4)", lambda ns, t: _index(ns, t, w=_topk_10),
            r"IndexerWeights\.topk.*multiple of kpool"),
    BadCall("index(packed_all shorter than S)", lambda ns, t: _index(ns, t, packed=lambda p: p[:, :4]),
            r"^packed_all: (holds T=4|4 cached rows)"),
    BadCall("index(packed_all of the wrong width)", lambda ns, t: _index(ns, t, packed=lambda p: p[..., 1:]),
            r"^packed_all"),
    BadCall("index(packed_all of another batch)", lambda ns, t: _index(ns, t, packed=lambda p: p[:1]),
            r"^packed_all"),
    # the Triton index leaves q_lat's width to its first matmul (a RuntimeError, no argument named)
    BadCall("index(q_lat [B, S, r_q + 1])",
            lambda ns, t: _index(ns, t, q_lat=lambda q: np.zeros((2, 6, G0.q_rank + 1))), r"^q_lat",
            targets=("torch", "oracle")),
    BadCall("index(a [S, D])", lambda ns, t: _index(ns, t, a=lambda a: a[0]), r"^a:"),
    BadCall("index(mask [B, S + 1])", lambda ns, t: _index(ns, t, np.ones((2, 7))), r"^mask"),
    BadCall("index(mask disagreeing with the valid flags)", lambda ns, t: _index(ns, t, np.eye(2, 6)),
            r"^mask: disagrees"),
    BadCall("index_rows(mask [B, S - 1])",
            lambda ns, t: ns.index_rows(*_index_call(t)[:2], t.tensor(np.ones((2, 5)))), r"^mask"),
    BadCall("pool_keys(ape [P_k + 1, d_i])",
            lambda ns, t: ns.pool_keys(_index_call(t)[3], t.tensor(np.zeros((G0.kpool + 1, G0.index_dim))),
                                       G0.kpool), r"^ape"),
    BadCall("pool_keys(kpool not the rows of ape)",
            lambda ns, t: ns.pool_keys(_index_call(t)[3], _index_call(t)[0].compress_ape, 3), "ape"),
)
