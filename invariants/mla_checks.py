"""The MLA row of the correctness matrix: sparse absorbed attention and the full + shared DSA layers over
split calls (SPEC §7, §8.8): cases, run functions, check records.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from hypothesis import strategies as st

from invariants.check import BadCall, Check
from invariants.compare import Comparison, to_int
from invariants.dsa_checks import (GFULL, POOLED_AXES, IndexCase, _label_sparsity, _mask, dsa_lengths, index_cases,
                                   index_inputs, token_pool)
from invariants.labels import label
from invariants.target import ORACLE, Target
from oracle import dsa as odsa
from oracle import mla as omla
from oracle.config import Geometry
from oracle.types import DSACache
from strategies import tensors as tz
from strategies.geometry import DSAGeometry, dsa_geometries
from strategies.sequences import chunk_splits, left_pads
from strategies.tensors import SEEDS

TINY = Geometry.preset("tiny")     # the pinned examples' geometry


# ------------------------------------------------------------------------ cases


class MLACase(NamedTuple):
    """A full DSA layer then a shared one over one token stream, cut into calls by `splits`."""

    geometry: DSAGeometry
    batch: int
    length: int
    left_pad: tuple[int, ...]
    splits: tuple[int, ...]
    family: str
    seed: int


@st.composite
def mla_cases(draw, base, *, max_len: int = 70) -> MLACase:
    g = draw(dsa_geometries(base))
    # the draws that set an example's cost first (the shrinker simplifies in draw order), the pads last
    length, batch = draw(dsa_lengths(g, max_len=max_len)), draw(st.integers(1, 2))
    splits, family, seed = draw(chunk_splits(length)), draw(st.sampled_from(("normal", "large"))), draw(SEEDS)
    return MLACase(g, batch, length, draw(left_pads(batch, length)), splits, family, seed)


class MLACausalCase(NamedTuple):
    """The full + shared DSA layers run twice over one stream, the second time with the hidden states
    from position `cut` on redrawn."""

    stream: MLACase
    cut: int


@st.composite
def mla_causal_cases(draw, base, *, max_len: int = 70) -> MLACausalCase:
    stream = draw(mla_cases(base, max_len=max_len))
    # the first token a row keeps after its left padding, and pool boundaries, are where a leak shows
    return MLACausalCase(stream, draw(st.integers(0, stream.length - 1)))


# a selection wider than two kernel blocks of 64 rows: few query rows then split it across programs
# (flash-decoding) on a GPU; the tiny geometry's topk 8 never does
WIDE_TOPK, WIDE_KPOOL = 256, 4


@st.composite
def absorbed_cases(draw, base, *, max_len: int = 80) -> IndexCase:
    """index_cases, plus (a drawn boolean) a wide selection: topk 256 over up to ~300 cached tokens with
    1-2 decode queries, the shape whose selection a GPU splits across programs and merges."""
    if not draw(st.booleans()):
        return draw(index_cases(base, max_len=max_len))
    g = draw(dsa_geometries(base, vary=False))._replace(topk=WIDE_TOPK, kpool=WIDE_KPOOL)
    length = draw(st.integers(1, g.topk + g.kpool + 40))
    batch = draw(st.integers(1, 2))
    pad = tuple(draw(st.integers(0, min(length - 1, 9))) for _ in range(batch))
    return IndexCase(g, batch, length, draw(st.integers(1, min(2, length))), pad, "none",
                     draw(st.sampled_from(("normal", "large"))), draw(SEEDS))


# ---------------------------------------------------------------- run functions


def run_absorbed(case: IndexCase, cand: Target, base: Target):
    """Sparse absorbed attention over the oracle's selection vs the oracle; baseline: torch expanded."""
    g = case.geometry
    if g.slots > 256:
        label("wide selection: split across programs on a GPU")
    _label_sparsity(case.length, g)
    w, a, q_lat, mask = index_inputs(case)
    mw = tz.mla_weights(np.random.default_rng(case.seed + 1), g)
    S = case.queries
    q, _, c = omla.project(mw, a)
    packed = odsa.index_rows(w, a, mask)
    # with mask holes the oracle's selection can repeat a position; the attention takes it as the set it is
    indices = odsa.as_set(odsa.index(w, a[:, -S:], q_lat[:, -S:], packed, mask[:, -S:]).indices)
    if case.holes:
        label("pad tokens inside the cache (mask holes)")
    outs = []
    for t, fn in ((ORACLE, "absorbed"), (cand, "absorbed"), (base, "expanded")):
        with t.poisoned():
            o, _ = getattr(t.impl.mla, fn)(mw.map(t.tensor), t.tensor(q[:, -S:]), t.tensor(c),
                                           t.index(indices, long=True))
        outs.append(o)
    return [Comparison("absorbed", "output", outs[1], outs[0], outs[2])]


