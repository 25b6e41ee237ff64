"""Paged caches (docs/candidates.md section 13): the DSA indexer and MLA absorbed attention reading their
caches through a block table, against the oracle on the equivalent contiguous rows.

A case pages every row's cache into a pool of `page_size`-token pages in a random physical order; every
slot no row owns (the tail of each row's last page, the spare pages, the block-table entries past a
row's pages) holds poison, so a read outside a row's own pages moves the result: "large" poison is
|1e4|-sized keys (and valid flags of 1: a reader trusting the flags takes the tokens as real), "nan" is
NaN everywhere. Lengths that are exact multiples of the page size are drawn half the time and pinned:
there a reader that counts pages as len // page_size + 1 reads one page past its row. Both checks call
optional functions (impl.registry.OPTIONAL_FUNCTIONS): a candidate without them is not run here.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from hypothesis import strategies as st

from invariants.check import BadCall, Check
from invariants.compare import Comparison, to_int
from invariants.dsa_checks import GFULL, _candidate_scores, _label_sparsity, dsa_lengths, token_pool
from invariants.labels import label
from invariants.target import ORACLE
from oracle import dsa as odsa
from oracle import mla as omla
from oracle.config import Geometry
from oracle.paged import pages_of
from strategies import tensors as tz
from strategies.geometry import DSAGeometry, dsa_geometries
from strategies.tensors import SEEDS

TINY = Geometry.preset("tiny")     # the pinned examples' geometry
# 1: a page a token; 3, 5: never divide the pool size or topk; 16: one page holds a whole short row
PAGE_SIZES = (1, 2, 3, 4, 5, 8, 16)
MAX_LEN = 48                        # the interpreter runs every example's kernels on the CPU


class PagedCase(NamedTuple):
    """Rows of `lengths` cached tokens (a row's first left_pad[b] of them padding), the last `queries`
    of each querying; pages of `page_size` tokens, `spare` block-table columns past the longest row
    (engines size the table for the longest allowed row), `poison` in every slot no row owns."""

    geometry: DSAGeometry
    page_size: int
    lengths: tuple[int, ...]
    queries: int
    left_pad: tuple[int, ...]
    spare: int
    poison: str
    family: str
    seed: int


@st.composite
def paged_cases(draw, base, *, max_len: int = MAX_LEN) -> PagedCase:
    g = draw(dsa_geometries(base))
    G = draw(st.sampled_from(PAGE_SIZES))
    multiple = st.integers(1, max(1, max_len // G)).map(lambda n: n * G)    # the page boundary
    batch = draw(st.integers(1, 3))
    lengths = tuple(draw(st.one_of(multiple, dsa_lengths(g, max_len=max_len))) for _ in range(batch))
    short = min(lengths)
    queries = draw(st.sampled_from(sorted({1, short}))) if draw(st.booleans()) else draw(st.integers(1, short))
    pad = tuple(draw(st.integers(0, min(n - 1, 5))) for n in lengths)
    return PagedCase(g, G, lengths, queries, pad, draw(st.integers(1, 2)), draw(st.sampled_from(("large", "nan"))),
                     draw(st.sampled_from(("normal", "large"))), draw(SEEDS))


# ---------------------------------------------------------------- paging


def _poison(rng, shape, kind: str) -> np.ndarray:
    if kind == "nan":
        return np.full(shape, np.nan)
    return 1e4 * np.sign(rng.standard_normal(shape))


def page_out(rows, G: int, spare: int, kind: str, rng, flag: bool = False):
    """(pages [N, G, F], block_table [B, M]) holding row b's cache rows[b] [L_b, F] on pages of random
    physical ids, every other slot poison; unused block-table entries name poison pages (shared by the
    rows, as stale ids are). flag: the last feature is a valid flag, 1 in "large" poison."""
    need = [pages_of(len(r), G) for r in rows]
    M = max(need) + spare
    extra = 1 + spare
    N = sum(need) + extra
    F = rows[0].shape[-1]
    pages = _poison(rng, (N, G, F), kind)
    if flag and kind == "large":
        pages[..., -1] = 1.0
    ids = rng.permutation(N)
    real, stale = ids[:sum(need)], ids[sum(need):]
    table = rng.choice(stale, size=(len(rows), M))
    k = 0
    for b, r in enumerate(rows):
        for j in range(need[b]):
            table[b, j] = real[k]
            chunk = r[j * G:(j + 1) * G]
            pages[real[k], :len(chunk)] = chunk
            k += 1
    return pages, table.astype(np.int64)


def _label_paging(case: PagedCase) -> None:
    G = case.page_size
    if any(n % G == 0 for n in case.lengths):
        label("a length an exact multiple of the page size")
    if any(n % G for n in case.lengths):
        label("a row's last page partly filled (poison in its tail)")
    if G == 1:
        label("page size 1")
    if len(set(case.lengths)) > 1:
        label("rows of different lengths")


def _rows_mask(case: PagedCase) -> np.ndarray:
    """[B, T] contiguous mask: 0 before row b's cache (T - L_b) and over its own left padding."""
    T = max(case.lengths)
    m = np.ones((len(case.lengths), T))
    for b, (n, p) in enumerate(zip(case.lengths, case.left_pad)):
        m[b, :T - n + p] = 0.0
    return m


# ---------------------------------------------------------------- DSA indexer


def run_index_paged(case: PagedCase, cand, base):
    """index_paged on the paged cache vs the oracle's index on the same rows left-padded to the longest."""
    _label_paging(case)
    g, S, T = case.geometry, case.queries, max(case.lengths)
    _label_sparsity(T, g)
    rng = np.random.default_rng(case.seed)
    w = tz.indexer_weights(rng, g, case.family)
    a, q_lat = rng.standard_normal((len(case.lengths), T, g.hidden)), rng.standard_normal((len(case.lengths), T, g.q_rank))
    packed = odsa.index_rows(w, a, _rows_mask(case))
    ref = odsa.index(w, a[:, -S:], q_lat[:, -S:], packed)
    pages, table = page_out([packed[b, T - n:] for b, n in enumerate(case.lengths)], case.page_size,
                            case.spare, case.poison, rng, flag=True)
    sels = []
    for t in (cand, base):
        with t.poisoned():
            sels.append(t.impl.dsa.index_paged(w.map(t.tensor), t.tensor(a[:, -S:]), t.tensor(q_lat[:, -S:]),
                                               t.tensor(pages), t.index(table, long=True), case.page_size,
                                               t.index(np.array(case.lengths), long=True)))
    # row-frame positions back into the left-padded frame the oracle's selection is in
    off = T - np.array(case.lengths)[:, None, None]
    idx = to_int(sels[0].indices)
    framed = np.where(idx >= 0, idx + off, -1) if idx.ndim == 3 and idx.shape[0] == len(off) else idx
    return [Comparison("index_paged", "scores", _candidate_scores(sels[0].scores, ref),
                       _candidate_scores(ref.scores, ref), _candidate_scores(sels[1].scores, ref)),
            Comparison("index_paged", "selection", framed, (ref, token_pool(packed, w)), kind="selection")]


# ---------------------------------------------------------------- MLA absorbed attention


def paged_selection(rng, lengths, S: int, W: int) -> np.ndarray:
    """[B, S, W] distinct positions of each row (-1 padded, in random slots): up to W of [0, L_b),
    always its last token when any (the one on the last, partly filled page)."""
    out = -np.ones((len(lengths), S, W), dtype=np.int64)
    for b, n in enumerate(lengths):
        for s in range(S):
            k = int(rng.integers(0, min(W, n) + 1))
            pick = np.concatenate([[n - 1], rng.permutation(n - 1)[:k - 1]]) if k else np.zeros(0, np.int64)
            out[b, s, rng.permutation(W)[:k]] = pick
    return out


def run_absorbed_paged(case: PagedCase, cand, base):
    """absorbed_paged on the paged latent cache vs the oracle's absorbed on the rows at [0, L_b)."""
    _label_paging(case)
    g, S, T = case.geometry, case.queries, max(case.lengths)
    rng = np.random.default_rng(case.seed)
    mw = tz.mla_weights(rng, g)
    B = len(case.lengths)
    q, _, c = omla.project(mw, rng.standard_normal((B, T, g.hidden)))
    q = q[:, -S:]
    latent = np.where(np.arange(T)[None, :, None] < np.array(case.lengths)[:, None, None], c, 0.0)
    indices = paged_selection(rng, case.lengths, S, g.slots)
    o_ref, _ = omla.absorbed(mw, q, latent, indices)
    pages, table = page_out([c[b, :n] for b, n in enumerate(case.lengths)], case.page_size, case.spare,
                            case.poison, rng)
    outs = []
    for t in (cand, base):
        with t.poisoned():
            o, _ = t.impl.mla.absorbed_paged(mw.map(t.tensor), t.tensor(q), t.tensor(pages),
                                             t.index(table, long=True), case.page_size,
                                             t.index(np.array(case.lengths), long=True),
                                             t.index(indices, long=True))
        outs.append(o)
    return [Comparison("absorbed_paged", "output", outs[0], o_ref, outs[1])]


# ----------------------------------------------------------------------------- the records

G0 = DSAGeometry.from_geometry(TINY)

CHECKS = (
    Check("dsa.index_paged", "dsa", PagedCase, paged_cases, run_index_paged,
          "the indexer over a paged cache (block table, page size): scores and the tie-aware selection vs "
          "the oracle on the contiguous rows, poison in every slot no row owns",
          examples=(PagedCase(G0, 4, (12, 8), 3, (0, 2), 1, "large", "normal", 0),   # both exact multiples
                    PagedCase(G0, 3, (13, 9, 6), 1, (0, 0, 1), 2, "nan", "normal", 1),  # 13 not, 9 and 6 are
                    PagedCase(G0, 1, (7,), 7, (0,), 1, "large", "normal", 2),      # a page a token
                    PagedCase(G0, 5, (23, 10), 10, (0, 0), 1, "large", "large", 3)),
          cpu_examples=12, optional=("dsa.index_paged",)),
    Check("mla.absorbed_paged", "mla", PagedCase, paged_cases, run_absorbed_paged,
          "absorbed attention over a paged latent cache (block table, page size) vs the oracle on the "
          "contiguous rows, poison in every slot no row owns",
          examples=(PagedCase(G0, 4, (12, 7), 2, (0, 0), 1, "nan", "normal", 0),
                    PagedCase(G0, 1, (5, 9), 1, (0, 0), 2, "large", "normal", 1),
                    PagedCase(G0, 16, (16, 3, 30), 3, (0, 0, 0), 1, "nan", "normal", 2)),
          # the released geometry on 64-token pages, 2 rows of 8 queries over 2051-wide selections: 64 heads a
          # program, 8 splits on 132 SMs (issue 14 step 40's launch, from 8 query rows on since step 41, 7 since step 47)
          gpu_examples=(PagedCase(GFULL, 64, (2200, 900), 8, (0, 3), 1, "nan", "normal", 20),),
          cpu_examples=12, optional=("mla.absorbed_paged",)),
)


# ----------------------------------------------------------------------------- calls to refuse


def _paged_call(t, G: int = 4, lengths=(6, 5), spare: int = 1):
    """(w, a, q_lat, pages, block_table, lengths) of B=2 rows paged by G, their last 2 tokens querying;
    a float64 oracle case converted by target t."""
    rng = np.random.default_rng(16)
    g = G0
    T = max(lengths)
    w = tz.indexer_weights(rng, g)
    a, q_lat = rng.standard_normal((2, T, g.hidden)), rng.standard_normal((2, T, g.q_rank))
    m = np.ones((2, T))
    m[1, :T - lengths[1]] = 0
    packed = odsa.index_rows(w, a, m)
    pages, table = page_out([packed[b, T - n:] for b, n in enumerate(lengths)], G, spare, "large", rng, flag=True)
    return (w.map(t.tensor), t.tensor(a[:, -2:]), t.tensor(q_lat[:, -2:]), t.tensor(pages),
            t.index(table, long=True), t.index(np.array(lengths), long=True))


def _with(args, i, edit):
    return args[:i] + (edit(args[i]),) + args[i + 1:]


def _index_paged(ns, t, G: int = 4, edit=None, **kw):
    w, a, q_lat, pages, table, lengths = _paged_call(t, **kw)
    args = (w, a, q_lat, pages, table, G, lengths)
    return ns.index_paged(*(edit(args) if edit else args))


def _absorbed_paged(ns, t, edit=None):
    """absorbed_paged over one row's paged latents (B=1, L=6, G=4), row positions `indices`."""
    rng = np.random.default_rng(17)
    mw = tz.mla_weights(rng, G0)
    q, _, c = omla.project(mw, rng.standard_normal((1, 6, G0.hidden)))
    pages, table = page_out([c[0]], 4, 1, "nan", rng)
    args = (mw.map(t.tensor), t.tensor(q[:, -2:]), t.tensor(pages), t.index(table, long=True), 4,
            t.index(np.array([6]), long=True), t.index(np.array([[[0, 5]], [[1, -1]]]).reshape(1, 2, 2), long=True))
    return ns.absorbed_paged(*(edit(args) if edit else args))


# (mechanism, rows): the module holds two mechanisms' functions, so its rows say whose they are
BAD_CALLS_BY_MECHANISM = {
    "dsa": (
        BadCall("index_paged(a used block-table entry past the pool)",
                lambda ns, t: _index_paged(ns, t, edit=lambda x: _with(x, 4, lambda bt: bt.clone() + 100
                                                                       if hasattr(bt, "clone") else bt + 100)),
                r"^block_table"),
        BadCall("index_paged(lengths past what the block table holds)",
                lambda ns, t: _index_paged(ns, t, edit=lambda x: _with(x, 6, lambda n: n * 4)), r"^lengths"),
        BadCall("index_paged(page_size not the pool's)",
                lambda ns, t: _index_paged(ns, t, edit=lambda x: _with(x, 5, lambda g: 3)), r"^row_pages"),
        BadCall("index_paged(a row shorter than the S queries)",
                lambda ns, t: _index_paged(ns, t, lengths=(6, 1)), r"^lengths"),
    ),
    "mla": (
        BadCall("absorbed_paged(index past the row's length)",
                lambda ns, t: _absorbed_paged(ns, t, edit=lambda x: _with(x, 5, lambda n: n - 1)), r"indices"),
        BadCall("absorbed_paged(page_size 0)",
                lambda ns, t: _absorbed_paged(ns, t, edit=lambda x: _with(x, 4, lambda g: 0)), r"^page_size"),
    ),
}
