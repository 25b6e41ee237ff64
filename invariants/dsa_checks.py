"""The KPool/DSA indexer row of the correctness matrix: cases, run functions, check records (SPEC §8).

Selections are compared tie-aware (invariants.compare.compare_selection): the oracle's scores decide
which pools are tied at the k-th place, and any tied choice is accepted and labelled.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from hypothesis import strategies as st

from invariants.check import Check
from invariants.compare import Comparison
from invariants.labels import label
from invariants.target import Target, poisoned_memory
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
    `tie` = "exact" copies one pool's tokens into the next so their scores tie on purpose."""

    geometry: DSAGeometry
    batch: int
    length: int
    queries: int
    left_pad: tuple[int, ...]
    tie: str
    family: str
    seed: int


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
    return IndexCase(g, batch, length, queries, pad, draw(st.sampled_from(("none", "exact"))),
                     draw(st.sampled_from(("normal", "large"))), draw(SEEDS))


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


def _impl_index(t: Target, w, a, q_lat, mask, S):
    wt = w.map(t.tensor)
    at, qt, mt = t.tensor(a), t.tensor(q_lat), t.tensor(mask)
    with poisoned_memory():
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
    if case.queries == 1:
        label("decode query after a prefix")
    w, a, q_lat, mask = index_inputs(case)
    S = case.queries
    packed = odsa.index_rows(w, a, mask)
    ref = odsa.index(w, a[:, -S:], q_lat[:, -S:], packed, mask[:, -S:])
    pc, sc_ = _impl_index(cand, w, a, q_lat, mask, S)
    pb, sb = _impl_index(base, w, a, q_lat, mask, S)
    return [Comparison("index_rows", "index_rows", pc, packed, pb),
            Comparison("scores", "scores", _candidate_scores(sc_.scores, ref), _candidate_scores(ref.scores, ref),
                       _candidate_scores(sb.scores, ref)),
            Comparison("index", "selection", sc_.indices, (ref, token_pool(packed, w)), kind="selection")]


# ----------------------------------------------------------------------------- the records

G0 = DSAGeometry.from_geometry(TINY)

CHECKS = (
    Check("dsa.index", "dsa", IndexCase, index_cases, run_index,
          "indexer rows, pool scores and the tie-aware selection at pool-boundary lengths",
          examples=(IndexCase(G0, 1, 5, 5, (0,), "none", "normal", 0),              # tail only, P = 1
                    IndexCase(G0, 2, 13, 13, (0, 3), "none", "normal", 1),          # real top-k, left padding
                    IndexCase(G0, 1, 23, 1, (0,), "exact", "normal", 2),            # decode query, exact tie
                    IndexCase(G0._replace(kpool=8), 1, 17, 17, (0,), "none", "large", 3))),
)