def mla_layers(t: Target, mw, iw, iw_shared, a, mask, splits, forced=None, sibling=False):
    """A full DSA layer then a shared one on target t, the stream cut into calls:
    (y_full, y_shared, full layer's cache, its selection indices over all calls [B, S, W]).

    The shared layer is handed an indexer of its own (same topk and kpool) that it must NOT run:
    were it to, its selection would differ from the hand-off. forced (an oracle's sublayer only takes
    it): the selection to attend instead of its own (the oracle re-run with an implementation's decisions).
    sibling: after the last call, a second continuation of the caches it started from (other inputs),
    thrown away: a state is a value, so the first continuation's caches (the ones returned and compared)
    must not see it (an engine appending in place into shared buffers must copy a branch that is not the
    buffer's tip: impl.candidates.cache_in_place).
    """
    mw_, iw_, iws_ = mw.map(t.tensor), iw.map(t.tensor), iw_shared.map(t.tensor)
    cache1 = cache2 = None
    y1s, y2s, sels, start = [], [], [], 0
    for i, n in enumerate(splits):
        sl = slice(start, start + n)
        kw = {} if forced is None else {"forced": forced[:, sl]}
        before = (cache1, cache2)
        with t.poisoned():
            y1, cache1, sel = t.impl.mla.sublayer(mw_, iw_, t.tensor(a[:, sl]), cache1, t.tensor(mask[:, sl]), **kw)
            y2, cache2, _ = t.impl.mla.sublayer(mw_, iws_, t.tensor(a[:, sl]), cache2, t.tensor(mask[:, sl]),
                                                prev=sel, kind="shared")
            if sibling and i == len(splits) - 1 and before[0] is not None:
                label("a second continuation of one state (a sibling branch)")
                other = t.tensor(a[:, sl][..., ::-1].copy())
                _, _, sel_o = t.impl.mla.sublayer(mw_, iw_, other, before[0], t.tensor(mask[:, sl]))
                t.impl.mla.sublayer(mw_, iws_, other, before[1], t.tensor(mask[:, sl]), prev=sel_o, kind="shared")
        y1s.append(y1)
        y2s.append(y2)
        sels.append(to_int(sel.indices))
        start += n
    return t.cat(y1s, 1), t.cat(y2s, 1), cache1, _cat_selections(sels)


def _cat_selections(parts) -> np.ndarray:
    """Per-call selections [B, S_i, W_i] -> [B, S, W] (-1 padded to the widest call)."""
    W = max(p.shape[-1] for p in parts)
    return np.concatenate([np.pad(p, ((0, 0), (0, 0), (0, W - p.shape[-1])), constant_values=-1)
                           for p in parts], axis=1)


def attendable(indices, T: int) -> bool:
    """Can the oracle attend this selection (each entry in [-1, T))? A selection that is not is judged
    a failure by its selection verdict; its outputs are then compared with the unconditioned oracle."""
    idx = to_int(indices)
    return idx.size == 0 or (idx.min() >= -1 and idx.max() < T)


def same_sets(a, b) -> bool:
    """Two selections [B, S, W] pick the same set of tokens for every query."""
    return odsa.selected_sets(to_int(a)) == odsa.selected_sets(to_int(b))


def conditioned(run, own, indices, T: int):
    """The oracle's outputs given an implementation's selection: its own run when the sets agree
    (the common case, no re-run), else `run(indices)`; the unconditioned run when unattendable."""
    if same_sets(indices, own) or not attendable(indices, T):
        return None
    return run(indices)


def layer_inputs(case: MLACase):
    """(MLA weights, the full layer's indexer, the shared layer's own indexer, hidden states, mask) of a case."""
    g = case.geometry
    rng = np.random.default_rng(case.seed)
    iw, mw = tz.indexer_weights(rng, g, case.family), tz.mla_weights(rng, g)
    iw2 = tz.indexer_weights(rng, g, case.family)
    a = rng.standard_normal((case.batch, case.length, g.hidden))
    return mw, iw, iw2, a, _mask(case.batch, case.length, case.left_pad)


def run_mla_paths(case: MLACase, cand: Target, base: Target):
    """Prefix/chunk/continuation on MLA + DSA: outputs, the latent cache, the indexer rows and the
    pooled-key cache (appended to call by call) of a stream cut into calls equal the oracle's one prefill,
    a sibling continuation of the last call's starting state run after it (mla_layers' sibling); a shared
    layer reuses the selection."""
    if len(case.splits) > 1:
        label("prefill cut into calls")
    if any(n % case.geometry.kpool for n in case.splits[:-1]):
        label("split not on a pool boundary")
    _label_sparsity(case.length, case.geometry)
    mw, iw, iw2, a, mask = layer_inputs(case)
    y1, y2, c1, own = mla_layers(ORACLE, mw, iw, iw2, a, mask, (case.length,))
    yc1, yc2, cc1, csel = mla_layers(cand, mw, iw, iw2, a, mask, case.splits, sibling=True)
    yb1, yb2, cb1, bsel = mla_layers(base, mw, iw, iw2, a, mask, case.splits, sibling=True)
    ref = odsa.index(iw, a, omla.project(mw, a)[1], c1.index_rows, mask)

    def oracle_given(indices):
        label("selection differs from the oracle's: outputs judged against the oracle re-run on it")
        return mla_layers(ORACLE, mw, iw, iw2, a, mask, (case.length,), forced=indices)[:2]
    (y1c, y2c), (y1b, y2b) = ((conditioned(oracle_given, own, s, case.length) or (y1, y2)) for s in (csel, bsel))
    return [Comparison("chunked_prefill", "selection", csel, (ref, token_pool(c1.index_rows, iw)), kind="selection"),
            Comparison("chunked_prefill", "output", yc1, y1c, yb1, baseline_reference=y1b),
            Comparison("chunked_prefill", "shared_output", yc2, y2c, yb2, baseline_reference=y2b),
            Comparison("chunked_prefill", "latent_cache", cc1.latent, c1.latent, cb1.latent),
            Comparison("chunked_prefill", "index_rows", cc1.index_rows, c1.index_rows, cb1.index_rows),
            Comparison("chunked_prefill", "pooled_keys", _pooled(cc1, "keys"), _pooled(c1, "keys"),
                       _pooled(cb1, "keys"), axes=POOLED_AXES),
            Comparison("chunked_prefill", "pool_flags", _pooled(cc1, "flags"), _pooled(c1, "flags"), kind="exact",
                       axes=POOLED_AXES[:-1])]


def _pooled(cache, part: str):
    """The K̄ part ("keys") or the completeness flags ("flags") of a cache's pooled rows; None where the
    cache holds none (reported as a missing output)."""
    if cache.pooled is None:
        return None
    return cache.pooled[..., :-1] if part == "keys" else cache.pooled[..., -1]


def run_mla_causal(case: MLACausalCase, cand: Target, base: Target):
    """Bitwise causality of the same implementation on the MLA + DSA path: outputs of both layers, the
    selection and the caches before the cut must not change AT ALL when only later tokens do."""
    c, cut = case.stream, case.cut
    mw, iw, iw2, a, mask = layer_inputs(c)
    b = a.copy()
    b[:, cut:] = np.random.default_rng(c.seed + 1).standard_normal(b[:, cut:].shape)
    label(f"cut on a pool boundary: {cut % c.geometry.kpool == 0}")
    ya1, ya2, ca, sa = mla_layers(cand, mw, iw, iw2, a, mask, c.splits)
    yb1, yb2, cb, sb = mla_layers(cand, mw, iw, iw2, b, mask, c.splits)
    rows = ("batch", "token", "channel")
    return [Comparison("sublayer", "causal", yb1[:, :cut], ya1[:, :cut], kind="exact", axes=rows, where="full layer"),
            Comparison("sublayer", "causal", yb2[:, :cut], ya2[:, :cut], kind="exact", axes=rows, where="shared layer"),
            Comparison("sublayer", "causal", sb[:, :cut], sa[:, :cut], kind="exact", axes=("batch", "query", "slot"),
                       where="selection"),
            Comparison("sublayer", "causal", cb.latent[:, :cut], ca.latent[:, :cut], kind="exact", axes=rows,
                       where="latent cache"),
            Comparison("sublayer", "causal", cb.index_rows[:, :cut], ca.index_rows[:, :cut], kind="exact", axes=rows,
                       where="indexer rows"),
            Comparison("sublayer", "causal", None if cb.pooled is None else cb.pooled[:, :cut],
                       None if ca.pooled is None else ca.pooled[:, :cut], kind="exact", axes=POOLED_AXES,
                       where="pooled-key cache")]


# ----------------------------------------------------------------------------- the records

G0 = DSAGeometry.from_geometry(TINY)

CHECKS = (
    Check("mla.absorbed", "mla", IndexCase, absorbed_cases, run_absorbed,
          "sparse absorbed attention over a selection vs the oracle (baseline: expanded form); wide "
          "selections (topk 256) that a GPU splits across programs",
          examples=(IndexCase(G0, 2, 13, 13, (0, 2), "none", "normal", 0),
                    IndexCase(G0, 1, 65, 1, (0,), "none", "normal", 1),
                    # one decode row, 259 slots in 8 splits of 33 (3 blocks each): every split full, then
                    # splits 2-8 empty (the combine's last-split and empty-split cases, the online rescale)
                    IndexCase(G0._replace(topk=WIDE_TOPK, kpool=WIDE_KPOOL), 1, 280, 1, (0,), "none", "normal", 2),
                    IndexCase(G0._replace(topk=WIDE_TOPK, kpool=WIDE_KPOOL), 1, 24, 1, (0,), "none", "normal", 3)),
          # 2051 selected rows of the released geometry: 33 blocks of the online softmax, split across programs
          gpu_examples=(IndexCase(GFULL, 1, 8196, 2, (0,), "none", "normal", 20),
                        IndexCase(GFULL, 2, 12000, 1, (0, 7), "none", "large", 21),
                        # 16 query rows (a prefill chunk; two rows of 8): 64 heads a program, 8 splits on 132 SMs
                        # (issue 14 step 40's launch, from 8 query rows on since step 41, 7 since step 47)
                        IndexCase(GFULL, 1, 2400, 16, (0,), "none", "large", 22),
                        IndexCase(GFULL, 2, 2200, 8, (0, 9), "none", "normal", 23),
                        # 8 query rows (step 41: the same launch from 8 rows on, 16 splits on 132 SMs), 7 (the
                        # 16-head launch before step 47, the 64-head one since: 18 splits), and 6 (the 16-head
                        # launch just below it)
                        IndexCase(GFULL, 1, 2300, 8, (0,), "none", "normal", 24),
                        IndexCase(GFULL, 1, 2300, 7, (0,), "none", "large", 25),
                        IndexCase(GFULL, 1, 2300, 6, (0,), "none", "normal", 26),
                        # 8 query rows over 600 tokens: 16 splits of 129 entries, the later ones empty, on the
                        # 64-head path (issue 14 step 49's producer kernel's too). At this geometry a row's
                        # log-sum-exp is large, so an empty split that wrongly reports 0 weighs in by ~e^-lse: it
                        # did not catch that mutant (stop 52); the tiny pin below is for it
                        IndexCase(GFULL, 1, 600, 8, (0,), "none", "normal", 27),
                        # 8 query rows over 24 tokens of the tiny geometry, topk 256: 4 splits of 65 slots, the
                        # last ones empty, lse ~3, on the 64-head path (added in stop 52, not yet run on a GPU)
                        IndexCase(G0._replace(topk=WIDE_TOPK, kpool=WIDE_KPOOL), 1, 24, 8, (0,), "none", "normal",
                                  28))),
    Check("mla.paths", "mla", MLACase, mla_cases, run_mla_paths,
          "full + shared DSA layers over split calls: outputs, latent cache, indexer rows, pooled keys; a "
          "sibling continuation of the last call's state must not reach the caches compared",
          examples=(MLACase(G0, 1, 13, (0,), (5, 8), "normal", 0),
                    MLACase(G0, 2, 9, (3, 0), (4, 1, 4), "normal", 1)),
          # the MLA sublayer composes the indexer: an indexer-only candidate runs here too; ~2-4 s an
          # example on the interpreter: three drawn on the CPU (CI's 15-minute budget, stop 41; 6 before)
          needs=("mla", "dsa"), cpu_examples=3),
    Check("mla.causal", "mla", MLACausalCase, mla_causal_cases, run_mla_causal,
          "bitwise causality: both DSA layers' outputs, the selection and the caches before a cut do not "
          "change when only later tokens do",
          examples=(MLACausalCase(MLACase(G0, 1, 13, (0,), (13,), "normal", 0), 9),
                    MLACausalCase(MLACase(G0, 2, 17, (3, 0), (8, 9), "large", 1), 8),
                    # one 24-row call over a 20-wide selection: the split path (2 splits, some empty for
                    # the first rows) and its combine, the cut inside the second split's keys
                    MLACausalCase(MLACase(G0._replace(topk=16), 1, 24, (0,), (24,), "normal", 2), 17)),
          # two runs of both layers an example (~6 s on the interpreter): three drawn on the CPU (CI's
          # 15-minute budget, stop 41; 6 before)
          needs=("mla", "dsa"), cpu_examples=3),
)


# ----------------------------------------------------------------------------- calls to refuse

OK_ROW = (0, 1, -1)


def _attention(t: Target, *rows, latent_rank: int = G0.kv_rank):
    """(w, q [1, 2, H, d_n], latent [1, 6, latent_rank], indices [1, 2, 3] int64) on target t."""
    rng = np.random.default_rng(14)
    w = tz.mla_weights(rng, G0)
    q, lat = rng.standard_normal((1, 2, G0.heads, G0.nope_dim)), rng.standard_normal((1, 6, G0.kv_rank))
    return w.map(t.tensor), t.tensor(q), t.tensor(lat[..., :latent_rank]), t.index([rows], long=True)


class _Layer(NamedTuple):
    """One full layer's weights, input, q, latent, cache and selection on a target."""

    w: object
    iw: object
    a: object
    q: object
    latent: object
    cache: object
    selection: object


def _layer(t: Target, **change) -> _Layer:
    """A full layer's float64 run on 2 x 5 tokens (the oracle's), its pieces on target t; `change` maps
    a piece (a, q, latent, indices) to an edit of its float64 array made before the conversion."""
    rng = np.random.default_rng(6)
    w, iw = tz.mla_weights(rng, G0), tz.indexer_weights(rng, G0)
    a = rng.standard_normal((2, 5, G0.hidden))
    q, _, c = omla.project(w, a)
    _, cache, sel = omla.sublayer(w, iw, a)
    x = {"a": a, "q": q, "latent": c, "indices": sel.indices}
    x = {n: change[n](v) if n in change else v for n, v in x.items()}
    sel = sel._replace(indices=t.index(x["indices"], long=True), scores=t.tensor(sel.scores, f32=True))
    return _Layer(w.map(t.tensor), iw.map(t.tensor), t.tensor(x["a"]), t.tensor(x["q"]), t.tensor(x["latent"]),
                  cache.map(t.tensor), sel)


def _attend(ns, t: Target, fn: str, **change):
    """ns.<fn> (absorbed or expanded) on _layer's q, latent and selection, edited by `change`."""
    L = _layer(t, **change)
    return getattr(ns, fn)(L.w, L.q, L.latent, L.selection.indices)


def _sublayer(ns, t: Target, cache=None, kind="full", iw=True, prev=False, **change):
    """ns.sublayer on _layer's input and cache (`cache`: an edit of the converted DSACache), handed
    _layer's selection as prev when `prev`, and its indexer weights unless not `iw`."""
    L = _layer(t, **change)
    return ns.sublayer(L.w, L.iw if iw else None, L.a, None if cache is None else cache(L.cache),
                       prev=L.selection if prev else None, kind=kind)


# where implementations word a refusal differently, a row's match lists each wording (alternatives)
BAD_CALLS = (
    BadCall("absorbed(index past the cache)", lambda ns, t: ns.absorbed(*_attention(t, OK_ROW, (0, 6, -1))), "indices"),
    BadCall("absorbed(index below -1)", lambda ns, t: ns.absorbed(*_attention(t, OK_ROW, (0, -2, 1))), "indices"),
    # a repeated index: the Triton kernel refuses it; the oracle and the baseline attend it as given
    BadCall("absorbed(index twice in a row)", lambda ns, t: ns.absorbed(*_attention(t, OK_ROW, (3, 1, 3))),
            "indices", targets=("triton",)),
    BadCall("absorbed(float indices)",
            lambda ns, t: ns.absorbed(*_attention(t)[:3], t.tensor([[OK_ROW, OK_ROW]])), "indices"),
    # `lengths` (each row's cached length) is an argument of the Triton kernel alone
    BadCall("absorbed(index past the row's length)",
            lambda ns, t: ns.absorbed(*_attention(t, OK_ROW, (4, 1, -1)), lengths=t.index([4], long=True)),
            "indices", targets=("triton",)),
    BadCall("absorbed(cache shorter than the claimed length)",
            lambda ns, t: ns.absorbed(*_attention(t, OK_ROW, OK_ROW), lengths=t.index([7], long=True)),
            "lengths", targets=("triton",)),
    BadCall("absorbed(latent wrong rank)", lambda ns, t: ns.absorbed(*_attention(t, OK_ROW, OK_ROW, latent_rank=8)),
            "latent"),
    BadCall("absorbed(indices beyond the cache)", lambda ns, t: _attend(ns, t, "absorbed", latent=lambda c: c[:, :3]),
            r"^indices: (entries must lie in \[-1, T=3\)|entry \[0, 3, 3\] = 3 outside \[-1, 3\))"),
    # a repeated index (as for absorbed): the Triton side alone refuses it
    BadCall("expanded(index twice in a row)", lambda ns, t: ns.expanded(*_attention(t, OK_ROW, (2, 2, -1))),
            "indices", targets=("triton",)),
    BadCall("expanded(q with 3 heads)",
            lambda ns, t: _attend(ns, t, "expanded", q=lambda q: np.zeros((2, 5, 3, G0.nope_dim))), r"^q: expected"),
    BadCall("expanded(latent [B, T, r_kv + 1])",
            lambda ns, t: _attend(ns, t, "expanded", latent=lambda c: np.zeros((2, 5, G0.kv_rank + 1))), r"^latent"),
    BadCall("expanded(indices [B, S - 1, W])", lambda ns, t: _attend(ns, t, "expanded", indices=lambda i: i[:, 1:]),
            r"^indices: expected \[B=2, S=5"),
    BadCall("sublayer(shared, prev width topk, not topk + P_k - 1)",
            lambda ns, t: _sublayer(ns, t, kind="shared", prev=True, indices=lambda i: i[..., :G0.topk]),
            r"^(indices:|prev: selection) width 8, expected topk \+ P_k - 1 = 11"),
    BadCall("sublayer(shared, no prev)", lambda ns, t: _sublayer(ns, t, kind="shared", iw=False), r"^prev"),
    BadCall("sublayer(full, no iw)", lambda ns, t: _sublayer(ns, t, iw=False), r"^iw"),
    BadCall("sublayer(kind='sparse')", lambda ns, t: _sublayer(ns, t, kind="sparse"), r"^kind"),
    BadCall("sublayer(cache latent longer than its index_rows)",
            lambda ns, t: _sublayer(ns, t, cache=lambda c: DSACache(c.latent, c.index_rows[:, :3])),
            r"^cache: (latent \(2, 5, 16\) and index_rows \(2, 3, 17\)|a full layer's index_rows) must cover "
            r"the same \[B, T\]"),
    BadCall("sublayer(cache latent of another rank)",
            lambda ns, t: _sublayer(ns, t, cache=lambda c: DSACache(c.latent[..., :4], c.index_rows)), r"^cache"),
    BadCall("sublayer(cache as a tuple)", lambda ns, t: _sublayer(ns, t, cache=tuple), r"^cache"),
    BadCall("project(a [S, D])", lambda ns, t: ns.project(_layer(t).w, _layer(t, a=lambda a: a[0]).a), r"^a:"),
)
